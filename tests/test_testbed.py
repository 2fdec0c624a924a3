"""The running_sum testbed at the papers' constants: every built-in runs there as its paper
wrote it, reports how much its mechanism acted (whatever that is: nothing is forced into a
band), answers in tens of tokens, and about half of the groups carry a gradient from the
start (tiny-sum samples at temperature 0.7 for that; zoo/run/run_config.py). Slow: one
short compare of every built-in (a few minutes)."""

from __future__ import annotations

import json
import math
import statistics

import pytest
from harness_cli import REPO, run_harness

from harness.tuning import load_plan
from zoo.algorithms import ALGORITHMS, list_algorithms

PLAN = REPO / "configs" / "tune" / "running_sum.toml"


def test_the_tuning_plan_tunes_only_the_learning_rate_over_one_grid_for_all():
    plan = load_plan(PLAN)
    grids = {tuple(sorted(s.items())) for a in plan.algorithms for s in plan.grid_of(a)}
    assert {k for g in grids for k, _ in g} == {"lr"}  # the papers' constants otherwise
    assert {tuple(tuple(s.items()) for s in plan.grid_of(a)) for a in plan.algorithms} == {
        tuple(tuple(s.items()) for s in plan.grid_of(plan.algorithms[0]))
    }
    assert not plan.require_acting and "lr" in plan.extend


@pytest.mark.slow
def test_every_built_in_at_its_papers_constants_reports_what_acts(tmp_path):
    built_ins = [n for n in list_algorithms() if ALGORITHMS.load(n).family != "control"]
    short = [
        "--env",
        "running_sum",
        "--model",
        "tiny-sum",
        "--seeds",
        "1",
        "--budget-samples",
        "512",
        "--prompts-per-step",
        "64",
        "--eval-points",
        "1",
        "--eval-samples",
        "0",
        "--env-set",
        "eval_size=32",
        "--quiet",
    ]
    result = run_harness(
        "compare", *built_ins, *short, "--out", str(tmp_path / "all"), cwd=tmp_path, timeout=2400
    )
    assert result.returncode == 0, result.stderr[-3000:]
    informative = []
    for name in built_ins:
        metrics = tmp_path / "all" / "runs" / f"{name}__running_sum__seed0" / "metrics.jsonl"
        records = [json.loads(line) for line in metrics.read_text().splitlines()]
        steps = [r for r in records if r["step"] > 0]
        assert steps, name
        assert json.loads((metrics.parent / "config.json").read_text())["run"]["temperature"] == 0.7
        lengths = [r["response_len_mean"] for r in steps]
        assert 10 < statistics.fmean(lengths) < 64, (name, lengths)
        informative.append(steps[0]["informative_group_frac"])
        shares = ALGORITHMS.load(name).acting_shares()
        if not shares:  # gpg: no ratio, no clip, nothing declared
            assert name == "gpg"
            continue
        for r in steps:  # reported every step, a share of units, whatever its size
            total = sum(r[m] for m in shares)
            assert math.isfinite(total) and 0 <= total <= 1, (name, shares, r)
    # About half the groups of the first step carry a gradient (0.51 measured over 256
    # prompts). Every built-in draws the same first step (same seed, start weights and
    # engine), so this is one draw of 64 groups: standard error ~0.06, and 0.3 sits 3.5 of
    # them below 0.51 (a share near 0, the testbed too hard or too easy, still fails).
    assert statistics.fmean(informative) > 0.3, informative
