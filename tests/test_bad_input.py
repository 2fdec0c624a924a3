"""Malformed invocations end in one line: exit status 2, ``error: ...`` naming what was
wrong and what is valid, no traceback, nothing written. Numbers past what a setting can
mean (``1e999``, ``1e23`` steps, a memory limit above the machine's), ``--out`` folders
that cannot be written, ``--resume`` where there is no run; and checkpoints that would
run code when loaded."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from harness_cli import run_harness
from test_fuzz import call

from zoo.core.config import ConfigError
from zoo.run.checkpoint import STATE_FILE, load_state_file

LONG_NAME = "a" * 300


def run_case(tmp_path: Path) -> dict[str, tuple[list[str], str]]:
    """Name -> (argv, a phrase the error must contain)."""
    out = ["--out", str(tmp_path / "out")]
    a_file = str(tmp_path / "a-file")
    return {
        "digits 1e999": (["run", "grpo", "--env-set", "digits=1e999", *out], "out of range"),
        "eval_size -1e999": (
            ["run", "grpo", "--env-set", "eval_size=-1e999", *out],
            "out of range",
        ),
        "eval_size 1e12": (
            ["run", "grpo", "--env-set", "digits=20", "--env-set", "eval_size=1e12", *out],
            "eval_size must be <= 100000",
        ),
        "max_turns 1e999": (
            ["run", "grpo", "--env", "tool_arithmetic", "--env-set", "max_turns=1e999", *out],
            "max_turns must be <= 1000",
        ),
        "max_turns 1e9": (
            ["run", "grpo", "--env", "tool_arithmetic", "--env-set", "max_turns=1000000000", *out],
            "max_turns must be <= 1000",
        ),
        "memory_mb 1e12": (
            ["run", "grpo", "--env", "tool_arithmetic", "--env-set", "memory_mb=1e12", *out],
            "this machine's memory",
        ),
        "eps 1e999": (["run", "grpo", "--set", "eps=1e999", *out], "finite"),
        "steps 1e23": (["run", "grpo", "--steps", "1e23", *out], "steps must be <= 1000000"),
        "steps 10**23": (
            ["run", "grpo", "--steps", "1" + "0" * 23, *out],
            "steps must be <= 1000000",
        ),
        "steps 1.5": (["run", "grpo", "--steps", "1.5", *out], "not an integer"),
        "seed 1e23": (["run", "grpo", "--seed", "1e23", *out], "int64"),
        "seed -1": (["run", "grpo", "--seed", "-1", *out], "seed must be >= 0, got -1"),
        "budget samples 1e30": (["run", "grpo", "--budget-samples", "1e30", *out], "int64"),
        "eval points 1e15": (
            ["run", "grpo", "--budget", "1e15", "--eval-points", "1e15", *out],
            "eval_points must be <= 10000",
        ),
        "run out a file": (["run", "grpo", "--out", a_file], "is a file, not a folder"),
        "run out under a file": (
            ["run", "grpo", "--out", f"{a_file}/run"],
            "no folder can be made under it",
        ),
        "run out in /proc": (
            ["run", "grpo", "--out", "/proc/forge-zoo-run"],
            "cannot make a folder in /proc",
        ),
        "run out a long name": (
            ["run", "grpo", "--out", str(tmp_path / LONG_NAME)],
            "300 bytes long",
        ),
        "run out empty": (["run", "grpo", "--out", ""], "not a folder name"),
        "run resume an empty folder": (
            ["run", "grpo", "--resume", "--out", str(tmp_path / "empty")],
            "holds no run",
        ),
        "run resume a missing folder": (["run", "grpo", "--resume", *out], "holds no run"),
        "compare out a file": (["compare", "grpo", "--out", a_file], "is a file, not a folder"),
        "compare out under a file": (
            ["compare", "grpo", "--out", f"{a_file}/x"],
            "no folder can be made under it",
        ),
        "compare out in /proc": (
            ["compare", "grpo", "--out", "/proc/forge-zoo-compare"],
            "cannot make a folder in /proc",
        ),
        "compare out a long name": (
            ["compare", "grpo", "--out", str(tmp_path / LONG_NAME)],
            "300 bytes long",
        ),
        "compare resume an empty folder": (
            ["compare", "grpo", "--resume", "--out", str(tmp_path / "empty")],
            "holds no experiment",
        ),
        "compare seeds 1e12": (["compare", "grpo", "--seeds", "1e12", *out], "10000 at most"),
        "compare jobs 1e18": (
            ["compare", "grpo", "--jobs", "1e18", *out],
            "--jobs must be <= 10000",
        ),
        "compare grid too large": (
            [
                "compare",
                "grpo",
                "--vary",
                "eps=0.1,0.2",
                "--vary",
                "beta=0,0.1",
                "--seeds",
                "5000",
                *out,
            ],
            "20000 runs",
        ),
        "compare run name too long": (
            ["compare", "grpo", "--vary", f"eps=0.{'1' * 250}", *out],
            "280 bytes long",
        ),
    }


CASES = list(run_case(Path("/x")))


@pytest.mark.parametrize("name", CASES)
def test_a_malformed_invocation_exits_2_with_one_line(name, tmp_path):
    if "/proc" in name and not Path("/proc").is_dir():
        pytest.skip("no /proc here")
    (tmp_path / "a-file").write_text("not a folder\n")
    (tmp_path / "empty").mkdir()
    argv, phrase = run_case(tmp_path)[name]
    code, err = call(argv)
    lines = err.strip().splitlines()
    assert code == 2, f"{argv} -> exit {code}: {err[-2000:]}"
    assert len(lines) == 1 and lines[0].startswith("error: "), err[-2000:]
    assert "Traceback" not in err and phrase in err, err[-2000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file", "empty"]  # nothing new
    assert list((tmp_path / "empty").iterdir()) == []
    assert not Path("/proc/forge-zoo-run").exists()


def test_the_real_command_prints_one_line_for_a_parse_error_and_a_bad_folder(tmp_path):
    """Through a subprocess, as a user meets them: argparse's own errors are one line too."""
    (tmp_path / "a-file").write_text("x\n")
    for args, phrase in (
        (["run", "grpo", "--steps", "many"], "argument --steps: cannot read 'many' as int"),
        (["run", "grpo", "--mode", "fast"], "invalid choice: 'fast'"),
        (["run", "grpo", "--out", str(tmp_path / "a-file" / "run")], "is a file"),
    ):
        result = run_harness(*args, cwd=tmp_path, timeout=120)
        assert result.returncode == 2, (args, result.stderr[-2000:])
        assert result.stderr.count("\n") == 1 and phrase in result.stderr, result.stderr
        assert "Traceback" not in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]


def test_a_number_in_scientific_notation_sets_an_integer_flag_exactly():
    from harness.cli import build_parser

    args = build_parser().parse_args(["run", "grpo", "--steps", "2e2", "--seed", "1_000"])
    assert (args.steps, args.seed) == (200, 1000)
    assert type(args.steps) is int


class Planted:
    """Unpickling this makes a folder: what a hostile trainer_state.pt could do instead."""

    def __init__(self, target: Path) -> None:
        self.target = target

    def __reduce__(self):
        return (os.makedirs, (str(self.target),))


def test_a_checkpoint_holding_code_is_refused_unrun(tmp_path):
    planted = tmp_path / "planted"
    torch.save({"loop": Planted(planted), "optimizer": {}, "version": 0}, tmp_path / STATE_FILE)
    with pytest.raises(ConfigError, match=r"\(os.makedirs\); they are not loaded") as refused:
        load_state_file(tmp_path / STATE_FILE)
    assert not planted.exists()
    assert "\n" not in str(refused.value)  # main() prints it as its one "error:" line
    # what a checkpoint holds (counters, an optimizer state dict, the version) loads
    state = {
        "loop": {"step_index": 3, "ledger": {"flops": {"train": 1.5}}},
        "optimizer": torch.optim.AdamW([torch.nn.Parameter(torch.ones(2))]).state_dict(),
        "version": 3,
    }
    torch.save(state, tmp_path / STATE_FILE)
    assert load_state_file(tmp_path / STATE_FILE) == state


def test_out_checks_leave_no_probe_behind(tmp_path):
    from harness.runner import check_out

    check_out(tmp_path / "new" / "run")
    check_out(tmp_path)
    assert list(tmp_path.iterdir()) == []
    if os.geteuid() != 0:  # (root writes anywhere)
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        with pytest.raises(ConfigError, match="cannot make a folder in"):
            check_out(locked / "run")
