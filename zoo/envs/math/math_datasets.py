"""``gsm8k`` and ``math`` (MATH-500 style): fixed data sets, graded with math-verify.

Data. Loaded with ``datasets`` (``zoo.envs.data.loading``, shared with ``mbpp``) from (in
this order):

1. local files: ``data_files`` (train) and ``eval_files`` (held-out), comma-separated,
   ``.jsonl``/``.json``/``.parquet``/``.csv``, rows in the data set's own format:
   gsm8k ``{"question", "answer"}`` with the answer ending in ``#### <number>``;
   MATH-500 ``{"problem", "solution", "answer", "subject", "level", "unique_id"}`` (rows
   without ``answer``, as in the original MATH, use the last ``\\boxed{}`` of ``solution``);
2. otherwise the Hugging Face data set named by ``hf_train`` / ``hf_eval``
   (``"path:config:split"`` or ``"path:split"``; ``path`` may be a local data set
   directory): online, ``datasets.load_dataset`` downloads it from the Hub by name on
   first use (``$HF_ENDPOINT``, the Hugging Face caches; zoo.hub); offline
   (``HF_HUB_OFFLINE=1``, or the Hub not reachable) the same call reads it from the local
   Hugging Face datasets cache with the Hub switched off.

If neither is there, ``ConfigError`` says where it looked, why nothing was downloaded, and
how to provide the data.

Sources by default: gsm8k ``openai/gsm8k`` (config ``main``; train, and test as the
held-out split); math: train ``DigitalLearningGmbH/MATH-lighteval`` (the 7,500-problem
train split of MATH, Hendrycks et al. 2021), held-out ``HuggingFaceH4/MATH-500`` (500
problems of MATH's test split, as chosen for PRM800K, Lightman et al. 2023). Train rows
whose problem text (whitespace collapsed, case kept) equals a held-out row's are dropped
(their count is ``describe()["dropped_overlap"]``), so train and held-out are
disjoint by problem text whatever the sources.

Splits. Train: the train rows in a seeded shuffled order (a fresh permutation per epoch),
so train prompt ``index`` for ``seed`` is a pure function of ``(index, seed)`` and the
data. Held-out: the eval split's rows in a fixed shuffled order, the first ``eval_size``
(0 = all). Without an eval source (``data_files`` given but no ``eval_files``, or
``hf_eval=""``), ``eval_size`` rows are split off the train rows with a constant seed and
never served for training.

Rewards: 1.0 when math-verify finds the completion's answer (a ``\\boxed{}`` first, then
other LaTeX or plain numbers/expressions) equal to the reference; 0.0 otherwise, including
parse failures and grading timeouts. ``env.stats`` counts outcomes since the last
``reset_stats()``: ``correct``, ``wrong`` (an answer was read, and it is wrong),
``parse_failures`` (no answer could be read), ``timeouts`` (grading took longer than
``grading_timeout_s``) and ``errors`` (the grading worker failed). Grading runs in worker
processes (``zoo.envs.math.math_grading``), safe from any thread.
"""

from __future__ import annotations

import threading
from abc import abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

from zoo.core.config import ConfigError
from zoo.envs.base import Env, EpochShuffle, Prompt, split_off
from zoo.envs.data.loading import load_rows, to_records
from zoo.envs.math.math_grading import shared_grader
from zoo.envs.prompt_format import build_prompt, check_prompt_format

BOXED_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."
STAT_KEYS = {
    "correct": "correct",
    "wrong": "wrong",
    "parse_failure": "parse_failures",
    "timeout": "timeouts",
    "error": "errors",
}


@dataclass
class MathDatasetConfig:
    data_files: str | None = None
    """Local train file(s), comma-separated (.jsonl/.json/.parquet/.csv); overrides hf_train."""
    eval_files: str | None = None
    """Local held-out file(s); if unset while data_files is set, held-out rows are split off."""
    hf_train: str = ""
    """Hugging Face data set "path:config:split" (or "path:split"): downloaded on first use
    when online, read from the cache offline."""
    hf_eval: str = ""
    """Same for the held-out split; "" splits eval_size rows off the train rows."""
    eval_size: int = 500
    """Held-out problems: the first eval_size of the eval split in a fixed order (0 = all)."""
    prompt_format: str = "plain"
    """"plain": Prompt.text only; "chat": also meta["messages"] for a chat template."""
    instruction: str = BOXED_INSTRUCTION
    """Appended to each problem after a blank line ("" appends nothing)."""
    grading_timeout_s: float = 5.0
    """Wall-clock limit of one math-verify grading (parse + verify); past it, reward 0."""
    grading_workers: int = 1
    """Grading worker processes (gradings of one batch run in parallel)."""


@dataclass
class GSM8KConfig(MathDatasetConfig):
    hf_train: str = "openai/gsm8k:main:train"
    hf_eval: str = "openai/gsm8k:main:test"


@dataclass
class MATHConfig(MathDatasetConfig):
    hf_train: str = "DigitalLearningGmbH/MATH-lighteval:default:train"
    hf_eval: str = "HuggingFaceH4/MATH-500:default:test"


def problem_key(text: str) -> str:
    """A problem's text with runs of whitespace collapsed: what train/held-out disjointness
    compares (case and LaTeX kept: two problems differing only there are different)."""
    return " ".join(text.split())


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (or ``\\fbox{...}``), braces matched."""
    start = max(text.rfind("\\boxed{"), text.rfind("\\fbox{"))
    if start < 0:
        return None
    i = text.index("{", start) + 1
    depth, j = 1, i
    while j < len(text) and depth:
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        j += 1
    return text[i : j - 1].strip() if depth == 0 else None


class MathDatasetEnv(Env):
    """Base of gsm8k and math: loading, splits, prompts and math-verify grading."""

    config_class = MathDatasetConfig
    reward_values = "1 (math-verify: equal to the reference) or 0 (wrong, unreadable, timeout)"
    fields: ClassVar[str] = ""
    """The row format, for error messages."""

    def __init__(self, **overrides: Any) -> None:
        super().__init__(**overrides)
        cfg = self.config
        check_prompt_format(self.name, cfg.prompt_format)
        if cfg.eval_size < 0 or cfg.grading_timeout_s <= 0 or cfg.grading_workers < 1:
            raise ConfigError(
                f"{self.name}: need eval_size >= 0, grading_timeout_s > 0, grading_workers >= 1"
            )
        train_rows, train_source = load_rows(
            self.name, self.fields, "train", cfg.data_files, cfg.hf_train
        )
        self._train = to_records(self.name, self.fields, train_rows, train_source, self._record)
        self.dropped_overlap = 0
        """Train rows dropped for having a held-out row's problem text."""
        if not cfg.eval_files and (cfg.data_files or not cfg.hf_eval):
            if cfg.eval_size < 1 or cfg.eval_size >= len(self._train):
                raise ConfigError(
                    f"{self.name}: the held-out split is split off the {len(self._train)} train "
                    f"rows ({train_source}); eval_size must be in 1..{len(self._train) - 1}, "
                    f"got {cfg.eval_size} (or give eval_files)"
                )
            self._train, self._eval = split_off(self._train, cfg.eval_size, self.name)
            self.sources = {
                "train": train_source,
                "eval": f"{cfg.eval_size} rows of {train_source}",
            }
        else:
            eval_rows, eval_source = load_rows(
                self.name, self.fields, "eval", cfg.eval_files, cfg.hf_eval
            )
            records = to_records(self.name, self.fields, eval_rows, eval_source, self._record)
            _, self._eval = split_off(records, len(records), self.name)  # a fixed shuffle
            self._eval = self._eval[: cfg.eval_size or None]
            self.sources = {"train": train_source, "eval": eval_source}
            # Disjoint by problem text from every row of the eval source (not only the
            # eval_size served), so the train rows do not depend on eval_size.
            held_out = {problem_key(r["question"]) for r in records}
            kept = [r for r in self._train if problem_key(r["question"]) not in held_out]
            self.dropped_overlap = len(self._train) - len(kept)
            self._train = kept
        if not self._train:
            raise ConfigError(f"{self.name}: no train rows in {train_source}")
        self._stream = EpochShuffle(self.name, len(self._train))
        self._stats_lock = threading.Lock()
        self.stats: dict[str, int] = {}
        self.reset_stats()
        self.grader = shared_grader(cfg.grading_timeout_s, cfg.grading_workers)

    # ---- data ----

    @abstractmethod
    def _record(self, row: dict[str, Any]) -> dict[str, Any]:
        """One data set row -> {"question", "answer", ...} (the env's own record)."""

    # ---- splits ----

    def _prompt(self, record: dict[str, Any], index: int, split: str) -> Prompt:
        cfg = self.config
        return build_prompt(
            record["question"],
            cfg.instruction,
            cfg.prompt_format,
            answer=record["answer"],
            index=index,
            split=split,
            meta=dict(record["meta"]),
        )

    def train_prompt(self, index: int, seed: int) -> Prompt:
        return self._prompt(self._train[self._stream(index, seed)], index, "train")

    def eval_prompts(self) -> list[Prompt]:
        return [self._prompt(r, i, "eval") for i, r in enumerate(self._eval)]

    def describe(self) -> dict[str, Any]:
        out = super().describe()
        out["sources"] = dict(self.sources)
        out["sizes"] = {"train": len(self._train), "eval": len(self._eval)}
        out["dropped_overlap"] = self.dropped_overlap
        return out

    # ---- scoring ----

    def reset_stats(self) -> None:
        with self._stats_lock:
            self.stats = dict.fromkeys(STAT_KEYS.values(), 0)

    def _count(self, outcome: str) -> float:
        with self._stats_lock:
            self.stats[STAT_KEYS[outcome]] += 1
        return 1.0 if outcome == "correct" else 0.0

    def score(self, prompt: Prompt, completion: str) -> float:
        return self._count(self.grader.grade(str(prompt.answer), completion))

    def score_batch(self, prompts: list[Prompt], completions: list[str]) -> list[float]:
        pairs = [(str(p.answer), c) for p, c in zip(prompts, completions, strict=True)]
        return [self._count(o) for o in self.grader.grade_many(pairs)]


GSM8K_MARKER = "####"


def gsm8k_reference(answer: str) -> str | None:
    """The number after the first ``####`` of a gsm8k answer field, commas removed, or None
    when there is no ``####`` or only blanks and commas follow it. A row is data, not model
    output, but it is split with ``str.partition`` all the same: the lazy pattern
    ``####\\s*(.+?)\\s*$`` used before took quadratic time over blanks followed by text."""
    _, marker, rest = answer.partition(GSM8K_MARKER)
    value = rest.replace(",", "").strip()
    return value if marker and value else None


class GSM8K(MathDatasetEnv):
    """``gsm8k``: grade-school word problems. Source: Hugging Face ``openai/gsm8k``, config
    ``main``, train (7473 rows) and test (1319, held-out), downloaded on first use.

    The reference is the number after ``####`` in the answer field, commas removed. The
    default held-out split is 500 test problems in a fixed order (``eval_size=0``: all).
    Rewards: 1.0 correct, 0.0 otherwise (see the module docstring and ``env.stats``).
    """

    name = "gsm8k"
    config_class = GSM8KConfig
    fields = '{"question": ..., "answer": "...#### <number>"}'

    def _record(self, row: dict[str, Any]) -> dict[str, Any]:
        question, answer = row["question"], row["answer"]
        if not isinstance(question, str) or not isinstance(answer, str):
            raise TypeError("question and answer must be strings")
        reference = gsm8k_reference(answer)
        if reference is None:
            raise ValueError("the answer does not end with '#### <number>'")
        return {"question": question, "answer": reference, "meta": {}}


class MATH(MathDatasetEnv):
    """``math``: competition problems with LaTeX answers. Sources: train
    ``DigitalLearningGmbH/MATH-lighteval`` (MATH's train split, 7500 rows), held-out
    ``HuggingFaceH4/MATH-500`` (split test), downloaded on first use; train rows with a
    held-out problem's text are dropped.

    Both from the Hub (or the Hugging Face cache offline); or local files in either
    format. MATH-500 is drawn from MATH's test split, so the two are disjoint by
    construction; the problem-text check holds it for any sources. The reference is the row's
    ``answer`` (else the last ``\\boxed{}`` of its ``solution``), compared by math-verify.
    Rewards: 1.0 correct, 0.0 otherwise (see the module docstring and ``env.stats``).
    """

    name = "math"
    config_class = MATHConfig
    fields = '{"problem", "solution", "answer", "subject", "level", "unique_id"}'

    def _record(self, row: dict[str, Any]) -> dict[str, Any]:
        problem = row["problem"]
        if not isinstance(problem, str):
            raise TypeError("problem must be a string")
        answer = row.get("answer")
        if not isinstance(answer, str) or not answer.strip():
            answer = last_boxed(str(row.get("solution") or ""))
        if not answer:
            raise ValueError("no answer field and no \\boxed{} in the solution")
        meta = {k: row[k] for k in ("subject", "type", "level", "unique_id") if k in row}
        return {"question": problem, "answer": answer.strip(), "meta": meta}
