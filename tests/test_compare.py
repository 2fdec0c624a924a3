"""`harness compare`, `leaderboard` and `reproduce` through the CLI, on small real runs."""

from __future__ import annotations

import itertools
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from harness_cli import REPO, run_harness

from harness.fits import fit_sigmoid, sigmoid_curve
from harness.stats import iqm, stratified_bootstrap_ci
from zoo.run.runlog import is_timing_key

SMALL = ["--prompts-per-step", "16", "--eval-points", "3", "--checkpoint-every", "2"]
BUDGET = 2.5e10  # ~5 GRPO steps of 16 x 8 on the tiny model


def metrics(run_dir: Path) -> list[dict]:
    return [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]


def without_timing(records: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if not is_timing_key(k)} for r in records]


@pytest.fixture(scope="module")
def experiment(tiny_model_path, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("compare")
    result = run_harness(
        "compare",
        "grpo",
        "dapo",
        "--seeds",
        "2",
        "--budget",
        str(BUDGET),
        *SMALL,
        "--out",
        "results/exp",
        cwd=root,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (root / "compare.stdout").write_text(result.stdout)
    (root / "compare.stderr").write_text(result.stderr)
    return root / "results" / "exp"


THIRD_PARTY = re.compile(
    r"WARNING|Warning|warnings\.warn|^\[W\d|Triton|safetensors|NUMA|tqdm|it/s\]", re.M
)


def test_a_default_compare_prints_no_third_party_warnings(experiment):
    # (The tiny model generates with transformers by default: its weight-loading bar too
    # must stay off the terminal.)
    root = experiment.parents[1]
    printed = (root / "compare.stdout").read_text() + (root / "compare.stderr").read_text()
    assert THIRD_PARTY.findall(printed) == [], printed[-3000:]
    assert "Held-out" in printed or "report" in printed  # forge-zoo's own output is there


@pytest.mark.slow  # ~17 s: starts a vLLM engine in a subprocess
def test_a_vllm_run_sends_third_party_output_to_its_log(tmp_path):
    result = run_harness(
        "run",
        "grpo",
        "--generator",
        "vllm",
        "--steps",
        "1",
        "--prompts-per-step",
        "4",
        "--eval-points",
        "1",
        "--eval-samples",
        "0",
        "--out",
        "run",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert THIRD_PARTY.findall(result.stdout + result.stderr) == [], result.stderr[-3000:]
    # They went to the run's log instead (vLLM's, Python warnings, C++ ones).
    log = (tmp_path / "run" / "third_party.log").read_text()
    assert "WARNING vllm" in log and "py.warnings" in log


def test_compare_writes_runs_tables_plots_and_report(experiment):
    runs = sorted(p.name for p in (experiment / "runs").iterdir())
    assert runs == [f"{a}__arithmetic__seed{s}" for a in ("dapo", "grpo") for s in (0, 1)]
    for name in ("reward_at_checkpoints", "summary", "verdicts", "throughput", "off_policy"):
        assert (experiment / "tables" / f"{name}.csv").stat().st_size > 0
        assert "|" in (experiment / "tables" / f"{name}.md").read_text()
    for name in ("reward_vs_flops", "reward_vs_seconds", "throughput"):
        png = (experiment / "plots" / f"{name}.png").read_bytes()
        assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 5000
    report = (experiment / "report.md").read_text()
    assert "python -m harness compare grpo dapo" in report and "torch" in report

    import pandas as pd

    table = pd.read_csv(experiment / "tables" / "reward_at_checkpoints.csv")
    assert sorted(table.algorithm.unique()) == ["dapo", "grpo"]
    for _, g in table.groupby("algorithm"):
        assert list(g.point) == [0, 1, 2, 3] and (g.seeds == 2).all()
        assert (g.ci_low <= g.reward_mean + 1e-12).all() and (
            g.reward_mean <= g.ci_high + 1e-12
        ).all()
        # samples only at the last 3 evaluations (the default sampled_eval_points)
        assert list(g.pass_at_8.notna()) == [False, True, True, True]
        sampled = g[g.pass_at_8.notna()]
        assert (
            (sampled.pass_at_1 <= sampled.pass_at_4) & (sampled.pass_at_4 <= sampled.pass_at_8)
        ).all()
    summary = pd.read_csv(experiment / "tables" / "summary.csv")
    columns = {
        "per_seed",
        "headline_mean",
        "ci_low",
        "ci_high",
        "auc_mean",
        "pass_at_1",
        "pass_at_8",
        "fit_A",
        "fit_C_mid",
        "fit_note",
    }
    assert columns <= set(summary)
    points = table.groupby("algorithm").point.max().min()
    for r in summary.itertuples():  # the headline: the mean over the last 3 checkpoints
        runs = pd.read_csv(experiment / "tables" / "reward_at_checkpoints.csv")
        tail = runs[(runs.algorithm == r.algorithm) & (runs.point > points - 3)]
        assert r.headline_mean == pytest.approx(tail.reward_mean.mean())
        assert len(r.per_seed.split()) == r.seeds == 2
        assert r.fit_A != r.fit_A or r.fit_identified  # A is blank unless identified
    # many-to-one: dapo against grpo (the first algorithm), paired over both seeds
    verdicts = pd.read_csv(experiment / "tables" / "verdicts.csv").set_index("algorithm")
    assert verdicts.loc["grpo", "role"] == "baseline" and verdicts.loc["dapo", "seeds"] == 2
    assert verdicts.loc["dapo", "verdict"] in ("better", "worse", "equivalent", "unresolved")
    assert not (experiment / "tables" / "pairs.csv").exists()  # only with --pairs all
    assert "Headline, fixed before the runs" in report and "## Verdicts against grpo" in report


def test_the_report_says_where_the_wall_time_went(experiment):
    """Every run records how long its services took to build; the report splits each row's
    wall time into start-up, the loop's phases, evaluation and the rest, none negative
    (a negative rest would mean two timers counted the same seconds)."""
    import pandas as pd

    startups = [
        json.loads((run / "complete.json").read_text())["startup_seconds"]
        for run in sorted((experiment / "runs").iterdir())
    ]
    assert all(s > 0 for s in startups)
    # compare starts the generation engine once and reuses it: later runs start faster
    assert min(startups) < 0.5 * max(startups), startups
    table = pd.read_csv(experiment / "tables" / "wall_time.csv")
    assert sorted(table.algorithm) == ["dapo", "grpo"] and (table.runs == 2).all()
    parts = [
        "startup",
        "generate",
        "score",
        "old_logprobs",
        "reference",
        "train",
        "sync",
        "step_other",
        "evaluation",
        "checkpoint_and_io",
    ]
    assert (table[parts] >= 0).all().all(), table.to_string()
    assert (table[["generate", "train", "evaluation"]] > 0).all().all()
    assert table[parts].sum(axis=1).to_numpy() == pytest.approx(table.wall.to_numpy())
    assert "## Where the wall time went" in (experiment / "report.md").read_text()


def test_matched_budgets_stop_within_one_step_of_each_other(experiment):
    finals, step_flops = [], []
    for run_dir in (experiment / "runs").iterdir():
        records = metrics(run_dir)
        flops = [r["flops"] for r in records]
        finals.append(flops[-1])
        step_flops.append(max(b - a for a, b in itertools.pairwise(flops)))
        assert flops[-2] < BUDGET <= flops[-1]  # stops at the budget, not at a step count
        evals = [r for r in records if "eval_reward" in r]
        assert len(evals) == 4  # step 0 and the 3 budget points
    assert max(finals) - min(finals) <= max(step_flops)


def test_sigmoid_fit_recovers_known_parameters():
    compute = np.geomspace(1e11, 1e14, 16)
    reward = sigmoid_curve(compute, 0.2, 0.75, 1.4, 3e12)
    fit = fit_sigmoid(compute, reward, r0=0.2)
    assert fit.converged
    assert abs(fit.a - 0.75) < 0.01 and abs(fit.b - 1.4) / 1.4 < 0.05
    assert abs(np.log(fit.c_mid / 3e12)) < 0.05
    noisy = reward + np.random.default_rng(0).normal(0, 0.005, reward.shape)
    assert abs(fit_sigmoid(compute, noisy, r0=0.2).a - 0.75) < 0.03
    flat = fit_sigmoid(compute[:2], reward[:2], r0=0.2)
    assert not flat.converged and "fewer than 3" in flat.note


def test_bootstrap_interval_covers_the_truth_and_narrows_with_more_seeds():
    rng = np.random.default_rng(1)
    truth = 0.5  # IQM of a symmetric distribution centred on 0.5
    covered, widths = 0, {}
    for n in (5, 40):
        for trial in range(40):
            scores = rng.normal(truth, 0.1, n)
            low, high = stratified_bootstrap_ci([scores], reps=300, seed=trial)
            covered += n == 40 and low <= truth <= high
            widths.setdefault(n, []).append(high - low)
    assert covered >= 32  # ~95% nominal; 80% is a safe floor for 40 trials
    assert np.mean(widths[40]) < np.mean(widths[5])
    assert stratified_bootstrap_ci([np.full(4, 0.3)]) == (0.3, 0.3)
    assert iqm(np.array([0.0, 1.0, 1.0, 1.0, 1.0, 100.0])) == pytest.approx(1.0)


@pytest.mark.slow
def test_leaderboard_rows_carry_provenance_and_reproduce_matches(experiment):
    from zoo.run.runlog import git_state

    root = experiment.parent.parent
    dirty = git_state(REPO).dirty  # a working copy being edited; CI's clone is clean
    flags = ["--allow-dirty"] if dirty else []
    result = run_harness("leaderboard", "--results", "results", "--out", "boards", *flags, cwd=root)
    assert result.returncode == 0, result.stderr[-2000:]
    rows = json.loads((root / "boards" / "leaderboard.json").read_text())
    assert all(bool(r["dirty_runs"]) == dirty for r in rows)
    assert {r["algorithm"] for r in rows} == {"grpo", "dapo"}
    for row in rows:
        assert row["command"].startswith("python -m harness compare")
        assert row["config_hash"] and row["git_commit"] is not None and row["date"]
        assert "torch" in row["versions"] and row["seeds"] == 2
    board = (root / "boards" / "tiny__arithmetic.md").read_text()
    assert "grpo" in board and "dapo" in board
    here = runlog_machine()  # the board names the setup its exact numbers need: this one
    assert f"All rows: {here['cpu']} [{here['cpu_vector_flags']}], " in board
    html = (root / "boards" / "index.html").read_text()
    assert "data:image/png;base64," in html

    grpo = next(r for r in rows if r["algorithm"] == "grpo")
    result = run_harness("reproduce", grpo["id"], "--leaderboards", "boards", cwd=root)
    assert result.returncode == 0, result.stdout + result.stderr[-2000:]
    assert result.stdout.count("MATCH") == 2
    # One of the two ran on the engine compare had started for an earlier run (its
    # start-up a fraction of the other's); reproduce builds every service afresh. Both
    # matching exactly: a reused engine (weights reset) gives a fresh process's numbers.
    runs = [experiment / "runs" / f"grpo__arithmetic__seed{s}" for s in (0, 1)]
    startups = [json.loads((r / "complete.json").read_text())["startup_seconds"] for r in runs]
    assert min(startups) < 0.5 * max(startups), startups


def test_reproduce_detects_a_tampered_result(experiment, tmp_path):
    import shutil

    run_dir = tmp_path / "run"
    shutil.copytree(experiment / "runs" / "grpo__arithmetic__seed0", run_dir)
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    record = json.loads(lines[-1])
    record["eval_reward"] += 0.01
    lines[-1] = json.dumps(record)
    (run_dir / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    result = run_harness("reproduce", str(run_dir), cwd=tmp_path)
    assert result.returncode == 1
    assert "DIFFERS" in result.stdout and "eval_reward" in result.stdout


@pytest.mark.slow  # ~15 s: a run and its reproduction
def test_reproduce_of_a_run_from_other_start_weights_names_them_and_the_way_out(
    experiment, tiny_model_path, tmp_path
):
    """A run of a tiny preset made from weights other than the shipped ones (a warm start
    built on first use on its machine, before the weights shipped) cannot be re-made from
    the shipped start: reproduce says so, naming the machine that built them and the way
    out (--model-path), and with --model-path the recorded hash is checked against it. (On
    another CPU the check is statistical, so the run comes with its sibling seed.)"""
    import shutil

    for seed in (0, 1):
        sibling = tmp_path / "exp" / "runs" / f"grpo__arithmetic__seed{seed}"
        shutil.copytree(experiment / "runs" / sibling.name, sibling)
        config = json.loads((sibling / "config.json").read_text())
        assert config["machine"]["cpu_vector_flags"] == runlog_machine()["cpu_vector_flags"]
        config["start_weights_sha256"] = "ab" * 32
        config["machine"]["cpu_vector_flags"] = "avx avx2"
        (sibling / "config.json").write_text(json.dumps(config))
    run_dir = tmp_path / "exp" / "runs" / "grpo__arithmetic__seed0"

    result = run_harness("reproduce", str(run_dir), cwd=tmp_path)
    assert result.returncode == 1
    assert "not reproducible from the shipped start weights" in result.stdout, result.stdout
    assert "sha256 abababababab" in result.stdout and "[avx avx2]" in result.stdout
    assert "--model-path" in result.stdout

    weights = tmp_path / "weights"
    shutil.copytree(tiny_model_path, weights)
    result = run_harness("reproduce", str(run_dir), "--model-path", str(weights), cwd=tmp_path)
    assert result.returncode == 1
    assert "not reproducible with this version" in result.stdout, result.stdout
    assert str(weights) in result.stdout and "sha256 abababababab" in result.stdout


@pytest.mark.slow
def test_reproduce_on_another_cpu_tests_the_row_statistically(experiment, tmp_path):
    """Runs recorded on another CPU class cannot match exactly here: `reproduce ROW_ID`
    re-runs the row's seeds and tests their headlines against the row's, naming its tests.
    The other CPU is faked by editing the grpo runs' config.json, so this machine in fact
    re-runs them bit for bit: each new headline must equal its recorded one, which checks
    that reproduce computes the headline as the leaderboard does."""
    import shutil

    from harness.reproduce import recorded_headline
    from harness.stats import row_mdd
    from zoo.run.runlog import git_state

    shutil.copytree(experiment, tmp_path / "results" / "exp")
    grpo_runs = sorted((tmp_path / "results" / "exp" / "runs").glob("grpo__*"))
    for run_dir in grpo_runs:
        config = json.loads((run_dir / "config.json").read_text())
        config["machine"].update(cpu="Imaginary CPU 9000", cpu_vector_flags="avx avx2")
        (run_dir / "config.json").write_text(json.dumps(config))
    dirty = ["--allow-dirty"] if git_state(REPO).dirty else []  # CI's clone is clean
    boards = run_harness(
        "leaderboard", "--results", "results", "--out", "boards", *dirty, cwd=tmp_path
    )
    assert boards.returncode == 0, boards.stderr[-3000:]
    board = (tmp_path / "boards" / "tiny__arithmetic.md").read_text()
    here = runlog_machine()
    assert "- Imaginary CPU 9000 [avx avx2], 2 threads: grpo (exp)" in board
    assert f"- {here['cpu']} [{here['cpu_vector_flags']}], " in board  # dapo's, told apart
    rows = json.loads((tmp_path / "boards" / "leaderboard.json").read_text())
    grpo = next(r for r in rows if r["algorithm"] == "grpo")
    recorded = [recorded_headline(tmp_path / d) for d in grpo["runs"]]
    assert " ".join(f"{v:.3f}" for v in recorded) == grpo["per_seed"]
    assert row_mdd(recorded) == pytest.approx(grpo["mdd_80"], rel=1e-9)

    result = run_harness("reproduce", grpo["id"], "--leaderboards", "boards", cwd=tmp_path)
    (tmp_path / "reproduce-row.stdout").write_text(result.stdout)
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    out = result.stdout
    assert f"statistical check of row {grpo['id']} (2 recorded seeds)" in out
    assert "the CPU class differs (made on Imaginary CPU 9000 [avx avx2]" in out
    assert "re-running seeds 0, 1 on this machine" in out and "MATCH" not in out
    assert "WARNING" not in out and "WARNING" not in result.stderr  # vLLM's went to a log
    for seed, value in enumerate(recorded):
        assert f"seed {seed}: headline {value:.4f} (recorded {value:.4f})" in out
    assert re.search(rf"^(AGREES|CONSISTENT) row {grpo['id']}$", out, re.M), out
    assert "Welch two-sample t-test at 5% (decides the exit code)" in out
    assert "difference +0.0000" in out and "p = 1;" in out
    assert "TOST equivalence test within the row's MDD 80%" in out

    # A run folder: its sibling (the other seed) completes the row; one new seed.
    seed1 = "results/exp/runs/grpo__arithmetic__seed1"
    result = run_harness("reproduce", seed1, "--seeds", "1", cwd=tmp_path)
    (tmp_path / "reproduce-run.stdout").write_text(result.stdout)
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    assert f"statistical check of run {seed1} (2 recorded seeds)" in result.stdout
    assert "re-running seed 1 on this machine" in result.stdout
    assert "two-sample t-test with the row's spread" in result.stdout
    assert "one new seed has no spread of its own" in result.stdout


def runlog_machine() -> dict:
    from zoo.run.runlog import machine

    return machine()


def test_resume_accepts_runs_recorded_before_newer_config_fields(experiment, tmp_path):
    """A run whose config.json predates fields added to RunConfig since (here: placement,
    device, generator) resumes: the missing fields take their defaults."""
    import shutil

    out = tmp_path / "exp"
    shutil.copytree(experiment, out)
    run_dir = out / "runs" / "dapo__arithmetic__seed1"
    config = json.loads((run_dir / "config.json").read_text())
    for field in ("placement", "device", "generator"):
        del config["run"][field]
    (run_dir / "config.json").write_text(json.dumps(config))
    (run_dir / "complete.json").unlink()  # unfinished: resume goes through the check
    before = metrics(run_dir)
    result = run_harness(
        "compare",
        "grpo",
        "dapo",
        "--seeds",
        "2",
        "--budget",
        str(BUDGET),
        *SMALL,
        "--resume",
        "--out",
        str(out),
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert (run_dir / "complete.json").exists()
    assert without_timing(metrics(run_dir)) == without_timing(before)

    # a run recorded with another value of a field it still has: refused, the field named
    config["run"]["sampled_eval_points"] = 0
    (run_dir / "config.json").write_text(json.dumps(config))
    (run_dir / "complete.json").unlink()
    result = run_harness(
        "compare",
        "grpo",
        "dapo",
        "--seeds",
        "2",
        "--budget",
        str(BUDGET),
        *SMALL,
        "--resume",
        "--out",
        str(out),
        cwd=tmp_path,
    )
    assert result.returncode == 2
    assert "differs from this run's in sampled_eval_points (recorded 0, now 3)" in result.stderr
    config["run"]["sampled_eval_points"] = 3

    # a run from before several updates per rollout batch would change its numbers: refused
    del config["run"]["mini_batches"]
    (run_dir / "config.json").write_text(json.dumps(config))
    result = run_harness(
        "compare",
        "grpo",
        "dapo",
        "--seeds",
        "2",
        "--budget",
        str(BUDGET),
        *SMALL,
        "--resume",
        "--out",
        str(out),
        cwd=tmp_path,
    )
    assert result.returncode == 2 and "recorded by an older forge-zoo" in result.stderr


# ~2.5 minutes. CI's resume-after-a-kill checks are the default set's
# test_checkpoint (a save killed at each stage, in process) and test_faults' killed trainer;
# this whole-compare case runs in scripts/check-all.sh.
@pytest.mark.slow
@pytest.mark.extra
def test_resume_after_a_kill_equals_an_uninterrupted_run(tiny_model_path, tmp_path):
    args = [
        "compare",
        "grpo",
        "--seeds",
        "1",
        "--budget",
        "8e10",
        "--prompts-per-step",
        "32",
        "--eval-points",
        "4",
        "--checkpoint-every",
        "2",
        "--quiet",
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO), "FORGE_ZOO_PROGRESS": "0"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness", *args, "--out", "killed"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    run_dir = tmp_path / "killed" / "runs" / "grpo__arithmetic__seed0"
    deadline = time.time() + 300
    while time.time() < deadline:  # kill once a checkpoint exists and a step came after it
        ckpt = run_dir / "checkpoint" / "checkpoint.json"
        if ckpt.exists() and (run_dir / "metrics.jsonl").exists():
            done = len((run_dir / "metrics.jsonl").read_text().splitlines()) - 1
            if done > json.loads(ckpt.read_text())["step"]:
                break
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (run_dir / "complete.json").exists(), "the run finished before it was killed"

    resumed = run_harness(*args, "--out", "killed", "--resume", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    straight = run_harness(*args, "--out", "straight", cwd=tmp_path)
    assert straight.returncode == 0, straight.stderr[-3000:]
    a = without_timing(metrics(run_dir))
    b = without_timing(metrics(tmp_path / "straight" / "runs" / "grpo__arithmetic__seed0"))
    assert a == b and len(a) > 4


def test_the_budget_in_use_is_printed_first(experiment):
    stdout = (experiment.parents[1] / "compare.stdout").read_text()
    assert stdout.splitlines()[0].startswith("budget: 2.5e+10 FLOPs per run (set by --budget")


def test_compare_steps_is_the_budget_as_in_run(tiny_model_path, tmp_path):
    """--steps means a step budget in `compare` as in `run` (it used to lose to compare's
    default FLOPs budget on the tiny presets, silently)."""
    result = run_harness(
        "compare",
        "grpo",
        "--seeds",
        "1",
        "--steps",
        "2",
        "--eval-every",
        "2",
        "--prompts-per-step",
        "8",
        "--eval-samples",
        "0",
        "--env-set",
        "eval_size=16",
        "--checkpoint-every",
        "0",
        "--quiet",
        "--out",
        "exp",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "budget: 2 steps per run (set by --steps" in result.stdout
    records = metrics(tmp_path / "exp" / "runs" / "grpo__arithmetic__seed0")
    assert [r["step"] for r in records] == [0, 1, 2]
    config = json.loads(
        (tmp_path / "exp" / "runs" / "grpo__arithmetic__seed0" / "config.json").read_text()
    )["run"]
    assert config["steps"] == 2 and config["budget_flops"] == 0


def test_help_states_each_commands_default_budget():
    def steps_help(command: str) -> str:
        wide = {**os.environ, "COLUMNS": "400"}  # (one line per option)
        out = subprocess.run(
            [sys.executable, "-m", "harness", command, "--help"],
            cwd=REPO,
            capture_output=True,
            text=True,
            env=wide,
        )
        return next(line for line in out.stdout.splitlines() if line.strip().startswith("--steps"))

    assert "default: --steps 150" in steps_help("run")
    compare = steps_help("compare")
    assert "--budget 2e+12" in compare and "4e+12 for tiny-sum" in compare
    assert "150" not in compare


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["compare", "grpo", "--steps", "2", "--budget", "1e12"], "give one budget, not --steps"),
        (["run", "grpo", "--budget", "1e12", "--budget-samples", "64"], "give one budget"),
        (["compare", "grpo", "--steps", "0"], "--steps must be > 0"),
        (["compare", "grpo", "--budget", "1e6"], "less than one step"),
        (["compare", "grpo", "nope"], "valid algorithms"),
        (["compare", "grpo", "--env", "nope"], "valid environments"),
        (["compare", "grpo", "--model", "qwen3-1.7b"], "cannot run this comparison"),
    ],
)
def test_invalid_comparisons_fail_before_any_work(tmp_path, args, message):
    result = run_harness(*args, cwd=tmp_path, timeout=120)
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert not (tmp_path / "results").exists()


def test_a_model_too_large_for_this_machine_is_refused(tmp_path):
    from zoo.models.presets import qwen3_config_dir

    big = qwen3_config_dir("qwen3-8b", tmp_path)
    result = run_harness(
        "compare", "grpo", "--model", str(big), "--budget", "1e18", cwd=tmp_path, timeout=120
    )
    assert result.returncode == 2 and "GiB" in result.stderr, result.stderr
    assert not (tmp_path / "results").exists()


def test_on_gpus_a_split_trainer_counts_its_share_of_the_memory():
    """qwen3-8b's float32 trainer state alone (~122 GiB) exceeds one H200 (141 GiB, 90% of
    it usable); split over 4 trainer processes with a GPU each, the first GPU holds a
    quarter of it plus the generator, KV cache, reference and activations. On the CPU all
    processes share the host's memory: no split."""
    from harness.experiment import check_memory
    from zoo.core.config import ConfigError
    from zoo.models.memory import memory_estimate
    from zoo.models.presets import model_shape
    from zoo.run.run_config import RunConfig

    shape = model_shape("qwen3-8b")
    h200 = 141 * 2**30
    one = RunConfig.from_flat(
        model="qwen3-8b", prompts_per_step=8, group_size=4, micro_batch_size=2
    )
    split = one.replace(distributed={"services": {"trainer": {"procs": 4}}})
    args = (shape, 32, 1280, False)
    with pytest.raises(ConfigError, match=r"'qwen3-8b' needs ~.* GiB .* this GPU has 141\.0 GiB"):
        check_memory(one, *args, device="cuda", capacity=h200)
    check_memory(split, *args, device="cuda", capacity=h200)
    with pytest.raises(ConfigError, match=r"this machine has 141\.0 GiB"):
        check_memory(split, *args, device="cpu", capacity=h200)
    whole = memory_estimate(
        shape, sequences=32, seq_len=1280, micro_batch=2, reference=False, compute_bytes=2
    )
    share = whole.trainer_split(4)
    assert share.optimizer == whole.optimizer / 4 and share.generator == whole.generator
    assert whole.minimum - share.minimum == pytest.approx(0.75 * (16 * shape.params))


def test_runs_recorded_before_mini_batches_are_refused_with_the_reason(tmp_path):
    """A committed leaderboard run predates several updates per rollout batch: this
    version would give other numbers, so reproduce says so (and names the commit) instead
    of reporting a mismatch (test_resume_accepts_... checks that --resume refuses)."""
    recorded = (
        REPO
        / "results"
        / "archive"
        / "tiny-arithmetic-builtins-predates-regime"
        / "runs"
        / "grpo__arithmetic__seed0"
    )
    result = run_harness("reproduce", str(recorded), cwd=tmp_path)
    assert result.returncode == 1
    assert "not reproducible with this version" in result.stdout
    assert "before mini_batches, epochs existed" in result.stdout
    assert json.loads((recorded / "config.json").read_text())["git"]["commit"] in result.stdout
