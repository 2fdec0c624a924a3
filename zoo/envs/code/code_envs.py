"""Code environments: model-written Python, scored by hidden tests run in the sandbox.

The machinery every code env shares (``SandboxedCodeEnv``); the envs are
``zoo.envs.code.humaneval``, ``zoo.envs.code.mbpp`` and the procedural ``zoo.envs.code.pyfunc``.

Execution. Every completion runs only through ``zoo.envs.execution.verdict.run_tests``: the
candidate in one bubblewrap sandbox, the hidden tests in another, calling the candidate's
functions across a pipe that carries plain data only (so no object the candidate built
ever reaches the tests), each with rlimits and a wall-clock timeout; several verdicts at a
time through a bounded ``SandboxPool`` (``sandbox_workers``, shared by the env instances
of a process). ``score_batch`` runs a batch's verdicts in parallel and runs identical
(prompt, completion) pairs once. The reward comes from the tests' process (exit 0 and its
secret nonce printed after the last test), never from anything the model's code prints or
returns about itself. Building an env probes the sandbox: without
isolation it raises ``CodeEnvUnavailable`` (a ``ConfigError`` and a
``SandboxUnavailable``) with the sandbox's reason; ``FORGE_ZOO_UNSAFE_NO_SANDBOX=1`` is
the sandbox module's explicit opt-out (never with untrusted code).

Pass fraction (a metric, never the reward). The tests run once, unmodified, and their
success alone gives reward 1 (``plain_then_count``); only when they fail does a counting
pass follow in the same process, where every ``assert`` is evaluated on its own (an
exception counts as a failure) and the counts are written to the tests' stdout after a
per-execution random tag. A passing completion has pass fraction 1; a failing one the
fraction of the asserts evaluated in the counting pass that passed (0 if the process died
before writing the counts). A passing answer's CPU time is that of one pass of its tests.
The counts are written by the tests' process, which the candidate cannot reach. The
counting code reaches builtins only through ``__builtins__``, so a served name that
shadows a builtin never enters the counts.

Limits. ``timeout_s`` is CPU seconds per sandboxed process (RLIMIT_CPU), so a correct
answer's reward does not depend on what else the machine runs; a wall-clock backstop
(``wall_timeout``) ends code that waits instead of computing.

What a completion's code is (``solution_code``): Markdown fences are read with any case
of their language tag (``Python``), line ends are normalised (CRLF), and of several blocks
the first that defines a function the tests call is taken; ``from __future__`` lines are
moved before the trusted code the envs put in front of the answer (``future_first``).

Visible examples (feedback envs only, ``visible_pass``): the examples the prompt shows run
first, each on its own, and the tests' process records for each whether it passed, the
exception class, and the ``repr`` of what the submission returned (``visible_results``).

Statistics. ``env.stats`` (a fresh dict on each read; ``reset_stats()`` zeroes it) counts
since the last reset: ``passed``, ``failed`` (ran, tests not all passed), ``timeouts``,
``memory``, ``killed``, ``rejected`` (not executed: empty or, for pyfunc, not an
expression), ``duplicates`` (identical completions of a batch scored once), and
``executions``, ``exec_seconds`` (sum of execution durations), ``wall_seconds`` (time in
the pool) and ``executions_per_s``, plus ``pass_fraction_mean`` over scored completions.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import secrets
import threading
import time
from abc import abstractmethod
from dataclasses import dataclass
from typing import Any

from zoo.core.config import ConfigError
from zoo.envs.base import Env, EpochShuffle, Prompt
from zoo.envs.execution.pool import default_workers, require_sandbox, shared_pool
from zoo.envs.execution.sandbox import SandboxPool
from zoo.envs.execution.verdict import TestJob, TestVerdict, map_tests, served_builtins

TAG = "__FORGE_ZOO_TAG__"
"""Placeholder in test templates; each execution replaces it with a fresh random tag."""
MAX_REFERENCE_PROGRAMS = 4096
"""Reference programs an env remembers (``SandboxedCodeEnv._reference_program``)."""


# --- completions -> code ---------------------------------------------------------------

FENCE = "```"
FENCE_LANGUAGES = ("python3", "python", "py")
"""The info strings an opening fence may carry (at most one; longest first, so the first
that fits is the only one that can)."""


def normalise_newlines(text: str) -> str:
    """``text`` with Windows (CRLF) and old Mac (CR) line ends made LF: a fence's info line
    ends in CR before LF on Windows, and the sandbox's tests compare what the code prints."""
    return text.replace("\r\n", "\n").replace("\r", "\n")


def fenced_code(text: str) -> str | None:
    """The first Markdown code block of ``text`` (an unclosed one runs to the end), or
    None when there is none. A block opens with ``FENCE``, then spaces or tabs, one of
    ``FENCE_LANGUAGES`` (any case: ``Python``) or none, spaces or tabs and a newline; it
    closes before the first later newline followed by spaces or tabs and ``FENCE``.

    Plain string scanning, linear in ``len(text)``: completions are untrusted and parsed
    here, in the host, outside any sandbox timeout. The regular expression used before
    backtracked over the blanks after a fence (5 s for a fence and 64k spaces)."""
    blocks = code_blocks(text, limit=1)
    return blocks[0] if blocks else None


def code_blocks(text: str, limit: int = 64) -> list[str]:
    """The Markdown code blocks of ``text`` in order (at most ``limit``), as
    ``fenced_code`` reads the first; linear in ``len(text)`` (each block's scan starts
    where the previous one closed)."""
    blocks: list[str] = []
    start = text.find(FENCE)
    while start >= 0 and len(blocks) < limit:
        # Of a run of backticks only the last three can open a block (earlier ones are
        # followed by a backtick, which no info line starts with): go there at once.
        start = _skip(text, start, "`") - len(FENCE)
        body = _fence_opening_end(text, start + len(FENCE))
        if body is None:
            start = text.find(FENCE, start + 1)
            continue
        end = _fence_closing_start(text, body)
        blocks.append(text[body:end])
        if end >= len(text):
            break
        # Past the closing fence's backticks and the rest of its line.
        close = _skip(text, end + 1, " \t") + len(FENCE)
        newline = text.find("\n", close)
        start = -1 if newline < 0 else text.find(FENCE, newline)
    return blocks


def defines(code: str, names: tuple[str, ...] | frozenset[str]) -> bool:
    """Whether ``code`` defines one of ``names`` at its top level (``def name(``, ``async
    def name(``, ``class name`` or ``name = ...``), read line by line (linear: untrusted)."""
    for line in code.split("\n"):
        if line[:1] in ("", " ", "\t", "#"):
            continue
        words = line.split(None, 2)
        if words[0] == "async":
            words = words[1:]
        if len(words) >= 2 and words[0] in ("def", "class"):
            name = words[1].split("(", 1)[0].split(":", 1)[0]
        else:
            name = line.split("=", 1)[0].strip() if "=" in line else ""
        if name in names:
            return True
    return False


def solution_code(text: str, names: tuple[str, ...] | frozenset[str]) -> str | None:
    """The code block of a completion that holds the solution: the first that defines one
    of ``names`` (the functions the tests call), else the first; None when there is no
    block. Chat models often put an example or a test in one block and the solution in
    another, in either order."""
    blocks = code_blocks(text)
    if not blocks:
        return None
    return next((b for b in blocks if defines(b, names)), blocks[0])


def _is_future(line: str) -> bool:
    return line.startswith("from") and line.split()[:2] == ["from", "__future__"]


def future_first(before: str, code: str) -> str:
    """``before`` then ``code``, with ``code``'s top-level ``from __future__ import ...``
    lines moved to the very top: Python accepts them only as a module's first statements,
    and the envs put trusted code (MBPP's setup, HumanEval's prompt) before the answer."""
    lines = code.split("\n")
    future = [line for line in lines if _is_future(line)]
    if not future:
        return before + code
    # Each moved line leaves a blank behind, so the answer keeps its line count.
    kept = ["" if _is_future(line) else line for line in lines]
    return "\n".join(future) + "\n" + before + "\n".join(kept)


def _skip(text: str, i: int, chars: str) -> int:
    """The first index from ``i`` on whose character is not one of ``chars``."""
    while i < len(text) and text[i] in chars:
        i += 1
    return i


def _fence_opening_end(text: str, i: int) -> int | None:
    """Where the block starts when an opening fence's info line begins at ``i`` (just past
    the backticks), else None. Each blank is looked at once per fence it follows, and a run
    of blanks follows at most one fence, so the calls of one scan are linear together."""
    i = _skip(text, i, " \t")
    for language in FENCE_LANGUAGES:
        if text[i : i + len(language)].lower() == language:
            i += len(language)
            break
    i = _skip(text, i, " \t")
    return i + 1 if text.startswith("\n", i) else None


def _fence_closing_start(text: str, body: int) -> int:
    """The index of the newline that starts the closing fence of a block starting at
    ``body``, or ``len(text)`` when the block is never closed."""
    newline = text.find("\n", body)
    while newline >= 0:
        after = _skip(text, newline + 1, " \t")
        if text.startswith(FENCE, after):
            return newline
        newline = text.find("\n", after)
    return len(text)


@functools.lru_cache(maxsize=512)
def counting_tests(test_src: str, entry_point: str) -> str | None:
    """HumanEval's ``check`` rewritten as ``_fz_check``: every ``assert`` is tallied
    instead of raised (an exception while evaluating it counts as a failure). None when
    the test code has no
    ``check`` function or cannot be parsed. Remembered: every completion of a problem
    runs the same tests."""
    try:
        tree = ast.parse(test_src)
    except (SyntaxError, ValueError):
        return None
    checks = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "check"]
    if not checks:
        return None
    check = checks[-1]  # rewritten in place: the tree is this call's own

    class Tally(ast.NodeTransformer):
        def visit_Assert(self, node: ast.Assert) -> list[ast.stmt]:
            source = ast.get_source_segment(test_src, node) or ast.unparse(node)
            stmts = ast.parse(TALLY_ASSERT).body
            stmts[0].body[0].value.args[0] = node.test
            stmts[-1].value.args[1] = ast.Constant(source)
            return [ast.copy_location(s, node) for s in stmts]

    new = Tally().visit(check)
    new.name = "_fz_check"
    return f"{TALLY_PRELUDE}\n{ast.unparse(ast.fix_missing_locations(new))}\n" + TALLY_RUN.format(
        call=f"_fz_check({entry_point})"
    )


# The counting code runs in the tests' namespace, where a served name may shadow a builtin
# (MBPP/126's ``sum``, ``verdict.served_builtins``), so it reaches builtins only through
# ``__builtins__`` (the builtins module there): the counts never call the candidate.
TALLY_ASSERT = """\
try:
    _fz_ok = __builtins__.bool(_FZ_TEST)
    _fz_error = None
except __builtins__.Exception as _fz_caught:
    _fz_ok, _fz_error = False, __builtins__.type(_fz_caught).__name__
_fz_tally(_fz_ok, _FZ_SOURCE, _fz_error)
"""
"""What each ``assert`` of ``check`` becomes (``_FZ_TEST``: its test; ``_FZ_SOURCE``: its
source text)."""
TALLY_PRELUDE = """\
_fz_counts = [0, 0]
def _fz_tally(ok, source, error):
    _fz_counts[0 if ok else 1] += 1
"""
TALLY_RUN = f"""\
try:
    {{call}}
except __builtins__.Exception:
    pass
_fz_os = __builtins__.__import__("os")
_fz_os.write(1, ("\\n{TAG} %d %d\\n" % (_fz_counts[0], _fz_counts[0] + _fz_counts[1])).encode())
"""


def counting_statements(statements: list[str]) -> str:
    """Counting pass over independent test statements (MBPP's ``test_list``)."""
    run = (
        "for _fz_src in _fz_srcs:\n"
        "    try:\n"
        "        __builtins__.exec(_fz_src)\n"
        "        _fz_tally(True, _fz_src, None)\n"
        "    except __builtins__.Exception as _fz_caught:\n"
        "        _fz_tally(False, _fz_src, __builtins__.type(_fz_caught).__name__)"
    )
    body = TALLY_RUN.format(call=run.replace("\n", "\n    "))
    return f"{TALLY_PRELUDE}_fz_srcs = {statements!r}\n{body}"


# --- the tests a verdict runs: visible examples, the plain tests, counts on failure -------

VISIBLE_SUFFIX = "-visible"
"""A visible pass writes one record per example after its tag and this (``visible_results``)."""
MAX_OUTPUT_CHARS = 200
"""A visible example's recorded output (the ``repr`` of what the function returned) is cut
to this many characters."""

VISIBLE_PASS = f"""\
def _fz_recorder(_fz_function, _fz_seen):
    def _fz_call(*_fz_args, **_fz_kwargs):
        _fz_value = _fz_function(*_fz_args, **_fz_kwargs)
        _fz_seen.append(_fz_value)
        return _fz_value
    return _fz_call
def _fz_visible(_fz_sources, _fz_aliases):
    _fz_b = __builtins__
    _fz_globals, _fz_os = _fz_b.globals(), _fz_b.__import__("os")
    for _fz_i, _fz_source in _fz_b.enumerate(_fz_sources):
        _fz_seen = []
        _fz_ns = _fz_b.dict(_fz_globals)
        for _fz_alias, _fz_name in _fz_aliases.items():
            _fz_ns[_fz_alias] = _fz_recorder(_fz_globals[_fz_name], _fz_seen)
        try:
            _fz_b.exec(_fz_source, _fz_ns)
            _fz_status = "passed"
        except _fz_b.Exception as _fz_caught:
            _fz_status = _fz_b.type(_fz_caught).__name__
        _fz_out = "-"
        if _fz_seen:
            try:
                _fz_out = _fz_b.repr(_fz_seen[-1])[:{MAX_OUTPUT_CHARS}].encode().hex() or "-"
            except _fz_b.Exception:
                pass
        _fz_record = "\\n{TAG}{VISIBLE_SUFFIX} %d %s %s\\n" % (_fz_i, _fz_status, _fz_out)
        _fz_os.write(1, _fz_record.encode())
"""
"""Runs each visible example on its own, before any other test calls the submission, and
writes for each: its index, "passed" or the class name of the exception it raised
(``AssertionError`` for a false assert), and the ``repr`` of the submission's last return
value there (hex; "-" for none). Written by the tests' process, whose stdout the
submission cannot reach, after the execution's random tag; and since no hidden input has
been passed to the submission yet, nothing it returns here can carry one. Builtins are
reached through ``__builtins__`` only (a served name may shadow one: MBPP/126's ``sum``)."""


def visible_pass(statements: list[str], aliases: dict[str, str]) -> str:
    """Tests code running ``VISIBLE_PASS`` over ``statements`` (the examples the prompt
    shows, as asserts); ``aliases`` maps each name they call to the served function it
    stands for (HumanEval's ``candidate`` is its entry point)."""
    if not statements:
        return ""
    return f"{VISIBLE_PASS}_fz_visible({statements!r}, {aliases!r})\n"


def plain_then_count(plain: str, counting: str) -> str:
    """Tests code that runs ``plain`` (the data set's tests, unmodified: their success
    alone gives reward 1) and, only when they fail, ``counting`` (the counting pass, for
    the pass fraction), then re-raises the failure. A passing answer's tests run once, so
    its CPU time is that of one pass (MBPP/123's reference needs ~3 s a pass)."""
    b = "__builtins__"
    return (
        "_fz_failed = None\n"
        "try:\n"
        f"    {b}.exec({b}.compile({plain!r}, '<tests>', 'exec', dont_inherit=True), "
        f"{b}.globals())\n"
        f"except {b}.BaseException as _fz_caught:\n"
        "    _fz_failed = _fz_caught\n"
        "if _fz_failed is not None:\n"
        "    try:\n"
        f"        {b}.exec({b}.compile({counting!r}, '<counting>', 'exec', dont_inherit=True), "
        f"{b}.globals())\n"
        f"    except {b}.BaseException:\n"
        "        pass\n"
        "    raise _fz_failed\n"
    )


@dataclass(frozen=True)
class VisibleResult:
    """One visible example as the tests' process recorded it."""

    status: str
    """"passed", or the class name of the exception raised there."""
    output: str | None
    """``repr`` of what the submission returned there (cut), or None when it returned
    nothing (it raised, or was not called)."""


def visible_results(verdict: TestVerdict, tag: str) -> dict[int, VisibleResult]:
    """The visible pass's records, by example index. Only lines after the execution's
    random tag count, and each field is checked (an identifier, hex), so nothing else in
    the tests' stdout is read as one."""
    prefix = f"{tag}{VISIBLE_SUFFIX} "
    out: dict[int, VisibleResult] = {}
    for line in verdict.tests.stdout.splitlines():
        if not line.startswith(prefix):
            continue
        fields = line[len(prefix) :].split(" ")
        if len(fields) != 3 or not fields[0].isdigit():
            continue
        status, output = fields[1], fields[2]
        if not (status.isascii() and status.isidentifier() and len(status) <= 80):
            continue
        try:
            text = None if output == "-" else bytes.fromhex(output).decode("utf-8", "replace")
        except ValueError:
            continue
        out.setdefault(int(fields[0]), VisibleResult(status, text))
    return out


def tag_fields(stdout: str, tag: str) -> list[str] | None:
    """The fields after ``tag`` on the last stdout line that starts with it."""
    found = None
    for line in stdout.splitlines():
        if line.startswith(tag + " ") or line == tag:
            found = line[len(tag) :].split()
    return found


def tally_fraction(verdict: TestVerdict, tag: str) -> float:
    if verdict.passed:
        return 1.0
    fields = tag_fields(verdict.tests.stdout, tag)
    try:
        passed, total = (int(x) for x in fields or ())
    except ValueError:
        return 0.0
    return min(1.0, passed / total) if passed >= 0 and total > 0 else 0.0


# --- the shared base -------------------------------------------------------------------


@dataclass
class SandboxConfig:
    timeout_s: float = 10.0
    """CPU seconds each sandboxed process of a verdict may use (RLIMIT_CPU, whole seconds
    rounded up); past it, reward 0. CPU time, not wall time, so a correct answer's reward
    does not depend on what else the machine runs: on two cores kept busy by other work,
    MBPP/123's reference took ~9.5 s of wall time for ~3 s of CPU."""
    wall_timeout_s: float = 0.0
    """Wall-clock backstop for code that waits rather than computes (a sleep, a blocked
    read); 0: ``WALL_FACTOR`` x timeout_s + ``WALL_EXTRA_S``."""
    memory_mb: int = 512
    """Address-space limit of each sandboxed process (the candidate's and the tests')."""
    sandbox_workers: int = 0
    """Executions at a time (0: min(8, CPU count)); pools are shared per size."""


WALL_FACTOR, WALL_EXTRA_S = 3.0, 5.0
"""The default wall-clock backstop (``SandboxConfig.wall_timeout_s``): on 2 cores shared by
4 busy processes a verdict's CPU-bound process gets half a core, so 3x its CPU limit."""


def wall_timeout(config: SandboxConfig) -> float:
    """The wall-clock limit of one sandboxed process under ``config``."""
    return config.wall_timeout_s or WALL_FACTOR * config.timeout_s + WALL_EXTRA_S


OUTCOMES = ("passed", "failed", "timeouts", "memory", "killed", "rejected")


@dataclass(frozen=True)
class Scored:
    """One completion's score and what decided it (``verdict`` and ``job`` are None when
    the completion was rejected unexecuted)."""

    reward: float
    fraction: float
    verdict: TestVerdict | None = None
    job: TestJob | None = None
    """The job as it ran: its tests with this execution's tag in place of ``TAG``."""
    tag: str = ""
    """This execution's tag (what replaced ``TAG``), for ``visible_results``."""


class SandboxedCodeEnv(Env):
    """Scoring through the sandbox. Subclasses implement ``_job(prompt, completion)`` ->
    a ``TestJob`` (its tests may contain ``TAG``) or None to reject without executing,
    and optionally ``_grade(prompt, verdict, tag)`` -> (reward, pass fraction); the
    default gives 1/0 on the verdict and the counted pass fraction."""

    def __init__(self, **overrides: Any) -> None:
        super().__init__(**overrides)
        cfg = self.config
        if cfg.timeout_s <= 0 or cfg.memory_mb < 32 or not 0 <= cfg.sandbox_workers <= 64:
            raise ConfigError(
                f"{self.name}: need timeout_s > 0, memory_mb >= 32, 0 <= sandbox_workers <= 64"
            )
        if cfg.wall_timeout_s < 0:
            raise ConfigError(f"{self.name}: need wall_timeout_s >= 0 (0: the default)")
        self.sandbox = require_sandbox(self.name)
        self.workers = cfg.sandbox_workers or default_workers()
        self._stats_lock = threading.Lock()
        self._reference_programs: dict[tuple[str, str], str] = {}
        self.reset_stats()

    # ---- hooks ----

    @abstractmethod
    def _job(self, prompt: Prompt, completion: str) -> TestJob | None:
        """The verdict to decide for this completion, or None if it is not runnable."""

    def _grade(self, prompt: Prompt, verdict: TestVerdict, tag: str) -> tuple[float, float]:
        return (1.0 if verdict.passed else 0.0), tally_fraction(verdict, tag)

    @abstractmethod
    def reference_answer(self, prompt: Prompt) -> str:
        """A completion that scores 1 (the data set's reference solution)."""

    # ---- scoring ----

    @property
    def pool(self) -> SandboxPool:
        return shared_pool(self.workers)

    def score(self, prompt: Prompt, completion: str) -> float:
        return self.score_batch([prompt], [completion])[0]

    def score_batch(self, prompts: list[Prompt], completions: list[str]) -> list[float]:
        return [r for r, _ in self.score_details(prompts, completions)]

    def score_details(
        self, prompts: list[Prompt], completions: list[str]
    ) -> list[tuple[float, float]]:
        """(reward, pass fraction) per completion; executions run in parallel."""
        return [(s.reward, s.fraction) for s in self.score_verdicts(prompts, completions)]

    def score_verdicts(self, prompts: list[Prompt], completions: list[str]) -> list[Scored]:
        """``score_details`` with what decided each reward: the verdict and the tests that
        ran (their tag filled in), for envs that show a failure back to the model."""
        jobs = [self._served(p, self._job(p, c)) for p, c in zip(prompts, completions, strict=True)]
        unique: dict[TestJob, int] = {}
        for job in jobs:
            if job is not None:
                unique.setdefault(job, len(unique))
        tags = [secrets.token_hex(16) for _ in unique]
        tagged = [
            dataclasses.replace(job, tests=job.tests.replace(TAG, tag))
            for job, tag in zip(unique, tags, strict=True)
        ]
        start = time.monotonic()
        verdicts = self._verdicts(tagged) if tagged else []
        wall = time.monotonic() - start
        out, counts = [], dict.fromkeys(OUTCOMES, 0)
        fraction_sum = 0.0
        for prompt, job in zip(prompts, jobs, strict=True):
            if job is None:
                out.append(Scored(0.0, 0.0))
                counts["rejected"] += 1
                continue
            i = unique[job]
            reward, fraction = self._grade(prompt, verdicts[i], tags[i])
            out.append(Scored(reward, fraction, verdicts[i], tagged[i], tags[i]))
            fraction_sum += fraction
            counts[self._outcome(verdicts[i], reward)] += 1
        with self._stats_lock:
            s = self._stats
            for k, v in counts.items():
                s[k] += v
            s["duplicates"] += sum(j is not None for j in jobs) - len(unique)
            s["fraction_sum"] += fraction_sum
            s["executions"] += len(tagged)
            s["exec_seconds"] += sum(v.duration_s for v in verdicts)
            s["wall_seconds"] += wall if tagged else 0.0
        return out

    def _served(self, prompt: Prompt, job: TestJob | None) -> TestJob | None:
        """``job``, also serving the builtin names its tests call that the data set's
        reference program defines at its top level (``verdict.served_builtins``; MBPP/126's
        function is called ``sum``). The reference program is this env's own job for
        ``reference_answer(prompt)``: which names are the candidate's is the data set's
        decision, never the candidate's."""
        if job is None:
            return None
        reference = self._reference_program(prompt)
        tests = self._tests_source(prompt, job)
        extra = served_builtins(tests, reference, job.prelude) if reference else ()
        extra = tuple(name for name in extra if name not in job.serve)
        return dataclasses.replace(job, serve=job.serve + extra) if extra else job

    def _tests_source(self, prompt: Prompt, job: TestJob) -> str:
        """The data set's tests as source (the names they call are read from it); the
        default: the job's tests. Envs whose job wraps the tests in a string (they run
        through ``plain_then_count``) give the tests themselves."""
        return job.tests

    def _reference_program(self, prompt: Prompt) -> str:
        """The program the reference answer of ``prompt`` runs as (its job's candidate),
        or "" when it is not runnable; remembered per prompt text and reference."""
        reference = self.reference_answer(prompt)
        key = (prompt.text, reference)
        cache = self._reference_programs
        if key not in cache:
            if len(cache) >= MAX_REFERENCE_PROGRAMS:
                cache.clear()
            job = self._job(prompt, reference)
            cache[key] = job.candidate if job is not None else ""
        return cache[key]

    def _verdicts(self, jobs: list[TestJob]) -> list[TestVerdict]:
        """Each job's verdict, the tests in a process of their own
        (``zoo.envs.execution.verdict``)."""
        cfg = self.config
        return map_tests(
            self.pool,
            jobs,
            timeout_s=wall_timeout(cfg),
            cpu_s=cfg.timeout_s,
            memory_mb=cfg.memory_mb,
        )

    @staticmethod
    def _outcome(verdict: TestVerdict, reward: float) -> str:
        status = verdict.status
        if status == "timeout":
            return "timeouts"
        if status in ("memory", "killed"):
            return status
        return "passed" if reward >= 1.0 else "failed"

    def reset_stats(self) -> None:
        with self._stats_lock:
            self._stats = dict.fromkeys(
                (*OUTCOMES, "duplicates", "executions", "exec_seconds", "wall_seconds"), 0
            )
            self._stats["fraction_sum"] = 0.0

    @property
    def stats(self) -> dict[str, Any]:
        with self._stats_lock:
            s = dict(self._stats)
        scored = sum(s[k] for k in OUTCOMES)
        s["executions_per_s"] = s["executions"] / s["wall_seconds"] if s["wall_seconds"] else 0.0
        s["pass_fraction_mean"] = s.pop("fraction_sum") / scored if scored else 0.0
        return s

    def describe(self) -> dict[str, Any]:
        out = super().describe()
        out["sandbox"] = dict(self.sandbox)
        out["reward_values"] = self.reward_values
        return out


class SplitMixin:
    """Train stream over a fixed list of problems: a seeded permutation per epoch, so
    train prompt ``index`` for ``seed`` is a pure function of (index, seed)."""

    _train: list
    name: str

    def _init_orders(self) -> None:
        self._stream = EpochShuffle(self.name, len(self._train))

    def _train_item(self, index: int, seed: int):
        if not self._train:
            raise ConfigError(
                f"{self.name}: no train problems: all {len(getattr(self, '_eval', []))} are "
                "held out (eval_size); to train on this env, hold out fewer, e.g. "
                "--env-set eval_size=64"
            )
        return self._train[self._stream(index, seed)]
