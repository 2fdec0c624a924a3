"""Code environments: model-written Python, scored by hidden tests run in the sandbox.

The machinery every code env shares (``SandboxedCodeEnv``); the envs are
``zoo.envs.humaneval``, ``zoo.envs.mbpp`` and the procedural ``zoo.envs.pyfunc``.

Execution. Every completion runs only through ``zoo.envs.verdict.run_tests``: the
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

Pass fraction (a metric, never the reward). The tests run twice in the same verdict:
first a counting pass, where every ``assert`` is evaluated on its own (an exception counts
as a failure) and the counts are written to the tests' stdout after a per-execution random
tag; then the tests unmodified, whose success alone gives reward 1. A passing completion
has pass fraction 1; a failing one the fraction of the asserts evaluated in the counting
pass that passed (an exception outside an assert ends the pass early; the fraction is 0 if
the process died before writing the counts). So ``timeout_s`` must cover both passes. The
counts are written by the tests' process, which the candidate cannot reach.

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
import os
import re
import secrets
import threading
import time
from abc import abstractmethod
from dataclasses import dataclass
from typing import Any

from zoo.core.config import ConfigError
from zoo.envs.base import Env, EpochShuffle, Prompt
from zoo.envs.sandbox import SandboxPool, SandboxUnavailable, sandbox_info
from zoo.envs.verdict import TestJob, TestVerdict, map_tests

TAG = "__FORGE_ZOO_TAG__"
"""Placeholder in test templates; each execution replaces it with a fresh random tag."""
MAX_WORKERS = 16


class CodeEnvUnavailable(ConfigError, SandboxUnavailable):
    """A code env cannot isolate model-written code here; the message says why."""


# --- shared sandbox pools --------------------------------------------------------------

_pools: dict[int, SandboxPool] = {}
_pools_lock = threading.Lock()


def default_workers() -> int:
    return max(1, min(8, os.cpu_count() or 1))


def shared_pool(workers: int) -> SandboxPool:
    """One pool per size per process, so env instances share their threads."""
    with _pools_lock:
        if workers not in _pools:
            _pools[workers] = SandboxPool(workers)
        return _pools[workers]


def require_sandbox(env: str) -> dict[str, Any]:
    """``sandbox_info()``, or ``CodeEnvUnavailable`` saying why code cannot be isolated."""
    try:
        return sandbox_info()
    except SandboxUnavailable as exc:
        raise CodeEnvUnavailable(f"{env}: {exc}") from exc


# --- completions -> code ---------------------------------------------------------------

FENCE = re.compile(r"```[ \t]*(?:python3?|py)?[ \t]*\n(.*?)(?:\n[ \t]*```|\Z)", re.DOTALL)


def fenced_code(text: str) -> str | None:
    """The first Markdown code block of ``text`` (an unclosed one runs to the end), or
    None when there is none."""
    m = FENCE.search(text)
    return m[1] if m else None


def counting_tests(test_src: str, entry_point: str) -> str | None:
    """HumanEval's ``check`` rewritten as ``_fz_check``: every ``assert`` is tallied
    instead of raised (an exception while evaluating it counts as a failure). None when
    the test code has no ``check`` function or cannot be parsed."""
    try:
        tree = ast.parse(test_src)
    except (SyntaxError, ValueError):
        return None
    checks = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "check"]
    if not checks:
        return None
    check = checks[-1]

    class Tally(ast.NodeTransformer):
        def visit_Assert(self, node: ast.Assert) -> list[ast.stmt]:
            stmts = ast.parse(
                "try:\n    _fz_ok = bool(_FZ_TEST)\nexcept Exception:\n    _fz_ok = False\n"
                "_fz_tally(_fz_ok)\n"
            ).body
            stmts[0].body[0].value.args[0] = node.test
            return [ast.copy_location(s, node) for s in stmts]

    new = Tally().visit(ast.parse(ast.unparse(check)).body[0])
    new.name = "_fz_check"
    return f"{TALLY_PRELUDE}\n{ast.unparse(ast.fix_missing_locations(new))}\n" + TALLY_RUN.format(
        call=f"_fz_check({entry_point})"
    )


TALLY_PRELUDE = """\
_fz_counts = [0, 0]
def _fz_tally(ok):
    _fz_counts[0 if ok else 1] += 1
"""
TALLY_RUN = f"""\
try:
    {{call}}
except Exception:
    pass
__import__("os").write(1, ("\\n{TAG} %d %d\\n" % (_fz_counts[0], sum(_fz_counts))).encode())
"""


def counting_statements(statements: list[str]) -> str:
    """Counting pass over independent test statements (MBPP's ``test_list``)."""
    run = "for _fz_src in _fz_srcs:\n    try:\n        exec(_fz_src)\n        _fz_tally(True)\n"
    run += "    except Exception:\n        _fz_tally(False)"
    body = TALLY_RUN.format(call=run.replace("\n", "\n    "))
    return f"{TALLY_PRELUDE}_fz_srcs = {statements!r}\n{body}"


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
    """Wall-clock limit of one verdict (the candidate's process; the tests' gets 0.5 s
    more); past it, reward 0."""
    memory_mb: int = 512
    """Address-space limit of each sandboxed process (the candidate's and the tests')."""
    sandbox_workers: int = 0
    """Executions at a time (0: min(8, CPU count)); pools are shared per size."""


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
        self.sandbox = require_sandbox(self.name)
        self.workers = cfg.sandbox_workers or default_workers()
        self._stats_lock = threading.Lock()
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
        jobs = [self._job(p, c) for p, c in zip(prompts, completions, strict=True)]
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
            out.append(Scored(reward, fraction, verdicts[i], tagged[i]))
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

    def _verdicts(self, jobs: list[TestJob]) -> list[TestVerdict]:
        """Each job's verdict, the tests in a process of their own (``zoo.envs.verdict``)."""
        cfg = self.config
        return map_tests(self.pool, jobs, timeout_s=cfg.timeout_s, memory_mb=cfg.memory_mb)

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
