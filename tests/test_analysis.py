"""The tool-use part of `harness compare`'s analysis (harness/analysis.py), on synthetic
run folders written here (no training): the tool_use table against numbers computed by
hand, its plot and report section for multi-turn runs, and none of them for single-turn
runs."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

import harness.analysis
from harness.analysis import tool_use_table, write_analysis
from harness.scores import load_runs
from zoo.services.ledger import PHASES

STEPS, EVAL_EVERY = 8, 2


def analyse(out: Path) -> None:
    """write_analysis with a few bootstrap resamples of the sigmoid fit: the fit is not
    what these tests check, and its 200 resamples take most of the time."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(harness.analysis, "FIT_BOOTSTRAP_REPS", 5)
        write_analysis(out)


def tool_metrics(step: int, seed: int, calls_gain: float) -> dict:
    """Made-up multi-turn step metrics: tool calls grow by ``calls_gain`` per step (each
    call one more turn), success rises with the step; the seed shifts calls by 0.1."""
    calls = calls_gain * step + 0.1 * seed
    return {"turns_mean": 1 + calls, "tool_calls_mean": calls, "tool_success_rate": step / STEPS}


def eval_tool_metrics(step: int, seed: int, calls_gain: float) -> dict:
    """The held-out counterpart: half the training calls, success one step ahead."""
    calls = calls_gain * step / 2 + 0.1 * seed
    return {
        "eval_turns_mean": 1 + calls,
        "eval_tool_calls_mean": calls,
        "eval_tool_success_rate": min(1.0, (step + 1) / STEPS),
    }


def write_run(out: Path, algorithm: str, env: str, seed: int, calls_gain: float | None) -> None:
    """One run folder as the loop writes it: config.json and metrics.jsonl with an
    evaluation at step 0 and every EVAL_EVERY steps; tool metrics unless ``calls_gain``
    is None (a single-turn env)."""
    run_dir = out / "runs" / f"{algorithm}__{env}__seed{seed}"
    run_dir.mkdir(parents=True)
    run = {
        "algorithm": algorithm,
        "env": env,
        "seed": seed,
        "steps": STEPS,
        "eval_every": EVAL_EVERY,
        "mini_batches": 1,
        "epochs": 1,
    }
    (run_dir / "config.json").write_text(json.dumps({"run": run}))
    records = []
    for step in range(STEPS + 1):
        flops = 1e9 * step * (1 + 0.1 * seed)  # seeds spend slightly different compute
        record: dict = {"step": step, "samples": 64 * step, "flops": flops, "seconds": step}
        if step > 0:
            record["reward_mean"] = 0.1 * step
            for p in PHASES:
                record.update(
                    {f"{p}_flops": flops / len(PHASES), f"{p}_seconds": 0.1, f"{p}_tokens": 100}
                )
            if calls_gain is not None:
                record.update(tool_metrics(step, seed, calls_gain))
        if step % EVAL_EVERY == 0:
            record["eval_reward"] = 0.2 + 0.05 * step + 0.01 * seed
            if calls_gain is not None:
                record.update(eval_tool_metrics(step, seed, calls_gain))
        records.append(record)
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def write_experiment(out: Path, runs: list[tuple[str, str, int, float | None]]) -> Path:
    out.mkdir()
    machine = {"cpu": "test", "cores": 1, "memory_gib": 1, "torch_threads": 1}
    manifest = {
        "command": "python -m harness compare (synthetic)",
        "created": "today",
        "versions": {"forge-zoo": "test"},
        "machine": machine,
    }
    (out / "experiment.json").write_text(json.dumps(manifest))
    for run in runs:
        write_run(out, *run)
    return out


# grpo: two seeds, 0.5 more tool calls a step; dapo: one seed, 0.25; plus single-turn
# runs of another env (every algorithm runs every env, as the performance profile asks),
# which the tool-use table and plot must leave out.
MIXED = [
    ("grpo", "tool_arithmetic", 0, 0.5),
    ("grpo", "tool_arithmetic", 1, 0.5),
    ("dapo", "tool_arithmetic", 0, 0.25),
    ("grpo", "arithmetic", 0, None),
    ("dapo", "arithmetic", 0, None),
]


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = write_experiment(tmp_path_factory.mktemp("mixed") / "exp", MIXED)
    analyse(out)
    return out


def test_tool_use_table_matches_numbers_computed_by_hand(mixed: Path):
    table = tool_use_table(load_runs(mixed)).set_index("algorithm")
    assert list(table["env"]) == ["tool_arithmetic", "tool_arithmetic"]  # no single-turn row
    grpo, dapo = table.loc["grpo"], table.loc["dapo"]
    assert grpo["seeds"] == 2 and dapo["seeds"] == 1
    # held-out, step 0: calls = 0.1 * seed, so the seed mean is 0.05; turns one more each
    assert grpo["tool_calls_start"] == pytest.approx(0.05)
    assert grpo["turns_start"] == pytest.approx(1.05)
    assert grpo["tool_success_start"] == pytest.approx(1 / 8)
    # held-out, last evaluation (step 8): 0.5 * 8 / 2 + 0.1 * seed -> 2.0 and 2.1
    assert grpo["tool_calls_last"] == pytest.approx(2.05)
    assert grpo["turns_last"] == pytest.approx(3.05)
    assert grpo["tool_success_last"] == pytest.approx(1.0)
    assert dapo["tool_calls_last"] == pytest.approx(1.0)
    # training, last quarter of 8 steps = steps 7 and 8: calls 0.5 * 7.5 + 0.1 * seed
    assert grpo["train_tool_calls"] == pytest.approx(3.8)
    assert grpo["train_turns"] == pytest.approx(4.8)
    assert grpo["train_tool_success"] == pytest.approx(7.5 / 8)
    assert dapo["train_tool_calls"] == pytest.approx(0.25 * 7.5)
    # the CSV holds the same numbers
    csv = pd.read_csv(mixed / "tables" / "tool_use.csv").set_index("algorithm")
    assert csv.loc["grpo", "train_tool_calls"] == pytest.approx(3.8)


def test_report_shows_tool_use_after_the_reward_curves(mixed: Path):
    plot = mixed / "plots" / "tool_use.png"
    assert plot.exists() and plot.stat().st_size > 10_000  # three panels drawn
    assert (mixed / "tables" / "tool_use.md").exists()
    report = (mixed / "report.md").read_text()
    section = report.index("## Tool use over training")
    assert report.index("## Held-out reward against compute") < section
    assert section < report.index("## Summary")
    assert "![tool use vs FLOPs](plots/tool_use.png)" in report[section:]
    assert "held-out greedy episodes" in report[section:]
    assert (mixed / "tables" / "tool_use.md").read_text().strip() in report[section:]


def test_single_turn_report_has_no_tool_use(tmp_path: Path):
    single = [(a, "arithmetic", s, None) for a in ("grpo", "dapo") for s in (0, 1)]
    out = write_experiment(tmp_path / "exp", single)
    analyse(out)
    assert "Tool use" not in (out / "report.md").read_text()
    assert not (out / "plots" / "tool_use.png").exists()
    assert not (out / "tables" / "tool_use.csv").exists()


def test_evaluation_table_splits_the_headlines_noise_and_the_evaluations_cost():
    """harness/eval_cost.py against numbers computed by hand: two seeds of one row, whose
    last three checkpoints are 0.40, 0.50, 0.60 (+ 0.01 x seed), evaluated greedily in 2 s
    and, at the last one, with samples in 10 s, on arithmetic's 500 held-out problems."""
    from harness.eval_cost import evaluation_table

    runs, rows = [], []
    for seed in (0, 1):
        records = [
            {
                "step": 4 * k,
                "eval_reward": 0.2 + 0.1 * k + 0.01 * seed,
                "eval_seconds": 10.0 if k == 4 else 2.0,
                **({"eval_mean_at_4": 0.3} if k == 4 else {}),
            }
            for k in range(5)
        ]
        runs.append(
            {
                "env": "arithmetic",
                "algorithm": "grpo",
                "seed": seed,
                "config": {"run": {"env": "arithmetic"}},
                "records": records,
            }
        )
        rows += [
            {
                "env": "arithmetic",
                "algorithm": "grpo",
                "seed": seed,
                "point": k,
                "reward": r["eval_reward"],
            }
            for k, r in enumerate(records)
        ]
    table = evaluation_table(runs, pd.DataFrame(rows), headline_points=3).iloc[0]
    assert table["runs"] == 2 and table["evaluations_per_run"] == 5
    assert table["greedy_s"] == pytest.approx(2.0) and table["sampled_s"] == pytest.approx(10.0)
    assert table["checkpoint_sd"] == pytest.approx(0.1)  # sd of 0.4, 0.5, 0.6
    assert table["checkpoint_se"] == pytest.approx(0.1 / 3**0.5)
    assert table["seed_sd"] == pytest.approx(0.01 / 2**0.5)  # headlines 0.50 and 0.51
    assert table["problems"] == 500
    assert table["problems_se"] == pytest.approx((0.505 * 0.495 / 500) ** 0.5)
