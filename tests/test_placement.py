"""The Monarch placement: generator, trainer and reference model in their own processes
as Monarch actors, driven by the same loop. Synchronous mode must give the same numbers
as the local placement, and a dead service process must stop the run with a clear error,
its metrics and a checkpoint it can resume from."""

from __future__ import annotations

import json
import os
import signal
from dataclasses import replace
from pathlib import Path

import pytest
from harness_cli import run_harness
from safetensors.torch import load_file

from harness.runner import execute_run, read_metrics
from zoo.core.loop import RunConfig, build_services
from zoo.core.placement import ServiceFailure
from zoo.core.runlog import is_timing_key


def numbers(records: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if not is_timing_key(k)} for r in records]


def cli_run(tmp_path: Path, placement: str) -> Path:
    out = tmp_path / placement
    result = run_harness("run", "grpo", "--steps", "3", "--prompts-per-step", "32",
                         "--eval-every", "2", "--checkpoint-every", "1", "--placement",
                         placement, "--quiet", "--out", str(out), cwd=tmp_path)  # fmt: skip
    assert result.returncode == 0, result.stderr
    return out


def test_monarch_placement_gives_the_local_placements_numbers(tmp_path, tiny_model_path):
    """GRPO (beta > 0, so the reference runs too), 3 steps, through the CLI."""
    local, remote = cli_run(tmp_path, "local"), cli_run(tmp_path, "monarch")
    assert json.loads((remote / "config.json").read_text())["run"]["placement"] == "monarch"
    ours, theirs = read_metrics(local), read_metrics(remote)
    assert [r["step"] for r in ours] == [0, 1, 2, 3]
    assert numbers(ours) == numbers(theirs)
    # the checkpoint written through the trainer actor holds the same weights
    a = load_file(str(local / "checkpoint" / "model.safetensors"))
    b = load_file(str(remote / "checkpoint" / "model.safetensors"))
    assert sorted(a) == sorted(b) and all(a[k].equal(b[k]) for k in a)


def test_a_killed_generator_stops_the_run_and_the_run_resumes(tmp_path, tiny_model_path):
    cfg = RunConfig(algorithm="dapo", steps=3, prompts_per_step=16, eval_every=2,
                    checkpoint_every=1, placement="monarch", device="cpu")  # fmt: skip
    out = tmp_path / "run"
    services = build_services(cfg, quiet=True)
    pid = services.generator.actor.pid.call_one().get()

    def kill_after_step_one(record: dict) -> None:
        if record["step"] == 1:
            os.kill(pid, signal.SIGKILL)

    try:
        with pytest.raises(ServiceFailure, match=r"generator service failed.*--resume"):
            execute_run(cfg, out, services, command="test", on_record=kill_after_step_one)
    finally:
        services.close()
    assert [r["step"] for r in read_metrics(out)] == [0, 1]  # nothing lost, nothing partial
    resumed = build_services(cfg, quiet=True)
    try:
        history = execute_run(cfg, out, resumed, command="test", resume=True)
    finally:
        resumed.close()
    local = build_services(replace(cfg, placement="local"), quiet=True)
    uninterrupted = execute_run(replace(cfg, placement="local"), tmp_path / "local", local,
                                command="test")  # fmt: skip
    assert numbers(history) == numbers(uninterrupted)
