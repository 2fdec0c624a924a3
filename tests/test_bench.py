"""`harness bench` runs every benchmark on tiny settings and writes its tables and plots.
These check that the benchmarks work, not how fast anything is (speed claims live in
leaderboards/performance.md, produced by `python -m harness bench`)."""

from __future__ import annotations

import pytest
from harness_cli import run_harness


def test_an_unknown_benchmark_is_refused_with_the_valid_names(tmp_path):
    result = run_harness(
        "bench", "--only", "nope", "--out", str(tmp_path), cwd=tmp_path, timeout=120
    )
    assert result.returncode == 2
    assert "rl_step" in result.stderr and "sandbox" in result.stderr


@pytest.mark.slow  # ~10 s: two benchmarks end to end
def test_utilisation_and_sandbox_benchmarks_write_their_tables(tmp_path, tiny_model_path):
    (tmp_path / "gpu_check.md").write_text("## GPU check\n\nkept verbatim\n")
    result = run_harness(
        "bench",
        "--quick",
        "--only",
        "utilisation",
        "--only",
        "sandbox",
        "--out",
        str(tmp_path),
        cwd=tmp_path,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    report = (tmp_path / "performance.md").read_text()
    assert "## 3. Training utilisation" in report and "## 5. Sandbox executions" in report
    assert "% of peak" in report and "exec/s" in report
    assert report.rstrip().endswith("kept verbatim")  # hand-written sections survive
    assert "Measured by `" in report and "machine: " in report


@pytest.mark.slow
@pytest.mark.extra  # CI keeps the utilisation, sandbox and engine-call benchmarks
def test_every_benchmark_runs_on_tiny_settings(tmp_path, tiny_model_path):
    result = run_harness("bench", "--quick", "--out", str(tmp_path), cwd=tmp_path, timeout=1800)
    assert result.returncode == 0, result.stderr
    report = (tmp_path / "performance.md").read_text()
    for title in (
        "1. RL step throughput",
        "2. Generation",
        "3. Training utilisation",
        "4. How cost grows",
        "5. Sandbox executions",
        "6. Board runs",
        "7. Evaluation batching",
        "8. Evaluation overlapped with training",
    ):
        assert f"## {title}" in report
    for system in ("forge-zoo, local sync", "bare torch loop", "TRL GRPOTrainer"):
        assert system in report
    assert "Fitted exponents" in report
    for png in ("rl_step.png", "scaling.png"):
        data = (tmp_path / "perf" / png).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000


@pytest.mark.slow
def test_one_engine_call_for_greedy_and_sampled_evaluation_gives_the_same_tokens(tmp_path):
    from benchmarks.evaluation import evaluation_table

    (row,) = evaluation_table(tmp_path, quick=True)
    assert row["same tokens"] == "yes"
    assert row["two calls s"] > row["greedy call s"] > 0
    assert row["two calls s / one call s"] == row["two calls s"] / row["one call s"]


@pytest.mark.slow
@pytest.mark.extra  # CI keeps the utilisation, sandbox and engine-call benchmarks
def test_the_board_benchmark_splits_a_boards_run_and_prices_the_bare_loop(tmp_path):
    """benchmarks/board.py on tiny settings: each board's compare runs two runs, the second
    on the first one's engine (start-up near zero), and the row's shares and ratios are
    consistent with its seconds."""
    from benchmarks.board import board_table

    rows = board_table(tmp_path, quick=True)
    assert [r["board"].split(" (")[0] for r in rows] == ["tiny arithmetic", "running_sum testbed"]
    for r in rows:
        assert r["steps per run"] == 3
        assert r["start-up s, 2nd run"] < 0.5 * r["start-up s, 1st run"], r
        assert 0 < r["training loop share"] + r["evaluation share"] < 1, r
        assert r["bare loop s (same steps)"] > 0
        assert r["bare s / run s"] == pytest.approx(r["bare loop s (same steps)"] / r["s per run"])
        assert r["bare s / run s"] < r["bare s / training loop s"]


# The GPU machine runs TorchTitan's trainer; transformers' fallback runs in scripts/check-all.sh.
@pytest.mark.parametrize(
    "trainer", ["titan", pytest.param("hf", marks=[pytest.mark.slow, pytest.mark.extra])]
)
def test_the_gpu_check_runs_on_cpu_with_either_trainer(tmp_path, tiny_model_path, trainer):
    """benchmarks/gpu_check.py on the tiny model with tiny sizes, so that the script a lent
    GPU machine runs once has run here first: every figure it reports is there and sane."""
    import json
    import subprocess
    import sys

    from harness_cli import REPO

    out = tmp_path / "out"
    result = subprocess.run(
        [
            sys.executable,
            str(REPO / "benchmarks" / "gpu_check.py"),
            "--model",
            str(tiny_model_path),
            "--device",
            "cpu",
            "--trainer",
            trainer,
            "--batch",
            "2",
            "--micro-batch",
            "1",
            "--prompt-len",
            "8",
            "--response-len",
            "8",
            "--steps",
            "1",
            "--gen-prompts",
            "2",
            "--gen-samples",
            "2",
            "--gen-tokens",
            "4",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((out / "gpu_check.json").read_text())
    assert report["trainer_model"].startswith("torchtitan" if trainer == "titan" else "transf")
    for key in (
        "train_step_seconds_median",
        "train_tokens_per_s",
        "mfu_vs_measured_matmul",
        "weight_export_seconds_median",
        "weight_load_into_generator_seconds",
        "generate_tokens_per_s",
    ):
        assert report[key] > 0, key
    assert report["generate_new_tokens"] <= 2 * 2 * 4
    assert "| weight export |" in (out / "gpu_check.md").read_text()
    # on this CPU the trainer computes in float32 and the generator holds the weights as
    # the sync ships them, rounded to bf16: the gap is that rounding (~1e-3 nats)
    assert report["trainer_sampler_tokens"] > 0
    assert 0 < report["trainer_sampler_mismatch_logprob_mean"] < 0.05
    assert "| trainer-sampler gap, mean |" in (out / "gpu_check.md").read_text()
