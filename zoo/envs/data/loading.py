"""Data-set loading shared by the math and code families (``gsm8k``, ``math``, ``mbpp``):
rows from local files (``.jsonl``/``.json``/``.parquet``/``.csv``) or a Hugging Face data
set (downloaded by name online, read from the local cache offline; zoo.hub), and the
``ConfigError`` that says where it looked when neither has them. ``owner`` (the env's
name) and ``fields`` (its row format) only word the error messages."""

from __future__ import annotations

import contextlib
import os
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from zoo import hub
from zoo.core.config import ConfigError
from zoo.hub import first_line

BUILDERS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv"}


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


def load_rows(
    owner: str, fields: str, split: str, files: str | None, hf_spec: str
) -> tuple[list[dict], str]:
    if files:
        try:
            return load_local_files(files), files
        except FileNotFoundError as exc:
            raise ConfigError(
                missing_data_message(owner, fields, split, files, hf_spec, exc)
            ) from exc
        except ConfigError:
            raise
        except Exception as exc:  # unreadable: not JSON lines, not parquet, ...
            raise ConfigError(
                f"{owner}: could not read {files} ({type(exc).__name__}: {exc}); "
                f"expected rows {fields}"
            ) from exc
    if not hf_spec:
        raise ConfigError(missing_data_message(owner, fields, split, files, hf_spec, None))
    try:
        return load_hf(hf_spec), f"Hugging Face {hf_spec}"
    except ConfigError:
        raise
    except Exception as exc:  # datasets raises many kinds; all mean "absent"
        raise ConfigError(missing_data_message(owner, fields, split, files, hf_spec, exc)) from exc


def missing_data_message(
    owner: str,
    fields: str,
    split: str,
    files: str | None,
    hf_spec: str,
    exc: Exception | None,
) -> str:
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
        f"{owner}: no data for the {split} split. Looked for "
        f"{'; '.join(looked) or 'nothing (no source configured)'}{reason}.{download} "
        f"Provide the data as a local file with rows "
        f"{fields}: --env-set {key}=/path/{split}.jsonl (.jsonl, .json, .parquet or "
        f".csv), or set {hf_key}=path:config:split to a data set on the Hub (downloaded "
        "when the Hub can be reached and HF_HUB_OFFLINE is unset), in the Hugging Face "
        f"cache or a local data set directory (or fill the cache where there is network: "
        f"datasets.load_dataset(...), then copy {datasets_cache})."
    )


def to_records(
    owner: str,
    fields: str,
    rows: list[dict[str, Any]],
    source: str,
    record: Callable[[dict[str, Any]], dict[str, Any]],
) -> list[dict[str, Any]]:
    """Rows -> ``record(row)`` each (gsm8k/math: {"question", "answer", "meta"}); a
    ConfigError names the first bad row."""
    out = []
    for i, row in enumerate(rows):
        try:
            out.append(record(row))
        except (KeyError, ValueError, TypeError) as exc:
            raise ConfigError(
                f"{owner}: row {i} of {source} is not in the expected format "
                f"({fields}): {type(exc).__name__}: {exc}; its fields: {sorted(row)}"
            ) from exc
    return out
