"""A run's source diffs, each kept once by content hash.

A run from a modified tree records the uncommitted changes (``git diff HEAD --binary``,
zoo.run.runlog). The runs of one experiment nearly always share that diff, often
megabytes of it, so the bytes go once into a store, ``diffs/<sha256>.diff``, and the run
folder holds a pointer: ``source.diff.sha256`` (``source-<sha256[:12]>.diff.sha256`` for
a later session's other diff), one line, the 64 hex digits of the diff's sha256.

Why a pointer file beside config.json, rather than a field in it: the records a run wrote
are never rewritten (config.json and sessions.jsonl are what ``reproduce`` and the
boards trust), and converting the folders recorded before the store existed must not
touch them; the pointer keeps the name a session records (``"diff": "source.diff"``,
plus ``.sha256``), so ``ls`` of a run folder still shows that a diff was kept; and
config.json's ``git.diff_sha256`` alone cannot tell "kept in the store" from "never
kept" (runs recorded before diffs were).

Where the store is: ``<experiment>/diffs/`` for a run inside an experiment folder (the
nearest folder above the run that holds experiment.json, at most ``UP`` levels up: it
covers ``<exp>/runs/<run>/earlier-starts/<k>/``), else ``<run>/diffs/``: so an experiment
folder, or a run outside one, copied elsewhere stays whole.

Both forms are read: a plain ``source.diff`` (written before the store, or by an older
checkout still running) and a pointer. ``diff_path`` is the one way in (``read_diff``,
``kept_diffs`` go through it); a pointer that is not one hash, a store file that is
missing or whose bytes do not hash to its name is an UnreadableFile naming the file
(zoo/files.py). Writing (``store_diff``, and ``convert_diffs`` for folders recorded
before the store) is zoo.run.runlog's, beside the other writes of a run.

A store file may be kept compressed, ``diffs/<sha256>.diff.gz`` (``scripts/compress_jsonl.py``
does it for finished experiments, as for their JSON Lines files): its name's sha256 is
still that of the diff itself, and every reader here takes either form.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from zoo.files import UnreadableFile, gunzip_file, jsonl_file, read_bytes

SOURCE_DIFF = "source.diff"
POINTER = ".sha256"
"""What a diff's name gets as a pointer: ``source.diff`` -> ``source.diff.sha256``."""
STORE = "diffs"
EXPERIMENT = "experiment.json"
EARLIER_STARTS = "earlier-starts"
"""Where a run that started over keeps an earlier start's records (harness/runner.py)."""
UP = 4
"""How many folders above a run folder (or an earlier start's) the experiment is sought."""
DIFF_NAME = re.compile(r"source(-[0-9a-f]{12})?\.diff")
SHA256 = re.compile(r"[0-9a-f]{64}")

_verified: dict[tuple[str, int, int], str] = {}
"""Store files whose bytes were hashed in this process: (path, size, mtime) -> sha256."""


def _folders_up(folder: Path) -> list[Path]:
    """``folder``, then the folders above it up to the experiment folder (the first that
    holds experiment.json), at most UP levels up; all of them when none is an experiment."""
    found = [folder]
    for above in list(Path(folder).parents)[:UP]:
        found.append(above)
        if (above / EXPERIMENT).is_file():
            break
    return found


def store_of(folder: Path) -> Path:
    """The store a run folder writes its diffs into: its experiment's ``diffs/``, or its
    own when it is in no experiment (an earlier start's folder: its run's)."""
    top = _folders_up(folder)[-1]
    if (top / EXPERIMENT).is_file():
        return top / STORE
    run = Path(folder)
    return (run.parent.parent if run.parent.name == EARLIER_STARTS else run) / STORE


def stores(folder: Path) -> list[Path]:
    """Where a pointer in ``folder`` is looked up, nearest first."""
    return [f / STORE for f in _folders_up(folder)]


def pointer_of(name: str) -> str:
    return name + POINTER


def diff_names(folder: Path) -> list[str]:
    """The diffs ``folder`` records, by their names (``source.diff`` first, then the
    later sessions' ``source-<sha256[:12]>.diff``), in either form."""
    names = set()
    for path in Path(folder).glob("source*.diff*"):
        name = path.name.removesuffix(POINTER)
        if DIFF_NAME.fullmatch(name):
            names.add(name)
    return sorted(names, key=lambda n: (n != SOURCE_DIFF, n))


def diff_files(folder: Path) -> list[Path]:
    """The files in ``folder`` that record its diffs (plain diffs and pointers; the
    store is not in it)."""
    found = []
    for name in diff_names(folder):
        found += [p for p in (folder / name, folder / pointer_of(name)) if p.exists()]
    return found


def read_pointer(path: Path) -> str:
    """The sha256 a pointer file holds (an UnreadableFile naming it when it holds none)."""
    data = read_bytes(path)
    try:
        text = data.decode("ascii").strip()
    except UnicodeDecodeError:
        text = ""
    if not SHA256.fullmatch(text):
        what = "empty" if not data else "not a diff pointer"
        raise UnreadableFile(path, f"{what}: it should hold one sha256 (64 hex digits)")
    return text


def stored_bytes(path: Path) -> bytes:
    """The diff a file holds: its bytes, decompressed when it is a store's ``.diff.gz``."""
    return gunzip_file(path) if path.name.endswith(".gz") else read_bytes(path)


def stored_file(store: Path, digest: str) -> Path | None:
    """Where the store ``store`` keeps the diff of sha256 ``digest``: ``<digest>.diff`` or
    ``<digest>.diff.gz``; None when neither is there (both: an UnreadableFile)."""
    return jsonl_file(store / f"{digest}.diff")  # (any file, plain or .gz, not only JSON Lines)


def hash_of(path: Path) -> str:
    """sha256 of the diff the store file ``path`` holds (decompressed; remembered while the
    file keeps its size and mtime)."""
    try:
        stat = path.stat()
    except OSError:
        stat = None
    key = (str(path), stat.st_size, stat.st_mtime_ns) if stat else None
    if key and key in _verified:
        return _verified[key]
    digest = hashlib.sha256(stored_bytes(path)).hexdigest()
    if key:
        _verified[key] = digest
    return digest


def recorded_sha256(folder: Path, name: str = SOURCE_DIFF) -> str | None:
    """The sha256 of the diff ``name`` of ``folder``, as recorded (the pointer's, or the
    plain file's bytes hashed), without reading the store; None when there is none."""
    pointer = Path(folder) / pointer_of(name)
    if pointer.exists():
        return read_pointer(pointer)
    plain = Path(folder) / name
    if plain.exists():
        return hashlib.sha256(read_bytes(plain)).hexdigest()
    return None


def find_stored(pointer: Path) -> Path:
    """The store file the pointer ``pointer`` names, its bytes checked against its name;
    a missing or damaged one is an UnreadableFile."""
    digest = read_pointer(pointer)
    looked = stores(pointer.parent)
    for store in looked:
        path = stored_file(store, digest)
        if path is not None:
            found = hash_of(path)
            if found != digest:
                raise UnreadableFile(
                    path,
                    f"damaged: its bytes hash to {found[:12]}, not to its name "
                    f"(the diff {pointer} points to)",
                )
            return path
    raise UnreadableFile(
        pointer,
        f"points to {digest}.diff, which is in none of {', '.join(map(str, looked))}",
    )


def diff_path(folder: Path, name: str = SOURCE_DIFF) -> Path | None:
    """The file holding the diff ``name`` that ``folder`` (a run, or an earlier start's)
    records: the store file its pointer names (checked), else the plain file; None when
    it records none. Every reader of a run's diff comes through here."""
    pointer = Path(folder) / pointer_of(name)
    if pointer.exists():
        return find_stored(pointer)
    plain = Path(folder) / name
    return plain if plain.exists() else None


def read_diff(folder: Path, name: str = SOURCE_DIFF) -> bytes | None:
    """The bytes of the diff ``name`` of ``folder`` (``diff_path``); None when none."""
    path = diff_path(folder, name)
    return stored_bytes(path) if path is not None else None


def kept_diffs(folder: Path) -> dict[str, Path]:
    """Every diff ``folder`` records: name -> the file holding it (each pointer checked)."""
    found = {}
    for name in diff_names(folder):
        path = diff_path(folder, name)
        if path is not None:
            found[name] = path
    return found
