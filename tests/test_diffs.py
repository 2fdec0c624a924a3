"""Source diffs kept once by content hash (zoo/run/diffs.py): what a run from a modified
tree writes, where the store is, how both forms read, how damage reads, and the
conversion of recorded folders (scripts/dedup_diffs.py). Small and offline: hand-made
run folders and RunWriter with a stand-in git state, no training."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from harness_cli import committed_configs

from zoo.files import UnreadableFile
from zoo.run import runlog
from zoo.run.diffs import (
    diff_names,
    kept_diffs,
    read_diff,
    store_of,
)
from zoo.run.runlog import GitState, RunWriter, convert_diffs

REPO = Path(__file__).resolve().parents[1]
A, B = b"diff --git a/x b/x\n+a\n", b"diff --git a/y b/y\n+b\n"


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def modified(monkeypatch):
    """Set the process's git state to a modified tree whose diff is the given bytes."""

    def to(diff: bytes) -> None:
        monkeypatch.setattr(runlog, "process_git_state", lambda: GitState("c0ffee", True, diff))

    return to


def start(run_dir: Path) -> None:
    writer = RunWriter(run_dir)
    writer.write_config({"run_id": run_dir.name})
    writer.start_session(0)
    writer.close()


def experiment(root: Path) -> Path:
    (root / "runs").mkdir(parents=True)
    (root / "experiment.json").write_text("{}\n")
    return root


def test_runs_of_an_experiment_share_one_store_file(tmp_path, modified):
    exp = experiment(tmp_path / "exp")
    modified(A)
    for name in ("a", "b"):
        start(exp / "runs" / name)
    assert [p.name for p in (exp / "diffs").iterdir()] == [f"{sha(A)}.diff"]
    for name in ("a", "b"):
        run = exp / "runs" / name
        assert (run / "source.diff.sha256").read_text() == sha(A) + "\n"
        assert not (run / "source.diff").exists() and not (run / "diffs").exists()
        assert read_diff(run) == A
        sessions = [json.loads(x) for x in (run / "sessions.jsonl").read_text().splitlines()]
        assert sessions[0]["diff"] == "source.diff"
    assert json.loads((exp / "runs" / "a" / "config.json").read_text())["git"]["diff_sha256"] == (
        sha(A)
    )


def test_a_lone_run_keeps_its_store_in_its_own_folder(tmp_path, modified):
    modified(A)
    start(tmp_path / "run")
    assert store_of(tmp_path / "run") == tmp_path / "run" / "diffs"
    assert (tmp_path / "run" / "diffs" / f"{sha(A)}.diff").read_bytes() == A
    moved = tmp_path / "elsewhere"
    shutil.move(tmp_path / "run", moved)  # copied elsewhere, it stays whole
    assert read_diff(moved) == A


def test_a_clean_tree_writes_no_diff(tmp_path, monkeypatch):
    monkeypatch.setattr(runlog, "process_git_state", lambda: GitState("c0ffee", False, None))
    exp = experiment(tmp_path / "exp")
    start(exp / "runs" / "a")
    assert not (exp / "diffs").exists() and kept_diffs(exp / "runs" / "a") == {}
    assert read_diff(exp / "runs" / "a") is None


def test_a_resume_with_another_diff_adds_a_second_pointer(tmp_path, modified):
    exp = experiment(tmp_path / "exp")
    run = exp / "runs" / "a"
    modified(A)
    start(run)
    modified(B)
    writer = RunWriter(run)
    writer.start_session(2)
    writer.close()
    other = f"source-{sha(B)[:12]}.diff"
    assert diff_names(run) == ["source.diff", other]
    assert read_diff(run) == A and read_diff(run, other) == B
    assert sorted(p.name for p in (exp / "diffs").iterdir()) == sorted(
        f"{sha(d)}.diff" for d in (A, B)
    )


def test_a_run_recorded_with_plain_diffs_reads_and_resumes_as_before(tmp_path, modified):
    """Folders written before the store (or by an older checkout still running) keep their
    plain source.diff: read as it is, and a resume with the same diff adds nothing."""
    exp = experiment(tmp_path / "exp")
    run = exp / "runs" / "a"
    run.mkdir()
    (run / "source.diff").write_bytes(A)
    (run / f"source-{sha(B)[:12]}.diff").write_bytes(B)
    later = f"source-{sha(B)[:12]}.diff"
    assert read_diff(run) == A and read_diff(run, later) == B
    assert set(kept_diffs(run).values()) == {run / "source.diff", run / later}
    modified(A)
    writer = RunWriter(run)
    writer.start_session(2)
    writer.close()
    assert not (exp / "diffs").exists() and not (run / "source.diff.sha256").exists()


@pytest.mark.parametrize(
    ("damage", "named"),
    [
        ("pointer emptied", "pointer"),
        ("pointer garbage", "pointer"),
        ("pointer cut", "pointer"),
        ("store file missing", "pointer"),
        ("store file cut", "store"),
        ("store file other bytes", "store"),
    ],
)
def test_a_damaged_pointer_or_store_file_is_one_line_naming_it(tmp_path, modified, damage, named):
    exp = experiment(tmp_path / "exp")
    run = exp / "runs" / "a"
    modified(A)
    start(run)
    pointer, stored = run / "source.diff.sha256", exp / "diffs" / f"{sha(A)}.diff"
    if damage == "pointer emptied":
        pointer.write_bytes(b"")
    elif damage == "pointer garbage":
        pointer.write_bytes(bytes(range(256)))
    elif damage == "pointer cut":
        pointer.write_text(sha(A)[:30])
    elif damage == "store file missing":
        stored.unlink()
    elif damage == "store file cut":
        stored.write_bytes(A[:5])
    else:
        stored.write_bytes(B)
    with pytest.raises(UnreadableFile) as refused:
        read_diff(run)
    line = str(refused.value)
    assert "\n" not in line
    assert line.startswith(f"{pointer if named == 'pointer' else stored}: "), line


def test_the_leaderboard_refuses_a_damaged_store_file_in_one_line(tmp_path, modified, capsys):
    """Through the command: the leaderboard counts the runs whose diff is kept, so it
    resolves each run's pointer."""
    from test_provenance import make_experiment

    from harness.cli import main

    results = tmp_path / "results"
    exp = make_experiment(results, dirty_dapo=True)
    dirty = exp / "runs" / "dapo__arithmetic__seed1"
    (dirty / "source.diff").write_bytes(A)
    convert_diffs(results)
    argv = ["leaderboard", "--results", str(results), "--out", str(tmp_path / "b")]
    assert main([*argv, "--allow-dirty"]) == 0
    notes = json.loads((tmp_path / "b" / "leaderboard.json").read_text())
    dapo = next(r for r in notes if r["algorithm"] == "dapo")
    assert "the diff is kept" in " ".join(dapo["provenance_notes"])
    assert "for 1 of them" in " ".join(dapo["provenance_notes"])
    capsys.readouterr()
    (exp / "diffs" / f"{sha(A)}.diff").write_bytes(b"")
    assert main([*argv, "--allow-dirty"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {exp / 'diffs' / sha(A)}.diff: "), err


def plain_tree(root: Path) -> dict[Path, bytes]:
    """An experiment with plain diffs as recorded before the store: two runs sharing one,
    a third with another and a later session's, an earlier start's; and a lone run."""
    exp = experiment(root / "exp")
    files = {
        exp / "runs" / "a" / "source.diff": A,
        exp / "runs" / "b" / "source.diff": A,
        exp / "runs" / "c" / "source.diff": B,
        exp / "runs" / "c" / f"source-{sha(A)[:12]}.diff": A,
        exp / "runs" / "c" / "earlier-starts" / "1" / "source.diff": B,
        root / "lone" / "source.diff": B,
        root / "lone" / "earlier-starts" / "1" / "source.diff": A,
    }
    for path, data in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return files


def test_the_conversion_keeps_every_diff_and_runs_again_as_a_no_op(tmp_path):
    files = plain_tree(tmp_path)
    before = {p: sha(read_diff(p.parent, p.name)) for p in files}
    converted = convert_diffs(tmp_path)
    assert sorted(converted) == sorted(files)
    after = {p: sha(read_diff(p.parent, p.name)) for p in files}
    assert after == before
    assert not [p for p in files if p.exists()]  # every plain file removed
    exp = tmp_path / "exp"
    assert sorted(p.name for p in (exp / "diffs").iterdir()) == sorted(
        f"{sha(d)}.diff" for d in (A, B)
    )
    assert sorted(p.name for p in (tmp_path / "lone" / "diffs").iterdir()) == sorted(
        f"{sha(d)}.diff" for d in (A, B)
    )  # (an earlier start's diff goes to its run's store)
    snapshot = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    assert convert_diffs(tmp_path) == []  # idempotent
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == snapshot


def test_the_conversion_finishes_one_cut_short_and_refuses_a_conflict(tmp_path):
    files = plain_tree(tmp_path)
    run = tmp_path / "exp" / "runs" / "a"
    (run / "source.diff.sha256").write_text(sha(A) + "\n")  # killed before the unlink
    (tmp_path / "exp" / "diffs").mkdir()
    (tmp_path / "exp" / "diffs" / f"{sha(A)}.diff").write_bytes(b"torn")  # and mid-write
    convert_diffs(tmp_path / "exp" / "runs" / "a")
    assert read_diff(run) == A and not (run / "source.diff").exists()
    other = tmp_path / "exp" / "runs" / "b"
    (other / "source.diff.sha256").write_text(sha(B) + "\n")
    with pytest.raises(UnreadableFile, match="names another diff"):
        convert_diffs(other)
    assert (other / "source.diff").read_bytes() == files[other / "source.diff"]


def test_the_script_converts_the_folders_it_is_given(tmp_path):
    files = plain_tree(tmp_path)
    script = REPO / "scripts" / "dedup_diffs.py"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    ran = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "exp")],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    assert "5 diff(s) converted" in ran.stdout
    lone = tmp_path / "lone" / "source.diff"
    assert lone.read_bytes() == files[lone]  # not given: left as it was


def test_publish_ships_the_store(tmp_path):
    from harness.publish import experiment_files

    plain_tree(tmp_path)
    convert_diffs(tmp_path)
    published, _ = experiment_files(tmp_path / "exp")
    assert f"diffs/{sha(A)}.diff" in published and "runs/a/source.diff.sha256" in published


def committed_runs() -> list[Path]:
    """Every committed run folder (one with a config.json) under results/."""
    return sorted({(REPO / p).parent for p in committed_configs() if "/checkpoint" not in p})


def test_every_committed_diff_resolves_to_the_hash_its_run_recorded():
    """The committed runs (converted, or plain as a running board writes them) keep the
    diff their config.json's git.diff_sha256 names, wherever they kept one."""
    checked = 0
    for run in committed_runs():
        kept = kept_diffs(run)
        if not kept:
            continue
        git = json.loads((run / "config.json").read_text()).get("git") or {}
        assert git.get("dirty") is True, run
        data = read_diff(run)
        if data is not None and git.get("diff_sha256"):
            assert sha(data) == git["diff_sha256"], run
            checked += 1
    assert checked > 0


def test_a_compressed_store_reads_the_same_and_a_later_run_reuses_it(tmp_path, modified):
    """scripts/compress_jsonl.py gzips a finished experiment's store files: the pointers
    still resolve to the same bytes, a later run of the same diff writes no second copy,
    and a .gz cut short is an UnreadableFile naming it."""
    exp = experiment(tmp_path / "exp")
    modified(A)
    start(exp / "runs" / "a")
    (exp / "runs" / "a" / "complete.json").write_text("{}\n")
    done = runlog.compress_jsonl(exp)
    store = exp / "diffs"
    assert store / f"{sha(A)}.diff" in done.files
    assert sorted(p.name for p in store.iterdir()) == [f"{sha(A)}.diff.gz"]
    assert read_diff(exp / "runs" / "a") == A
    assert kept_diffs(exp / "runs" / "a") == {"source.diff": store / f"{sha(A)}.diff.gz"}
    start(exp / "runs" / "b")  # the same diff: found in its compressed form
    assert sorted(p.name for p in store.iterdir()) == [f"{sha(A)}.diff.gz"]
    assert read_diff(exp / "runs" / "b") == A
    assert runlog.compress_jsonl(exp).files == []  # again: nothing to do
    packed = store / f"{sha(A)}.diff.gz"
    packed.write_bytes(packed.read_bytes()[:-8])
    with pytest.raises(UnreadableFile, match="cut short"):
        read_diff(exp / "runs" / "a")
