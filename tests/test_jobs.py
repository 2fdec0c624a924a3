"""`compare --jobs N`: runs at once in worker processes, with the numbers of one by one."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pandas as pd
import pytest
from harness_cli import run_harness

from harness.jobs import last_record, worker_slots
from zoo.core.config import ConfigError
from zoo.run.run_config import RunConfig
from zoo.run.runlog import is_timing_key


def test_cpu_workers_get_disjoint_cores():
    cores = sorted(os.sched_getaffinity(0))
    slots = worker_slots([RunConfig(device="cpu")], len(cores))
    assigned = [s["FORGE_ZOO_CORES"] for s in slots]
    assert sorted(int(c) for c in assigned) == cores  # one core each, none shared
    over = worker_slots([RunConfig(device="cpu")], 2 * len(cores))
    assert len(over) == 2 * len(cores)  # more jobs than cores: each still gets one


def test_a_monarch_placement_is_refused():
    with pytest.raises(ConfigError, match="placement"):
        worker_slots([RunConfig(placement="monarch")], 2)


def test_last_record_skips_a_line_being_written(tmp_path: Path):
    assert last_record(tmp_path) is None
    (tmp_path / "metrics.jsonl").write_text('{"step": 0}\n{"step": 1}\n{"step": 2, "rew')
    assert last_record(tmp_path) == {"step": 1}


def test_jobs_below_one_exit_2(tmp_path: Path):
    result = run_harness("compare", "grpo", "--jobs", "0", cwd=tmp_path, timeout=120)
    assert result.returncode == 2 and "--jobs must be >= 1" in result.stderr


SMALL = ["--prompts-per-step", "16", "--eval-points", "2", "--eval-samples", "0",
         "--checkpoint-every", "0", "--budget", "2.5e10", "--seeds", "2", "--quiet"]  # fmt: skip


def untimed(path: Path) -> list[dict]:
    records = [json.loads(x) for x in path.read_text().splitlines()]
    return [{k: v for k, v in r.items() if not is_timing_key(k)} for r in records]


@pytest.mark.slow  # ~2.5 minutes: the same 4 tiny runs twice
def test_two_jobs_give_the_numbers_of_one(tiny_model_path, tmp_path: Path):
    seconds = {}
    for jobs in (1, 2):
        start = time.perf_counter()
        result = run_harness("compare", "grpo", "dapo", *SMALL, "--jobs", str(jobs),
                             "--out", f"j{jobs}", cwd=tmp_path)  # fmt: skip
        seconds[jobs] = time.perf_counter() - start
        assert result.returncode == 0, result.stderr[-3000:]
    runs = sorted(p.name for p in (tmp_path / "j1" / "runs").iterdir())
    assert runs == sorted(p.name for p in (tmp_path / "j2" / "runs").iterdir())
    assert len(runs) == 4
    for name in runs:
        one, two = (untimed(tmp_path / f"j{j}" / "runs" / name / "metrics.jsonl") for j in (1, 2))
        assert one == two, name
    summary = [pd.read_csv(tmp_path / f"j{j}" / "tables" / "summary.csv") for j in (1, 2)]
    pd.testing.assert_frame_equal(summary[0], summary[1])
    print(f"compare of 4 tiny runs: --jobs 1 {seconds[1]:.0f} s, --jobs 2 {seconds[2]:.0f} s")
