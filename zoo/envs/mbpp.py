"""``mbpp``: Mostly Basic Python Problems, scored by its test asserts through the verdict
of ``zoo.envs.verdict`` (the sandboxed-code machinery is in ``zoo.envs.code_envs``)."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from typing import Any

from zoo.core.config import ConfigError
from zoo.envs.base import Prompt, split_off
from zoo.envs.code_envs import (
    SandboxConfig,
    SandboxedCodeEnv,
    SplitMixin,
    counting_statements,
    fenced_code,
)
from zoo.envs.math_datasets import MathDatasetEnv
from zoo.envs.prompt_format import build_prompt, check_prompt_format
from zoo.envs.verdict import TestJob, free_names

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
    hf_train: str = "google-research-datasets/mbpp:sanitized:train"
    """Hugging Face data set "path:config:split" (or "path:split"): downloaded on first use
    when online, read from the cache offline."""
    hf_eval: str = "google-research-datasets/mbpp:sanitized:test"
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
    """``mbpp``: Mostly Basic Python Problems. Source: Hugging Face
    ``google-research-datasets/mbpp``, config ``sanitized`` (the hand-verified subset),
    train (120 rows) and test (257, held-out), downloaded on first use.

    Loaded with ``datasets`` exactly like ``gsm8k`` (see ``zoo.envs.math_datasets``): local
    ``data_files`` / ``eval_files``, else the Hub data set (the cache offline); if absent,
    a ``ConfigError`` that says where it looked. ``hf_train`` / ``hf_eval`` with config
    ``full`` (374 train, 500 test) take the original set.

    Rows: the ``full`` config's ``{"task_id", "text", "code", "test_list",
    "test_setup_code", "challenge_test_list"}`` (the last two may be missing or empty) or
    the ``sanitized`` one's ``{"task_id", "prompt", "code", "test_list", "test_imports"}``
    (``prompt`` stands for ``text``, the ``test_imports`` lines for the setup code).
    Prompt: the paper's ("You are an expert Python programmer, and here is your task: ...
    Your code should pass these tests: ...", the first ``shown_tests`` asserts) plus
    ``instruction``. A completion is Python code, or a Markdown code block holding it; it
    runs in the sandbox after ``test_setup_code`` and is followed by the ``test_list`` asserts.

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
        '"challenge_test_list"} (full) or {"task_id", "prompt", "code", "test_list", '
        '"test_imports"} (sanitized)'
    )

    # The loading (Hub, cache, local files) and its "no data" error, shared with gsm8k/math.
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

        text, code = row["text"] if "text" in row else row["prompt"], row["code"]
        if not isinstance(text, str) or not isinstance(code, str):
            raise TypeError("text (sanitized: prompt) and code must be strings")
        tests = str_list(row["test_list"], "test_list")
        if not tests:
            raise ValueError("test_list is empty")
        setup = row.get("test_setup_code") or ""
        if not setup and row.get("test_imports"):  # the sanitized config's imports
            setup = "\n".join(str_list(row["test_imports"], "test_imports"))
        return {
            "task_id": row["task_id"],
            "text": text,
            "code": code,
            "test_list": tests,
            "test_setup_code": setup,
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
