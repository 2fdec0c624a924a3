"""``mbpp``: Mostly Basic Python Problems, scored by its test asserts through the verdict
of ``zoo.envs.execution.verdict`` (the sandboxed-code machinery is in
``zoo.envs.code.code_envs``)."""

from __future__ import annotations

import dataclasses
import json
import sys
import threading
from dataclasses import dataclass
from typing import Any

from zoo.core.config import ConfigError
from zoo.envs.base import Prompt, split_off
from zoo.envs.code.code_envs import (
    TAG,
    SandboxConfig,
    SandboxedCodeEnv,
    Scored,
    SplitMixin,
    counting_statements,
    future_first,
    normalise_newlines,
    plain_then_count,
    solution_code,
    tag_fields,
    visible_pass,
)
from zoo.envs.code.shown_tests import choose_shown, constant_proof, statement_expectation
from zoo.envs.data.loading import load_rows, to_records
from zoo.envs.execution.verdict import TestJob, TestVerdict, free_names, served_builtins
from zoo.envs.prompt_format import build_prompt, check_prompt_format

MBPP_QUESTION = (
    "You are an expert Python programmer, and here is your task: {text} "
    "Your code should pass this example test and further tests that are not shown:\n\n{tests}"
)
MBPP_INSTRUCTION = "Answer with the code in a ```python code block."


@dataclass
class MBPPConfig(SandboxConfig):
    data_files: str | None = None
    """Local train file(s), comma-separated (.jsonl/.json/.parquet/.csv); overrides hf_train."""
    eval_files: str | None = None
    """Local held-out file(s); if unset while data_files is set, held-out rows are split off."""
    hf_train: str = "google-research-datasets/mbpp:sanitized:train"
    """Hugging Face data set "path:config:split" (or "path:split"): downloaded on first use
    when online, read from the cache offline."""
    hf_eval: str = "google-research-datasets/mbpp:sanitized:test"
    """Same for the held-out split; "" splits eval_size rows off the train rows."""
    eval_size: int = 500
    """Held-out problems: the first eval_size of the eval split in a fixed order (0 = all)."""
    shown_tests: int = 1
    """How many of a row's test_list asserts the prompt shows: 1, as the example that gives
    the function's name and signature; the others are hidden. Which one: the first whose
    showing leaves two hidden asserts that no constant answer passes together
    (``zoo.envs.code.shown_tests``), else the first (the data set's order otherwise). MBPP's
    paper shows all 3, but 397 of the 427 sanitized tasks have exactly 3, so a table of the
    shown inputs and outputs would pass nearly every task; 0 would hide the name the tests
    call. Any other value is refused."""
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


def called_names(asserts: str) -> frozenset[str]:
    """Every name the asserts read: the functions a solution block must define are among
    them (``code_envs.solution_code``)."""
    import ast

    try:
        tree = ast.parse(asserts)
    except (SyntaxError, ValueError):
        return frozenset()
    return frozenset(n.id for n in ast.walk(tree) if isinstance(n, ast.Name))


def shown_assert(tests: list[str], setup: str, reference: str) -> tuple[int, bool]:
    """(index of the assert the prompt shows, whether a table of it plus one constant
    answer elsewhere may pass the others). The shown one is the first whose showing leaves
    two hidden asserts that no constant satisfies together (``shown_tests.choose_shown``);
    the names read as the task's function are those the tests call (``mbpp_calls``), plus
    the builtins the reference defines (MBPP/126's ``sum``)."""
    plain = "\n".join(tests)
    try:
        serve, _ = mbpp_calls(plain, setup)
        names = frozenset(serve) | frozenset(served_builtins(plain, reference, setup))
    except (SyntaxError, ValueError):
        return 0, True
    facts = [statement_expectation(t, names) for t in tests]
    i = choose_shown(facts)
    shown = {facts[i].call} if facts[i] is not None else set()
    return i, not constant_proof(facts[:i] + facts[i + 1 :], shown)


SHOWN_TAG, HIDDEN_TAG = f"{TAG}-shown", f"{TAG}-hidden"
"""The counting passes' tags (``TAG`` in them becomes each execution's random tag)."""


@dataclass(frozen=True)
class MBPPScored(Scored):
    """``Scored`` plus the pass fraction over the asserts the prompt does not show."""

    hidden_fraction: float | None = None
    """Fraction of the hidden asserts that passed (1.0 when every assert passed, 0.0 when
    the completion was rejected unexecuted or the counts were never written); None for a
    task whose asserts are all shown (a task with one assert)."""


def _tally(verdict: TestVerdict, tag: str) -> tuple[int, int] | None:
    """(passed, counted) as a counting pass wrote them after ``tag``, or None."""
    try:
        passed, total = (int(x) for x in tag_fields(verdict.tests.stdout, tag) or ())
    except ValueError:
        return None
    return (passed, total) if 0 <= passed <= total else None


class MBPP(SandboxedCodeEnv, SplitMixin):
    """``mbpp``: Mostly Basic Python Problems. Source: Hugging Face
    ``google-research-datasets/mbpp``, config ``sanitized`` (the hand-verified subset),
    train (120 rows) and test (257, held-out), downloaded on first use.

    Loaded with ``datasets`` exactly like ``gsm8k`` (``zoo.envs.data.loading``): local
    ``data_files`` / ``eval_files``, else the Hub data set (the cache offline); if absent,
    a ``ConfigError`` that says where it looked. ``hf_train`` / ``hf_eval`` with config
    ``full`` (374 train, 500 test) take the original set.

    Rows: the ``full`` config's ``{"task_id", "text", "code", "test_list",
    "test_setup_code", "challenge_test_list"}`` (the last two may be missing or empty) or
    the ``sanitized`` one's ``{"task_id", "prompt", "code", "test_list", "test_imports"}``
    (``prompt`` stands for ``text``, the ``test_imports`` lines for the setup code).
    Prompt: the paper's wording ("You are an expert Python programmer, and here is your
    task: ...") with one assert of ``test_list`` shown as the example (it names the
    function and its arguments), plus ``instruction``. Which one: the first whose showing
    leaves two hidden asserts no constant answer passes together (``shown_assert``; on the
    sanitized set every task but MBPP/596, whose expected values are not literals), so a
    table of the example plus a guessed default (0, False, ...) is not rewarded. The other
    asserts are hidden: the paper shows all three, and most tasks have no more, so every
    test would be visible and a table of the shown inputs and outputs would pass. A
    completion is Python code, or Markdown code blocks holding it (the first that defines
    a function the asserts call); it runs in the sandbox after ``test_setup_code`` and the
    asserts (the shown one first) run against it.

    Rewards: 1.0 when every assert of ``test_list`` (and ``challenge_test_list`` with
    ``challenge_tests=True``) passes, shown and hidden, 0.0 otherwise. Metrics: the pass
    fraction over all those asserts (module docstring of ``zoo.envs.code.code_envs``; the second
    value of ``score_details``) and, apart, over the hidden ones alone:
    ``score_verdicts`` gives ``MBPPScored`` with ``hidden_fraction``, and ``stats`` adds
    ``hidden_pass_fraction_mean`` over the ``hidden_scored`` completions of tasks that have
    hidden asserts. When the plain pass fails, the counting pass runs on the shown and on
    the hidden asserts apart, each with a tag of its own.

    Splits: held-out = the eval split's rows in a fixed shuffled order, the first
    ``eval_size`` (0 = all); without an eval source, ``eval_size`` train rows are split off
    with a constant seed and never served for training. Train: the train rows in a seeded
    order, a fresh permutation per epoch.
    """

    name = "mbpp"
    config_class = MBPPConfig
    reward_values = (
        "1 (all of the problem's test asserts pass, the shown one and the hidden ones) or 0; "
        "pass fractions (all asserts, hidden asserts) as metrics"
    )
    fields = (
        '{"task_id", "text", "code", "test_list": [assert, ...], "test_setup_code", '
        '"challenge_test_list"} (full) or {"task_id", "prompt", "code", "test_list", '
        '"test_imports"} (sanitized)'
    )

    def __init__(self, **overrides: Any) -> None:
        # Before the base's __init__, which resets the stats (reset_stats below).
        self._hidden_lock = threading.Lock()
        self._grading = threading.local()
        super().__init__(**overrides)
        cfg = self.config
        check_prompt_format(self.name, cfg.prompt_format)
        if cfg.eval_size < 0:
            raise ConfigError(f"{self.name}: need eval_size >= 0, got {cfg.eval_size}")
        if cfg.shown_tests != 1:
            raise ConfigError(
                f"{self.name}: shown_tests must be 1, got {cfg.shown_tests}: the prompt shows "
                "the first assert as the example and hides the rest. With all shown, most "
                "tasks could be passed by a table of the shown inputs and outputs; with none, "
                "the function's name and arguments are unknown"
            )
        rows, train_source = load_rows(
            self.name, self.fields, "train", cfg.data_files, cfg.hf_train
        )
        train = to_records(self.name, self.fields, rows, train_source, self._record)
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
            rows, eval_source = load_rows(
                self.name, self.fields, "eval", cfg.eval_files, cfg.hf_eval
            )
            records = to_records(self.name, self.fields, rows, eval_source, self._record)
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

        text, code = row["text"] if "text" in row else row["prompt"], row["code"]
        if not isinstance(text, str) or not isinstance(code, str):
            raise TypeError("text (sanitized: prompt) and code must be strings")
        tests = str_list(row["test_list"], "test_list")
        if not tests:
            raise ValueError("test_list is empty")
        setup = row.get("test_setup_code") or ""
        if not setup and row.get("test_imports"):  # the sanitized config's imports
            setup = "\n".join(str_list(row["test_imports"], "test_imports"))
        shown, guessable = shown_assert(tests, setup, code)
        return {
            "task_id": row["task_id"],
            "text": text,
            "code": code,
            "test_list": tests,
            "test_setup_code": setup,
            "challenge_test_list": str_list(row.get("challenge_test_list") or [], "challenge"),
            "shown_index": shown,
            "guessable": guessable,
        }

    def _asserts(self, record: dict[str, Any]) -> tuple[list[str], list[str]]:
        """(shown, hidden) asserts of a row: the one at ``shown_index`` (``shown_assert``)
        and the others in order, then the challenge asserts when they count (never shown)."""
        tests = record["test_list"]
        i = record.get("shown_index", 0)
        challenge = record["challenge_test_list"] if self.config.challenge_tests else []
        return [tests[i]], tests[:i] + tests[i + 1 :] + challenge

    def _prompt(self, record: dict[str, Any], index: int, split: str) -> Prompt:
        shown, _ = self._asserts(record)
        cfg = self.config
        question = MBPP_QUESTION.format(text=record["text"].strip(), tests="\n".join(shown))
        return build_prompt(
            question,
            cfg.instruction,
            cfg.prompt_format,
            answer=dict(record),
            index=index,
            split=split,
            meta={"task_id": record["task_id"]},
        )

    def train_prompt(self, index: int, seed: int) -> Prompt:
        return self._prompt(self._train_item(index, seed), index, "train")

    def eval_prompts(self) -> list[Prompt]:
        return [self._prompt(r, i, "eval") for i, r in enumerate(self._eval)]

    def reference_answer(self, prompt: Prompt) -> str:
        return prompt.answer["code"]

    visible_pass = False
    """Whether each job first runs the shown assert on its own and records the result
    (``code_envs.visible_pass``): set by ``mbpp_feedback``, whose observations show it."""

    def _job(self, prompt: Prompt, completion: str) -> TestJob | None:
        a = prompt.answer
        shown, hidden = self._asserts(a)
        setup = a["test_setup_code"]
        plain = "\n".join(shown + hidden)
        serve, prelude = mbpp_calls(plain, setup)
        completion = normalise_newlines(completion)
        code = solution_code(completion, called_names(plain))
        program = completion if code is None else code
        if not program.strip():
            return None
        # The setup code (imports, fixtures) runs before the candidate and before the tests;
        # the answer's own __future__ imports go first of all.
        candidate = future_first(f"{setup}\n" if setup.strip() else "", program) + "\n"
        # Two counting passes, the shown asserts' and the hidden ones', each writing its
        # counts after its own tag, so the hidden pass fraction is measured apart.
        counting = "\n".join(
            counting_statements(asserts).replace(TAG, tag)
            for asserts, tag in ((shown, SHOWN_TAG), (hidden, HIDDEN_TAG))
        )
        tests = plain_then_count(plain, counting)
        if self.visible_pass:
            tests = visible_pass(shown, {name: name for name in serve}) + tests
        return TestJob(candidate, tests, serve, prelude)

    def _tests_source(self, prompt: Prompt, job: TestJob) -> str:
        shown, hidden = self._asserts(prompt.answer)
        return "\n".join(shown + hidden)

    def feedback_tests(self, prompt: Prompt) -> tuple[list[str], int]:
        """(the shown assert, the number of hidden ones), for ``mbpp_feedback``."""
        shown, hidden = self._asserts(prompt.answer)
        return shown, len(hidden)

    @staticmethod
    def guessable(record: dict[str, Any]) -> bool:
        """No proof that a table of the shown assert plus one constant fails the hidden ones
        (``shown_assert``): ``mbpp_feedback`` refuses such a task."""
        return bool(record.get("guessable", True))

    def _grade(self, prompt: Prompt, verdict: TestVerdict, tag: str) -> tuple[float, float]:
        shown = _tally(verdict, SHOWN_TAG.replace(TAG, tag))
        hidden = _tally(verdict, HIDDEN_TAG.replace(TAG, tag))
        if verdict.passed:
            fraction, hidden_fraction = 1.0, 1.0
        elif shown is None or hidden is None or shown[1] + hidden[1] == 0:
            fraction, hidden_fraction = 0.0, 0.0  # the tests died before both counts
        else:
            fraction = (shown[0] + hidden[0]) / (shown[1] + hidden[1])
            hidden_fraction = hidden[0] / hidden[1] if hidden[1] else 0.0
        # The base class hands this execution's tag to _grade only, so the hidden
        # fraction goes back to score_verdicts (same thread, same call) by the verdict.
        graded = getattr(self._grading, "hidden", None)
        if graded is not None:
            graded[id(verdict)] = hidden_fraction
        return (1.0 if verdict.passed else 0.0), fraction

    def score_verdicts(self, prompts: list[Prompt], completions: list[str]) -> list[MBPPScored]:
        """The base's ``Scored`` per completion, as ``MBPPScored`` with the pass fraction
        over the hidden asserts; ``stats`` counts it."""
        self._grading.hidden = {}
        try:
            scored = super().score_verdicts(prompts, completions)
            graded = self._grading.hidden
        finally:
            del self._grading.hidden
        out = []
        for prompt, s in zip(prompts, scored, strict=True):
            hidden_fraction = None
            if self._asserts(prompt.answer)[1]:
                hidden_fraction = 0.0 if s.verdict is None else graded[id(s.verdict)]
            fields = {f.name: getattr(s, f.name) for f in dataclasses.fields(s)}
            out.append(MBPPScored(**fields, hidden_fraction=hidden_fraction))
        counted = [s.hidden_fraction for s in out if s.hidden_fraction is not None]
        with self._hidden_lock:
            self._hidden_sum += sum(counted)
            self._hidden_scored += len(counted)
        return out

    def reset_stats(self) -> None:
        super().reset_stats()
        with self._hidden_lock:
            self._hidden_sum, self._hidden_scored = 0.0, 0

    @property
    def stats(self) -> dict[str, Any]:
        """The base's statistics plus ``hidden_scored`` (completions of tasks with hidden
        asserts) and ``hidden_pass_fraction_mean`` (their mean hidden pass fraction)."""
        s = super().stats
        with self._hidden_lock:
            total, n = self._hidden_sum, self._hidden_scored
        s["hidden_scored"] = n
        s["hidden_pass_fraction_mean"] = total / n if n else 0.0
        return s

    def describe(self) -> dict[str, Any]:
        out = super().describe()
        out["sources"] = dict(self.sources)
        out["sizes"] = {"train": len(self._train), "eval": len(self._eval)}
        return out
