"""A small Hugging Face Hub stand-in on 127.0.0.1, for tests of the real download code
(``huggingface_hub.snapshot_download`` / ``hf_hub_download``, ``datasets.load_dataset``)
with ``HF_ENDPOINT`` pointed at it. Nothing leaves the machine.

It serves model and data set repositories held in memory, one commit at a time (the
newest), through the routes those libraries call:

- ``GET /api/{models,datasets}/{owner}/{name}[/revision/{rev}]``: repo info (``id``,
  ``sha``, ``siblings``);
- ``GET /api/{models,datasets}/{owner}/{name}/tree/{rev}[/{path}][?recursive=true]``:
  the files and folders under ``path`` (one page; no ``Link`` header);
- ``POST /api/{models,datasets}/{owner}/{name}/paths-info/{rev}`` (form ``paths=...``):
  the entries of the paths that exist;
- ``HEAD``/``GET /{owner}/{name}/resolve/{rev}/{path}`` and
  ``/datasets/{owner}/{name}/resolve/{rev}/{path}``: a file, with ``X-Repo-Commit``,
  ``ETag`` (the git blob id), ``Content-Length`` and ``Range`` requests (206).

and it takes uploads through the routes ``HfApi.create_repo`` and ``HfApi.create_commit``
call (huggingface_hub 1.33):

- ``POST /api/repos/create`` (JSON ``name``, ``organization``, ``type``): an empty repo;
  409 when it exists (``exist_ok=True`` takes that as success);
- ``POST /api/{models,datasets}/{owner}/{name}/preupload/{rev}`` (JSON ``files``: path,
  sample, size): ``uploadMode`` "regular" for every file (no LFS, no Xet), with the
  ``oid`` of a file the repo already holds, so the client leaves unchanged files out;
- ``POST /api/{models,datasets}/{owner}/{name}/commit/{rev}`` (NDJSON: a ``header`` line,
  then ``file`` lines with base64 ``content`` and ``deletedFile`` / ``deletedFolder``
  lines): the files change in memory and the repo gets a new commit id (``commitOid``);
  a ``parentCommit`` that is not the current one is a 412, an ``lfsFile`` line a 400.

With ``LocalHub.write_token`` set, those three need ``Authorization: Bearer <it>``; without
one (or with another) they are refused with the Hub's 401. Reads never need a token.

``rev`` is ``main`` or the repo's current commit id. Anything else is a 404 with the
``X-Error-Code`` the Hub sends (``RepoNotFound``, ``RevisionNotFound``,
``EntryNotFound``), which is how the clients tell those cases apart. Every request is
recorded in ``LocalHub.requests`` as ``(method, path)``; each commit in ``Repo.commits`` as
``(commit id, summary)``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

KINDS = {"models": "model", "datasets": "dataset"}


def git_blob_id(data: bytes) -> str:
    """The id git gives a file's content (what the Hub reports as a file's oid)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass
class Repo:
    kind: str
    """"model" or "dataset"."""
    repo_id: str
    files: dict[str, bytes]
    sha: str = ""
    commits: list[tuple[str, str]] = field(default_factory=list)
    """(commit id, summary) of each commit made through the commit route, oldest first."""

    def __post_init__(self) -> None:
        if not self.sha:
            self.sha = self._commit_id("")

    def _commit_id(self, parent: str) -> str:
        listing = "".join(f"{p}:{git_blob_id(d)}\n" for p, d in sorted(self.files.items()))
        # (no parent: the id the repo was created with, as before commits existed)
        head = f"{self.kind}/{self.repo_id}\n" + (f"{parent}\n" if parent else "")
        return hashlib.sha1(f"{head}{listing}".encode()).hexdigest()

    def commit(self, summary: str, files: dict[str, bytes], deleted: set[str]) -> str:
        """Apply one commit: ``files`` written, paths in ``deleted`` removed; the new id."""
        for path in deleted:
            self.files.pop(path, None)
        self.files.update(files)
        self.sha = self._commit_id(self.sha)
        self.commits.append((self.sha, summary))
        return self.sha

    def folders(self) -> set[str]:
        out = set()
        for path in self.files:
            parts = path.split("/")[:-1]
            out.update("/".join(parts[: i + 1]) for i in range(len(parts)))
        return out

    def entry(self, path: str) -> dict | None:
        if path in self.files:
            data = self.files[path]
            return {"type": "file", "oid": git_blob_id(data), "size": len(data), "path": path}
        if path in self.folders():
            return {"type": "directory", "oid": git_blob_id(path.encode()), "size": 0, "path": path}
        return None

    def tree(self, under: str, recursive: bool) -> list[dict] | None:
        if under and under not in self.folders():
            return None
        prefix = f"{under}/" if under else ""
        paths = sorted({*self.files, *self.folders()})
        inside = [p for p in paths if p.startswith(prefix) and p != under]
        if not recursive:
            inside = [p for p in inside if "/" not in p[len(prefix) :]]
        return [self.entry(p) for p in inside]

    def info(self) -> dict:
        return {
            "_id": self.sha[:24],
            "id": self.repo_id,
            "sha": self.sha,
            "private": False,
            "disabled": False,
            "gated": False,
            "downloads": 0,
            "likes": 0,
            "tags": [],
            "lastModified": "2025-01-01T00:00:00.000Z",
            "createdAt": "2025-01-01T00:00:00.000Z",
            "siblings": [{"rfilename": p} for p in sorted(self.files)],
        }


@dataclass
class LocalHub:
    """``with LocalHub() as hub: hub.add_model(...); os.environ["HF_ENDPOINT"] = hub.url``."""

    repos: dict[tuple[str, str], Repo] = field(default_factory=dict)
    requests: list[tuple[str, str]] = field(default_factory=list)
    url: str = ""
    write_token: str | None = None
    """When set, creating a repo and committing need ``Authorization: Bearer <it>``."""

    def add_model(self, repo_id: str, files: dict[str, bytes]) -> Repo:
        self.repos["model", repo_id] = repo = Repo("model", repo_id, files)
        return repo

    def add_dataset(self, repo_id: str, files: dict[str, bytes]) -> Repo:
        self.repos["dataset", repo_id] = repo = Repo("dataset", repo_id, files)
        return repo

    def __enter__(self) -> LocalHub:
        hub = self

        class Handler(_Handler):
            local_hub = hub

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


API = re.compile(
    r"^/api/(models|datasets)/([^/]+/[^/]+)"
    r"(?:/(revision|tree|paths-info|preupload|commit)/([^/]+)(/.*)?)?$"
)
CREATE = "/api/repos/create"
RESOLVE = re.compile(r"^/(datasets/)?([^/]+/[^/]+)/resolve/([^/]+)/(.+)$")


class _Handler(BaseHTTPRequestHandler):
    local_hub: LocalHub

    def log_message(self, format: str, *args: object) -> None:  # quiet
        pass

    # ---- answers ----

    def _send(
        self, status: int, body: bytes = b"", headers: dict | None = None, head: bool = False
    ) -> None:
        self.send_response(status)
        for k, v in {"Content-Length": str(len(body)), **(headers or {})}.items():
            self.send_header(k, v)
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _json(self, value: object) -> None:
        self._send(200, json.dumps(value).encode(), {"Content-Type": "application/json"})

    def _error(self, code: str, message: str, head: bool = False, status: int = 404) -> None:
        body = json.dumps({"error": message}).encode()
        headers = {
            "Content-Type": "application/json",
            "X-Error-Code": code,
            "X-Error-Message": message,
        }
        self._send(status, body, headers, head=head)

    def _refuse(self, status: int, message: str) -> None:
        """An error without an ``X-Error-Code`` (401, 400, 409, 412), as the Hub sends them."""
        body = json.dumps({"error": message}).encode()
        headers = {"Content-Type": "application/json", "X-Error-Message": message}
        self._send(status, body, headers)

    def _body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _may_write(self) -> bool:
        """Whether a write is authorised (``LocalHub.write_token``); answers the 401 if not."""
        token = self.local_hub.write_token
        if token is None:
            return True
        given = self.headers.get("Authorization") or ""
        if not given:
            self._refuse(401, "Invalid username or password.")
            return False
        if given != f"Bearer {token}":
            self._refuse(401, "Invalid credentials in Authorization header")
            return False
        return True

    def _repo(self, kind: str, repo_id: str, rev: str | None, head: bool = False) -> Repo | None:
        repo = self.local_hub.repos.get((kind, repo_id))
        if repo is None:
            self._error("RepoNotFound", f"Repository Not Found for url: {self.path}", head)
            return None
        if rev is not None and rev not in ("main", repo.sha):
            self._error("RevisionNotFound", f"Invalid rev id: {rev}", head)
            return None
        return repo

    # ---- routes ----

    def _route(self, method: str) -> None:
        split = urlsplit(self.path)
        self.local_hub.requests.append((method, split.path))
        query = parse_qs(split.query)
        api, resolve = API.match(split.path), RESOLVE.match(split.path)
        if split.path == CREATE and method == "POST":
            return self._create()
        writes = api and method == "POST" and api[3] in ("preupload", "commit")
        if writes and not self._may_write():
            return
        if api and method in ("GET", "POST"):
            kind, repo_id, what, rev, rest = api.groups()
            repo = self._repo(KINDS[kind], repo_id, unquote(rev) if rev else None)
            if repo is None:
                return
            under = unquote(rest or "").strip("/")
            if what in (None, "revision") and method == "GET":
                return self._json(repo.info())
            if what == "tree" and method == "GET":
                recursive = query.get("recursive", ["false"])[0].lower() in ("true", "1")
                listing = repo.tree(under, recursive)
                if listing is None:
                    return self._error("EntryNotFound", f"{under} does not exist")
                return self._json(listing)
            if what == "paths-info" and method == "POST":
                length = int(self.headers.get("Content-Length") or 0)
                form = parse_qs(self.rfile.read(length).decode())
                entries = [repo.entry(p.strip("/")) for p in form.get("paths", [])]
                return self._json([e for e in entries if e is not None])
            if what == "preupload" and method == "POST":
                return self._preupload(repo)
            if what == "commit" and method == "POST":
                return self._commit(repo)
        if resolve and method in ("GET", "HEAD"):
            dataset, repo_id, rev, path = resolve.groups()
            head = method == "HEAD"
            kind = "dataset" if dataset else "model"
            repo = self._repo(kind, repo_id, unquote(rev), head)
            if repo is None:
                return
            data = repo.files.get(unquote(path))
            if data is None:
                return self._error("EntryNotFound", f"{unquote(path)} does not exist", head)
            headers = {
                "X-Repo-Commit": repo.sha,
                "ETag": f'"{git_blob_id(data)}"',
                "Accept-Ranges": "bytes",
                "Content-Type": "application/octet-stream",
            }
            ranged = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range") or "")
            if ranged and not head:
                start = int(ranged[1])
                end = min(int(ranged[2]) if ranged[2] else len(data) - 1, len(data) - 1)
                if start >= len(data):
                    return self._send(416, b"", {"Content-Range": f"bytes */{len(data)}"})
                headers["Content-Range"] = f"bytes {start}-{end}/{len(data)}"
                return self._send(206, data[start : end + 1], headers)
            return self._send(200, data, headers, head=head)
        self._error("EntryNotFound", f"no route for {method} {split.path}", method == "HEAD")

    def _create(self) -> None:
        """``POST /api/repos/create``: an empty repo, or 409 when it exists."""
        if not self._may_write():
            return
        try:
            payload = json.loads(self._body() or b"{}")
            name, owner = payload["name"], payload.get("organization")
        except (ValueError, KeyError, TypeError):
            return self._refuse(400, "Invalid JSON payload: name is required")
        kind = payload.get("type") or "model"
        if kind not in KINDS.values() or not owner:
            return self._refuse(400, f"cannot create a {kind} repo without an owner here")
        repo_id = f"{owner}/{name}"
        prefix = "" if kind == "model" else f"{kind}s/"
        url = f"{self.local_hub.url}/{prefix}{repo_id}"
        if (kind, repo_id) in self.local_hub.repos:
            body = json.dumps({"error": f"You already created this {kind} repo", "url": url})
            return self._send(409, body.encode(), {"Content-Type": "application/json"})
        self.local_hub.repos[kind, repo_id] = Repo(kind, repo_id, {})
        self._json({"url": url, "name": repo_id, "id": repo_id})

    def _preupload(self, repo: Repo) -> None:
        """Every file is uploaded "regular" (inline in the commit), none ignored; ``oid`` of a
        file the repo holds (its git blob id) lets the client skip unchanged files."""
        try:
            files = json.loads(self._body())["files"]
            paths = [f["path"] for f in files]
        except (ValueError, KeyError, TypeError):
            return self._refuse(400, "Invalid JSON payload: files is required")
        answer = [
            {
                "path": p,
                "uploadMode": "regular",
                "shouldIgnore": False,
                "oid": git_blob_id(repo.files[p]) if p in repo.files else None,
            }
            for p in paths
        ]
        self._json({"files": answer, "commitOid": repo.sha})

    def _commit(self, repo: Repo) -> None:
        """The NDJSON commit: header, then file / deletedFile / deletedFolder lines."""
        try:
            lines = [json.loads(x) for x in self._body().splitlines() if x.strip()]
            header = lines[0]["value"] if lines and lines[0]["key"] == "header" else None
        except (ValueError, KeyError, TypeError):
            return self._refuse(400, "Invalid NDJSON payload")
        if header is None or not header.get("summary"):
            return self._refuse(400, "the first line must be a header with a summary")
        parent = header.get("parentCommit")
        if parent and not repo.sha.startswith(parent):
            return self._refuse(412, f"A commit has happened since {parent}. Please refresh.")
        added: dict[str, bytes] = {}
        deleted: set[str] = set()
        for line in lines[1:]:
            key, value = line.get("key"), line.get("value") or {}
            path = str(value.get("path", "")).strip("/")
            if key == "file" and value.get("encoding") == "base64":
                try:
                    added[path] = base64.b64decode(value.get("content", ""), validate=True)
                except (binascii.Error, ValueError):
                    return self._refuse(400, f"{path}: content is not base64")
            elif key == "deletedFile":
                if path not in repo.files and path not in added:
                    return self._error("EntryNotFound", "A file with this name doesn't exist")
                deleted.add(path)
                added.pop(path, None)
            elif key == "deletedFolder":
                inside = {p for p in repo.files if p.startswith(f"{path}/")}
                deleted |= inside
                for p in [p for p in added if p.startswith(f"{path}/")]:
                    added.pop(p)
            else:  # lfsFile (never asked for here), or an unknown line
                return self._refuse(400, f"unsupported commit line {key!r} for {path}")
        sha = repo.commit(header["summary"], added, deleted - set(added))
        prefix = "" if repo.kind == "model" else f"{repo.kind}s/"
        url = f"{self.local_hub.url}/{prefix}{repo.repo_id}/commit/{sha}"
        answer = {"success": True, "commitOid": sha, "commitMessage": header["summary"]}
        self._json({**answer, "commitUrl": url, "hookOutput": "", "pullRequestUrl": None})

    def do_GET(self) -> None:
        self._route("GET")

    def do_HEAD(self) -> None:
        self._route("HEAD")

    def do_POST(self) -> None:
        self._route("POST")
