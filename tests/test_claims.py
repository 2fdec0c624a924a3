"""The claims table: each claim measured per run, the difference to its baseline with an
interval, and a verdict that follows the interval (and the paper's predicted side)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from harness.claims import CLAIMS, claims_table, difference_interval, late_mean, verdict


def run(algorithm: str, seed: int, entropy: list[float], wrong_len: float = 20.0) -> dict:
    records = [{"step": 0}] + [
        {"step": k + 1, "entropy_sampled": e, "response_len_incorrect_mean": wrong_len}
        for k, e in enumerate(entropy)
    ]
    return {"env": "running_sum", "algorithm": algorithm, "seed": seed, "records": records,
            "config": {"run": {}}}  # fmt: skip


def test_verdicts_follow_the_interval_and_the_predicted_side():
    assert verdict(+1, 0.01, 0.05) == "supported"
    assert verdict(-1, 0.01, 0.05) == "contradicted"
    assert verdict(+1, -0.01, 0.05) == "inconclusive"
    assert verdict(+1, math.nan, math.nan) == "no interval"


def test_paired_and_welch_intervals():
    x, y = np.array([1.0, 2.0, 3.0]), np.array([0.5, 1.5, 2.5])
    diff, low, high = difference_interval(x, y, paired=True)
    assert diff == 0.5 and low == high == 0.5  # identical differences: no spread
    diff, low, high = difference_interval(x, y, paired=False)
    assert diff == 0.5 and low < 0 < high  # the seeds' spread swamps it unpaired


def test_late_mean_reads_the_second_half_of_the_steps():
    assert late_mean("entropy_sampled")(run("grpo", 0, [9.0, 9.0, 1.0, 3.0])) == 2.0


def test_the_table_tests_only_claims_whose_rows_ran():
    runs = [run("grpo", s, [0.30, 0.25, 0.20, 0.18 + 0.001 * s]) for s in range(4)]
    runs += [run("dapo", s, [0.30, 0.29, 0.28, 0.27 + 0.002 * s]) for s in range(4)]
    runs += [run("dr_grpo", s, [0.3] * 4, wrong_len=20.0 + s) for s in range(4)]
    table = claims_table(runs).set_index("algorithm")
    assert set(table.index) == {"dapo", "dr_grpo"}  # no gspo, cispo, ... rows ran
    assert table.loc["dapo", "verdict"] == "supported"  # entropy kept higher than grpo's
    # second half: (0.28 + 0.27 + 0.002 s) / 2 - (0.20 + 0.18 + 0.001 s) / 2, mean over s
    assert table.loc["dapo", "difference"] == pytest.approx(0.085 + 0.0005 * 1.5)
    assert table.loc["dapo", "seeds"] == "4 vs 4 paired"
    from harness.analysis import claims_markdown

    shown = claims_markdown(table.reset_index())
    assert "dapo vs grpo" in shown and "| supported" in shown and "+0.08" in shown
    # dr_grpo's wrong answers are longer than grpo's (20 + s vs 20): the claim says shorter
    assert table.loc["dr_grpo", "verdict"] in ("contradicted", "inconclusive")


def test_every_claim_names_a_built_in_and_its_source():
    from zoo.algorithms import list_algorithms

    for c in CLAIMS:
        rows = (c.algorithm.split("@")[0], c.baseline.split("@")[0])  # an ablation's arms
        assert set(rows) <= set(list_algorithms())
        assert "arXiv" in c.where and c.direction in (-1, 1)
