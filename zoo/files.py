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
"""

from __future__ import annotations

import codecs
import json
import pickle
import re
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


def read_json_lines(path: Path, torn_ok: bool = False) -> JsonLines:
    """Every line of ``path`` as a JSON object (blank lines skipped; a missing file reads
    as none). A line that is not one is an UnreadableFile naming it, except a torn last
    line (see JsonLines.torn) when ``torn_ok``."""
    if not Path(path).exists():
        return JsonLines()
    data = read_bytes(path)
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
