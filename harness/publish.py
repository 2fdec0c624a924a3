"""`harness publish` / `harness fetch`: an experiment's board on a Hugging Face data set
repository, so that boards can be shared without growing the code repository.

``publish(experiment, "OWNER/NAME")`` creates the data set repository when it is missing
and uploads, in one commit (``HfApi.create_commit``), every file ``reproduce`` and
``analyze`` read: experiment.json, each run's records (config.json, metrics.jsonl,
samples.jsonl, sessions.jsonl, complete.json, source.diff or its pointer, earlier starts
...), the diffs/ store the pointers name (zoo.run.diffs), tables/, plots/ and report.md.
Checkpoints (any path with a part named ``checkpoint*``), the ``samples/`` pages and links
are left out. Beside them goes ``manifest.json``: each file's
sha256 and size, and the code commit(s) the runs were made at (their config.json).

``fetch("OWNER/NAME", out)`` downloads a snapshot into the Hugging Face cache
(``snapshot_download``), checks every file the manifest lists against its sha256 and size,
and only then copies the files into ``out``. Offline (``HF_HUB_OFFLINE=1``, or a Hub that
cannot be reached: zoo/hub.py) it reads the cache. Errors the user can act on (no such
repository, no write token, an unreachable Hub, a damaged file) are one-line
``ConfigError``s. docs/publishing.md has the user's side.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from zoo.core.config import ConfigError
from zoo.files import UnreadableFile, read_bytes, read_json
from zoo.hub import (
    download_allowed,
    endpoint,
    first_line,
    is_connection_error,
    offline_reason,
    offline_requested,
    unreachable,
)

MANIFEST = "manifest.json"
MANIFEST_FORMAT = 1
EXPERIMENT_FILE = "experiment.json"
LEFT_OUT = ("checkpoint*", "samples/")
"""What is never published: any file or folder whose name starts with ``checkpoint``
(runs/<run>/checkpoint, checkpoints/, checkpoint.tmp, checkpoint.old) and the
experiment's ``samples/`` HTML pages (``harness analyze`` writes them again)."""
KEPT_ON_HUB = ("README.md", ".gitattributes")
"""Files of the repository that a publish never deletes (a data set card written on the
Hub, the Hub's own attributes); any other file an earlier publish left that the
experiment no longer holds is deleted, so the repository mirrors the board."""
REPO_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*")
REPO_TYPE = "dataset"
PUBLISHING = "publishing to"


@dataclass(frozen=True)
class PublishResult:
    """What ``publish`` did."""

    repo_id: str
    commit: str
    """The commit id on the Hub (the current one when nothing changed)."""
    url: str
    """The commit's address."""
    files: int
    """Files of the experiment published (manifest.json not counted)."""
    bytes: int
    """Their size in all."""
    left_out: int
    """Files, links and folders left out (checkpoints, samples/ pages, links)."""
    deleted: int
    """Files of an earlier publish that the experiment no longer holds, deleted."""

    def line(self) -> str:
        """What the command prints: one line."""
        gone = f", {self.deleted} stale deleted" if self.deleted else ""
        return (
            f"published {self.files} files ({self.bytes / 1e6:.1f} MB; {self.left_out} "
            f"checkpoints, samples pages or links left out{gone}) to {self.repo_id} at "
            f"{self.commit[:12]}: {self.url}"
        )


# ---- what is published ----


def check_repo_id(repo_id: str) -> None:
    """Refuse a repository name that is not ``OWNER/NAME``."""
    if not isinstance(repo_id, str) or not REPO_ID.fullmatch(repo_id) or ".." in repo_id:
        raise ConfigError(
            f"--repo {repo_id!r} is not a Hub repository name: give OWNER/NAME "
            "(letters, digits, '.', '_', '-'), e.g. alice/tiny-arithmetic"
        )


def read_experiment(experiment: Path) -> dict[str, Any]:
    """experiment.json of ``experiment``; a folder without a readable one is a one-line
    ConfigError naming the file."""
    experiment = Path(experiment)
    if not experiment.is_dir():
        raise ConfigError(
            f"{experiment} is not a folder: name an experiment folder (one with {EXPERIMENT_FILE})"
        )
    path = experiment / EXPERIMENT_FILE
    try:
        return read_json(path)
    except UnreadableFile as exc:
        raise UnreadableFile(path, exc.problem, "not an experiment folder to publish") from None


def is_left_out(relative: str) -> bool:
    """Whether the experiment's file or folder at ``relative`` (a POSIX path) is never
    published (see ``LEFT_OUT``)."""
    parts = PurePosixPath(relative).parts
    if not parts:
        return False
    if any(part.startswith("checkpoint") for part in parts):
        return True
    return parts[0] == "samples" or relative == MANIFEST


def experiment_files(experiment: Path) -> tuple[list[str], list[str]]:
    """(published, left out): the POSIX paths under ``experiment`` that are published, and
    those left out (checkpoint files and folders, samples/, links, a manifest.json), each
    sorted. A left-out folder is one entry ending in "/"; its contents are not walked."""
    experiment = Path(experiment)
    published: list[str] = []
    left: list[str] = []
    for folder, dirs, names in os.walk(experiment):
        base = Path(folder).relative_to(experiment)
        for name in list(dirs):
            relative = (base / name).as_posix()
            link = (Path(folder) / name).is_symlink()
            if is_left_out(relative) or link:
                dirs.remove(name)
                left.append(relative if link else f"{relative}/")
        for name in names:
            relative = (base / name).as_posix()
            if is_left_out(relative) or (Path(folder) / name).is_symlink():
                left.append(relative)
            else:
                published.append(relative)
    return sorted(published), sorted(left)


def run_commits(experiment: Path, files: list[str]) -> tuple[list[str], bool]:
    """(the code commits the runs were made at, whether any run had uncommitted changes),
    from the ``git`` record of each published runs/<run>/config.json."""
    commits: set[str] = set()
    dirty = False
    for relative in files:
        parts = PurePosixPath(relative).parts
        if len(parts) != 3 or parts[0] != "runs" or parts[2] != "config.json":
            continue
        try:
            git = read_json(experiment / relative).get("git") or {}
        except UnreadableFile:
            continue
        if isinstance(git, dict) and isinstance(git.get("commit"), str):
            commits.add(git["commit"])
            dirty = dirty or bool(git.get("dirty"))
    return sorted(commits), dirty


def build_manifest(experiment: Path, record: dict[str, Any], contents: dict[str, bytes]) -> dict:
    """manifest.json of a publish: each file's sha256 and size, the runs' commits, and the
    experiment's identity (experiment.json's command and created time). Nothing in it
    depends on when it was written, so publishing an unchanged board changes nothing."""
    files = sorted(contents)
    commits, dirty = run_commits(experiment, files)
    runs = {PurePosixPath(f).parts[1] for f in files if f.startswith("runs/") and f.count("/") > 1}
    return {
        "format": MANIFEST_FORMAT,
        "made_by": "forge-zoo harness publish",
        "experiment": Path(experiment).resolve().name,
        "command": record.get("command"),
        "created": record.get("created"),
        "runs": len(runs),
        "commits": commits,
        "dirty": dirty,
        "left_out": list(LEFT_OUT),
        "files": {
            f: {"sha256": hashlib.sha256(contents[f]).hexdigest(), "size": len(contents[f])}
            for f in files
        },
    }


# ---- errors ----


def _status(exc: BaseException) -> int | None:
    response = getattr(exc, "response", None)
    return getattr(response, "status_code", None)


def _hub_error(doing: str, repo_id: str, exc: Exception) -> ConfigError | None:
    """The one-line ConfigError for a failure the user can act on (None: not one)."""
    from huggingface_hub.errors import (
        HfHubHTTPError,
        HFValidationError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    where = f"{REPO_TYPE} repository {repo_id} on {endpoint()}"
    status = _status(exc)
    if is_connection_error(exc):
        return ConfigError(
            f"{doing} {repo_id}: the Hub at {endpoint()} could not be reached ({first_line(exc)})"
        )
    if doing == PUBLISHING and status == 401:
        return ConfigError(
            f"{doing} {repo_id}: the Hub at {endpoint()} refused to write (401 Unauthorized): "
            "no write token, or an invalid one; set HF_TOKEN to a token with write access "
            "(or `hf auth login`)"
        )
    if status == 403:
        may = "write there; use a write token of the owner" if doing == PUBLISHING else "read it"
        return ConfigError(
            f"{doing} {repo_id}: the Hub at {endpoint()} refused (403 Forbidden): your token "
            f"may not {may}"
        )
    if isinstance(exc, RevisionNotFoundError):
        return ConfigError(f"{where} has no revision by that name ({first_line(exc)})")
    if isinstance(exc, RepositoryNotFoundError):
        return ConfigError(
            f"{where} was not found (or it is private: set HF_TOKEN) ({first_line(exc)})"
        )
    if isinstance(exc, HFValidationError):
        return ConfigError(f"{doing} {repo_id}: {first_line(exc)}")
    if isinstance(exc, HfHubHTTPError | OSError):
        return ConfigError(f"{doing} {where} failed: {first_line(exc)}")
    return None


# ---- publish ----


def publish(
    experiment: Path, repo_id: str, *, token: str | None = None, message: str | None = None
) -> PublishResult:
    """Upload the experiment folder ``experiment`` to the Hub data set repository
    ``repo_id`` (OWNER/NAME), created when missing, in one commit: its files but
    checkpoints and samples/ pages, and manifest.json. ``token``: a write token (default:
    HF_TOKEN or the token of ``hf auth login``); ``message``: the commit's summary."""
    from huggingface_hub import CommitOperationAdd, CommitOperationDelete, HfApi

    check_repo_id(repo_id)
    experiment = Path(experiment)
    record = read_experiment(experiment)
    files, left = experiment_files(experiment)
    contents = {f: read_bytes(experiment / f) for f in files}
    manifest = build_manifest(experiment, record, contents)
    if offline_requested():
        raise ConfigError(
            f"cannot publish to {repo_id}: {offline_reason()}; unset it to upload "
            "(nothing was uploaded)"
        )
    if reason := unreachable():
        raise ConfigError(f"cannot publish to {repo_id}: {offline_reason(reason)}")
    size = sum(len(data) for data in contents.values())
    summary = message or (
        f"harness publish {manifest['experiment']}: {len(files)} files, {manifest['runs']} runs"
    )
    api = HfApi(token=token)
    try:
        api.create_repo(repo_id, repo_type=REPO_TYPE, exist_ok=True)
        held = set(api.list_repo_files(repo_id, repo_type=REPO_TYPE))
        stale = sorted(held - set(files) - {MANIFEST, *KEPT_ON_HUB})
        text = json.dumps(manifest, indent=1, sort_keys=True) + "\n"
        operations: list[Any] = [CommitOperationAdd(f, contents[f]) for f in files]
        operations.append(CommitOperationAdd(MANIFEST, text.encode()))
        operations += [CommitOperationDelete(path) for path in stale]
        info = api.create_commit(repo_id, operations, commit_message=summary, repo_type=REPO_TYPE)
    except Exception as exc:
        error = _hub_error(PUBLISHING, repo_id, exc)
        if error is None:
            raise
        raise error from exc
    return PublishResult(
        repo_id=repo_id,
        commit=info.oid,
        url=str(info.commit_url),
        files=len(files),
        bytes=size,
        left_out=len(left),
        deleted=len(stale),
    )


# ---- fetch ----


def cache_folder(repo_id: str) -> Path:
    """Where the Hugging Face cache keeps data set ``repo_id``."""
    import huggingface_hub.constants as hub_constants

    return Path(hub_constants.HF_HUB_CACHE) / f"datasets--{repo_id.replace('/', '--')}"


def _snapshot(repo_id: str, revision: str | None, token: str | None) -> Path:
    """The snapshot folder of ``repo_id`` at ``revision`` in the cache: downloaded where
    the Hub can be reached, else (or when the download fails on the connection) the
    cached one; none cached offline is the project's offline message."""
    from huggingface_hub import snapshot_download

    allowed, why = download_allowed()
    if allowed:
        try:
            return Path(
                snapshot_download(repo_id, repo_type=REPO_TYPE, revision=revision, token=token)
            )
        except Exception as exc:
            if not is_connection_error(exc):
                error = _hub_error("fetching", repo_id, exc)
                if error is None:
                    raise
                raise error from exc
            why = offline_reason(first_line(exc))
    try:
        return Path(
            snapshot_download(
                repo_id, repo_type=REPO_TYPE, revision=revision, local_files_only=True
            )
        )
    except Exception as exc:
        if not is_connection_error(exc):
            raise
        # huggingface_hub refuses a snapshot with a file missing; verify_snapshot names it
        found = _cached_snapshot(repo_id, revision)
        if found is not None and (found / MANIFEST).is_file():
            return found
        at = f" at {revision}" if revision else ""
        raise ConfigError(
            f"{repo_id}{at} was not found offline: looked in the Hugging Face cache at "
            f"{cache_folder(repo_id)}; nothing was downloaded: {why}"
        ) from exc


def _cached_snapshot(repo_id: str, revision: str | None) -> Path | None:
    """The cache's snapshot folder of ``repo_id`` at ``revision`` (a ref or a commit id),
    whatever it holds; None when there is none."""
    folder = cache_folder(repo_id)
    name = revision or "main"
    ref = folder / "refs" / name
    try:
        commit = ref.read_text().strip() if ref.is_file() else name
    except OSError:
        return None
    snapshot = folder / "snapshots" / commit
    return snapshot if commit and "/" not in commit and snapshot.is_dir() else None


def _safe(relative: object) -> bool:
    """Whether a manifest's path stays inside the folder it is copied into."""
    if not isinstance(relative, str) or not relative or "\\" in relative:
        return False
    path = PurePosixPath(relative)
    return not path.is_absolute() and ".." not in path.parts and "." not in path.parts


def verify_snapshot(snapshot: Path, repo_id: str) -> dict[str, dict[str, Any]]:
    """The files manifest.json lists (path -> sha256, size), each checked in ``snapshot``:
    a missing one, or one whose sha256 or size differs, is a one-line ConfigError naming
    it (and the cache folder to delete)."""
    path = snapshot / MANIFEST
    if not path.is_file():
        raise ConfigError(
            f"{repo_id} holds no {MANIFEST}: it was not published by `harness publish`"
        )
    manifest = read_json(path)
    files = manifest.get("files")
    if not isinstance(files, dict) or EXPERIMENT_FILE not in files:
        raise UnreadableFile(path, f"lists no files (or no {EXPERIMENT_FILE})")
    advice = f"delete {cache_folder(repo_id)} and fetch again"
    for relative, meta in files.items():
        if not _safe(relative) or not isinstance(meta, dict):
            raise UnreadableFile(path, f"lists a path that is not inside the board: {relative!r}")
        found = snapshot / relative
        if not found.is_file():
            raise UnreadableFile(found, f"listed in {repo_id}'s {MANIFEST} but missing", advice)
        data = read_bytes(found)
        digest = hashlib.sha256(data).hexdigest()
        if digest != meta.get("sha256") or len(data) != meta.get("size"):
            raise UnreadableFile(
                found,
                f"{relative} of {repo_id} is damaged: sha256 {digest[:12]}, {len(data)} bytes, "
                f"where {MANIFEST} says {str(meta.get('sha256'))[:12]}, {meta.get('size')} bytes",
                advice,
            )
    return files


def _identity(record: dict[str, Any]) -> tuple[Any, Any]:
    return record.get("command"), record.get("created")


def _check_out(out: Path) -> None:
    """Refuse, before anything is downloaded, an ``out`` that is a file, or a non-empty
    folder that holds no experiment.json."""
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out} is a file: name a new or empty folder")
    if out.is_dir() and any(out.iterdir()) and not (out / EXPERIMENT_FILE).is_file():
        raise ConfigError(
            f"--out {out} is not empty and holds no {EXPERIMENT_FILE}: fetch into a new or "
            "empty folder (nothing was written)"
        )


def fetch(
    repo_id: str, out: Path, *, revision: str | None = None, token: str | None = None
) -> Path:
    """Download the experiment published to Hub data set ``repo_id`` (at ``revision``: a
    branch, tag or commit id; default main) into the Hugging Face cache, check every file
    against manifest.json, then copy the files into ``out`` (returned). ``out`` must be new,
    empty, or hold the same experiment (experiment.json's command and created time), whose
    published files are then replaced and other files (checkpoints) kept. Offline it reads
    the cache. ``token``: for a private repository (default: HF_TOKEN or `hf auth login`)."""
    check_repo_id(repo_id)
    out = Path(out)
    _check_out(out)
    snapshot = _snapshot(repo_id, revision, token)
    files = verify_snapshot(snapshot, repo_id)
    if (out / EXPERIMENT_FILE).is_file():
        fetched = read_json(snapshot / EXPERIMENT_FILE)
        try:
            same = _identity(read_json(out / EXPERIMENT_FILE)) == _identity(fetched)
        except UnreadableFile:
            same = False
        if not same:
            raise ConfigError(
                f"--out {out} holds another experiment than {repo_id} (its {EXPERIMENT_FILE} "
                "has another command or created time): fetch into a new or empty folder "
                "(nothing was written)"
            )
    for relative in sorted(files):
        data = read_bytes(snapshot / relative)
        target = out / relative
        if target.is_file() and not target.is_symlink() and target.read_bytes() == data:
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(f"{target.name}.fetch-partial")
        partial.write_bytes(data)
        os.replace(partial, target)
    return out
