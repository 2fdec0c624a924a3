"""A finished run's .jsonl files stored compressed (``metrics.jsonl.gz`` ...) read exactly
as the plain ones, through every reader; the conversion (zoo.run.runlog.compress_jsonl,
scripts/compress_jsonl.py) loses nothing, changes nothing run twice, leaves unfinished
runs alone and refuses, in one line, what it cannot tell apart.

The readers are checked on two copies of a small committed experiment
(results/tiny-code-feedback-pyfunc: 4 runs, each with metrics, samples and sessions), one
plain and one compressed. The damaged .gz cases of the commands are in
tests/test_damaged_files.py."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from zoo.core.config import ConfigError
from zoo.files import UnreadableFile, gzipped, jsonl_file, read_json_lines
from zoo.run.runlog import (
    COMPLETE,
    JSONL,
    compress_file,
    compress_jsonl,
    expand_jsonl,
    read_samples,
    read_sessions,
)

REPO = Path(__file__).resolve().parents[1]
SMALL = REPO / "results" / "tiny-code-feedback-pyfunc"


@pytest.fixture(scope="module")
def copies(tmp_path_factory) -> tuple[Path, Path]:
    """(plain, compressed): two copies of ``SMALL``, each ``<root>/results/<its name>`` (the
    same name, so what is written from them can be compared byte for byte)."""
    root = tmp_path_factory.mktemp("copies")
    plain = root / "plain" / "results" / SMALL.name
    packed = root / "gz" / "results" / SMALL.name
    for copy in (plain, packed):
        shutil.copytree(SMALL, copy)
    for run in (plain / "runs").iterdir():  # (plain whichever form is committed)
        expand_jsonl(run)
    assert not list(plain.rglob("*.gz"))
    compress_jsonl(packed)
    assert not list(packed.rglob("*.jsonl"))
    assert len(list(packed.rglob("*.jsonl.gz"))) == 3 * len(list((packed / "runs").iterdir()))
    return plain, packed


def runs_of(experiment: Path) -> list[Path]:
    return sorted((experiment / "runs").iterdir())


def same_tree(a: Path, b: Path, top_a: Path, top_b: Path) -> None:
    """Every file under ``a`` and ``b`` the same, byte for byte, where a file names its
    copy's top folder (``top_a``, ``top_b``) aside."""
    files_a = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    files_b = sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
    assert files_a == files_b
    for relative in files_a:
        data_a = (a / relative).read_bytes().replace(str(top_a).encode(), b"TOP")
        data_b = (b / relative).read_bytes().replace(str(top_b).encode(), b"TOP")
        assert data_a == data_b, relative


# ------------------------------------------------------------------ the readers


def test_the_gz_files_hold_the_plain_bytes_and_are_the_same_every_time(copies, tmp_path):
    plain, packed = copies
    for run in runs_of(plain):
        for name in JSONL:
            data = (run / name).read_bytes()
            packed_file = packed / "runs" / run.name / f"{name}.gz"
            assert gzip.decompress(packed_file.read_bytes()) == data
            assert packed_file.read_bytes()[4:8] == b"\0\0\0\0"  # (no time in the header)
            again = tmp_path / run.name / name
            again.parent.mkdir(exist_ok=True)
            again.write_bytes(data)
            assert compress_file(again)
            assert gzipped(again).read_bytes() == packed_file.read_bytes()


def test_every_run_reader_reads_both_forms_alike(copies):
    from harness.leaderboard import run_provenance
    from harness.reproduce import recorded_headline
    from harness.runner import holds_metrics, read_metrics
    from harness.scores import load_runs

    plain, packed = copies
    for run in runs_of(plain):
        other = packed / "runs" / run.name
        assert read_metrics(run) and read_metrics(other) == read_metrics(run)
        assert read_samples(run) and read_samples(other) == read_samples(run)
        assert read_sessions(run) and read_sessions(other) == read_sessions(run)
        assert holds_metrics(other)
        assert recorded_headline(other) == recorded_headline(run)
        assert {**run_provenance(other)} == {**run_provenance(run)}
    loaded = [{k: v for k, v in r.items() if k != "dir"} for r in load_runs(plain)]
    assert [{k: v for k, v in r.items() if k != "dir"} for r in load_runs(packed)] == loaded


def test_the_analysis_of_both_forms_is_the_same(copies):
    """Tables, plots and report.md of ``analyze``, and the samples pages, byte for byte."""
    from harness.analysis import write_analysis
    from harness.samples import write_samples_pages

    plain, packed = copies
    for experiment in (plain, packed):
        write_analysis(experiment)
        assert write_samples_pages(experiment) is not None
    for part in ("tables", "plots", "samples"):
        same_tree(plain / part, packed / part, plain, packed)
    report = (plain / "report.md").read_text().replace(str(plain), "EXP")
    assert (packed / "report.md").read_text().replace(str(packed), "EXP") == report


def test_the_leaderboard_of_both_forms_is_the_same(copies):
    from harness.leaderboard import build_leaderboards

    plain, packed = copies
    for experiment in (plain, packed):
        build_leaderboards(experiment.parent, experiment.parent.parent / "lb", allow_dirty=True)
    top_a, top_b = plain.parent.parent, packed.parent.parent
    same_tree(top_a / "lb", top_b / "lb", top_a, top_b)


def test_a_compressed_run_counts_as_a_run_for_every_check(copies):
    """A fresh run or compare into a folder of compressed runs is refused as into one of
    plain runs; ``harness samples`` takes a compressed run folder; publish carries the
    .gz files (it carries every file but checkpoints and pages)."""
    from harness.commands.samples import is_run
    from harness.experiment import check_experiment_folder
    from harness.publish import experiment_files
    from harness.runner import check_run_folder

    _, packed = copies
    run = runs_of(packed)[0]
    with pytest.raises(ConfigError, match="already holds a run"):
        check_run_folder(run, resume=False)
    with pytest.raises(ConfigError, match="already holds runs"):
        check_experiment_folder(packed, resume=False)
    assert is_run(run)
    published, _ = experiment_files(packed)
    assert {f"runs/{run.name}/{name}.gz" for name in JSONL} <= set(published)
    assert not [p for p in published if p.endswith(".jsonl")]


# ------------------------------------------------------------------ either form, never both


def test_both_forms_side_by_side_are_refused_naming_both(tmp_path):
    plain = tmp_path / "metrics.jsonl"
    plain.write_text('{"step": 0}\n')
    gzipped(plain).write_bytes(gzip.compress(b'{"step": 0}\n'))
    with pytest.raises(UnreadableFile, match=r"metrics\.jsonl: is there twice.*metrics\.jsonl\.gz"):
        read_json_lines(plain)
    with pytest.raises(UnreadableFile, match="ambiguous"):
        jsonl_file(plain)


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (b"", "empty"),
        (b'{"step": 0}\n', "not a gzip file"),
        (gzip.compress(b'{"step": 0}\n' * 200)[:40], "not a whole gzip file: cut short"),
        (gzip.compress(b'{"step": 0}\n')[:-8] + b"\0\0\0\0\0\0\0\0", "not a whole gzip file"),
        (gzip.compress(b'{"step": 0}\nnot json\n'), "line 2 is not a JSON record"),
        (gzip.compress(b'{"step": 0}\n{"step": 1'), "line 2, the last, is cut short"),
    ],
    ids=["empty", "not-gzip", "cut-short", "bad-check", "bad-line", "cut-line"],
)
def test_a_damaged_gz_is_refused_naming_it(tmp_path, data, problem):
    plain = tmp_path / "metrics.jsonl"
    gzipped(plain).write_bytes(data)
    with pytest.raises(UnreadableFile, match=f"^{gzipped(plain)}: {problem}"):
        read_json_lines(plain)


# ------------------------------------------------------------------ the conversion


def make_run(folder: Path, finished: bool = True) -> dict[Path, bytes]:
    """A run folder with its three records (and complete.json when ``finished``); the
    records' bytes."""
    folder.mkdir(parents=True)
    records = {}
    for i, name in enumerate(JSONL):
        records[folder / name] = "".join(
            json.dumps({"step": s, "name": name, "x": i * s}) + "\n" for s in range(50)
        ).encode()
        (folder / name).write_bytes(records[folder / name])
    (folder / "config.json").write_text("{}")
    if finished:
        (folder / COMPLETE).write_text("{}")
    return records


def read_back(records: dict[Path, bytes]) -> dict[Path, bytes]:
    """The bytes of each record file, in whichever form it is."""
    out = {}
    for path in records:
        found = jsonl_file(path)
        out[path] = (
            gzip.decompress(found.read_bytes()) if found.suffix == ".gz" else found.read_bytes()
        )
    return out


def test_compressing_a_tree_is_lossless_and_idempotent_and_leaves_unfinished_runs(tmp_path):
    """Finished runs (and an earlier start of one) compressed; an unfinished run and a
    checkpoint folder left alone; a second pass changes nothing; a resume's expand gives
    the plain files back, byte for byte."""
    exp = tmp_path / "exp"
    (exp / "experiment.json").parent.mkdir()
    (exp / "experiment.json").write_text("{}")
    done_run = make_run(exp / "runs" / "a__env__seed0")
    earlier = make_run(exp / "runs" / "a__env__seed0" / "earlier-starts" / "1", finished=False)
    running = make_run(exp / "runs" / "a__env__seed1", finished=False)
    inside_checkpoint = make_run(exp / "runs" / "a__env__seed0" / "checkpoint")
    done = compress_jsonl(exp)
    assert sorted(done.files) == sorted([*done_run, *earlier])
    assert done.unfinished == [exp / "runs" / "a__env__seed1"]
    assert 0 < done.packed_bytes < done.plain_bytes
    for path in [*done_run, *earlier]:
        assert not path.exists() and gzipped(path).is_file()
    for path in [*running, *inside_checkpoint]:
        assert path.is_file() and not gzipped(path).exists()
    every = {**done_run, **earlier, **running, **inside_checkpoint}
    assert read_back(every) == every
    snapshot = {p: p.read_bytes() for p in exp.rglob("*") if p.is_file()}
    again = compress_jsonl(exp)
    assert again.files == [] and again.unfinished == done.unfinished
    assert {p: p.read_bytes() for p in exp.rglob("*") if p.is_file()} == snapshot
    assert expand_jsonl(exp / "runs" / "a__env__seed0") == list(done_run)
    for path, data in done_run.items():
        assert path.read_bytes() == data and not gzipped(path).exists()
    assert expand_jsonl(exp / "runs" / "a__env__seed0") == []


def test_a_gz_beside_its_plain_file_is_finished_when_the_same_and_refused_when_not(tmp_path):
    """An earlier conversion stopped between the .gz and the removal: the same bytes, so
    the plain file goes. A .gz of other bytes beside a plain file: refused, both kept."""
    records = make_run(tmp_path / "run")
    metrics, samples = list(records)[:2]
    gzipped(metrics).write_bytes(gzip.compress(records[metrics]))
    gzipped(samples).write_bytes(gzip.compress(b'{"step": 0}\n'))
    with pytest.raises(UnreadableFile, match=r"samples\.jsonl: is there twice.*differ"):
        compress_jsonl(tmp_path)
    assert not metrics.exists()  # (the files are taken one by one: metrics.jsonl came first)
    assert samples.read_bytes() == records[samples]
    assert gzip.decompress(gzipped(samples).read_bytes()) == b'{"step": 0}\n'
    gzipped(samples).unlink()
    done = compress_jsonl(tmp_path)
    assert done.files == list(records)[1:]
    assert read_back(records) == records


def test_the_script_says_what_it_did_and_refuses_in_one_line(tmp_path, capsys):
    import sys

    sys.path.insert(0, str(REPO / "scripts"))
    try:
        import compress_jsonl as script
    finally:
        sys.path.remove(str(REPO / "scripts"))
    make_run(tmp_path / "exp" / "runs" / "done")
    make_run(tmp_path / "exp" / "runs" / "running", finished=False)
    assert script.main([str(tmp_path / "exp")]) == 0
    out, err = capsys.readouterr()
    assert "3 file(s) compressed" in out
    assert f"note: {tmp_path / 'exp' / 'runs' / 'running'}: not finished" in err
    bad = tmp_path / "exp" / "runs" / "running"
    (bad / COMPLETE).write_text("{}")
    gzipped(bad / "metrics.jsonl").write_bytes(b"not gzip")
    assert script.main([str(tmp_path / "exp")]) == 2
    _, err = capsys.readouterr()
    assert err.count("\n") == 1 and err.startswith(
        f"error: {bad / 'metrics.jsonl'}: is there twice"
    )
