"""harness tune and the board's controls: the same number of settings for every algorithm
or no sweep; selection on the validation split by the highest mean; the board's rows at
the chosen settings with plain names; grpo_twin an exact copy of grpo; the controls'
verdicts and the board's MDD in the report. The end-to-end sweep and board are slow."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import pandas as pd
import pytest
import torch
from harness_cli import REPO, run_harness

from harness.controls import control_configs, control_verdicts, power_at_resolution
from harness.tuning import (
    apply_setting,
    extend_edges,
    load_plan,
    runner_up_gap,
    select,
    sweep_markdown,
    tuning_configs,
)
from zoo.algorithms import get_algorithm
from zoo.core.config import ConfigError
from zoo.core.types import TrainBatch
from zoo.run.run_config import RunConfig

PLAN = """
env = "running_sum"
model = "tiny-sum"
algorithms = ["grpo", "gspo"]
seeds = 2
settings = 2

[run]
budget_flops = 1e12

[grid.default]
lr = [5e-5, 1e-4]

[grid.gspo]
lr = [5e-5]
eps_high = [4e-4, 4e-3]
"""


def write_plan(tmp_path: Path, text: str = PLAN) -> Path:
    path = tmp_path / "plan.toml"
    path.write_text(text)
    return path


def test_every_algorithm_gets_the_same_settings_and_seeds_on_validation(tmp_path):
    plan = load_plan(write_plan(tmp_path))
    cfgs = tuning_configs(plan)
    assert len(cfgs) == 2 * 2 * 2
    assert {c.evaluation.eval_split for c in cfgs} == {"validation"}
    assert {c.run.seed for c in cfgs} == {100, 101}  # apart from a board's seeds 0..n
    rows = sorted({c.run.variant for c in cfgs})
    assert rows == [
        "grpo@lr=0.0001",
        "grpo@lr=5e-05",
        "gspo@lr=5e-05,eps_high=0.0004",
        "gspo@lr=5e-05,eps_high=0.004",
    ]
    gspo = next(c for c in cfgs if c.run.variant == "gspo@lr=5e-05,eps_high=0.004")
    assert gspo.run.algorithm_config == {"eps_high": "0.004"} and gspo.optimizer.lr == 5e-5
    assert {c.budget.budget_flops for c in cfgs} == {1e12}


def test_constants_that_move_together_are_listed_setting_by_setting(tmp_path):
    listed = PLAN.replace(
        "[grid.gspo]\nlr = [5e-5]\neps_high = [4e-4, 4e-3]\n",
        "[grid]\ngspo = [{lr = 5e-5, eps_low = 3e-4, eps_high = 4e-4},\n"
        "        {lr = 5e-5, eps_low = 3e-3, eps_high = 4e-3}]\n",
    )
    assert listed != PLAN
    plan = load_plan(write_plan(tmp_path, listed.replace("[grid.default]", "[grid.default]")))
    assert plan.grid_of("gspo")[1] == {"lr": "5e-05", "eps_low": "0.003", "eps_high": "0.004"}


def test_a_plan_that_gives_one_algorithm_more_settings_is_refused(tmp_path):
    unfair = PLAN.replace("eps_high = [4e-4, 4e-3]", "eps_high = [4e-4, 4e-3, 4e-2]")
    with pytest.raises(ConfigError, match="gspo has 3 settings, the plan gives every algorithm 2"):
        load_plan(write_plan(tmp_path, unfair))


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (('"grpo", "gspo"', '"grpo", "nope"'), "unknown algorithm 'nope'"),
        (("[run]", "[run]\neval_split = 'heldout'"), "cannot set"),
        (("seeds = 2", "seedz = 2"), "unknown keys"),
        (("[grid.gspo]", "[grid.dapo]"), "names no algorithm"),
    ],
)
def test_bad_plans_name_what_is_wrong(tmp_path, edit, message):
    with pytest.raises(ConfigError, match=message):
        load_plan(write_plan(tmp_path, PLAN.replace(*edit)))


def summary_rows(means: dict[str, float]) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "env": "running_sum",
                "algorithm": row,
                "seeds": 2,
                "headline_mean": m,
                "ci_low": m - 0.02,
                "ci_high": m + 0.02,
                "per_seed": f"{m} {m}",
            }
            for row, m in means.items()
        ]
    )


def test_selection_takes_the_best_validation_mean_and_publishes_the_sweep(tmp_path):
    plan = load_plan(write_plan(tmp_path))
    (tmp_path / "tables").mkdir()
    summary_rows(
        {
            "grpo@lr=5e-05": 0.30,
            "grpo@lr=0.0001": 0.34,
            "gspo@lr=5e-05,eps_high=0.0004": 0.31,
            "gspo@lr=5e-05,eps_high=0.004": 0.29,
        }
    ).to_csv(tmp_path / "tables" / "summary.csv", index=False)
    pd.DataFrame(
        [
            {
                "algorithm": "grpo@lr=0.0001",
                "mechanism_acting": 0.02,
                "mechanism_in_band_steps": 0.9,
                "grad_clip_frac": 0.1,
            }
        ]
    ).to_csv(tmp_path / "tables" / "off_policy.csv", index=False)
    selection = select(tmp_path, plan)
    assert selection["algorithms"]["grpo"]["setting"] == {"lr": "0.0001"}
    assert selection["algorithms"]["gspo"]["setting"] == {"lr": "5e-05", "eps_high": "0.0004"}
    table = sweep_markdown(selection)
    assert (
        "| grpo | lr=0.0001 | 0.340 [0.320, 0.360] | 2.00% | 90.00% | 10.00% | **yes** "
        "(at the grid's edge in lr) |" in table
    )
    assert "| grpo | lr=5e-05 | 0.300 [0.280, 0.320] | n/a | n/a | n/a |  |" in table
    (tmp_path / "tables" / "summary.csv").write_text(
        summary_rows({"grpo@lr=5e-05": 0.3}).to_csv(index=False)
    )
    with pytest.raises(ConfigError, match=r"no finished run of grpo@lr=0\.0001"):
        select(tmp_path, plan)


def test_with_require_acting_the_best_acting_setting_wins_over_an_idle_better_one(tmp_path):
    plan = load_plan(write_plan(tmp_path, "require_acting = true\n" + PLAN))
    (tmp_path / "tables").mkdir()
    summary_rows(
        {
            "grpo@lr=5e-05": 0.30,
            "grpo@lr=0.0001": 0.34,
            "gspo@lr=5e-05,eps_high=0.0004": 0.31,
            "gspo@lr=5e-05,eps_high=0.004": 0.29,
        }
    ).to_csv(tmp_path / "tables" / "summary.csv", index=False)
    # grpo's better setting acts in band on 40% of its steps (idle on the rest), its other
    # on 80%; neither gspo setting acts in band: it selects among both
    pd.DataFrame(
        [
            {"algorithm": "grpo@lr=0.0001", "mechanism_in_band_steps": 0.4},
            {"algorithm": "grpo@lr=5e-05", "mechanism_in_band_steps": 0.8},
            {"algorithm": "gspo@lr=5e-05,eps_high=0.0004", "mechanism_in_band_steps": 0.0},
            {"algorithm": "gspo@lr=5e-05,eps_high=0.004", "mechanism_in_band_steps": 0.1},
        ]
    ).to_csv(tmp_path / "tables" / "off_policy.csv", index=False)
    selection = select(tmp_path, plan)
    assert selection["algorithms"]["grpo"]["setting"] == {"lr": "5e-05"}
    assert selection["algorithms"]["grpo"]["acts"] is True
    assert selection["algorithms"]["gspo"]["setting"] == {"lr": "5e-05", "eps_high": "0.0004"}
    assert selection["algorithms"]["gspo"]["acts"] is False
    table = sweep_markdown(selection)
    assert "| grpo | lr=0.0001 | 0.340 [0.320, 0.360] | n/a | 40.00% | n/a | (mechanism " in table
    assert "acts in band on >= 50% of their steps" in table
    # without the rule the idle better setting wins
    plain = load_plan(write_plan(tmp_path))
    assert select(tmp_path, plain)["algorithms"]["grpo"]["setting"] == {"lr": "0.0001"}


def test_tuned_settings_keep_the_row_name_and_reach_run_and_algorithm():
    cfg = RunConfig.from_flat(algorithm="gspo", env="running_sum", model="tiny-sum")
    out = apply_setting(cfg, {"lr": "1e-4", "eps_high": "0.004"})
    assert out.optimizer.lr == 1e-4 and out.run.algorithm_config == {"eps_high": "0.004"}
    assert out.run.variant == cfg.run.variant and out.run.algorithm == "gspo"
    assert get_algorithm("gspo", **out.run.algorithm_config).config.eps_high == 0.004


def test_controls_are_the_baseline_with_other_noise_and_at_fractions_of_its_lr():
    board = [
        RunConfig.from_flat(algorithm=a, seed=s, lr=1e-4) for a in ("grpo", "dapo") for s in (0, 1)
    ]
    extra, record = control_configs(board, "grpo")
    twins = [c for c in extra if c.run.variant == "grpo@twin"]
    half = [c for c in extra if c.run.variant == "grpo@half_lr"]
    quarter = [c for c in extra if c.run.variant == "grpo@quarter_lr"]
    # the twin: the baseline's seeds and prompts (paired), other sampling noise
    assert [c.run.seed for c in twins] == [0, 1] and {c.sampling.noise_seed for c in twins} == {1}
    same = {k: v for k, v in twins[0].to_flat().items() if k not in ("variant", "noise_seed")}
    assert same == {
        k: v for k, v in board[0].to_flat().items() if k not in ("variant", "noise_seed")
    }
    assert [c.run.seed for c in quarter] == [0, 1] and {c.optimizer.lr for c in quarter} == {2.5e-5}
    assert {c.optimizer.lr for c in half} == {5e-5}
    assert record["negative"]["row"] == "grpo@twin"
    assert [p["row"] for p in record["positive"]] == ["grpo@half_lr", "grpo@quarter_lr"]
    dapo_based, _ = control_configs(board, "dapo", (0.3,))
    assert {c.run.variant for c in dapo_based} == {"dapo@twin", "dapo@lr_x0.3"}
    with pytest.raises(ConfigError, match="needs the baseline 'gspo'"):
        control_configs(board, "gspo")


def test_another_noise_seed_samples_other_noise_for_the_same_prompts():
    from zoo.run.rollout import sampling_seed

    assert sampling_seed(3, 17, samples=8) == sampling_seed(3, 17, 0, samples=8)
    for streams in ("disjoint", "consecutive"):  # no collision between twins and the board
        pairs = [(s, i) for s in range(20) for i in range(50)]
        seeds = {sampling_seed(s, i, n, streams, samples=8) for s, i in pairs for n in (0, 1)}
        assert len(seeds) == 20 * 50 * 2, streams
    with pytest.raises(ConfigError, match="noise_seed must be >= 0"):
        RunConfig.from_flat(noise_seed=-1).validate()


def test_grpo_twin_is_grpo_exactly():
    grpo, twin = get_algorithm("grpo"), get_algorithm("grpo_twin")
    assert asdict(grpo.config) == asdict(twin.config) and twin.family == "control"
    gen = torch.Generator().manual_seed(0)
    mask = (torch.rand(8, 6, generator=gen) > 0.2).double()
    old = -torch.rand(8, 6, generator=gen, dtype=torch.float64)
    logprobs = (old + 0.3 * torch.randn(8, 6, generator=gen, dtype=torch.float64)).requires_grad_()
    adv = torch.randn(8, generator=gen, dtype=torch.float64)

    def grad(algorithm):
        batch = TrainBatch(
            logprobs=logprobs,
            old_logprobs=old,
            ref_logprobs=old - 0.1,
            advantages=adv,
            mask=mask,
            num_sequences=8,
            num_tokens=int(mask.sum()),
            max_response_len=6,
        )
        out = algorithm.loss(batch)
        (g,) = torch.autograd.grad(out.loss, logprobs)
        return float(out.loss), g

    (l1, g1), (l2, g2) = grad(grpo), grad(twin)
    assert l1 == l2 and torch.equal(g1, g2)


CONTROLS = control_configs([RunConfig.from_flat(algorithm="grpo")], "grpo")[1]


def verdict_rows(rows: list[tuple[str, str, float]]) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "algorithm": a,
                "verdict": v,
                "difference": d,
                "p_difference_adjusted": 0.01,
                "p_equivalence_adjusted": 0.5,
            }
            for a, v, d in rows
        ]
    )


def test_controls_pass_only_as_they_must():
    good = verdict_rows(
        [
            ("grpo@twin", "equivalent", 0.004),
            ("grpo@half_lr", "worse", -0.02),
            ("grpo@quarter_lr", "worse", -0.05),
            ("dapo", "better", 0.03),
        ]
    )
    checks = control_verdicts(good, CONTROLS, 0.02)
    assert [c["verdict"] for c in checks] == ["passed", "passed", "passed"]
    assert "0.020 (1.0 x delta, grpo@half_lr)" in power_at_resolution(checks, 0.02)
    # the twin separated (a false positive), a weaker variant came out on top, and one
    # a delta below the baseline was left unresolved (no power at delta)
    bad = verdict_rows(
        [
            ("grpo@twin", "better", 0.04),
            ("grpo@half_lr", "better", 0.02),
            ("grpo@quarter_lr", "unresolved", -0.02),
        ]
    )
    assert [c["verdict"] for c in control_verdicts(bad, CONTROLS, 0.02)] == ["failed"] * 3
    assert "no positive control" in power_at_resolution(control_verdicts(bad, CONTROLS, 0.02), 0.02)
    # a weaker copy whose gap is below delta may come out equivalent: correct, no power
    small = verdict_rows(
        [
            ("grpo@twin", "equivalent", 0.0),
            ("grpo@half_lr", "equivalent", -0.008),
            ("grpo@quarter_lr", "worse", -0.07),
        ]
    )
    checks = control_verdicts(small, CONTROLS, 0.02)
    assert [c["verdict"] for c in checks] == ["passed", "below delta", "passed"]
    assert "no control shows power at delta itself" in power_at_resolution(checks, 0.02)
    # an unresolved twin is no false positive; a missing row is missing
    open_ = verdict_rows([("grpo@twin", "unresolved", 0.01)])
    assert [c["verdict"] for c in control_verdicts(open_, CONTROLS, 0.02)] == [
        "passed",
        "missing",
        "missing",
    ]


SHORT = """
env = "running_sum"
model = "tiny-sum"
algorithms = ["grpo", "dapo"]
seeds = 1
settings = 2

[run]
budget_samples = 64
prompts_per_step = 4
eval_points = 1
eval_samples = 0

[env_config]
validation_size = 16
eval_size = 16

[grid.default]
lr = [5e-5, 2e-4]
"""


@pytest.mark.slow
def test_a_sweep_then_a_board_at_the_chosen_settings_with_controls(tmp_path):
    plan = write_plan(tmp_path, SHORT)
    sweep = run_harness(
        "tune", str(plan), "--out", str(tmp_path / "sweep"), "--quiet", cwd=tmp_path, timeout=1200
    )
    assert sweep.returncode == 0, sweep.stderr[-3000:]
    selection = json.loads((tmp_path / "sweep" / "selection.json").read_text())
    assert set(selection["algorithms"]) == {"grpo", "dapo"}
    runs = json.loads((tmp_path / "sweep" / "experiment.json").read_text())["runs"]
    assert {r["eval_split"] for r in runs.values()} == {"validation"} and len(runs) == 4
    assert "| dapo |" in (tmp_path / "sweep" / "sweep.md").read_text()
    assert "validation greedy reward" in (tmp_path / "sweep" / "report.md").read_text()
    board = run_harness(
        "compare",
        "grpo",
        "dapo",
        "--env",
        "running_sum",
        "--model",
        "tiny-sum",
        "--seeds",
        "2",
        "--tuned",
        str(tmp_path / "sweep" / "selection.json"),
        "--controls",
        "--budget-samples",
        "64",
        "--prompts-per-step",
        "4",
        "--eval-points",
        "1",
        "--eval-samples",
        "0",
        "--env-set",
        "eval_size=16",
        "--env-set",
        "validation_size=16",
        "--out",
        str(tmp_path / "board"),
        "--quiet",
        cwd=tmp_path,
        timeout=1200,
    )
    assert board.returncode == 0, board.stderr[-3000:]
    runs = json.loads((tmp_path / "board" / "experiment.json").read_text())["runs"]
    chosen = float(selection["algorithms"]["grpo"]["setting"]["lr"])
    assert runs["grpo__running_sum__seed0"]["lr"] == chosen
    assert runs["grpo@twin__running_sum__seed1"]["lr"] == chosen
    assert runs["grpo@twin__running_sum__seed1"]["noise_seed"] == 1
    assert runs["grpo@quarter_lr__running_sum__seed1"]["lr"] == chosen / 4
    assert {r["eval_split"] for r in runs.values()} == {"heldout"}
    report = (tmp_path / "board" / "report.md").read_text()
    assert "## Verdicts against grpo" in report and "negative control grpo@twin" in report
    assert (tmp_path / "board" / "tables" / "controls.csv").exists()


def test_a_sweep_is_no_board(tmp_path):
    from harness.leaderboard import is_tuning_sweep

    for name, split in (("sweep", "validation"), ("board", "heldout")):
        (tmp_path / name).mkdir()
        runs = {"grpo__running_sum__seed0": {"eval_split": split}}
        (tmp_path / name / "experiment.json").write_text(json.dumps({"runs": runs}))
    assert is_tuning_sweep(tmp_path / "sweep") and not is_tuning_sweep(tmp_path / "board")


def test_each_arm_of_an_ablation_is_tuned_and_selected_on_its_own(tmp_path):
    plan = load_plan(REPO / "configs" / "tune" / "running_sum-on-policy.toml")
    assert sorted(plan.arms_of("grpo")) == ["grpo@mini_batches=1", "grpo@mini_batches=4"]
    assert {len(s) for s in plan.arms_of("opo").values()} == {plan.settings}
    (tmp_path / "tables").mkdir()
    grid = {
        "1": ["1.25e-05", "2.5e-05", "5e-05", "0.0001", "0.0002", "0.0004"],
        "4": ["3.125e-06", "6.25e-06", "1.25e-05", "2.5e-05", "5e-05", "0.0001"],
    }
    best = ("0.0002", "6.25e-06")  # one per arm: each lr is in one grid only
    means = {
        f"{a}@mini_batches={m},lr={lr},eps=0.006": 0.3 + (0.05 if lr in best else 0)
        for a in ("grpo", "opo")
        for m, lrs in grid.items()
        for lr in lrs
    }
    summary_rows(means).to_csv(tmp_path / "tables" / "summary.csv", index=False)
    pd.DataFrame({"algorithm": list(means)}).to_csv(tmp_path / "tables" / "off_policy.csv")
    selection = select(tmp_path, plan)
    assert selection["algorithms"]["grpo@mini_batches=1"]["setting"]["lr"] == "0.0002"
    assert selection["algorithms"]["opo@mini_batches=4"]["setting"]["lr"] == "6.25e-06"
    from harness.experiment import with_variant
    from harness.tuning import tuned

    arm = with_variant(RunConfig.from_flat(algorithm="grpo"), {"mini_batches": "1"})
    out = tuned(arm, selection)
    assert (out.run.variant, out.regime.mini_batches, out.optimizer.lr) == (
        "grpo@mini_batches=1",
        1,
        2e-4,
    )
    assert out.run.algorithm_config["eps"] == "0.006"
    unfair = (
        (REPO / "configs" / "tune" / "running_sum-on-policy.toml")
        .read_text()
        .replace("{mini_batches = 4, lr = 1e-4, eps = 0.006},", "")
    )
    with pytest.raises(ConfigError, match="grpo@mini_batches=4 has 5 settings"):
        load_plan(write_plan(tmp_path, unfair))


EXTENDING = """
env = "running_sum"
model = "tiny-sum"
algorithms = ["grpo", "dapo", "gspo"]
seeds = 2
settings = 3

[grid.default]
lr = [1e-5, 2e-5, 4e-5]

[extend]
lr = [5e-6, 4e-5]
"""


def _chosen(lr: str) -> dict:
    return {"setting": {"lr": lr}, "sweep": []}


def test_a_choice_on_the_grids_edge_extends_it_outward_up_to_the_bound(tmp_path):
    plan = load_plan(write_plan(tmp_path, EXTENDING))
    selection = {
        "algorithms": {"grpo": _chosen("1e-05"), "dapo": _chosen("2e-05"), "gspo": _chosen("4e-05")}
    }
    added = extend_edges(plan, selection)
    # grpo at the low edge gains 5e-6 (the grid's factor of 2); dapo is interior; gspo's
    # next value, 8e-5, passes the bound of 4e-5
    assert added == {"grpo": ["lr=5e-06"]}
    assert [s["lr"] for s in plan.grid_of("grpo")] == ["5e-06", "1e-05", "2e-05", "4e-05"]
    assert [s["lr"] for s in plan.grid_of("dapo")] == ["1e-05", "2e-05", "4e-05"]
    assert len(tuning_configs(plan)) == (4 + 3 + 3) * 2
    selection["algorithms"]["grpo"] = _chosen("5e-06")  # the bound itself: no further
    assert extend_edges(plan, selection) == {}


def test_an_extension_needs_the_axis_in_every_grid(tmp_path):
    bad = EXTENDING.replace("[extend]", "[grid.gspo]\neps_high = [4e-4, 4e-3]\n\n[extend]")
    bad = bad.replace("settings = 3", "settings = 2").replace(
        "lr = [1e-5, 2e-5, 4e-5]", "lr = [1e-5, 2e-5]"
    )
    with pytest.raises(ConfigError, match="gspo's does not"):
        load_plan(write_plan(tmp_path, bad))


def test_the_runner_up_within_noise_is_said():
    def row(lr: str, mean: float, seeds: str) -> dict:
        return {"setting": {"lr": lr}, "validation_headline": mean, "per_seed": seeds}

    rows = [
        row("1e-05", 0.40, "0.41 0.38 0.41"),
        row("2e-05", 0.39, "0.39 0.39 0.39"),
        row("4e-05", 0.30, "0.30 0.31 0.29"),
    ]
    close = runner_up_gap(rows, 0)
    assert close["runner_up"] == {"lr": "2e-05"} and close["within_noise"]
    assert close["difference"] == pytest.approx(0.01)
    rows[1]["per_seed"], rows[1]["validation_headline"] = "0.31 0.28 0.31", 0.30
    rows[2]["validation_headline"] = 0.29
    assert not runner_up_gap(rows, 0)["within_noise"]  # 0.10 lower on every seed
