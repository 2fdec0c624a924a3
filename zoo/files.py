"""Reading the files a run or an experiment wrote, or refusing them in one line.

A run's folder outlives the process that wrote it: it is copied, synced, cut short by a
full disk or a kill, edited by hand. Every reader of such a file goes through here, so a
damaged one ends the command with ``error: PATH: what is wrong`` (exit status 2, as any
bad input: ``UnreadableFile`` is a ``ConfigError``) instead of a traceback from json,
pandas, torch or safetensors, and the same damage reads the same way everywhere.

JSON Lines files (metrics.jsonl, samples.jsonl, sessions.jsonl) are appended one whole
line at a time, so a kill in the middle of a write leaves at most the last line cut short
and without its newline: ``read_json_lines`` reports that "torn" line apart from damage
anywhere else, for the one reader that may accept it (``run --resume``, which re-does the
step the line belonged to).

A finished run's JSON Lines files may be stored compressed, ``metrics.jsonl.gz`` in place
of ``metrics.jsonl`` (gzip; ``scripts/compress_jsonl.py`` converts, zoo.run.runlog's
``compress_jsonl``). ``jsonl_file`` is the one place that resolves a name to the form
there, and every reader goes through it (``read_json_lines``, ``jsonl_exists``,
``jsonl_holds_data``): given ``run/metrics.jsonl`` they read it, or ``run/metrics.jsonl.gz``
when that is what exists. A .gz that is damaged (cut short, not gzip, a bad line inside)
is an UnreadableFile naming it; both forms side by side is one too (which holds the
records would be a guess). A running run only ever appends to the plain form.
"""

from __future__ import annotations

import codecs
import gzip
import json
import os
import pickle
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from zoo.core.config import ConfigError

if TYPE_CHECKING:
    import pandas as pd
    import torch


class UnreadableFile(ConfigError):
    """A file that is missing, empty, cut short or not what it should be. ``str()`` is one
    line: the path, what is wrong and, where the caller knows one, what to do."""

    def __init__(self, path: Path | str, problem: str, advice: str = "") -> None:
        self.path = Path(path)
        self.problem = " ".join(problem.split())  # (library messages may span lines)
        self.advice = advice
        super().__init__(f"{path}: {self.problem}" + (f"; {advice}" if advice else ""))

    def __reduce__(self) -> tuple:  # (rebuilt whole when a worker process raises it)
        return (UnreadableFile, (self.path, self.problem, self.advice))

    def advised(self, advice: str) -> UnreadableFile:
        """The same problem with ``advice`` (what to do, in the caller's terms)."""
        return UnreadableFile(self.path, self.problem, advice)


def _os_problem(path: Path, exc: OSError) -> UnreadableFile:
    if isinstance(exc, FileNotFoundError):
        return UnreadableFile(path, "missing")
    if isinstance(exc, IsADirectoryError):
        return UnreadableFile(path, "a folder where a file belongs")
    return UnreadableFile(path, f"cannot be read ({exc.strerror or exc})")


def file_size(path: Path) -> int:
    """The size of a file that is there and is a file (else an UnreadableFile)."""
    try:
        stat = Path(path).stat()
    except OSError as exc:
        raise _os_problem(path, exc) from None
    if Path(path).is_dir():
        raise _os_problem(path, IsADirectoryError())
    return stat.st_size


def read_bytes(path: Path) -> bytes:
    """The file's bytes; a missing file, a folder or a read error is an UnreadableFile."""
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise _os_problem(path, exc) from None


def _decode(path: Path, data: bytes, where: str = "") -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UnreadableFile(
            path, f"{where}not UTF-8 text (byte {exc.start}): overwritten with other data?"
        ) from None


def read_text(path: Path) -> str:
    """The file as UTF-8 text (see ``read_bytes``)."""
    return _decode(path, read_bytes(path))


def _json_problem(text: str, exc: json.JSONDecodeError) -> str:
    """What a JSON error says in words: a document that stops early (at its end, or in a
    string that never closes) is cut short."""
    if exc.pos >= len(text.rstrip()) or exc.msg.startswith("Unterminated string"):
        return f"cut short (its JSON stops mid-way, after line {text.count(chr(10)) + 1})"
    return f"not valid JSON ({exc.msg}: line {exc.lineno}, column {exc.colno})"


_KINDS = {dict: "object", list: "list"}


def read_json(path: Path, kind: type = dict) -> Any:
    """The JSON document in ``path``, which must be a ``kind`` (dict: a JSON object)."""
    text = read_text(path)
    if not text.strip():
        raise UnreadableFile(path, "empty")
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UnreadableFile(path, _json_problem(text, exc)) from None
    except RecursionError:
        raise UnreadableFile(path, "not valid JSON (nested too deeply)") from None
    if not isinstance(value, kind):
        found = _KINDS.get(type(value), type(value).__name__)
        raise UnreadableFile(path, f"holds a JSON {found} where a JSON {_KINDS[kind]} belongs")
    return value


@dataclass
class JsonLines:
    """A JSON Lines file as read: its records, and the last line if a write was cut."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    torn: int | None = None
    """The number of the last line when it is cut short (no newline, not a whole JSON
    record), the trace of a kill mid-write; None when the file ends cleanly."""
    unterminated: bool = False
    """The last line is a whole record but lacks its newline (a cut that fell just before
    it): an append would join the next record to it."""


GZIP = ".gz"
"""What a JSON Lines file's name gets when it is stored compressed."""


def gzipped(path: Path) -> Path:
    """The compressed form's name of a JSON Lines file: ``metrics.jsonl`` -> ``.jsonl.gz``."""
    path = Path(path)
    return path.with_name(path.name + GZIP)


def jsonl_file(path: Path) -> Path | None:
    """Where the JSON Lines file ``path`` (named in its plain form, ``run/metrics.jsonl``)
    is: ``path`` itself, or ``path.gz`` when that is what exists; None when neither does.
    Both at once is an UnreadableFile naming both: which one holds the records cannot be
    told, and a silent pick could read the stale one."""
    path = Path(path)
    packed = gzipped(path)
    plain_there, packed_there = os.path.lexists(path), os.path.lexists(packed)
    if plain_there and packed_there:
        raise UnreadableFile(
            path,
            f"is there twice, plain and compressed ({packed.name}): which one holds the "
            "records is ambiguous",
            f"compare them (zcat {packed.name} | cmp - {path.name}) and remove one",
        )
    if packed_there:
        return packed
    return path if plain_there else None


def jsonl_shown(path: Path) -> Path:
    """The name of the JSON Lines file ``path`` in the form there (the plain name when
    neither is), for messages about what it holds."""
    return jsonl_file(path) or Path(path)


def jsonl_exists(path: Path) -> bool:
    """Whether the JSON Lines file ``path`` is there in either form (see ``jsonl_file``)."""
    return jsonl_file(path) is not None


def jsonl_holds_data(path: Path) -> bool:
    """Whether the JSON Lines file ``path`` is there, in either form, and not empty (a
    compressed one is not read past its first byte: see ``read_jsonl_bytes`` for the
    check of the whole)."""
    found = jsonl_file(path)
    if found is None or not found.is_file():
        return False
    if found.name.endswith(GZIP):
        try:
            with gzip.open(found, "rb") as fh:
                return bool(fh.read(1))
        except (OSError, EOFError, zlib.error):
            raise UnreadableFile(found, _gzip_problem(found)) from None
    return found.stat().st_size > 0


def _gzip_problem(path: Path, data: bytes | None = None) -> str:
    """Why a .gz could not be read: empty, not gzip at all, or a gzip stream that stops
    early or fails its check."""
    if data is None:
        with open(path, "rb") as fh:
            data = fh.read(2)
    if not data:
        return "empty (a gzip file holds a header at least)"
    if data[:2] != b"\x1f\x8b":
        return "not a gzip file (overwritten with other data?)"
    return "not a whole gzip file: cut short, or damaged inside (its data fail gzip's check)"


def read_jsonl_bytes(path: Path) -> bytes | None:
    """The bytes of the JSON Lines file ``path`` in either form, a compressed one
    decompressed (None when neither is there). A .gz that does not decompress whole is an
    UnreadableFile naming it."""
    found = jsonl_file(path)
    if found is None:
        return None
    return gunzip_file(found) if found.name.endswith(GZIP) else read_bytes(found)


def gunzip_file(path: Path) -> bytes:
    """The decompressed bytes of the gzip file ``path``; one that does not decompress
    whole (empty, not gzip, cut short, failing gzip's check) is an UnreadableFile."""
    data = read_bytes(path)
    if not data:  # (gzip reads nothing as nothing; a .gz of no lines has its header)
        raise UnreadableFile(path, _gzip_problem(path, data))
    try:
        return gzip.decompress(data)
    except (OSError, EOFError, zlib.error):  # (BadGzipFile is an OSError)
        raise UnreadableFile(path, _gzip_problem(path, data)) from None


def read_json_lines(path: Path, torn_ok: bool = False) -> JsonLines:
    """Every line of ``path`` as a JSON object (blank lines skipped; a missing file reads
    as none). ``path`` is named in its plain form and read in the form there (see
    ``jsonl_file``); problems name the file read. A line that is not one is an
    UnreadableFile naming it, except a torn last line (see JsonLines.torn) when
    ``torn_ok``."""
    data = read_jsonl_bytes(path)
    if data is None:
        return JsonLines()
    path = jsonl_file(path)
    lines = data.split(b"\n")
    # split() leaves "" after a final newline; anything else there is a line left unended
    last = lines.pop()
    found = JsonLines()
    for number, raw in enumerate([*lines, last] if last else lines, start=1):
        ended = number <= len(lines)
        try:
            text = _decode(path, raw, f"line {number} is ")
            if not text.strip():
                continue
            row = json.loads(text)
        except (UnreadableFile, json.JSONDecodeError, RecursionError) as exc:
            if not ended and _looks_cut(raw):  # the last line, unended: a write cut short
                if torn_ok:
                    found.torn = number
                    break
                raise UnreadableFile(
                    path, f"line {number}, the last, is cut short (a write stopped mid-line)"
                ) from None
            if isinstance(exc, UnreadableFile):
                raise
            what = exc.msg if isinstance(exc, json.JSONDecodeError) else "nested too deeply"
            raise UnreadableFile(path, f"line {number} is not a JSON record ({what})") from None
        if not isinstance(row, dict):
            found_kind = _KINDS.get(type(row), type(row).__name__)
            raise UnreadableFile(path, f"line {number} holds a JSON {found_kind}, not a record")
        found.rows.append(row)
        found.unterminated = not ended
    return found


def _looks_cut(raw: bytes) -> bool:
    """Whether a line reads as the start of a JSON record that stops early: UTF-8 up to
    its end (where a cut may split a character) and opening with "{". Anything else in
    its place was written by something other than an append that was stopped."""
    try:
        text = codecs.getincrementaldecoder("utf-8")().decode(raw, final=False)
    except UnicodeDecodeError:
        return False
    return text.lstrip().startswith("{")


def read_table(path: Path, columns: tuple[str, ...] = ()) -> pd.DataFrame:
    """A CSV table written by pandas (harness/analysis.py's tables/), with ``columns``.
    A table of no rows and no columns (pandas writes one newline for it) reads as empty."""
    import io

    import pandas as pd

    text = read_text(path)
    if not text:
        raise UnreadableFile(path, "empty")
    if not text.endswith("\n"):  # pandas ends every table with one
        raise UnreadableFile(path, "cut short (its last line has no end)")
    if not text.strip():
        return pd.DataFrame()
    try:
        table = pd.read_csv(io.StringIO(text))
    except (pd.errors.ParserError, pd.errors.EmptyDataError, ValueError) as exc:
        raise UnreadableFile(path, f"not a CSV table ({str(exc).strip()})") from None
    missing = [c for c in columns if c not in table.columns]
    if missing:
        raise UnreadableFile(path, f"has no column {', '.join(missing)}: not the table it was")
    return table


def load_torch(path: Path) -> Any:
    """``torch.load(path, weights_only=True)``: tensors and plain values only. A file that
    holds other objects is refused, not unpickled (unpickling them could run code), and
    one that is cut short or not torch's is named as such."""
    import torch

    if file_size(path) == 0:
        raise UnreadableFile(path, "empty")
    try:
        return torch.load(path, weights_only=True)
    except pickle.UnpicklingError as exc:
        if " GLOBAL " in str(exc):
            found = re.search(r"GLOBAL ([\w.]+)", str(exc))  # the object torch refused
            what = f" ({found.group(1)})" if found else ""
            raise UnreadableFile(
                path,
                f"holds objects other than tensors and plain values{what}; they are not "
                "loaded, since unpickling them could run code",
            ) from None
        raise UnreadableFile(path, _torch_problem(path)) from None
    except (RuntimeError, EOFError, ValueError, OSError):
        raise UnreadableFile(path, _torch_problem(path)) from None


def _torch_problem(path: Path) -> str:
    """Why torch could not read a file: torch.save writes a zip archive, so one that
    starts as a zip and fails was cut short (or damaged inside); anything else is not a
    file torch.save wrote."""
    with open(path, "rb") as fh:
        head = fh.read(4)
    if head == b"PK\x03\x04":
        return "cut short or damaged (its zip archive is incomplete)"
    return "not a file torch.save wrote (overwritten with other data?)"


SAFETENSORS_PROBLEMS = {
    "incomplete metadata, file not fully covered": "cut short (its tensors end before its "
    "header says they do)",
    "header too small": "cut short (no whole header)",
    "header too large": "not a safetensors file (its header is unreadable)",
}


def _safetensors_problem(path: Path, exc: Exception) -> UnreadableFile:
    detail = str(exc).removeprefix("Error while deserializing header: ")
    problem = SAFETENSORS_PROBLEMS.get(detail, f"not a whole safetensors file ({detail})")
    return UnreadableFile(path, problem)


def check_safetensors(path: Path) -> None:
    """Read the header of a safetensors file (cheap: the tensors are not loaded) and check
    that the file holds every byte the header promises."""
    from safetensors import safe_open

    if file_size(path) == 0:
        raise UnreadableFile(path, "empty")
    try:
        with safe_open(str(path), "pt") as opened:
            opened.keys()
    except Exception as exc:  # SafetensorError; its class is not importable in every version
        raise _safetensors_problem(path, exc) from None


def load_safetensors(path: Path) -> dict[str, torch.Tensor]:
    """Every tensor of a safetensors file."""
    from safetensors.torch import load_file

    check_safetensors(path)
    try:
        return load_file(str(path))
    except Exception as exc:
        raise _safetensors_problem(path, exc) from None
