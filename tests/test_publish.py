"""Publishing a board to a Hub data set repository and fetching it back (harness/publish.py)
through the real huggingface_hub client (create_repo, create_commit, snapshot_download)
and the Hub stand-in on 127.0.0.1 (tests/hub_server.py). Each publish and fetch runs in a
subprocess whose only Hub is the local one, with its own Hugging Face cache under
tmp_path, as the command `harness publish` / `harness fetch` will: a ConfigError is
``error: <one line>`` and exit 2."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from harness_cli import REPO, run_harness
from hub_server import LocalHub

from harness.publish import (
    MANIFEST,
    PublishResult,
    experiment_files,
    is_left_out,
    publish,
    read_experiment,
)
from zoo.core.config import ConfigError

TOKEN = "hf_writer_token"
SOURCE = REPO / "results" / "tiny-arithmetic"
METRICS = "metrics.jsonl.gz"
"""A finished run's metrics as SOURCE stores them (compressed: scripts/compress_jsonl.py)."""
RUNS = [
    "grpo__arithmetic__seed0",
    "grpo__arithmetic__seed1",
    "dapo__arithmetic__seed0",
    "dapo__arithmetic__seed1",
]
NEVER = [
    "runs/grpo__arithmetic__seed0/checkpoints/step-000010/model.safetensors",
    "runs/grpo__arithmetic__seed0/checkpoint.tmp/state.pt",
    "samples/index.html",
    "samples/grpo__arithmetic__seed0.html",
]


def make_board(folder: Path) -> Path:
    """A small real experiment: four runs of results/tiny-arithmetic (experiment.json cut to
    them), its tables, plots and report, a source.diff; plus what is never published: a
    checkpoint folder, a checkpoint link, a half-written checkpoint and samples/ pages."""
    folder.mkdir(parents=True)
    record = json.loads((SOURCE / "experiment.json").read_text())
    record["runs"] = {name: record["runs"][name] for name in RUNS}
    (folder / "experiment.json").write_text(json.dumps(record, indent=1))
    for name in RUNS:
        shutil.copytree(SOURCE / "runs" / name, folder / "runs" / name)
    for sub in ("tables", "plots"):
        shutil.copytree(SOURCE / sub, folder / sub)
    shutil.copy(SOURCE / "report.md", folder / "report.md")
    (folder / "runs" / RUNS[1] / "source.diff").write_text("diff --git a/x b/x\n+1\n")
    for relative in NEVER:
        (folder / relative).parent.mkdir(parents=True, exist_ok=True)
        (folder / relative).write_bytes(os.urandom(64))
    (folder / "runs" / RUNS[0] / "checkpoint").symlink_to("checkpoints/step-000010")
    return folder


def published(folder: Path) -> dict[str, bytes]:
    """What a publish of ``folder`` should upload: every file but the never-published."""
    out = {}
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(folder).as_posix()
        parts = relative.split("/")
        kept = parts[0] != "samples" and not any(x.startswith("checkpoint") for x in parts)
        if kept and path.is_file() and not path.is_symlink():
            out[relative] = path.read_bytes()
    return out


def files_in(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()
    }


@pytest.fixture(scope="module")
def hub():
    with LocalHub(write_token=TOKEN) as local:
        yield local


@pytest.fixture(scope="module")
def board(tmp_path_factory) -> Path:
    return make_board(tmp_path_factory.mktemp("board") / "tiny-arithmetic")


DRIVER = """
import dataclasses, json, sys
from pathlib import Path
from zoo.core.config import ConfigError
from harness.publish import fetch, publish
args = json.loads(sys.argv[1])
try:
    if args.pop("do") == "publish":
        done = publish(Path(args.pop("experiment")), args.pop("repo"), **args)
        print("RESULT" + json.dumps(dataclasses.asdict(done)))
    else:
        done = fetch(args.pop("repo"), Path(args.pop("out")), **args)
        print("RESULT" + json.dumps(str(done)))
except ConfigError as exc:
    print(f"error: {exc}", file=sys.stderr)
    sys.exit(2)
"""


def hub_env(home: Path, endpoint: str, offline: bool, token: str | None) -> dict[str, str]:
    """A subprocess environment whose only Hub is ``endpoint`` and whose Hugging Face home
    is ``home``, with HF_TOKEN ``token``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "TRANSFORMERS_"))}
    env.update(
        HF_HOME=str(home),
        HF_HUB_CACHE=str(home / "hub"),
        HF_ENDPOINT=endpoint,
        HF_HUB_DISABLE_TELEMETRY="1",
        HF_HUB_DISABLE_PROGRESS_BARS="1",
        HF_HUB_OFFLINE="1" if offline else "0",
        PYTHONPATH=str(REPO),
    )
    if token:
        env["HF_TOKEN"] = token
    return env


def call(
    home: Path, endpoint: str, *, offline: bool = False, token: str | None = None, **args: object
) -> tuple[int, object, str]:
    """(exit code, result, stderr) of publish or fetch (``do=``) in a subprocess with the
    Hugging Face home ``home``, the Hub at ``endpoint``, HF_TOKEN ``token``."""
    text = json.dumps({k: str(v) if isinstance(v, Path) else v for k, v in args.items()})
    done = subprocess.run(
        [sys.executable, "-c", DRIVER, text],
        cwd=home.parent,
        env=hub_env(home, endpoint, offline, token),
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = [x for x in done.stdout.splitlines() if x.startswith("RESULT")]
    result = json.loads(lines[-1][len("RESULT") :]) if lines else None
    return done.returncode, result, done.stderr


def one_line_error(code: int, stderr: str) -> str:
    """The error line of a refused call: exit 2, one ``error:`` line, no traceback."""
    assert code == 2, stderr[-3000:]
    assert "Traceback" not in stderr, stderr[-3000:]
    errors = [x for x in stderr.splitlines() if x.startswith("error: ")]
    assert len(errors) == 1 and stderr.rstrip().endswith(errors[0]), stderr[-3000:]
    return errors[0]


def snapshot_of(home: Path, repo_id: str, hub: LocalHub) -> Path:
    sha = hub.repos["dataset", repo_id].sha
    return home / "hub" / f"datasets--{repo_id.replace('/', '--')}" / "snapshots" / sha


# ---- what is published (no Hub) ----


def test_checkpoints_samples_pages_and_links_are_left_out(board):
    files, left = experiment_files(board)
    assert files == sorted(published(board))
    assert "experiment.json" in files and "report.md" in files
    assert f"runs/{RUNS[1]}/source.diff" in files
    assert all(f"runs/{name}/{METRICS}" in files for name in RUNS)
    assert left == sorted(
        [
            f"runs/{RUNS[0]}/checkpoint",
            f"runs/{RUNS[0]}/checkpoint.tmp/",
            f"runs/{RUNS[0]}/checkpoints/",
            "samples/",
        ]
    )
    assert is_left_out("runs/a/checkpoints/step-000010/model.safetensors")
    assert is_left_out("samples/index.html") and not is_left_out("runs/a/samples.jsonl")
    assert not is_left_out("tables/summary.md")
    assert not is_left_out("tables/reward_at_checkpoints.csv")  # a table, not a checkpoint
    assert "tables/reward_at_checkpoints.csv" in files


def test_a_folder_without_experiment_json_is_refused_naming_the_file(tmp_path):
    (tmp_path / "runs").mkdir()
    with pytest.raises(ConfigError) as caught:
        read_experiment(tmp_path)
    message = str(caught.value)
    assert message.startswith(f"{tmp_path / 'experiment.json'}: ") and "\n" not in message
    with pytest.raises(ConfigError, match="is not a folder"):
        publish(tmp_path / "missing", "alice/board")
    with pytest.raises(ConfigError, match="not a Hub repository name"):
        publish(tmp_path, "no-owner")


# ---- through the Hub stand-in ----


def test_publish_then_fetch_gives_every_published_file_byte_for_byte(hub, board, tmp_path):
    home = tmp_path / "hf-home"
    before = len(hub.requests)
    code, result, stderr = call(
        home, hub.url, token=TOKEN, do="publish", experiment=board, repo="alice/tiny-arithmetic"
    )
    assert code == 0, stderr[-3000:]
    expected = published(board)
    done = PublishResult(**result)
    assert done.files == len(expected) and done.bytes == sum(map(len, expected.values()))
    assert done.left_out == 4 and done.deleted == 0
    assert done.line().startswith(f"published {len(expected)} files (0.")
    assert done.line().endswith(f"to alice/tiny-arithmetic at {done.commit[:12]}: {done.url}")
    repo = hub.repos["dataset", "alice/tiny-arithmetic"]
    assert done.commit == repo.sha and repo.commits == [(repo.sha, repo.commits[0][1])]
    assert repo.commits[0][1].startswith("harness publish tiny-arithmetic: ")
    assert set(repo.files) == {*expected, MANIFEST}
    assert all(repo.files[name] == data for name, data in expected.items())
    asked = hub.requests[before:]
    for route in (
        "/api/repos/create",
        "/api/datasets/alice/tiny-arithmetic/preupload/main",
        "/api/datasets/alice/tiny-arithmetic/commit/main",
    ):
        assert ("POST", route) in asked, route
    manifest = json.loads(repo.files[MANIFEST])
    assert manifest["commits"] == ["8dc4bd5f617f87906a078796761d318b479da993"]
    assert manifest["runs"] == len(RUNS) and set(manifest["files"]) == set(expected)
    meta = manifest["files"]["experiment.json"]
    assert meta["size"] == len(expected["experiment.json"])

    out = tmp_path / "fetched" / "tiny-arithmetic"
    code, result, stderr = call(home, hub.url, do="fetch", repo="alice/tiny-arithmetic", out=out)
    assert code == 0, stderr[-3000:]
    assert Path(result) == out
    assert files_in(out) == expected  # byte for byte; no checkpoint, no samples/ page, no manifest

    # the same board again: nothing changed, no commit; a changed board: one more commit,
    # and a file the board no longer holds is deleted from the repository
    code, result, stderr = call(
        home, hub.url, token=TOKEN, do="publish", experiment=board, repo="alice/tiny-arithmetic"
    )
    assert code == 0, stderr[-3000:]
    assert result["commit"] == repo.sha and len(repo.commits) == 1
    changed = tmp_path / "changed"
    shutil.copytree(board, changed, symlinks=True)
    (changed / "runs" / RUNS[1] / "source.diff").unlink()
    (changed / "report.md").write_text("# changed\n")
    code, result, stderr = call(
        home,
        hub.url,
        token=TOKEN,
        do="publish",
        experiment=changed,
        repo="alice/tiny-arithmetic",
        message="the report, again",
    )
    assert code == 0, stderr[-3000:]
    assert result["deleted"] == 1 and len(repo.commits) == 2
    assert repo.commits[-1] == (result["commit"], "the report, again")
    assert f"runs/{RUNS[1]}/source.diff" not in repo.files
    assert repo.files["report.md"] == b"# changed\n"
    # into the folder of the same experiment: the new files replace the old, a local
    # checkpoint stays
    (out / "runs" / RUNS[0] / "checkpoints").mkdir()
    code, _, stderr = call(home, hub.url, do="fetch", repo="alice/tiny-arithmetic", out=out)
    assert code == 0, stderr[-3000:]
    assert (out / "report.md").read_text() == "# changed\n"
    assert (out / "runs" / RUNS[0] / "checkpoints").is_dir()


@pytest.fixture(scope="module")
def fetched(hub, board, tmp_path_factory) -> tuple[Path, Path]:
    """(Hugging Face home, fetched folder) of board published as alice/shared."""
    root = tmp_path_factory.mktemp("shared")
    code, _, stderr = call(
        root / "publisher",
        hub.url,
        token=TOKEN,
        do="publish",
        experiment=board,
        repo="alice/shared",
    )
    assert code == 0, stderr[-3000:]
    home, out = root / "hf-home", root / "out" / "shared"
    code, _, stderr = call(home, hub.url, do="fetch", repo="alice/shared", out=out)
    assert code == 0, stderr[-3000:]
    return home, out


def test_fetch_offline_reads_the_cache_without_a_request(hub, board, fetched, tmp_path):
    home, _ = fetched
    expected = published(board)
    before = len(hub.requests)
    for offline, endpoint in ((True, hub.url), (False, "http://127.0.0.1:9")):
        out = tmp_path / f"offline-{offline}"
        code, _, stderr = call(
            home, endpoint, offline=offline, do="fetch", repo="alice/shared", out=out
        )
        assert code == 0, stderr[-3000:]
        assert files_in(out) == expected
    assert len(hub.requests) == before  # not one request
    # nothing cached: the project's offline message, naming the cache it looked in
    empty = tmp_path / "empty-home"
    code, _, stderr = call(
        empty, hub.url, offline=True, do="fetch", repo="alice/shared", out=tmp_path / "none"
    )
    line = one_line_error(code, stderr)
    assert "alice/shared was not found offline" in line
    assert str(empty / "hub" / "datasets--alice--shared") in line
    assert line.endswith("nothing was downloaded: HF_HUB_OFFLINE is set")
    code, _, stderr = call(
        empty, "http://127.0.0.1:9", do="fetch", repo="alice/shared", out=tmp_path / "none"
    )
    line = one_line_error(code, stderr)
    assert "nothing was downloaded: the Hub at http://127.0.0.1:9 could not be reached" in line
    assert not (tmp_path / "none").exists()


def test_a_tampered_or_missing_file_in_the_cache_is_caught(hub, fetched, tmp_path):
    home, _ = fetched
    cache = tmp_path / "hf-home"
    shutil.copytree(home, cache, symlinks=True)
    snapshot = snapshot_of(cache, "alice/shared", hub)
    metrics = f"runs/{RUNS[2]}/{METRICS}"
    blob = (snapshot / metrics).resolve()
    blob.write_bytes(blob.read_bytes() + b'{"step": 99}\n')
    for offline in (False, True):  # online the cached blob is not fetched again
        out = tmp_path / f"tampered-{offline}"
        code, _, stderr = call(
            cache, hub.url, offline=offline, do="fetch", repo="alice/shared", out=out
        )
        line = one_line_error(code, stderr)
        assert f"{metrics} of alice/shared is damaged: sha256 " in line, line
        assert f"delete {cache / 'hub' / 'datasets--alice--shared'} and fetch again" in line
        assert not out.exists()  # nothing was copied
    blob.unlink()
    (snapshot / metrics).unlink()
    code, _, stderr = call(
        cache, hub.url, offline=True, do="fetch", repo="alice/shared", out=tmp_path / "missing"
    )
    line = one_line_error(code, stderr)
    assert line.startswith(f"error: {snapshot / metrics}: listed in alice/shared's manifest.json")


def test_fetch_refuses_to_overwrite_a_folder_of_another_experiment(hub, fetched, tmp_path):
    home, _ = fetched
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine\n")
    code, _, stderr = call(home, hub.url, do="fetch", repo="alice/shared", out=other)
    assert "holds no experiment.json" in one_line_error(code, stderr)
    record = json.loads((SOURCE / "experiment.json").read_text())
    (other / "experiment.json").write_text(json.dumps({**record, "created": "2020-01-01"}))
    code, _, stderr = call(home, hub.url, do="fetch", repo="alice/shared", out=other)
    assert "holds another experiment than alice/shared" in one_line_error(code, stderr)
    assert sorted(p.name for p in other.iterdir()) == ["experiment.json", "notes.txt"]
    code, _, stderr = call(home, hub.url, do="fetch", repo="alice/shared", out=other / "notes.txt")
    assert "is a file" in one_line_error(code, stderr)


def test_unknown_repo_no_token_and_no_hub_are_one_line_errors(hub, board, tmp_path):
    home = tmp_path / "hf-home"
    code, _, stderr = call(home, hub.url, do="fetch", repo="nobody/nothing", out=tmp_path / "o")
    line = one_line_error(code, stderr)
    assert line.startswith(f"error: dataset repository nobody/nothing on {hub.url} was not found")
    assert not (tmp_path / "o").exists()
    # no token, then a wrong one: the Hub's 401; nothing is created
    for token in (None, "hf_wrong"):
        code, _, stderr = call(
            home, hub.url, token=token, do="publish", experiment=board, repo="alice/refused"
        )
        line = one_line_error(code, stderr)
        assert "refused to write (401 Unauthorized): no write token" in line, line
        assert ("dataset", "alice/refused") not in hub.repos
    # nothing listens where the Hub should be; HF_HUB_OFFLINE set
    code, _, stderr = call(
        home,
        "http://127.0.0.1:9",
        token=TOKEN,
        do="publish",
        experiment=board,
        repo="alice/refused",
    )
    line = one_line_error(code, stderr)
    assert "the Hub at http://127.0.0.1:9 could not be reached" in line
    code, _, stderr = call(
        home,
        hub.url,
        offline=True,
        token=TOKEN,
        do="publish",
        experiment=board,
        repo="alice/refused",
    )
    assert "HF_HUB_OFFLINE is set" in one_line_error(code, stderr)
    code, _, stderr = call(
        home, hub.url, token=TOKEN, do="publish", experiment=tmp_path, repo="alice/refused"
    )
    line = one_line_error(code, stderr)
    assert line.startswith(f"error: {tmp_path / 'experiment.json'}: ")
    assert ("dataset", "alice/refused") not in hub.repos


@pytest.mark.slow  # ~15 s: analyze on the fetched copy
def test_the_fetched_copy_analyzes(fetched, tmp_path):
    _, out = fetched
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    for sub in ("tables", "plots"):
        shutil.rmtree(copy / sub)
    (copy / "report.md").unlink()
    result = run_harness("analyze", str(copy), cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert (copy / "report.md").is_file() and (copy / "tables" / "summary.md").is_file()
    assert "grpo" in (copy / "tables" / "summary.md").read_text()


STAND_IN = """
import sys
from huggingface_hub import CommitOperationAdd, CommitOperationDelete, HfApi
api = HfApi()
api.create_repo("bob/model", exist_ok=False)
first = api.create_commit("bob/model", [CommitOperationAdd("a/x.txt", b"x"),
                                        CommitOperationAdd("a/y.txt", b"y"),
                                        CommitOperationAdd("b.txt", b"")], commit_message="one")
api.create_commit("bob/model", [CommitOperationDelete("a/")], commit_message="two")
try:
    api.create_commit("bob/model", [CommitOperationAdd("c.txt", b"c")], commit_message="three",
                      parent_commit=first.oid)
except Exception as exc:
    print("STALE", getattr(exc.response, "status_code", None))
try:
    api.create_repo("bob/model", exist_ok=False)
except Exception as exc:
    print("EXISTS", getattr(exc.response, "status_code", None))
print("FILES", sorted(api.list_repo_files("bob/model")))
"""


def test_the_stand_in_takes_the_clients_commits_deletions_and_refusals(hub, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "TRANSFORMERS_"))}
    env.update(HF_HOME=str(tmp_path), HF_ENDPOINT=hub.url, HF_HUB_OFFLINE="0", HF_TOKEN=TOKEN)
    done = subprocess.run(
        [sys.executable, "-c", STAND_IN], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "STALE 412" in done.stdout and "EXISTS 409" in done.stdout
    assert "FILES ['b.txt']" in done.stdout
    repo = hub.repos["model", "bob/model"]
    assert [summary for _, summary in repo.commits] == ["one", "two"]
    assert repo.files == {"b.txt": b""} and repo.sha == repo.commits[-1][0]


def test_the_commands_publish_and_fetch_a_board(hub, board, tmp_path):
    """`python -m harness publish` and `fetch` as a user types them: the one line each
    prints, the files back byte for byte, and a bad repository name refused by the CLI."""
    home = tmp_path / "hf-home"
    env = hub_env(home, hub.url, offline=False, token=TOKEN)
    home.mkdir()

    def harness(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "harness", *argv],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )

    up = harness("publish", str(board), "--repo", "carol/board", "--message", "first")
    assert up.returncode == 0, up.stderr[-3000:]
    repo = hub.repos["dataset", "carol/board"]
    line = up.stdout.strip()
    assert line.startswith("published ") and f"to carol/board at {repo.sha[:12]}: " in line
    assert repo.commits[-1][1] == "first"
    out = tmp_path / "copy"
    down = harness("fetch", "carol/board", "--out", str(out))
    assert down.returncode == 0, down.stderr[-3000:]
    assert down.stdout.strip() == f"fetched carol/board into {out}"
    for name, data in published(board).items():
        assert (out / name).read_bytes() == data, name
    refused = harness("publish", str(board), "--repo", "no-owner")
    assert "not a Hub repository name" in one_line_error(refused.returncode, refused.stderr)
