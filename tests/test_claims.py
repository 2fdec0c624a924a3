"""The claims table: each claim measured per run, the difference to its baseline with an
interval, a verdict Holm-adjusted over the claims, and "not tested here" (with the reason)
where the claim's precondition fails: its mechanism did not act, or a row did not learn."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from harness.claims import CLAIMS, claims_table, decide_claims, difference_interval, late_mean


def run(algorithm: str, seed: int, entropy: list[float], wrong_len: float = 20.0) -> dict:
    records = [{"step": 0}] + [
        {"step": k + 1, "entropy_sampled": e, "response_len_incorrect_mean": wrong_len}
        for k, e in enumerate(entropy)
    ]
    return {
        "env": "running_sum",
        "algorithm": algorithm,
        "seed": seed,
        "records": records,
        "config": {"run": {}},
    }


def test_verdicts_are_holm_adjusted_over_the_claims():
    table = pd.DataFrame(
        {
            "untested": [None, None, None, "not tested here: why"],
            "p_for": [0.01, 0.02, 0.9, 0.001],
            "p_against": [0.99, 0.98, 0.012, 0.9],
        }
    )
    out = decide_claims(table)
    # six tested one-sided p-values: 0.01 -> 0.06 (not significant after Holm), 0.012 -> 0.06
    assert list(out.verdict[:3]) == ["inconclusive", "inconclusive", "inconclusive"]
    assert out.p_for_holm[0] == pytest.approx(0.06)
    assert out.verdict[3] == "not tested here: why" and np.isnan(out.p_for_holm[3])
    strong = decide_claims(
        pd.DataFrame({"untested": [None, None], "p_for": [1e-4, 0.9], "p_against": [0.9, 1e-4]})
    )
    assert list(strong.verdict) == ["supported", "contradicted"]


def test_paired_and_welch_intervals():
    x, y = np.array([1.0, 2.0, 3.0]), np.array([0.5, 1.5, 2.5])
    diff, low, high, se, dof = difference_interval(x, y, paired=True)
    assert diff == 0.5 and low == high == 0.5 and se == 0 and dof == 2  # no spread
    diff, low, high, _, _ = difference_interval(x, y, paired=False)
    assert diff == 0.5 and low < 0 < high  # the seeds' spread swamps it unpaired


def test_late_mean_reads_the_second_half_of_the_steps():
    assert late_mean("entropy_sampled")(run("grpo", 0, [9.0, 9.0, 1.0, 3.0])) == 2.0


def test_the_table_tests_only_claims_whose_rows_ran():
    runs = [run("grpo", s, [0.30, 0.25, 0.20, 0.18 + 0.001 * s]) for s in range(4)]
    runs += [run("dapo", s, [0.30, 0.29, 0.28, 0.27 + 0.002 * s]) for s in range(4)]
    runs += [run("dr_grpo", s, [0.3] * 4, wrong_len=20.0 + s) for s in range(4)]
    acting = pd.DataFrame(
        {
            "env": ["running_sum"] * 2,
            "algorithm": ["dapo", "dr_grpo"],
            "mechanism_acting": [0.004, 0.01],
        }
    )
    table = claims_table(runs, off_policy=acting).set_index("algorithm")
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


def test_a_claim_whose_mechanism_did_not_act_or_whose_row_did_not_learn_is_not_tested():
    runs = [run("grpo", s, [0.30, 0.25, 0.20, 0.18 + 0.001 * s]) for s in range(4)]
    runs += [run("dapo", s, [0.30, 0.29, 0.28, 0.27 + 0.002 * s]) for s in range(4)]
    idle = pd.DataFrame({"env": ["running_sum"], "algorithm": ["dapo"], "mechanism_acting": [0.0]})
    verdict = claims_table(runs, off_policy=idle).set_index("algorithm").loc["dapo", "verdict"]
    assert verdict.startswith("not tested here: dapo's mechanism did not act (0.000%")
    # a baseline that never rises above its start: nothing it is compared with is tested
    for r in runs:
        r["records"][0]["eval_reward"] = 0.3
    scores = pd.DataFrame(
        [
            {
                "env": "running_sum",
                "algorithm": r["algorithm"],
                "seed": r["seed"],
                "headline": (0.29 + 0.001 * r["seed"])
                if r["algorithm"] == "grpo"
                else 0.4 + 0.001 * r["seed"],
            }
            for r in runs
        ]
    )
    acting = idle.assign(mechanism_acting=0.01)
    table = claims_table(runs, scores, acting).set_index("algorithm")
    assert table.loc["dapo", "verdict"].startswith("not tested here: grpo does not learn")


def test_every_claim_names_a_built_in_and_its_source():
    from zoo.algorithms import list_algorithms

    for c in CLAIMS:
        rows = (c.algorithm.split("@")[0], c.baseline.split("@")[0])  # an ablation's arms
        assert set(rows) <= set(list_algorithms())
        assert "arXiv" in c.where and c.direction in (-1, 0, 1)
        if c.direction == 0:  # "as well as" claims are about the headline
            assert "headline" in c.quantity
