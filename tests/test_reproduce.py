"""`harness reproduce`'s statistical verdict (on synthetic headlines, checked against
scipy's own tests), the setups a board names, and the targets it refuses before running
anything. The end-to-end checks (exact MATCH, and a statistical verdict on a faked CPU)
run real runs: tests/test_compare.py."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from harness_cli import run_harness
from scipy import stats

from harness.leaderboard import exact_setup_lines
from harness.reproduce import POOLED, WELCH, agreement, reproduce
from harness.stats import min_detectable_difference, row_mdd
from zoo.core.config import ConfigError

ROW = [0.500, 0.520, 0.490, 0.510, 0.530]


def tost_p(new: list[float], old: list[float], margin: float, equal_var: bool) -> float:
    """The TOST's p from two of scipy's one-sided two-sample tests on shifted data (a
    shift moves the mean, not the spread): H0 diff <= -margin, and H0 diff >= +margin."""
    above = stats.ttest_ind(np.add(new, margin), old, equal_var=equal_var, alternative="greater")
    below = stats.ttest_ind(np.subtract(new, margin), old, equal_var=equal_var, alternative="less")
    return max(above.pvalue, below.pvalue)


def test_new_seeds_from_the_rows_distribution_agree():
    new = [0.505, 0.515, 0.495]
    margin = row_mdd(ROW)
    result = agreement(ROW, new, margin)
    welch = stats.ttest_ind(new, ROW, equal_var=False)
    assert result.test == WELCH
    assert result.p == pytest.approx(welch.pvalue, rel=1e-9)
    assert result.t == pytest.approx(welch.statistic, rel=1e-9)
    assert result.dof == pytest.approx(welch.df, rel=1e-9)
    assert result.tost_p == pytest.approx(tost_p(new, ROW, margin, False), rel=1e-9)
    assert result.label == "AGREES" and not result.differs and result.equivalent
    # the accepted range of the new mean holds the new mean exactly when p >= 5%
    assert result.accept[0] < np.mean(new) < result.accept[1]
    text = "\n".join(result.describe())
    assert "Welch two-sample t-test" in text and "TOST equivalence test" in text
    assert f"p = {welch.pvalue:.3g}" in text and "decides the exit code" in text


def test_new_seeds_far_from_the_row_differ():
    new = [0.600, 0.610, 0.590]
    result = agreement(ROW, new, row_mdd(ROW))
    welch = stats.ttest_ind(new, ROW, equal_var=False)
    assert welch.pvalue < 0.01  # the case is clear-cut by scipy's own test
    assert result.p == pytest.approx(welch.pvalue, rel=1e-9)
    assert result.label == "DIFFERS" and not result.equivalent
    assert not result.accept[0] <= np.mean(new) <= result.accept[1]


def test_one_new_seed_takes_the_rows_spread():
    """One seed has no variance: the test pools, so the row's variance stands for both
    sides (scipy's equal-variance test gives the same with one new value)."""
    margin = row_mdd(ROW)
    for new, label in (([0.515], "CONSISTENT"), ([0.62], "DIFFERS")):
        result = agreement(ROW, new, margin)
        pooled = stats.ttest_ind(new, ROW, equal_var=True)
        assert result.test == POOLED and result.dof == len(ROW) - 1
        assert result.p == pytest.approx(pooled.pvalue, rel=1e-9)
        assert result.tost_p == pytest.approx(tost_p(new, ROW, margin, True), rel=1e-9)
        assert result.label == label
        assert "one new seed has no spread of its own" in "\n".join(result.describe())


def test_equivalence_is_a_separate_question_from_difference():
    # Few, widely spread seeds: no significant difference, yet no shown equivalence either.
    row, new = [0.40, 0.55, 0.47], [0.52, 0.70, 0.45]
    result = agreement(row, new, row_mdd(row))
    assert stats.ttest_ind(new, row, equal_var=False).pvalue > 0.3
    assert result.tost_p == pytest.approx(tost_p(new, row, row_mdd(row), False), rel=1e-9)
    assert result.tost_p >= 0.05 and result.label == "CONSISTENT"
    assert "equivalence not shown" in "\n".join(result.describe())
    # Tight seeds: a significant difference smaller than a (wide) margin still DIFFERS.
    row, new = [0.500, 0.501, 0.502, 0.501], [0.510, 0.511, 0.512]
    result = agreement(row, new, 0.05)
    assert stats.ttest_ind(new, row, equal_var=False).pvalue < 0.001
    assert result.equivalent and result.label == "DIFFERS"
    assert "by less than the row's MDD" in "\n".join(result.describe())


def test_no_spread_anywhere_is_decided_by_the_difference():
    assert agreement([0.5, 0.5], [0.5, 0.5], 0.0).label == "AGREES"
    different = agreement([0.5, 0.5], [0.6, 0.6], 0.0)
    assert different.p == 0.0 and different.label == "DIFFERS"


def test_no_margin_means_no_tost_and_too_few_seeds_are_refused():
    result = agreement(ROW, [0.51, 0.52], None)
    assert result.tost_p is None and result.label == "CONSISTENT"
    assert "TOST equivalence test: not made" in "\n".join(result.describe())
    with pytest.raises(ValueError, match="at least 2 recorded seeds"):
        agreement([0.5], [0.5, 0.6], 0.1)
    with pytest.raises(ValueError, match="at least 1 new headline"):
        agreement(ROW, [], 0.1)


def test_the_margin_is_the_rows_mdd_as_the_summary_computes_it():
    sd = float(np.std(ROW, ddof=1))
    assert row_mdd(ROW) == min_detectable_difference(sd, 5, 5)
    assert np.isnan(row_mdd([0.5]))


def write_run(
    folder: Path, seed: int, cpu: str, threads: int = 2, versions: dict | None = None
) -> Path:
    """A run folder with only a config.json: enough for everything `reproduce` and the
    boards read before anything runs."""
    folder.mkdir(parents=True)
    config = {
        "run": {"algorithm": "grpo", "env": "arithmetic", "model": "tiny", "seed": seed},
        "machine": {"cpu": cpu, "cpu_vector_flags": "avx avx2", "torch_threads": threads},
        "versions": versions or {"torch": "2.13.0+cpu"},
    }
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_a_board_names_the_setups_its_rows_need(tmp_path):
    runs = tmp_path / "exp" / "runs"
    a = [str(write_run(runs / f"a{s}", s, "CPU One")) for s in (0, 1)]
    b = [str(write_run(runs / "b0", 0, "CPU One")), str(write_run(runs / "b1", 1, "CPU Two", 1))]
    g = pd.DataFrame(
        {"algorithm": ["grpo", "dapo"], "experiment": [str(tmp_path / "exp")] * 2, "runs": [a, b]}
    )
    text = "\n".join(exact_setup_lines(g))
    assert "Package versions: torch 2.13.0+cpu." in text  # shared: named once
    assert "- CPU One [avx avx2], 2 threads: grpo (exp), dapo (exp, 1 of its 2 runs)" in text
    assert "- CPU Two [avx avx2], 1 thread: dapo (exp, 1 of its 2 runs)" in text
    one = "\n".join(exact_setup_lines(g.iloc[:1]))
    assert "All rows: CPU One [avx avx2], 2 threads." in one
    # other versions make another setup, and then each setup names its own
    c = [str(write_run(runs / "c0", 0, "CPU One", versions={"torch": "2.14.0+cpu"}))]
    g = pd.DataFrame(
        {"algorithm": ["grpo", "opo"], "experiment": [str(tmp_path / "exp")] * 2, "runs": [a, c]}
    )
    text = "\n".join(exact_setup_lines(g))
    assert "2 threads; torch 2.13.0+cpu: grpo (exp)" in text
    assert "2 threads; torch 2.14.0+cpu: opo (exp)" in text


def test_a_lone_run_on_another_cpu_is_refused_before_running(tmp_path):
    write_run(tmp_path / "exp" / "runs" / "grpo__arithmetic__seed0", 0, "Imaginary CPU")
    result = run_harness("reproduce", "exp/runs/grpo__arithmetic__seed0", cwd=tmp_path, timeout=300)
    assert result.returncode == 2, result.stdout + result.stderr[-2000:]
    assert "the CPU class differs (made on Imaginary CPU [avx avx2]" in result.stderr
    assert "needs a leaderboard row or the run's sibling runs" in result.stderr
    assert "Traceback" not in result.stderr


def test_targets_that_cannot_be_tested_are_refused(tmp_path):
    runs = tmp_path / "exp" / "runs"
    write_run(runs / "grpo__arithmetic__seed0", 0, "Imaginary CPU")
    write_run(runs / "grpo__arithmetic__seed1", 1, "Imaginary CPU")
    with pytest.raises(ConfigError, match=r"--seeds 3: run .*seed0 has 2 run\(s\).*give 1 to 2"):
        reproduce(str(runs / "grpo__arithmetic__seed0"), tmp_path, seeds=3)
    boards = tmp_path / "boards"
    boards.mkdir()
    row = {
        "id": "tiny__arithmetic__grpo__exp",
        "runs": [str(runs / "grpo__arithmetic__seed0")],
        "per_seed": "0.500",
    }
    (boards / "leaderboard.json").write_text(json.dumps([row]))
    with pytest.raises(ConfigError, match=r"needs at least 2 recorded seeds.*the row has 1"):
        reproduce(row["id"], boards)
    with pytest.raises(ConfigError, match=r"neither a run folder .* nor a row id"):
        reproduce("tiny__arithmetic__nope__exp", boards)
