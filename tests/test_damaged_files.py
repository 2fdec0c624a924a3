"""No file can take a command down with it, and nothing is deleted to recover.

Every file a run or an experiment writes is damaged three ways (cut to its first half,
ending mid-line; emptied; overwritten with random bytes) for every command that reads it,
on a copy of a small real run and experiment made once per module: each case exits 2 with
one line, ``error: PATH: what is wrong``, naming the damaged file (no traceback), and no
file is removed. The states a crash leaves (a last line cut mid-write, checkpoints from a
save that was killed) are resumed from, with a note, and a start that saved no checkpoint
starts over with its records kept in ``earlier-starts/<k>/``.

The cases run ``harness.cli.main`` in this process (tests/test_fuzz.py's ``call``): an
exception other than SystemExit fails the case with its traceback. The module's runs are
made, and its commands run, as from a modified tree (``MODIFIED``), so each run folder
holds a diff pointer and the experiment a diff store (zoo/run/diffs.py)."""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import string
from pathlib import Path

import pytest
from harness_cli import run_harness
from test_fuzz import call

from harness.runner import EARLIER_STARTS
from zoo.run import checkpoint, runlog
from zoo.run.checkpoint import DAMAGED, checkpoint_step, current
from zoo.run.runlog import GitState, is_timing_key

SMALL = [
    "--steps",
    "2",
    "--prompts-per-step",
    "4",
    "--eval-every",
    "1",
    "--eval-samples",
    "0",
    "--checkpoint-every",
    "1",
    "--env-set",
    "eval_size=20",
    "--quiet",
]
"""A run of 2 steps with a checkpoint after each (~2 s of training on the tiny model)."""
EXP = "results/exp"
SEED0, SEED1 = f"{EXP}/runs/grpo__arithmetic__seed0", f"{EXP}/runs/grpo__arithmetic__seed1"


DIFF = b"diff --git a/zoo/x.py b/zoo/x.py\n--- a/zoo/x.py\n+++ b/zoo/x.py\n@@ -1 +1 @@\n-a\n+b\n"
DIFF_SHA = hashlib.sha256(DIFF).hexdigest()


@pytest.fixture(scope="module", autouse=True)
def modified_tree():
    """Every run and command of the module as from a tree modified by ``DIFF`` (the same
    for all, as one checkout's: compare --resume checks that)."""
    commit = runlog.git_state(runlog.PACKAGE_ROOT).commit
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(runlog, "process_git_state", lambda: GitState(commit, True, DIFF))
        yield


class Killed(BaseException):
    """Stands for SIGKILL inside a checkpoint save (nothing catches it)."""


@pytest.fixture(scope="module")
def recorded(tiny_model_path, tmp_path_factory) -> Path:
    """What the commands read, made by the commands: ``run/`` (one run), ``results/exp/``
    (grpo and dapo, 2 seeds each), ``lb/`` (its leaderboard; --allow-dirty, since the
    tree running the tests may be modified) and ``selection.json`` (a tuning selection
    of grpo's learning rate, as ``harness tune`` writes it). ~15 s."""
    root = tmp_path_factory.mktemp("recorded")
    for argv in (
        ["run", "grpo", *SMALL, "--out", str(root / "run")],
        ["compare", "grpo", "dapo", "--seeds", "2", *SMALL, "--out", str(root / EXP)],
        [
            "leaderboard",
            "--results",
            str(root / "results"),
            "--out",
            str(root / "lb"),
            "--allow-dirty",
        ],
    ):
        code, err = call(argv, timeout_s=600)
        assert code == 0, f"{argv}: {err[-3000:]}"
    selection = {
        "plan": "synthetic",
        "algorithms": {"grpo": {"setting": {"lr": "0.0001"}, "validation_mean": 0.3}},
    }
    (root / "selection.json").write_text(json.dumps(selection, indent=2) + "\n")
    return root


def copy_of(recorded: Path, where: Path) -> Path:
    """A copy of ``recorded`` under ``where``. Checkpoint files are hard links (saves never
    write into a finished checkpoint, and ``damage`` replaces a file, not its bytes);
    everything else is copied, since commands rewrite tables and records in place."""

    def link_or_copy(src: str, dst: str) -> None:
        if f"{os.sep}checkpoints{os.sep}" in src:
            os.link(src, dst)
        else:
            shutil.copy2(src, dst)

    for name in ("run", "results", "lb", "selection.json"):
        source = recorded / name
        if source.is_dir():
            shutil.copytree(source, where / name, symlinks=True, copy_function=link_or_copy)
        else:
            shutil.copy2(source, where / name)
    return where


TEXT_SUFFIXES = (".json", ".jsonl", ".csv")


def damage(path: Path, how: str) -> None:
    """Replace ``path`` (a new file: its hard links elsewhere keep the old bytes) by its
    first half ending mid-line ("truncated"), nothing ("emptied"), random bytes
    ("garbage") or random printable text ("text")."""
    data = path.read_bytes()
    rng = random.Random(f"{path.name}-{how}")
    if how == "truncated":
        cut = len(data) // 2
        while path.suffix in TEXT_SUFFIXES and cut > 1 and data[cut - 1 : cut] == b"\n":
            cut -= 1  # (a cut at a line's end reads as a shorter file, not a cut one)
        new = data[:cut]
    elif how == "emptied":
        new = b""
    elif how == "garbage":
        new = rng.randbytes(512)
    else:
        new = "".join(rng.choices(string.printable, k=512)).encode()
    path.unlink()
    path.write_bytes(new)


def resume(w: Path) -> list[str]:
    return ["run", "grpo", *SMALL, "--resume", "--out", str(w / "run")]


def reproduce_row(w: Path) -> list[str]:
    row = json.loads((w / "lb" / "leaderboard.json").read_text())[0]["id"]
    return ["reproduce", row, "--leaderboards", str(w / "lb")]


COMMANDS = {
    "run --resume": resume,
    "run --model-path": lambda w: [
        "run",
        "grpo",
        *SMALL,
        "--model-path",
        str(w / "run" / "checkpoint"),
        "--out",
        str(w / "new"),
    ],
    "reproduce RUN": lambda w: ["reproduce", str(w / "run")],
    "reproduce SEED0": lambda w: ["reproduce", str(w / SEED0)],
    "reproduce SEED0 --statistical": lambda w: ["reproduce", str(w / SEED0), "--statistical"],
    "reproduce ROW": reproduce_row,
    "analyze": lambda w: ["analyze", str(w / EXP)],
    "leaderboard": lambda w: [
        "leaderboard",
        "--results",
        str(w / "results"),
        "--out",
        str(w / "lb-new"),
        "--allow-dirty",
    ],
    "compare --resume": lambda w: [
        "compare",
        "grpo",
        "dapo",
        "--seeds",
        "2",
        *SMALL,
        "--resume",
        "--out",
        str(w / EXP),
    ],
    "compare --tuned": lambda w: [
        "compare",
        "grpo",
        "--seeds",
        "1",
        *SMALL,
        "--tuned",
        str(w / "selection.json"),
        "--out",
        str(w / "tuned"),
    ],
}
"""How each command is called on a copy ``w`` of the recorded files."""

EXPERIMENT_READERS = ("analyze", "leaderboard", "compare --resume")
READERS = {
    "run/config.json": ("run --resume", "reproduce RUN"),
    "run/metrics.jsonl": ("run --resume", "reproduce RUN"),
    "run/samples.jsonl": ("run --resume",),
    "run/sessions.jsonl": ("run --resume",),
    "run/checkpoint/checkpoint.json": ("run --resume",),
    "run/checkpoint/trainer_state.pt": ("run --resume",),
    "run/checkpoint/model.safetensors": ("run --resume", "run --model-path"),
    # a checkpoint is a Hugging Face model folder too (--model-path); a resume reads only
    # the three files above
    "run/checkpoint/config.json": ("run --model-path",),
    "run/checkpoint/tokenizer.json": ("run --model-path",),
    "run/checkpoint/tokenizer_config.json": ("run --model-path",),
    "run/checkpoint/generation_config.json": ("run --model-path",),
    f"{EXP}/experiment.json": EXPERIMENT_READERS,
    f"{SEED0}/config.json": EXPERIMENT_READERS,
    f"{SEED0}/metrics.jsonl": EXPERIMENT_READERS,
    f"{SEED0}/samples.jsonl": EXPERIMENT_READERS,  # (the samples pages; a board's first run)
    f"{SEED0}/sessions.jsonl": ("leaderboard",),
    f"{SEED0}/complete.json": EXPERIMENT_READERS,
    # a healthy run's sibling folders (same config, other seeds): reproduce reads their
    # configs to find them, their metrics for a statistical check
    f"{SEED1}/config.json": ("reproduce SEED0",),
    f"{SEED1}/metrics.jsonl": ("reproduce SEED0 --statistical",),
    # the diff of a modified tree: a pointer, and the experiment's store file it names
    "run/source.diff.sha256": ("run --resume",),
    f"{SEED0}/source.diff.sha256": ("leaderboard",),
    f"{EXP}/diffs/{DIFF_SHA}.diff": ("leaderboard",),
    f"{EXP}/tables/summary.csv": ("leaderboard",),
    f"{EXP}/tables/throughput.csv": ("leaderboard",),
    f"{EXP}/tables/off_policy.csv": ("leaderboard",),
    f"{EXP}/tables/verdicts.csv": ("leaderboard",),  # (pairs.csv: only with --pairs all)
    "lb/leaderboard.json": ("reproduce ROW",),
    "selection.json": ("compare --tuned",),
}
"""Every file a run or an experiment writes that a command reads, and those commands.
Not read by any: a lone run's own diffs/ store (a resume compares hashes with the
pointer), third_party.log, report.md, plots and the samples pages (written, never read
back)."""

CASES = [(f, c) for f, commands in READERS.items() for c in commands]
RECORDS = ("metrics.jsonl", "samples.jsonl", "sessions.jsonl")


def files_under(root: Path) -> dict[Path, bytes | None]:
    """Every file under ``root`` (through no link), with the bytes of the record files
    (plain or .gz)."""
    return {
        p.relative_to(root): (p.read_bytes() if p.name.removesuffix(".gz") in RECORDS else None)
        for p in root.rglob("*")
        if p.is_file() and not p.is_symlink()
    }


def check_one_line_naming(path: Path, code: object, err: str, argv: list[str]) -> str:
    lines = err.strip().splitlines()
    assert code == 2, f"{argv} -> exit {code}: {err[-3000:]}"
    assert "Traceback" not in err and len(lines) == 1, err[-3000:]
    line = lines[0]
    assert line.startswith("error: "), line
    # the file, by the path given or the one a link leads to (run/checkpoint -> checkpoints/)
    assert str(path) in line or str(path.resolve()) in line, (path, line)
    return line


def check_damaged_file_case(
    recorded: Path, tmp_path: Path, file: str, command: str, how: str
) -> None:
    w = copy_of(recorded, tmp_path)
    argv = COMMANDS[command](w)  # (before the damage: reproduce ROW reads leaderboard.json)
    damage(w / file, how)
    before = files_under(w)
    code, err = call(argv, timeout_s=300)
    check_one_line_naming(w / file, code, err, argv)
    after = files_under(w)
    assert set(before) <= set(after), sorted(set(before) - set(after))  # nothing removed
    changed = [p for p, data in before.items() if data is not None and after[p] != data]
    assert not changed, changed  # refused: every record as it was


@pytest.mark.parametrize("how", ["truncated", "emptied", "garbage"])
@pytest.mark.parametrize(("file", "command"), CASES, ids=[f"{f}-{c}" for f, c in CASES])
def test_a_damaged_file_ends_the_command_in_one_line_naming_it(
    recorded, tmp_path, file, command, how
):
    check_damaged_file_case(recorded, tmp_path, file, command, how)


@pytest.mark.slow  # the same cases again, the file overwritten with printable text (41
# cases, 21 s in all on the quiet 2-core machine: kept in CI)
@pytest.mark.parametrize(("file", "command"), CASES, ids=[f"{f}-{c}" for f, c in CASES])
def test_a_file_overwritten_with_text_ends_the_command_in_one_line(
    recorded, tmp_path, file, command
):
    check_damaged_file_case(recorded, tmp_path, file, command, "text")


CHEAP_COMMANDS = ("run --resume", "analyze", "leaderboard", "compare --resume")


@pytest.mark.parametrize("command", CHEAP_COMMANDS)
def test_the_recorded_files_undamaged_are_read_without_complaint(recorded, tmp_path, command):
    """The other half of each case: undamaged, the same command succeeds, so a refusal
    above is the damage's."""
    w = copy_of(recorded, tmp_path)
    code, err = call(COMMANDS[command](w), timeout_s=300)
    assert code == 0 and "error" not in err, err[-3000:]


@pytest.mark.slow  # ~30 s: these re-run runs
@pytest.mark.parametrize("command", sorted(set(COMMANDS) - set(CHEAP_COMMANDS)))
def test_the_recorded_files_undamaged_are_read_by_the_costlier_commands(
    recorded, tmp_path, command
):
    w = copy_of(recorded, tmp_path)
    code, err = call(COMMANDS[command](w), timeout_s=600)
    assert code == 0 and "error" not in err, err[-3000:]


# ------------------------------------------------------------------ compressed records

GZ_READERS = {
    "run/metrics.jsonl.gz": ("run --resume",),
    "run/samples.jsonl.gz": ("run --resume",),
    "run/sessions.jsonl.gz": ("run --resume",),
    f"{SEED0}/metrics.jsonl.gz": ("analyze",),
    f"{SEED0}/samples.jsonl.gz": ("analyze",),
    f"{SEED0}/sessions.jsonl.gz": ("leaderboard",),
}
"""The records of a finished run stored compressed (scripts/compress_jsonl.py), and a
command that reads each (the others read them through the same reader,
zoo.files.read_json_lines)."""
GZ_CASES = [(f, c) for f, commands in GZ_READERS.items() for c in commands]


def compressed_copy_of(recorded: Path, where: Path) -> Path:
    """``copy_of``, its finished runs' records then compressed (``metrics.jsonl.gz`` ...)."""
    from zoo.run.runlog import compress_jsonl

    w = copy_of(recorded, where)
    for folder in (w / "run", w / EXP):
        done = compress_jsonl(folder)
        assert done.files and not done.unfinished
    return w


def damage_gz(path: Path, how: str) -> None:
    """``damage``, or ("bad line") a whole gzip file whose second line is not JSON."""
    if how != "bad line":
        damage(path, how)
        return
    import gzip

    lines = gzip.decompress(path.read_bytes()).splitlines(keepends=True)
    path.unlink()
    path.write_bytes(gzip.compress(b"".join([lines[0], b"not json\n", *lines[2:]])))


@pytest.mark.parametrize("how", ["truncated", "garbage", "bad line"])
@pytest.mark.parametrize(("file", "command"), GZ_CASES, ids=[f"{f}-{c}" for f, c in GZ_CASES])
def test_a_damaged_compressed_record_ends_the_command_in_one_line_naming_it(
    recorded, tmp_path, file, command, how
):
    w = compressed_copy_of(recorded, tmp_path)
    argv = COMMANDS[command](w)
    damage_gz(w / file, how)
    before = files_under(w)
    code, err = call(argv, timeout_s=300)
    line = check_one_line_naming(w / file, code, err, argv)
    assert ("line 2 is not a JSON record" in line) == (how == "bad line"), line
    after = files_under(w)
    assert set(before) <= set(after), sorted(set(before) - set(after))
    changed = [p for p, data in before.items() if data is not None and after[p] != data]
    assert not changed, changed


@pytest.mark.parametrize("command", ["run --resume", "analyze"])
def test_a_record_there_plain_and_compressed_is_refused_as_ambiguous(recorded, tmp_path, command):
    """Both forms side by side: which holds the records cannot be told, so the command
    stops naming both rather than read one of them."""
    w = compressed_copy_of(recorded, tmp_path)
    folder = w / ("run" if command == "run --resume" else SEED0)
    (folder / "metrics.jsonl").write_text('{"step": 0}\n')
    argv = COMMANDS[command](w)
    code, err = call(argv, timeout_s=300)
    line = check_one_line_naming(folder / "metrics.jsonl", code, err, argv)
    assert "is there twice, plain and compressed (metrics.jsonl.gz)" in line, line


@pytest.mark.parametrize("command", CHEAP_COMMANDS)
def test_compressed_records_undamaged_are_read_without_complaint(recorded, tmp_path, command):
    """The finished run and experiment with their records compressed: each command
    succeeds. A resume turns the run's records plain again, to the same bytes, and
    appends its session."""
    import gzip

    w = compressed_copy_of(recorded, tmp_path)
    packed = {p: gzip.decompress(p.read_bytes()) for p in (w / "run").glob("*.jsonl.gz")}
    code, err = call(COMMANDS[command](w), timeout_s=300)
    assert code == 0 and "error" not in err, err[-3000:]
    if command == "run --resume":
        assert not list((w / "run").glob("*.jsonl.gz"))
        for path, data in packed.items():
            plain = path.with_suffix("").read_bytes()
            assert plain.startswith(data) and (plain == data or path.name.startswith("sessions"))


def numbers(run: Path) -> list[dict]:
    records = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not is_timing_key(k)} for r in records]


@pytest.mark.parametrize("name", RECORDS)
def test_a_last_line_cut_mid_write_is_dropped_with_a_note_and_the_rest_kept(
    recorded, tmp_path, capfd, name
):
    """A kill in the middle of an append leaves the last line cut short and unended: the
    step it belonged to came after the checkpoint (its record is written before the
    save), so the resume drops it, says so, and keeps every whole line."""
    w = copy_of(recorded, tmp_path)
    path = w / "run" / name
    whole = path.read_bytes()
    path.write_bytes(whole + b'{"step": 3, "reward_mean": 0.2')  # (unended)
    capfd.readouterr()
    code, err = call(resume(w), timeout_s=300)
    printed = capfd.readouterr().err + err  # (notes go to the terminal: file descriptor 2)
    assert code == 0, err[-3000:]
    torn = len(whole.splitlines()) + 1
    assert f"note: {path}: line {torn}, the last, was cut short" in printed, printed
    if name == "sessions.jsonl":  # the resume's own session is appended after the others
        assert path.read_bytes().startswith(whole) and path.read_bytes().count(b"\n") == 2
    else:
        assert path.read_bytes() == whole


def test_a_damaged_newest_checkpoint_falls_back_to_the_previous_with_a_note(
    recorded, tmp_path, capfd, monkeypatch
):
    """A save killed after its link switched leaves two checkpoints (steps 1 and 2). With
    step 2's trainer state cut, the resume says so, continues from step 1 (step 2 is
    re-done, to the numbers of the uninterrupted run) and keeps the damaged folder."""
    out = tmp_path / "run"
    argv = ["run", "grpo", *SMALL, "--out", str(out)]
    saves = []

    def killed_at_the_second_switch(stage: str) -> None:
        saves.append(stage)
        if stage == "link switched" and saves.count(stage) == 2:
            raise Killed(stage)

    monkeypatch.setattr(checkpoint, "reached", killed_at_the_second_switch)
    with pytest.raises(Killed):
        call(argv, timeout_s=300)
    monkeypatch.setattr(checkpoint, "reached", lambda stage: None)
    steps = sorted(p.name for p in (out / "checkpoints").iterdir())
    assert steps == ["step-000001", "step-000002"] and not (out / "complete.json").exists()
    newest = out / "checkpoints" / "step-000002" / checkpoint.STATE_FILE
    damage(newest, "truncated")
    cut_size = newest.stat().st_size
    kept_lines = (out / "metrics.jsonl").read_text().splitlines()[:2]  # steps 0 and 1

    capfd.readouterr()
    code, err = call([*argv, "--resume"], timeout_s=300)
    printed = capfd.readouterr().err + err
    assert code == 0, err[-3000:]
    assert f"note: {newest}: cut short" in printed, printed
    assert "resuming from the checkpoint of step 1 (step-000002 kept as step-000002.damaged)" in (
        printed
    )
    assert numbers(out) == numbers(recorded / "run")  # step 2 re-done to the same numbers
    assert (out / "metrics.jsonl").read_text().splitlines()[:2] == kept_lines
    kept = out / "checkpoints" / f"step-000002{DAMAGED}"
    assert (kept / checkpoint.STATE_FILE).stat().st_size == cut_size
    assert checkpoint_step(current(out / "checkpoint")) == 2  # a whole one, saved again


def test_a_run_stopped_before_its_first_checkpoint_starts_over_keeping_its_records(
    tiny_model_path, tmp_path, capfd, monkeypatch
):
    """With --checkpoint-every 0 the only save is the last. A run killed in it has
    records and no checkpoint: the resume starts over (there is nothing to continue
    from) and moves what the first start recorded to earlier-starts/1/, byte for byte."""
    out = tmp_path / "run"
    argv = ["run", "grpo", *SMALL, "--checkpoint-every", "0", "--out", str(out)]

    def killed(stage: str) -> None:
        raise Killed(stage)

    monkeypatch.setattr(checkpoint, "reached", killed)
    with pytest.raises(Killed):
        call(argv, timeout_s=300)
    monkeypatch.setattr(checkpoint, "reached", lambda stage: None)
    first = {
        p.name: p.read_bytes()
        for p in out.iterdir()
        if p.is_file() and p.name in (*RECORDS, "config.json")
    }
    assert set(first) == {*RECORDS, "config.json"} and first["metrics.jsonl"].count(b"\n") == 3

    capfd.readouterr()
    code, err = call([*argv, "--resume"], timeout_s=300)
    printed = capfd.readouterr().err + err
    assert code == 0, err[-3000:]
    kept = out / EARLIER_STARTS / "1"
    assert f"starts over; what it recorded is kept in {kept}" in printed, printed
    assert {p.name: p.read_bytes() for p in kept.iterdir() if p.name in first} == first
    assert numbers(out) == [
        {k: v for k, v in json.loads(x).items() if not is_timing_key(k)}
        for x in first["metrics.jsonl"].decode().splitlines()
    ]
    assert (out / "complete.json").exists()


# ------------------------------------------------------------------ the reader


@pytest.mark.parametrize(
    ("data", "rows", "torn", "refusal"),
    [
        (b'{"step": 0}\n{"step": 1}\n', 2, None, None),
        # a kill mid-append: the start of a record, unended (here inside a character)
        (b'{"step": 0}\n{"step": 1, "text": "caf\xc3', 1, 2, "line 2, the last, is cut short"),
        # whole but unended (a cut just before the newline): nothing lost
        (b'{"step": 0}\n{"step": 1}', 2, None, None),
        # unended lines that are not the start of a record are damage, not a cut
        (b'{"step": 0}\n\xff\xfe{', None, None, "line 2 is not UTF-8 text"),
        (b'{"step": 0}\nnot json', None, None, "line 2 is not a JSON record"),
        (b'{"step": 0}\n{"step"\n{"step": 2}\n', None, None, "line 2 is not a JSON record"),
        (b"[0]\n", None, None, "line 1 holds a JSON list, not a record"),
    ],
)
def test_json_lines_tell_a_write_cut_mid_line_from_damage(tmp_path, data, rows, torn, refusal):
    from zoo.files import UnreadableFile, read_json_lines

    path = tmp_path / "metrics.jsonl"
    path.write_bytes(data)
    if rows is None:
        for torn_ok in (False, True):
            with pytest.raises(UnreadableFile, match=f"^{path}: {refusal}"):
                read_json_lines(path, torn_ok=torn_ok)
        return
    found = read_json_lines(path, torn_ok=True)
    assert (len(found.rows), found.torn) == (rows, torn)
    if torn is None:
        assert read_json_lines(path).rows == found.rows
    else:  # every other reader refuses the cut line: only a resume may drop it
        with pytest.raises(UnreadableFile, match=refusal):
            read_json_lines(path)


def test_a_refusal_raised_in_a_worker_process_comes_back_whole():
    import pickle

    from zoo.files import UnreadableFile

    refusal = UnreadableFile("/run/metrics.jsonl", "empty", "restore it")
    back = pickle.loads(pickle.dumps(refusal))
    assert (str(back), back.path, back.problem) == (str(refusal), refusal.path, "empty")


# ------------------------------------------------------------------ headlines and seeds


def test_analyze_refuses_a_nan_headline_and_a_missing_seed(recorded, tmp_path):
    """A metrics line whose eval_reward is NaN (valid JSON) and a run whose evaluations
    were cut at a line's end (a shorter file, not a cut one) used to give a NaN headline
    and a row ranked on the other seeds, exit 0."""
    w = copy_of(recorded, tmp_path)
    metrics = w / SEED0 / "metrics.jsonl"
    lines = metrics.read_text().splitlines()
    last = json.loads(lines[-1])
    nan = json.dumps({**last, "eval_reward": float("nan")})  # ("eval_reward": NaN)
    metrics.write_text("\n".join([*lines[:-1], nan]) + "\n")
    code, err = call(["analyze", str(w / EXP)])
    assert code == 2 and f"{metrics} gives eval_reward nan at step 2" in err, err
    metrics.write_text(lines[0] + "\n")  # the start's evaluation only
    code, err = call(["analyze", str(w / EXP)])
    assert code == 2 and f"the evaluations of {w / SEED0} stop before the end" in err, err
    metrics.unlink()
    code, err = call(["analyze", str(w / EXP)])
    assert code == 2 and f"{w / SEED0}/metrics.jsonl holds no record" in err, err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_leaderboard_refuses_a_cached_summary_with_a_nan_headline_or_a_missing_seed(
    recorded, tmp_path
):
    """leaderboard reads the experiment's cached tables/summary.csv: one an older analysis
    wrote over a missing seed or a NaN headline is refused, naming it and the row."""
    import pandas as pd

    w = copy_of(recorded, tmp_path)
    path = w / EXP / "tables" / "summary.csv"
    summary = pd.read_csv(path)
    argv = COMMANDS["leaderboard"](w)
    for column, value, phrase in (
        ("headline_mean", float("nan"), "gives grpo on arithmetic no headline (nan)"),
        ("seeds", 1, "ranks grpo on arithmetic on 1 of the 2 seeds"),
    ):
        edited = summary.copy()
        edited.loc[edited.algorithm == "grpo", column] = value
        edited.to_csv(path, index=False)
        code, err = call(argv)
        assert code == 2 and f"{path}: {phrase}" in err, err
        assert "harness analyze" in err and err.count("\n") == 1
    assert not (w / "lb-new").exists()


# ------------------------------------------------------------------ through the real command


@pytest.mark.slow  # ~15 s: a subprocess imports torch and builds the run first
def test_a_cut_checkpoint_on_resume_is_one_line_through_the_real_command(recorded, tmp_path):
    w = copy_of(recorded, tmp_path)
    damage(w / "run" / "checkpoint" / checkpoint.STATE_FILE, "truncated")
    result = run_harness(*resume(w), cwd=tmp_path, timeout=600)
    assert result.returncode == 2, result.stderr[-3000:]
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert "trainer_state.pt: cut short" in result.stderr


@pytest.mark.slow  # ~30 s: two worker processes start
def test_a_damaged_checkpoint_stops_compare_resume_in_workers_in_one_line(recorded, tmp_path):
    """With --jobs the resume runs in worker processes: the refusal comes back whole."""
    w = copy_of(recorded, tmp_path)
    for run in (SEED0, SEED1):  # both unfinished: the runs go to the workers
        (w / run / "complete.json").unlink()
    state = w / SEED1 / "checkpoint" / checkpoint.STATE_FILE
    damage(state, "emptied")
    argv = [*COMMANDS["compare --resume"](w), "--jobs", "2"]
    code, err = call(argv, timeout_s=600)
    assert "empty; no other checkpoint of the run reads whole" in check_one_line_naming(
        state, code, err, argv
    )
    assert (w / SEED0 / "complete.json").exists()  # the healthy run finished meanwhile
