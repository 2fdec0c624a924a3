"""``doctor --plan`` (harness/capacity.py): the capacity plan of the GPU check's setting
against what that check measured (leaderboards/gpu_check.md), the plan's FLOPs against the
pre-flight estimate's, its scaling over GPUs, and the command offline, with bad input."""

from __future__ import annotations

import contextlib
import io

import pytest
from test_doctor import doctor

from harness.capacity import (
    GENERATION_EFFICIENCY,
    GPU_CHECK,
    GPUS,
    TRAIN_EFFICIENCY,
    Workload,
    capacity_plan,
    gpu_check_comparison,
    gpu_check_workload,
    gpus_needed,
)
from harness.cli import build_parser, main
from zoo.core.config import ConfigError
from zoo.run.plan import RunPlan
from zoo.run.run_config import RunConfig


def test_the_gpu_check_setting_against_its_measurement():
    c = gpu_check_comparison()
    # Circular by construction (the efficiency is that step's): 0.607 s back within 1%
    assert c.predicted_step_s == pytest.approx(c.measured_step_s, rel=0.01)
    # The plan counts the step's FLOPs as the check did: 275.4 TFLOP/s x 0.607 s, within
    # the rounding of those two published figures (1%)
    assert c.ledger_flops == pytest.approx(c.measured_flops, rel=0.01)
    assert c.ledger_flops == pytest.approx(1.6726e14, rel=1e-3)
    # Not circular: the memory estimate, a rough upper estimate, holds the measured peak
    # (31.9 GiB) and is within 1.5x of it (45.2 GiB: the activations are over-counted)
    assert c.measured_memory_gib <= c.trainer_memory_gib <= 1.5 * c.measured_memory_gib
    # and the float32 weights, gradients and AdamW moments alone (16 bytes a parameter,
    # which the trainer must hold) are below the measured peak
    assert c.static_memory_gib == pytest.approx(25.6, abs=0.1)
    assert c.static_memory_gib < c.measured_memory_gib


def test_the_default_efficiencies_are_the_gpu_checks():
    assert abs(TRAIN_EFFICIENCY - 0.278) < 5e-4  # 27.8% of 989.4 TFLOP/s
    # generation at that efficiency gives back 8,599 new tokens/s for its 256 sequences
    g = GPU_CHECK
    work = Workload(
        shape=gpu_check_workload().shape,
        sequences=g["gen_sequences"],
        prompt=g["gen_prompt_tokens"],
        response=g["gen_new_tokens"],
        max_len=384,
        micro_batch=4,
    )
    seconds = capacity_plan(work).generation_seconds
    assert g["gen_sequences"] * g["gen_new_tokens"] / seconds == pytest.approx(8_599, rel=1e-9)
    assert 0.05 < GENERATION_EFFICIENCY < 0.1  # ~8%: decoding is memory-bound


@pytest.mark.parametrize("algorithm", ["grpo", "remax", "ppo", "dapo"])
def test_the_plans_flops_are_the_preflight_estimates(algorithm):
    run = RunPlan.resolve(RunConfig.from_flat(algorithm=algorithm, model="qwen3-0.6b"), spec=False)
    work = Workload.of_plan(run)
    flops = work.phase_flops()
    critic = flops.pop("critic", 0.0)  # (the pre-flight estimate leaves a critic out)
    assert sum(flops.values()) == pytest.approx(run.with_estimate().step.flops, rel=1e-12)
    assert (critic > 0) == (algorithm == "ppo")
    assert (flops["reference"] > 0) == run.algorithm.needs_reference


def test_more_gpus_split_the_trainer_and_the_time():
    work = gpu_check_workload()
    one, eight = capacity_plan(work, 1), capacity_plan(work, 8, "h100")
    assert eight.train_seconds == pytest.approx(one.train_seconds / 8)  # linear: assumed
    assert eight.memory.optimizer == pytest.approx(one.memory.optimizer / 8)
    assert eight.memory.activations == one.memory.activations  # not split
    a100 = capacity_plan(work, 1, "a100")
    assert a100.train_seconds == pytest.approx(one.train_seconds * 989.4 / 312)
    assert gpus_needed(work, "h200") == 1
    with pytest.raises(ConfigError, match=">= 1"):
        capacity_plan(work, 0)
    with pytest.raises(ConfigError, match="valid: h200, h100, a100"):
        capacity_plan(work, 1, "tpu")


def test_doctor_plan_prints_the_table_offline_without_weights(monkeypatch):
    # (the tests run with HF_HUB_OFFLINE=1 and no Qwen3 weights: the shape is by name)
    monkeypatch.setenv("COLUMNS", "200")  # (the table follows the terminal's width)
    code, text = doctor("--plan", "--model", "qwen3-1.7b", "--gpus", "2", "--gpu", "h100")
    assert code == 0, text
    for word in (
        "capacity plan: 2 x H100",
        "memory per GPU",
        "fits",
        "generation",
        "training",
        "27.8% of peak",
        "upper bound on speed",
    ):
        assert word in text, (word, text)


def test_doctor_plan_that_does_not_fit_says_how_many_gpus(monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    # qwen3-1.7b's default batch on an 80 GB card: micro-batch 8 does not fit, 4 does
    code, text = doctor("--plan", "--model", "qwen3-1.7b", "--env", "gsm8k", "--gpu", "h100")
    assert code == 1 and "try --micro-batch-size 4 or --gpus 3" in text, text
    code, text = doctor(
        "--plan",
        "--model",
        "qwen3-8b",
        "--gpu",
        "a100",
        "--micro-batch-size",
        "1",
        "--prompts-per-step",
        "4",
        "--max-response-len",
        "256",
    )
    assert code == 1 and "does NOT fit" in text and "try --gpus" in text, text


def test_doctor_plan_refuses_bad_input_naming_the_valid_values():
    for args, message in (
        (["--gpus", "0"], "must be >= 1, got 0"),
        (["--gpus", "two"], "a whole number of GPUs"),
        (["--gpu", "tpu"], "choose from 'h200', 'h100', 'a100'"),
    ):
        err = io.StringIO()
        with pytest.raises(SystemExit) as info, contextlib.redirect_stderr(err):
            main(["doctor", "--plan", *args])
        assert info.value.code == 2 and message in err.getvalue(), err.getvalue()
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert main(["doctor", "--gpus", "2", "--only", "disk"]) == 2
    assert "add --plan" in err.getvalue()
    choices = next(
        a.choices
        for a in build_parser()._subparsers._group_actions[0].choices["doctor"]._actions
        if a.dest == "gpu"
    )
    assert tuple(choices) == tuple(GPUS)


def test_doctor_plan_of_a_data_env_offline_assumes_its_prompts_and_says_so(tmp_path, monkeypatch):
    """gsm8k's data is not here (no network, an empty cache): the plan needs only prompt
    lengths, so it assumes them, and says so, instead of failing as a run would."""
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("COLUMNS", "200")
    code, text = doctor("--plan", "--model", "qwen3-1.7b", "--env", "gsm8k")
    assert code == 0, text
    assert "prompts of 256 tokens assumed" in text and "gsm8k's data is not here" in text
    assert "512 sequences x (256 + 512) tokens" in text
    # a config the run would refuse is still refused (the env's own config, the run's)
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert main(["doctor", "--plan", "--env", "gsm8k", "--env-set", "nope=1"]) == 2
    assert "nope" in err.getvalue()


def test_list_models_and_doctor_plan_give_one_memory_figure(tmp_path, monkeypatch):
    """The figures disagreed (72.2 against 81.9 GiB for qwen3-1.7b): each sized another
    run. Now ``list models`` sizes the run it names (GRPO on the recipe's env) with the
    plan's computation, so the plan of that run prints the same total."""
    from harness.listing import default_run, print_models

    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("COLUMNS", "300")  # (one line per row)
    listed = io.StringIO()
    with contextlib.redirect_stdout(listed):
        print_models()
    memory = listed.getvalue().split("memory in GiB")[1]  # (the table of memory by part)
    row = next(line for line in memory.splitlines() if "│ qwen3-1.7b " in line)
    minimum, total = (float(x) for x in row.split("│")[2].split("/"))
    assert "grpo, gsm8k*, 512 x 1280, mb 8, bf16 GPU" in row
    cfg = default_run("qwen3-1.7b")
    assert (cfg.run.algorithm, cfg.run.env) == ("grpo", "gsm8k")
    code, text = doctor("--plan", "--model", "qwen3-1.7b", "--env", "gsm8k")
    assert code == 0 and f"{minimum:.1f} GiB of" in text and f"{total:.1f} GiB with the" in text
    assert minimum == pytest.approx(81.92, abs=0.01)
