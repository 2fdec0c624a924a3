"""Runs pinned across commits: the same seed gives the same metrics.jsonl (timings left
out) for a short run of every built-in algorithm on the local placement and of GRPO on
the Monarch placement as when tests/golden/metrics.json was written (tests/golden_metrics.py
runs them and writes it)."""

from __future__ import annotations

import json
import re

import pytest
from golden_metrics import BUILT_INS, GOLDEN, differences, machine, produce
from harness_cli import run_harness


def test_every_built_in_algorithm_has_a_golden_run(tmp_path):
    listed = run_harness("list", "algorithms", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    built_in = re.findall(r"^(\w+)\s+\[built-in\]", listed.stdout, flags=re.MULTILINE)
    assert sorted(built_in) == sorted(BUILT_INS)
    runs = json.loads(GOLDEN.read_text())["runs"]
    assert sorted(runs) == sorted([*(f"{a}/local" for a in BUILT_INS), "grpo/monarch"])


def test_the_comparison_names_the_run_step_and_field():
    record = {"step": 1, "loss": 0.5, "response_tokens": 40, "reward_mean": 0.25}
    golden = {"grpo/local": [record]}
    moved = {"grpo/local": [{**record, "loss": 0.5001, "response_tokens": 41}]}
    assert differences(golden, moved, exact_floats=True) == [
        "grpo/local step 1 loss: golden 0.5, now 0.5001",
        "grpo/local step 1 response_tokens: golden 40, now 41",
    ]
    # on another machine only the discrete fields count
    assert differences(golden, moved, exact_floats=False) == [
        "grpo/local step 1 response_tokens: golden 40, now 41"
    ]


@pytest.mark.slow
def test_the_runs_give_the_golden_metrics(tmp_path, tiny_model_path):
    golden = json.loads(GOLDEN.read_text())
    here = machine()
    if golden["machine"] != here:
        pytest.skip(f"golden metrics from {golden['machine']}; this machine is {here}")
    found = differences(golden["runs"], produce(tmp_path), exact_floats=True)
    assert found == [], "\n".join(found)
