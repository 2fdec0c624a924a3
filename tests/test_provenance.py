"""What a run records about the code and weights behind it (zoo.run.runlog, the runner,
the experiment manifest) and how the leaderboard uses it: refusing rows from a modified
tree unless asked, listing every commit behind a row. Small and offline: temporary git
repositories and hand-made run folders, no real training."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from importlib.metadata import version
from pathlib import Path
from types import SimpleNamespace

import pytest

from zoo.core.config import ConfigError
from zoo.run import runlog
from zoo.run.diffs import read_diff
from zoo.run.runlog import GitState, RunWriter, git_state, installed_packages, weights_sha256

GIT_ENV = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.org",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.org",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_CONFIG_NOSYSTEM": "1",
}


def git(root: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args],
        cwd=root,
        check=True,
        capture_output=True,
        env={**os.environ, **GIT_ENV},
    ).stdout.decode()


def make_repo(root: Path) -> str:
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    (root / "code.py").write_text("x = 1\ny = 2\n")
    (root / "blob.bin").write_bytes(bytes(range(256)) * 4)
    git(root, "add", ".")
    git(root, "commit", "-q", "-m", "first")
    return git(root, "rev-parse", "HEAD").strip()


@pytest.fixture
def fresh_process_state(monkeypatch):
    """process_git_state's per-process snapshot, emptied before and after the test."""
    cached = runlog.process_git_state
    cached.cache_clear()
    yield
    cached.cache_clear()


def test_git_state_records_the_commit_and_a_diff_that_applies(tmp_path):
    repo = tmp_path / "repo"
    commit = make_repo(repo)
    clean = git_state(repo)
    assert clean == GitState(commit, False, None)
    assert clean.record() == {"commit": commit, "dirty": False}

    (repo / "untracked.txt").write_text("not part of the code")  # untracked: still clean
    assert git_state(repo).dirty is False

    # a committed board's experiment.json, rewritten by `compare --resume`: data, not code
    (repo / "results" / "board").mkdir(parents=True)
    (repo / "results" / "board" / "experiment.json").write_text("{}")
    git(repo, "add", "results")
    git(repo, "commit", "-q", "-m", "a board")
    commit = git(repo, "rev-parse", "HEAD").strip()
    (repo / "results" / "board" / "experiment.json").write_text('{"resumed": []}')
    assert git_state(repo) == GitState(commit, False, None)

    (repo / "code.py").write_text("x = 1\ny = 3\nz = 4\n")
    blob = bytearray((repo / "blob.bin").read_bytes())
    blob[7] ^= 0xFF
    (repo / "blob.bin").write_bytes(bytes(blob))
    (repo / "staged.py").write_text("new = True\n")
    git(repo, "add", "staged.py")
    dirty = git_state(repo)
    assert dirty.commit == commit and dirty.dirty is True and dirty.diff
    assert dirty.record()["diff_sha256"] == hashlib.sha256(dirty.diff).hexdigest()
    assert b"untracked.txt" not in dirty.diff and b"GIT binary patch" in dirty.diff
    assert b"experiment.json" not in dirty.diff

    patch = tmp_path / "source.diff"
    patch.write_bytes(dirty.diff)
    git(repo, "apply", "-R", "--check", str(patch))  # it is exactly the change to the tree
    checkout = tmp_path / "checkout"
    git(tmp_path, "clone", "-q", str(repo), str(checkout))
    git(checkout, "apply", str(patch))  # a checkout of the commit + the diff = the tree
    for name in ("code.py", "blob.bin", "staged.py"):
        assert (checkout / name).read_bytes() == (repo / name).read_bytes()

    # not the root of a work tree (e.g. installed inside another repository): unknown
    (repo / "sub").mkdir()
    assert git_state(repo / "sub") == GitState(None, None, None)
    assert git_state(tmp_path) == GitState(None, None, None)


def test_the_process_keeps_the_git_state_of_its_first_call(
    tmp_path, monkeypatch, fresh_process_state
):
    repo = tmp_path / "repo"
    first = make_repo(repo)
    monkeypatch.setattr(runlog, "PACKAGE_ROOT", repo)
    assert runlog.git_commit() == {"commit": first, "dirty": False}
    (repo / "code.py").write_text("x = 2\n")
    git(repo, "commit", "-qam", "later")
    assert git_state(repo).commit != first
    assert runlog.git_commit() == {"commit": first, "dirty": False}


def test_start_weights_hash_covers_every_safetensors_file_by_name_and_bytes(tmp_path):
    (tmp_path / "model-00002-of-00002.safetensors").write_bytes(b"\x01\x02" * 1000)
    (tmp_path / "model-00001-of-00002.safetensors").write_bytes(bytes(range(256)) * 5000)
    (tmp_path / "config.json").write_text("{}")  # not weights: not hashed
    expected = hashlib.sha256()
    for name in ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"):
        data = (tmp_path / name).read_bytes()
        expected.update(name.encode() + b"\0" + str(len(data)).encode() + b"\0" + data)
    digest = weights_sha256(tmp_path)
    assert digest == expected.hexdigest()
    assert runlog.start_weights(tmp_path, "pretrained", 0) == {"start_weights_sha256": digest}

    (tmp_path / "config.json").write_text('{"changed": 1}')
    assert weights_sha256(tmp_path) == digest
    data = bytearray((tmp_path / "model-00001-of-00002.safetensors").read_bytes())
    data[1_100_000] ^= 1  # one byte, in the file's second 1 MiB chunk
    (tmp_path / "model-00001-of-00002.safetensors").write_bytes(bytes(data))
    assert weights_sha256(tmp_path) != digest

    empty = tmp_path / "empty"
    empty.mkdir()
    assert weights_sha256(empty) is None
    random = runlog.start_weights(empty, "random", 3)
    assert random["start_weights_sha256"] is None and "manual_seed(3)" in random["start_weights"]


def test_the_package_list_is_every_installed_distribution():
    packages = installed_packages()
    assert packages["torch"] == version("torch") and packages["numpy"] == version("numpy")
    assert len(packages) > len(runlog.package_versions()) + 20
    assert list(packages) == sorted(packages, key=lambda n: (n.lower(), n))


def test_config_json_and_source_diff_at_a_first_start(tmp_path, monkeypatch, fresh_process_state):
    diff = b"diff --git a/x b/x\n"
    monkeypatch.setattr(runlog, "process_git_state", lambda: GitState("c0ffee", True, diff))
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "source-0123456789ab.diff").write_text("from an abandoned start")
    writer = RunWriter(run_dir)
    writer.write_config({"run_id": "run", "start_weights_sha256": "ab" * 32})
    writer.close()
    config = json.loads((run_dir / "config.json").read_text())
    assert config["git"] == {
        "commit": "c0ffee",
        "dirty": True,
        "diff_sha256": hashlib.sha256(diff).hexdigest(),
    }
    digest = hashlib.sha256(diff).hexdigest()  # kept once by its hash (zoo.run.diffs)
    assert (run_dir / "source.diff.sha256").read_text() == digest + "\n"
    assert (run_dir / "diffs" / f"{digest}.diff").read_bytes() == diff
    assert read_diff(run_dir) == diff and not (run_dir / "source.diff").exists()
    assert not (run_dir / "source-0123456789ab.diff").exists()
    assert config["packages"] == installed_packages()
    assert config["versions"] == runlog.package_versions()  # the short list, unchanged
    assert config["created"].endswith("+00:00") and config["start_weights_sha256"]


class FakeLoop:
    """Stands in for RLLoop in execute_run: two steps per session."""

    def __init__(self, cfg, services) -> None:
        self.step_index = 0
        self.samples = 0

    def run(self, log, checkpoint, samples=None):
        records = []
        for _ in range(2):
            self.step_index += 1
            self.samples += 8
            record = {"step": self.step_index, "samples": self.samples}
            if samples:
                samples([{"step": self.step_index, "kind": "train"}])
            log(record)
            records.append(record)
        return records


def test_execute_run_records_sessions_and_the_finish(tmp_path, monkeypatch, fresh_process_state):
    import harness.runner as runner
    from zoo.run.run_config import RunConfig

    model = tmp_path / "model"
    model.mkdir()
    (model / "model.safetensors").write_bytes(b"weights")
    cfg = RunConfig.from_flat()

    def save(directory, loop, source_model):
        directory.mkdir(exist_ok=True)
        (directory / "trainer_state.pt").write_text(json.dumps({"step": loop.step_index}))
        (directory / "checkpoint.json").write_text(json.dumps({"step": loop.step_index}))

    def find(directory):
        if not (directory / "checkpoint.json").exists():
            return None
        step = json.loads((directory / "trainer_state.pt").read_text())["step"]
        return SimpleNamespace(step=step, passed_over=[])

    def load(directory, loop, found):
        loop.step_index = found.step
        return loop.step_index

    monkeypatch.setattr(runner, "RLLoop", FakeLoop)
    monkeypatch.setattr(runner, "save_checkpoint", save)
    monkeypatch.setattr(runner, "find_checkpoint", find)
    monkeypatch.setattr(runner, "load_checkpoint", load)
    monkeypatch.setattr(
        runner,
        "resolved_config",
        lambda c, s: {"run": c.to_flat(), "model_path": str(model), "seed": c.run.seed},
    )
    services = SimpleNamespace(ledger=SimpleNamespace(total_flops=1.0))
    states = iter([GitState("aaa", True, b"diff a\n"), GitState("bbb", True, b"diff b\n")])
    state = next(states)
    monkeypatch.setattr(runlog, "process_git_state", lambda: state)

    out = tmp_path / "run"
    runner.execute_run(cfg, out, services, command="test")
    config = json.loads((out / "config.json").read_text())
    assert config["start_weights_sha256"] == weights_sha256(model)
    assert config["git"]["commit"] == "aaa" and config["git"]["dirty"] is True
    assert read_diff(out) == b"diff a\n"
    complete = json.loads((out / "complete.json").read_text())
    assert {"steps", "flops", "samples", "wall_seconds_this_session"} <= set(complete)
    assert complete["finished"] >= config["created"]
    assert [(s["step"], s["commit"]) for s in complete["sessions"]] == [(0, "aaa")]

    state = next(states)  # resumed by a process at another commit, from a modified tree
    (out / "complete.json").unlink()
    runner.execute_run(cfg, out, services, command="test --resume", resume=True)
    assert json.loads((out / "config.json").read_text()) == config  # not rewritten
    sessions = [json.loads(x) for x in (out / "sessions.jsonl").read_text().splitlines()]
    assert [(s["step"], s["commit"], s["dirty"]) for s in sessions] == [
        (0, "aaa", True),
        (2, "bbb", True),
    ]
    other = "source-" + hashlib.sha256(b"diff b\n").hexdigest()[:12] + ".diff"
    assert [s["diff"] for s in sessions] == ["source.diff", other]
    assert read_diff(out) == b"diff a\n"  # the first start's, kept
    assert read_diff(out, other) == b"diff b\n"
    assert sorted(p.name for p in (out / "diffs").iterdir()) == sorted(
        hashlib.sha256(d).hexdigest() + ".diff" for d in (b"diff a\n", b"diff b\n")
    )
    complete = json.loads((out / "complete.json").read_text())
    assert complete["sessions"] == sessions and complete["steps"] == 4


def test_a_resume_keeps_the_experiments_first_command_and_date(tmp_path, monkeypatch):
    import harness.experiment as experiment
    from zoo.run.run_config import RunConfig

    cfgs = [RunConfig.from_flat(algorithm="grpo", seed=s) for s in range(2)]
    times = iter(
        [
            "2026-01-01T00:00:00+00:00",
            "2026-01-02T00:00:00+00:00",
            "2026-01-03T00:00:00+00:00",
            "2026-01-04T00:00:00+00:00",
        ]
    )
    monkeypatch.setattr(experiment, "now_iso", lambda: next(times))
    experiment.write_manifest(tmp_path, cfgs, "compare grpo", resume=False)
    experiment.write_manifest(tmp_path, cfgs, "compare grpo --resume", resume=True)
    manifest = experiment.write_manifest(tmp_path, cfgs, "compare grpo --resume 2", resume=True)
    assert manifest == json.loads((tmp_path / "experiment.json").read_text())
    assert manifest["created"] == "2026-01-01T00:00:00+00:00"
    assert manifest["command"] == "compare grpo"
    assert manifest["resumed"] == [
        {"at": "2026-01-02T00:00:00+00:00", "command": "compare grpo --resume"},
        {"at": "2026-01-03T00:00:00+00:00", "command": "compare grpo --resume 2"},
    ]
    assert set(manifest["runs"]) == {"grpo__arithmetic__seed0", "grpo__arithmetic__seed1"}
    fresh = experiment.write_manifest(tmp_path, cfgs, "compare grpo", resume=False)
    assert fresh["created"] == "2026-01-04T00:00:00+00:00" and "resumed" not in fresh


A, B, C = ("a" * 40, "b" * 40, "c" * 40)
WEIGHTS = "f" * 64


def make_run(
    runs: Path,
    name: str,
    commit: str,
    dirty: bool,
    *,
    old: bool = False,
    resumed_at: str | None = None,
    weights: str = WEIGHTS,
) -> None:
    """A run folder as the leaderboard reads it; ``old``: recorded before start weights,
    sessions and finish times were kept (as the committed results were)."""
    run_dir = runs / name
    run_dir.mkdir(parents=True)
    config = {
        "run": {"model": "tiny", "budget_flops": 2e10, "seed": int(name[-1])},
        "git": {"commit": commit, "dirty": dirty},
        "created": f"2026-11-0{int(name[-1]) + 1}T10:00:00+00:00",
    }
    complete = {"steps": 2}
    if not old:
        config["start_weights_sha256"] = weights
        complete["finished"] = config["created"].replace("T10", "T12")
        sessions = [{"started": config["created"], "step": 0, "commit": commit, "dirty": dirty}]
        if resumed_at:
            sessions.append({"started": "x", "step": 1, "commit": resumed_at, "dirty": False})
        (run_dir / "sessions.jsonl").write_text("".join(json.dumps(s) + "\n" for s in sessions))
    (run_dir / "config.json").write_text(json.dumps(config))
    (run_dir / "complete.json").write_text(json.dumps(complete))
    (run_dir / "metrics.jsonl").write_text(json.dumps({"step": 0, "eval_reward": 0.5}) + "\n")


def make_experiment(results: Path, dirty_dapo: bool) -> Path:
    """grpo (seed 0 at commit A, seed 1 at B and resumed at C) and dapo (seed 1 recorded
    before the provenance fields existed, from a modified tree when ``dirty_dapo``)."""
    exp = results / "exp"
    (exp / "tables").mkdir(parents=True)
    (exp / "experiment.json").write_text(
        json.dumps(
            {
                "command": "python -m harness compare grpo dapo --seeds 2",
                "versions": {"torch": "x"},
                "created": "2026-11-01T09:00:00+00:00",
            }
        )
    )
    (exp / "tables" / "summary.csv").write_text(
        "env,algorithm,seeds,headline_mean,ci_low,ci_high,tie_group,per_seed,mdd_80,fit_A,"
        "fit_B,fit_C_mid,max_flops,fit_note\n"
        "arithmetic,grpo,2,0.5,0.4,0.6,1,0.45 0.55,0.3,0.7,1.1,1e12,2e12,\n"
        "arithmetic,dapo,2,0.45,0.4,0.5,1,0.42 0.48,0.2,,1.0,5e12,2e12,A withheld: C_mid\n"
    )
    (exp / "tables" / "throughput.csv").write_text(
        "algorithm,env,generate_tokens_per_s,train_tokens_per_s\n"
        "grpo,arithmetic,1000,2000\ndapo,arithmetic,1100,2100\n"
    )
    runs = exp / "runs"
    make_run(runs, "grpo__arithmetic__seed0", A, False)
    make_run(runs, "grpo__arithmetic__seed1", B, False, resumed_at=C)
    make_run(runs, "dapo__arithmetic__seed0", A, False, weights="e" * 64)
    make_run(runs, "dapo__arithmetic__seed1", A, dirty_dapo, old=True)
    return exp


def test_a_board_with_unfinished_runs_stays_off_the_leaderboard_until_whole(tmp_path, capsys):
    from harness.leaderboard import build_leaderboards

    results, boards = tmp_path / "results", tmp_path / "boards"
    whole = make_experiment(results, dirty_dapo=False)
    partial = results / "partial"
    shutil.copytree(whole, partial)
    manifest = json.loads((partial / "experiment.json").read_text())
    names = [d.name for d in (partial / "runs").iterdir()]
    manifest["runs"] = {name: {} for name in [*names, "dapo__arithmetic__seed2"]}
    (partial / "experiment.json").write_text(json.dumps(manifest))
    build_leaderboards(results, boards)
    rows = json.loads((boards / "leaderboard.json").read_text())
    assert {Path(r["experiment"]).name for r in rows} == {"exp"}
    assert f"skipped {partial}: 4 of 5 runs finished" in capsys.readouterr().err
    (partial / "runs" / "dapo__arithmetic__seed1" / "complete.json").unlink()
    manifest["runs"].pop("dapo__arithmetic__seed2")
    (partial / "experiment.json").write_text(json.dumps(manifest))
    build_leaderboards(results, boards)
    assert "3 of 4 runs finished" in capsys.readouterr().err


def test_the_leaderboard_refuses_runs_from_a_modified_tree_unless_allowed(tmp_path, capsys):
    from harness.cli import main
    from harness.leaderboard import build_leaderboards

    results, boards = tmp_path / "results", tmp_path / "boards"
    exp = make_experiment(results, dirty_dapo=True)
    with pytest.raises(ConfigError) as refused:
        build_leaderboards(results, boards)
    message = str(refused.value)
    assert f"{exp}/runs/dapo__arithmetic__seed1: modified tree" in message
    assert "--allow-dirty" in message and "grpo__" not in message
    assert not boards.exists()  # nothing written
    assert main(["leaderboard", "--results", str(results), "--out", str(boards)]) == 2
    assert "dapo__arithmetic__seed1" in capsys.readouterr().err

    build_leaderboards(results, boards, allow_dirty=True)
    rows = {r["algorithm"]: r for r in json.loads((boards / "leaderboard.json").read_text())}
    grpo, dapo = rows["grpo"], rows["dapo"]
    assert grpo["git_commits"] == [A, B, C] and grpo["git_commit"] == A
    assert grpo["dirty_runs"] == 0 and grpo["start_weights_sha256"] == [WEIGHTS]
    assert grpo["started"] == "2026-11-01T10:00:00+00:00"
    assert grpo["finished"] == "2026-11-02T12:00:00+00:00"
    assert grpo["date"] == "2026-11-01 10:00 .. 2026-11-02 12:00 UTC"
    assert dapo["dirty_runs"] == 1 and dapo["dirty_commits"] == [A]
    assert dapo["finished"] is None  # the old run has no finish time: unknown
    notes = " ".join(dapo["provenance_notes"])
    assert "start weights of 1 of 2 runs: not recorded" in notes
    assert "1 of 2 runs from a modified tree" in notes
    board = (boards / "tiny__arithmetic.md").read_text()
    grpo_line = next(x for x in board.splitlines() if "| grpo " in x)
    dapo_line = next(x for x in board.splitlines() if "| dapo " in x)
    assert f"{A[:10]}, {B[:10]}, {C[:10]}" in grpo_line and "+dirty" not in grpo_line
    assert f"{A[:10]}+dirty" in dapo_line and "+dirty: built with --allow-dirty" in board
    assert "A withheld (C_mid)" in dapo_line and "A 0.700" in grpo_line
    assert f"{A[:10]}, {B[:10]}, {C[:10]}" in (boards / "index.html").read_text()


def test_old_clean_runs_build_without_the_flag(tmp_path):
    from harness.leaderboard import build_leaderboards

    results = tmp_path / "results"
    make_experiment(results, dirty_dapo=False)
    build_leaderboards(results, tmp_path / "boards")
    rows = json.loads((tmp_path / "boards" / "leaderboard.json").read_text())
    assert all(r["dirty_runs"] == 0 for r in rows)
    assert not any("different weights" in n for r in rows for n in r["provenance_notes"])
    shutil.rmtree(tmp_path / "boards")
    grpo1 = results / "exp" / "runs" / "grpo__arithmetic__seed1" / "config.json"
    grpo1.write_text(grpo1.read_text().replace(WEIGHTS, "0" * 64))
    build_leaderboards(results, tmp_path / "boards")
    grpo = next(
        r
        for r in json.loads((tmp_path / "boards" / "leaderboard.json").read_text())
        if r["algorithm"] == "grpo"
    )
    assert grpo["start_weights_sha256"] == ["0" * 64, WEIGHTS]
    assert "runs started from 2 different weights" in grpo["provenance_notes"]
    assert (
        f"{'0' * 12} / {WEIGHTS[:12]}" in (tmp_path / "boards" / "tiny__arithmetic.md").read_text()
    )
    shutil.rmtree(tmp_path / "boards")
    config = results / "exp" / "runs" / "grpo__arithmetic__seed0" / "config.json"
    record = json.loads(config.read_text())
    del record["git"]  # no git state recorded: unknown, refused as well
    config.write_text(json.dumps(record))
    with pytest.raises(ConfigError, match="grpo__arithmetic__seed0: git state unknown"):
        build_leaderboards(results, tmp_path / "boards")


def test_the_board_tells_rows_from_the_shipped_start_from_older_ones(tmp_path):
    """Rows whose runs started from the tiny preset's shipped weights are marked shipped;
    rows from any other start (a warm start built on first use before the weights shipped)
    are marked not shipped, and the board names both hashes."""
    from harness.leaderboard import build_leaderboards
    from zoo.models.tiny import tiny_model_path
    from zoo.run.runlog import weights_sha256

    shipped = weights_sha256(tiny_model_path())
    results = tmp_path / "results"
    runs = make_experiment(results, dirty_dapo=False) / "runs"
    for seed in (0, 1):  # grpo from the shipped start; dapo from "e" * 64 and an old run
        config = runs / f"grpo__arithmetic__seed{seed}" / "config.json"
        config.write_text(config.read_text().replace(WEIGHTS, shipped))
    build_leaderboards(results, tmp_path / "boards")
    rows = {
        r["algorithm"]: r
        for r in json.loads((tmp_path / "boards" / "leaderboard.json").read_text())
    }
    assert rows["grpo"]["start_weights_shipped"] is True
    assert rows["dapo"]["start_weights_shipped"] is False
    board = (tmp_path / "boards" / "tiny__arithmetic.md").read_text()
    assert f"runs record them as {shipped[:12]}" in board
    assert "Rows marked *not shipped* (1 of 2)" in board and "e" * 12 in board
    grpo_line = next(x for x in board.splitlines() if "| grpo " in x)
    dapo_line = next(x for x in board.splitlines() if "| dapo " in x)
    assert f"{shipped[:12]} (shipped)" in grpo_line and "(not shipped)" in dapo_line
