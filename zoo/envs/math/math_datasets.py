"""``gsm8k`` and ``math`` (MATH-500 style): fixed data sets, graded with math-verify.

Data. Loaded with ``datasets`` from (in this order):

1. local files: ``data_files`` (train) and ``eval_files`` (held-out), comma-separated,
   ``.jsonl``/``.json``/``.parquet``/``.csv``, rows in the data set's own format:
   gsm8k ``{"question", "answer"}`` with the answer ending in ``#### <number>``;
   MATH-500 ``{"problem", "solution", "answer", "subject", "level", "unique_id"}`` (rows
   without ``answer``, as in the original MATH, use the last ``\\boxed{}`` of ``solution``);
2. otherwise the Hugging Face data set named by ``hf_train`` / ``hf_eval``
   (``"path:config:split"`` or ``"path:split"``; ``path`` may be a local data set
   directory): online, ``datasets.load_dataset`` downloads it from the Hub by name on
   first use (``$HF_ENDPOINT``, the Hugging Face caches; zoo.core.hub); offline
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
processes (``zoo.envs.math_grading``), safe from any thread.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import threading
from abc import abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from zoo.core import hub
from zoo.core.config import ConfigError
from zoo.core.hub import first_line
from zoo.envs.base import Env, EpochShuffle, Prompt, split_off
from zoo.envs.math_grading import shared_grader
from zoo.envs.prompt_format import build_prompt, check_prompt_format

BOXED_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."
BUILDERS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv"}
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


@contextlib.contextmanager
def hub_offline():
    """Switch the Hugging Face Hub off for ``datasets`` and ``huggingface_hub`` (their flags
    are read at import, so the module globals are set too) and silence progress bars,
    restoring both afterwards. Process-wide while it lasts (loading holds ``_LOAD_LOCK``)."""
    import datasets
    import huggingface_hub.constants as hub_constants

    saved_env = {k: os.environ.get(k) for k in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")}
    saved = (datasets.config.HF_HUB_OFFLINE, hub_constants.HF_HUB_OFFLINE)
    bars_were_off = datasets.utils.are_progress_bars_disabled()
    os.environ.update({k: "1" for k in saved_env})
    datasets.config.HF_HUB_OFFLINE = hub_constants.HF_HUB_OFFLINE = True
    datasets.utils.disable_progress_bars()
    try:
        yield
    finally:
        datasets.config.HF_HUB_OFFLINE, hub_constants.HF_HUB_OFFLINE = saved
        if not bars_were_off:
            datasets.utils.enable_progress_bars()
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def hf_cache_dir() -> str:
    """The datasets cache that an offline ``load_dataset`` of a Hub name reads: the one an
    earlier online ``load_dataset`` filled ($HF_DATASETS_CACHE, ~/.cache/huggingface/datasets
    by default). With the Hub off, ``datasets`` 4.x does not read the hub file cache."""
    import datasets

    return str(datasets.config.HF_DATASETS_CACHE)


def parse_hf_spec(spec: str) -> tuple[str, str | None, str]:
    parts = spec.rsplit(":", 2)
    if len(parts) == 2:
        return parts[0], None, parts[1]
    if len(parts) == 3 and all(parts):
        return parts[0], (None if parts[1] in ("", "default") else parts[1]), parts[2]
    raise ConfigError(f"Hugging Face data set {spec!r} is not of the form path[:config]:split")


_LOAD_LOCK = threading.Lock()


def load_local_files(files: str) -> list[dict[str, Any]]:
    """Rows of local data files, through ``datasets`` (built in a throwaway cache dir, so
    nothing is written to the user's cache)."""
    import datasets

    paths = [Path(p.strip()).expanduser() for p in files.split(",") if p.strip()]
    missing = [str(p) for p in paths if not p.is_file()]
    if not paths or missing:
        raise FileNotFoundError(f"no such file: {', '.join(missing) or repr(files)}")
    kinds = {BUILDERS.get("".join(p.suffixes[-1:]).lower()) for p in paths}
    if None in kinds or len(kinds) != 1:
        raise ConfigError(
            f"data files {files!r}: need one kind of {', '.join(BUILDERS)} (got {kinds - {None}})"
        )
    with _LOAD_LOCK, hub_offline(), tempfile.TemporaryDirectory() as cache:
        ds = datasets.load_dataset(
            kinds.pop(),
            data_files=[str(p) for p in paths],
            split="train",
            cache_dir=cache,
            keep_in_memory=True,
        )
        return ds.to_list()


@contextlib.contextmanager
def hub_online():
    """``datasets`` reads the repo's own files only: not the parquet export's split sizes,
    which it asks of a second host (datasets-server.<endpoint's host>) that a mirror or an
    ``HF_ENDPOINT`` need not have. Process-wide while it lasts (under ``_LOAD_LOCK``)."""
    import datasets

    saved = datasets.config.USE_PARQUET_EXPORT
    datasets.config.USE_PARQUET_EXPORT = False
    try:
        yield
    finally:
        datasets.config.USE_PARQUET_EXPORT = saved


class HubDataUnavailable(Exception):
    """A Hub data set that could be neither downloaded nor read from the cache."""

    def __init__(self, offline_error: Exception, online_error: Exception | None) -> None:
        super().__init__(str(offline_error))
        self.offline_error = offline_error
        self.online_error = online_error


def load_hf(spec: str) -> list[dict[str, Any]]:
    """Rows of a Hugging Face data set split: a local data set directory; else, online,
    downloaded by name (cached after the first time); offline, or when the Hub cannot be
    reached or refuses, from the local cache. Raises ``HubDataUnavailable`` when none
    of these has it."""
    import datasets

    path, name, split = parse_hf_spec(spec)
    online_error: Exception | None = None
    if not hub.offline_requested() and not Path(path).expanduser().exists():
        if hub.unreachable():
            online_error = hub.HubUnreachable(hub.unreachable())
        else:
            try:
                with _LOAD_LOCK, hub_online():
                    return datasets.load_dataset(path, name, split=split).to_list()
            except Exception as exc:  # the cache may still have it; said in the message if not
                online_error = exc
    try:
        with _LOAD_LOCK, hub_offline():
            ds = datasets.load_dataset(
                path, name, split=split, download_mode="reuse_cache_if_exists"
            )
            return ds.to_list()
    except Exception as exc:
        raise HubDataUnavailable(exc, online_error) from exc


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
        train_rows, train_source = self._load("train", cfg.data_files, cfg.hf_train)
        self._train = self._records(train_rows, train_source)
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
            eval_rows, eval_source = self._load("eval", cfg.eval_files, cfg.hf_eval)
            records = self._records(eval_rows, eval_source)
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

    def _load(self, split: str, files: str | None, hf_spec: str) -> tuple[list[dict], str]:
        if files:
            try:
                return load_local_files(files), files
            except FileNotFoundError as exc:
                raise ConfigError(self._missing(split, files, hf_spec, exc)) from exc
            except ConfigError:
                raise
            except Exception as exc:  # unreadable: not JSON lines, not parquet, ...
                raise ConfigError(
                    f"{self.name}: could not read {files} ({type(exc).__name__}: {exc}); "
                    f"expected rows {self.fields}"
                ) from exc
        if not hf_spec:
            raise ConfigError(self._missing(split, files, hf_spec, None))
        try:
            return load_hf(hf_spec), f"Hugging Face {hf_spec}"
        except ConfigError:
            raise
        except Exception as exc:  # datasets raises many kinds; all mean "absent"
            raise ConfigError(self._missing(split, files, hf_spec, exc)) from exc

    def _missing(self, split: str, files: str | None, hf_spec: str, exc: Exception | None) -> str:
        key = "data_files" if split == "train" else "eval_files"
        hf_key = "hf_train" if split == "train" else "hf_eval"
        datasets_cache = hf_cache_dir()
        looked = []
        if files:
            looked.append(f"local file(s) {files} ({key})")
        elif hf_spec:
            path, name, hf_split = parse_hf_spec(hf_spec)
            looked.append(
                f"the Hugging Face data set {path!r} (config {name or 'default'}, split "
                f"{hf_split!r}) offline in the local Hugging Face datasets cache "
                f"{datasets_cache}"
                + (f" and as a local directory {os.path.abspath(path)}" if "/" in path else "")
            )
        download = ""
        if isinstance(exc, HubDataUnavailable):
            online, exc = exc.online_error, exc.offline_error
            if online is not None and not hub.is_connection_error(online):
                download = f" Downloading it from {hub.endpoint()} failed ({first_line(online)})."
            else:
                unreachable = "" if online is None else str(online)
                if not isinstance(online, hub.HubUnreachable):
                    unreachable = first_line(online)
                download = f" Nothing was downloaded: {hub.offline_reason(unreachable)}."
        reason = f" ({first_line(exc)})" if exc else ""
        return (
            f"{self.name}: no data for the {split} split. Looked for "
            f"{'; '.join(looked) or 'nothing (no source configured)'}{reason}.{download} "
            f"Provide the data as a local file with rows "
            f"{self.fields}: --env-set {key}=/path/{split}.jsonl (.jsonl, .json, .parquet or "
            f".csv), or set {hf_key}=path:config:split to a data set on the Hub (downloaded "
            "when the Hub can be reached and HF_HUB_OFFLINE is unset), in the Hugging Face "
            f"cache or a local data set directory (or fill the cache where there is network: "
            f"datasets.load_dataset(...), then copy {datasets_cache})."
        )

    def _records(self, rows: list[dict[str, Any]], source: str) -> list[dict[str, Any]]:
        """Rows -> {"question", "answer", "meta"}; a ConfigError names the first bad row."""
        out = []
        for i, row in enumerate(rows):
            try:
                out.append(self._record(row))
            except (KeyError, ValueError, TypeError) as exc:
                raise ConfigError(
                    f"{self.name}: row {i} of {source} is not in the expected format "
                    f"({self.fields}): {type(exc).__name__}: {exc}; its fields: {sorted(row)}"
                ) from exc
        return out

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
