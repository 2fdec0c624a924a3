"""The headline command as typed: ``compare grpo dapo --model qwen3-1.7b`` runs the preset's
recipe (harness/recipes.py). On this CPU machine, offline without Qwen3 weights, it prints
its plan and stops with each reason and its fix (exit 2, nothing written); with ``--init
random --dry-run`` it prints the plan and exits 0. The recipe's numbers are held to the
capacity plan's estimate (harness/capacity.py), the same one ``doctor --plan`` prints."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io

import pytest
import torch
from harness_cli import REPO, run_harness

from harness.capacity import GPUS, Workload, capacity_plan, estimate_plan, run_steps
from harness.recipes import MICRO_BATCHES, RECIPES, plan_on, print_plan
from zoo.core.config import ConfigError
from zoo.run.run_config import RunConfig, run_defaults

pytestmark = pytest.mark.skipif(
    torch.cuda.is_available(), reason="checks what a machine without a GPU says"
)

OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}


def offline(tmp_path) -> dict[str, str]:
    """No network and empty Hugging Face caches: no Qwen3 weights, no gsm8k data."""
    return {**OFFLINE, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_CACHE": str(tmp_path / "hf")}


def test_the_headline_command_prints_its_plan_then_stops_with_the_reasons_and_fixes(tmp_path):
    result = run_harness(
        "compare",
        "grpo",
        "dapo",
        "--model",
        "qwen3-1.7b",
        cwd=tmp_path,
        env=offline(tmp_path),
        timeout=300,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    out, err = result.stdout, result.stderr
    # the plan, before the refusal: the recipe, the runs, per GPU class the memory settings
    assert "budget: 3e+17 FLOPs per run" in out and "its recipe (docs/gpu.md)" in out
    assert "plan: 6 runs" in out and "dapo__gsm8k__seed2" in out
    assert "H200 (140 GiB): micro-batch 8" in out and "H100 (75 GiB): micro-batch 4" in out
    assert "estimate, not measured" in out and "per run" in out and "h for all 6" in out
    assert "--micro-batch-size 4" in out  # the H100 advice, as the plan's own command
    # the reasons, each with its fix
    assert "cannot run this comparison" in err
    assert "no GPU" in err and "scripts/setup.sh" in err and "--dry-run" in err
    assert "no weights for qwen3-1.7b" in err and "--init random" in err
    assert not (tmp_path / "results").exists()


def test_the_headline_command_with_random_weights_as_a_dry_run_prints_the_plan(tmp_path):
    result = run_harness(
        "compare",
        "grpo",
        "dapo",
        "--model",
        "qwen3-1.7b",
        "--init",
        "random",
        "--dry-run",
        cwd=tmp_path,
        env=offline(tmp_path),
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "plan: 6 runs" in out and "micro-batch 4" in out and "A100" in out
    # still said, though not an error: this machine would not run it
    assert "cannot run it as is" in out and "no GPU" in out and "no weights" not in out
    assert not (tmp_path / "results").exists()
    # docs/gpu.md's table per GPU class is this plan's figures
    doc = (REPO / "docs" / "gpu.md").read_text()
    planned = [x for x in out.splitlines() if x.startswith("    ") and " per run, " in x]
    assert [x.split()[0] for x in planned] == ["H200", "H100", "A100"]
    for line in planned:
        gpu = line.split()[0]
        memory = line.split("micro-batch ")[1].split(", ")[1].split(" per GPU")[0]
        per_run, total = line.split("; ")[-1].split(" per run, ")
        row = next(r for r in doc.splitlines() if r.startswith(f"| {gpu} "))
        assert memory.removesuffix(" GiB") in row and per_run in row, (line, row)
        assert total.removesuffix(" for all 6") in row, (line, row)


def test_a_tiny_comparison_as_a_dry_run_lists_its_runs_and_writes_nothing(tmp_path):
    result = run_harness("compare", "grpo", "--seeds", "2", "--dry-run", cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "plan: 2 runs" in result.stdout and "grpo__arithmetic__seed1" in result.stdout
    assert "memory PASS" in result.stdout
    assert not (tmp_path / "results").exists()


def recipe_work(model: str, algorithm: str = "grpo") -> tuple:
    cfg = RunConfig.from_flat(
        algorithm=algorithm,
        model=model,
        env=RECIPES[model].env,
        budget_flops=RECIPES[model].budget_flops,
        **run_defaults(model),
    )
    run, _ = estimate_plan(cfg)
    return run, Workload.of_plan(run)


@pytest.mark.parametrize("model", list(RECIPES))
def test_each_recipe_buys_about_40_steps_of_grpo(model):
    run, work = recipe_work(model)
    steps = run_steps(run, capacity_plan(work), work)
    assert 30 <= steps <= 50, steps


def micro_batch_on(model: str, gpu: str) -> int | None:
    rows = {a: recipe_work(model, a) for a in ("grpo", "dapo")}
    runs = {a: run for a, (run, _) in rows.items()}
    works = {a: work for a, (_, work) in rows.items()}
    return plan_on(works, runs, {a: 3 for a in rows}, GPUS[gpu], None).micro_batch


def test_the_micro_batch_is_the_largest_that_fits_the_gpu():
    assert micro_batch_on("qwen3-1.7b", "h200") == 8
    assert micro_batch_on("qwen3-1.7b", "h100") == 4
    assert micro_batch_on("qwen3-0.6b", "h100") == 8
    assert micro_batch_on("qwen3-4b", "h200") == 4
    assert micro_batch_on("qwen3-8b", "h200") is None  # no micro-batch: more GPUs
    # and what is chosen is what fits: the next size up does not, on the H100
    _, work = recipe_work("qwen3-1.7b")
    sized = {
        m: capacity_plan(dataclasses.replace(work, micro_batch=m), 1, "h100").fits
        for m in MICRO_BATCHES
    }
    assert sized == {8: False, 4: True, 2: True, 1: True}


def compare_args(**given) -> argparse.Namespace:
    defaults = {
        "algorithms": ["grpo", "dapo"],
        "model": "qwen3-1.7b",
        "envs": ["gsm8k"],
        "seeds": 3,
        "dry_run": False,
        "micro_batch_given": False,
        "budget_line": "budget: 3e+17 FLOPs per run",
    }
    return argparse.Namespace(**{**defaults, **given})


def test_on_a_gpu_the_plan_is_for_that_gpu_and_its_micro_batch_is_used(monkeypatch):
    """What a machine with a GPU sees: the plan of that GPU alone, and the micro-batch that
    fits it passed back to compare. (No GPU here: detect_gpu stands in for an H100.)"""
    import harness.capacity

    h100 = dataclasses.replace(GPUS["h100"], name="NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(harness.capacity, "detect_gpu", lambda: h100)
    cfgs = [
        RunConfig.from_flat(
            algorithm=a,
            model="qwen3-1.7b",
            env="gsm8k",
            seed=s,
            init="random",
            budget_flops=3e17,
            **run_defaults("qwen3-1.7b"),
        )
        for a in ("grpo", "dapo")
        for s in range(3)
    ]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        micro = print_plan(compare_args(), cfgs, RECIPES["qwen3-1.7b"])
    assert micro == 4
    text = out.getvalue()
    assert "this machine's GPU: NVIDIA H100 80GB HBM3" in text and "H200 (" not in text
    # the user's own micro-batch is planned as given, and refused where it does not fit
    refused = pytest.raises(ConfigError, match=r"at micro-batch 8: .* smaller --micro-batch")
    with contextlib.redirect_stdout(io.StringIO()), refused:
        print_plan(
            compare_args(micro_batch_given=True),
            [c.replace(micro_batch_size=8) for c in cfgs],
            RECIPES["qwen3-1.7b"],
        )
