"""A many-to-one board end to end, on synthetic run folders with known effects (no
training): the analysis writes each row's verdict against the baseline, the controls'
checks, the budget and step-matched view, and report.md opens with the board's sentence
and its verdict table before anything else."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import harness.analysis
from harness.analysis import write_analysis
from harness.board import new_design
from harness.controls import control_configs
from zoo.run.run_config import RunConfig
from zoo.services.ledger import PHASES

STEPS, EVAL_EVERY, SEEDS = 8, 1, 14
DELTA = 0.02
EFFECTS = {
    "grpo": 0.0,
    "dapo": 2 * DELTA,  # better
    "gspo": 0.0,  # equal
    "cispo": -DELTA / 4,  # slightly worse: within delta
    "grpo@twin": 0.0,
    "grpo@half_lr": -1.5 * DELTA,
    "grpo@quarter_lr": -3 * DELTA,
}
UPDATES = {"dapo": 5}  # optimizer steps per loop step (the others: 4)


def write_run(out: Path, row: str, seed: int, rng: np.random.Generator, base: float) -> None:
    """One run folder: a reward that climbs to ``base + effect`` by half the budget and
    then flattens (dapo keeps climbing), with noise of 0.01 per checkpoint."""
    run_dir = out / "runs" / f"{row}__running_sum__seed{seed}"
    run_dir.mkdir(parents=True)
    plugin = row.split("@")[0]
    run = {
        "algorithm": plugin,
        "variant": row if "@" in row else "",
        "env": "running_sum",
        "seed": seed,
        "steps": STEPS,
        "eval_every": EVAL_EVERY,
        "mini_batches": 4,
        "epochs": 1,
    }
    config = {
        "run": run,
        "git": {"commit": "abc1234", "dirty": False},
        "machine": {"cpu": "test cpu"},
    }
    (run_dir / "config.json").write_text(json.dumps(config))
    records = []
    for step in range(STEPS + 1):
        record: dict = {"step": step, "samples": 64 * step, "flops": 1e9 * step, "seconds": step}
        if step > 0:
            record.update(
                {
                    "reward_mean": 0.05 + 0.01 * step,
                    "updates": UPDATES.get(row, 4),
                    "informative_group_frac": 0.5,
                }
            )
            for p in PHASES:
                record.update(
                    {f"{p}_flops": 1e9 / len(PHASES), f"{p}_seconds": 0.1, f"{p}_tokens": 100}
                )
        rise = min(step, STEPS // 2) / (STEPS // 2) if row != "dapo" else step / STEPS
        record["eval_reward"] = 0.3 + (0.1 + EFFECTS[row]) * rise + base * (step > 0)
        record["eval_reward"] += rng.normal(0, 0.01) * (step > 0)
        records.append(record)
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


@pytest.fixture(scope="module")
def board(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("board")
    _, controls = control_configs([RunConfig.from_flat(algorithm="grpo")], "grpo")
    rng = np.random.default_rng(0)
    runs = {}
    for seed in range(SEEDS):
        base = rng.normal(0, 0.03)  # what a seed shares across rows: cancels in pairs
        for row in EFFECTS:
            write_run(out, row, seed, rng, base)
            runs[f"{row}__running_sum__seed{seed}"] = {}
    machine = {"cpu": "test", "cores": 1, "memory_gib": 1, "torch_threads": 1}
    manifest = {
        "command": "python -m harness compare (synthetic)",
        "created": "today",
        "versions": {"forge-zoo": "test"},
        "runs": runs,
        "controls": controls,
        "design": new_design("grpo", delta=DELTA),
        "machine": machine,
    }
    (out / "experiment.json").write_text(json.dumps(manifest))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(harness.analysis, "FIT_BOOTSTRAP_REPS", 5)
        write_analysis(out)
    return out


def test_each_row_gets_its_verdict_against_the_baseline(board: Path):
    v = pd.read_csv(board / "tables" / "verdicts.csv").set_index("algorithm")
    assert v.loc["grpo", "verdict_text"] == "baseline"
    assert v.loc["dapo", "verdict"] == "better"
    assert v.loc["gspo", "verdict"] == "equivalent"
    assert v.loc["cispo", "verdict"] in ("equivalent", "worse")
    assert v.loc["grpo@quarter_lr", "verdict"] == "worse"
    family = v[v.role == "algorithm"]
    assert set(family.index) == {"dapo", "gspo", "cispo"}  # controls judged, not counted
    assert family.level.iloc[0] == pytest.approx(0.05 / 3)
    assert (family.mdd > 0).all() and family.mdd.max() < DELTA  # 14 seeds resolve delta
    assert set(v.commits) == {"abc1234"} and set(v.machines) == {"test cpu"}
    # dapo climbs to the end; the others flatten at half the budget
    assert v.loc["dapo", "still_rising"] and not v.loc["gspo", "still_rising"]
    # dapo takes 5 optimizer steps a loop step, the rest 4: at equal steps its lead shrinks
    assert v.loc["dapo", "difference_at_steps"] < v.loc["dapo", "difference"]
    assert v.matched_steps.iloc[0] == 4 * STEPS


def test_the_controls_pass_and_show_power_near_delta(board: Path):
    c = pd.read_csv(board / "tables" / "controls.csv")
    assert c[c.control == "negative"].verdict.tolist() == ["passed"]
    assert set(c[c.control == "positive"].verdict) == {"passed"}
    rule = c[c.control == "decision rule"].iloc[0]
    assert rule.verdict == "passed" and rule.false_positive_rate < 0.1


def test_the_report_opens_with_the_verdicts(board: Path):
    report = (board / "report.md").read_text()
    first = report.index("**running_sum: Most rows are equivalent to grpo within ±0.02: of 3")
    assert (
        first < report.index("## Verdicts against grpo") < report.index("## Can this board rank?")
    )
    assert report.index("## Can this board rank?") < report.index(
        "## Held-out reward against compute"
    )
    assert "every control came out as it must" in report
    assert "Every run at commit abc1234 on test cpu." in report
    assert "0.05/3 = 0.0167" in report
    assert "Kendall tau" in report and "still rising" in report
    assert "## Pairs" not in report and "tie_group" not in report  # many-to-one only
    verdict_table = report[report.index("## Verdicts against grpo") : report.index("## Can this")]
    rows = [
        line.split("|")[2].strip()
        for line in verdict_table.splitlines()
        if line.startswith("| running_sum")
    ]
    assert rows[0] == "dapo"  # sorted by headline
    assert (board / "plots" / "reward_vs_flops.png").stat().st_size > 0


def test_resume_refuses_runs_of_another_commit_or_cpu(tmp_path: Path):
    from harness.experiment import check_one_provenance
    from zoo.core.config import ConfigError
    from zoo.run.runlog import cpu_model, git_commit

    runs = tmp_path / "runs"
    (runs / "grpo__running_sum__seed0").mkdir(parents=True)
    here = {"git": git_commit(), "machine": {"cpu": cpu_model()}}
    config = runs / "grpo__running_sum__seed0" / "config.json"
    config.write_text(json.dumps(here))
    check_one_provenance(runs)  # the same code on the same CPU: fine
    config.write_text(json.dumps({**here, "git": {"commit": "0" * 40, "dirty": False}}))
    with pytest.raises(ConfigError, match="grpo__running_sum__seed0 was made under other"):
        check_one_provenance(runs)
    config.write_text(json.dumps({**here, "machine": {"cpu": "Imaginary CPU 9000"}}))
    with pytest.raises(ConfigError, match="made on Imaginary CPU 9000"):
        check_one_provenance(runs)


@pytest.mark.slow  # ~1-2 minutes: 6 short runs
def test_compare_resolve_runs_a_pilot_then_the_seeds_its_plan_asks_for(tmp_path: Path):
    from harness_cli import run_harness

    small = [
        "--budget",
        "2.5e10",
        "--prompts-per-step",
        "16",
        "--eval-points",
        "3",
        "--eval-samples",
        "0",
        "--quiet",
    ]
    result = run_harness(
        "compare",
        "grpo",
        "dapo",
        "--seeds",
        "2",
        "--resolve",
        "0.3",
        "--max-seeds",
        "3",
        *small,
        "--out",
        "exp",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    manifest = json.loads((tmp_path / "exp" / "experiment.json").read_text())
    plan = manifest["power_plan"]
    assert plan["pilot_seeds"] == 2 and 2 <= plan["seeds"] <= 3 and plan["delta"] == 0.3
    assert manifest["design"]["delta"] == 0.3 and manifest["design"]["baseline"] == "grpo"
    runs = sorted(p.name for p in (tmp_path / "exp" / "runs").iterdir())
    assert len(runs) == 2 * plan["seeds"]
    assert (
        "Seeds from a power plan: a pilot of 2 seeds"
        in (tmp_path / "exp" / "report.md").read_text()
    )
    # the plan is re-derived from the same pilot on --resume: nothing more runs
    flags = ["--seeds", "2", "--resolve", "0.3", "--max-seeds", "3", *small, "--out", "exp"]
    again = run_harness("compare", "grpo", "dapo", *flags, "--resume", cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "0 runs done this time" in again.stdout
