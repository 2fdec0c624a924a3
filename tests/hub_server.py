"""A small Hugging Face Hub stand-in on 127.0.0.1, for tests of the real download code
(``huggingface_hub.snapshot_download`` / ``hf_hub_download``, ``datasets.load_dataset``)
with ``HF_ENDPOINT`` pointed at it. Nothing leaves the machine.

It serves model and data set repositories held in memory, one commit each, through the
routes those libraries call:

- ``GET /api/{models,datasets}/{owner}/{name}[/revision/{rev}]``: repo info (``id``,
  ``sha``, ``siblings``);
- ``GET /api/{models,datasets}/{owner}/{name}/tree/{rev}[/{path}][?recursive=true]``:
  the files and folders under ``path`` (one page; no ``Link`` header);
- ``POST /api/{models,datasets}/{owner}/{name}/paths-info/{rev}`` (form ``paths=...``):
  the entries of the paths that exist;
- ``HEAD``/``GET /{owner}/{name}/resolve/{rev}/{path}`` and
  ``/datasets/{owner}/{name}/resolve/{rev}/{path}``: a file, with ``X-Repo-Commit``,
  ``ETag`` (the git blob id), ``Content-Length`` and ``Range`` requests (206).

``rev`` is ``main`` or the repo's commit id. Anything else is a 404 with the
``X-Error-Code`` the Hub sends (``RepoNotFound``, ``RevisionNotFound``,
``EntryNotFound``), which is how the clients tell those cases apart. Every request is
recorded in ``LocalHub.requests`` as ``(method, path)``.
"""

from __future__ import annotations

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

    def __post_init__(self) -> None:
        if not self.sha:
            listing = "".join(f"{p}:{git_blob_id(d)}\n" for p, d in sorted(self.files.items()))
            self.sha = hashlib.sha1(f"{self.kind}/{self.repo_id}\n{listing}".encode()).hexdigest()

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
    r"^/api/(models|datasets)/([^/]+/[^/]+)(?:/(revision|tree|paths-info)/([^/]+)(/.*)?)?$"
)
RESOLVE = re.compile(r"^/(datasets/)?([^/]+/[^/]+)/resolve/([^/]+)/(.+)$")


class _Handler(BaseHTTPRequestHandler):
    local_hub: LocalHub

    def log_message(self, format: str, *args: object) -> None:  # quiet
        pass

    # ---- answers ----

    def _send(self, status: int, body: bytes = b"", headers: dict | None = None,
              head: bool = False) -> None:  # fmt: skip
        self.send_response(status)
        for k, v in {"Content-Length": str(len(body)), **(headers or {})}.items():
            self.send_header(k, v)
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _json(self, value: object) -> None:
        self._send(200, json.dumps(value).encode(), {"Content-Type": "application/json"})

    def _error(self, code: str, message: str, head: bool = False) -> None:
        body = json.dumps({"error": message}).encode()
        headers = {"Content-Type": "application/json", "X-Error-Code": code,
                   "X-Error-Message": message}  # fmt: skip
        self._send(404, body, headers, head=head)

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
            headers = {"X-Repo-Commit": repo.sha, "ETag": f'"{git_blob_id(data)}"',
                       "Accept-Ranges": "bytes",
                       "Content-Type": "application/octet-stream"}  # fmt: skip
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

    def do_GET(self) -> None:
        self._route("GET")

    def do_HEAD(self) -> None:
        self._route("HEAD")

    def do_POST(self) -> None:
        self._route("POST")
