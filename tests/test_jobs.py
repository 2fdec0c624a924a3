"""`compare --jobs N`: runs at once in worker processes (on this machine's cores, or each
on its own group of a placement file's hosts), with the numbers of one by one."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pandas as pd
import pytest
from harness_cli import run_harness

from harness.jobs import host_groups, hosts_needed, last_record, worker_slots
from zoo.core.config import ConfigError
from zoo.placement.config import PlacementConfig, ServiceLayout
from zoo.run.run_config import RunConfig
from zoo.run.runlog import is_timing_key


def test_cpu_workers_get_disjoint_cores():
    cores = sorted(os.sched_getaffinity(0))
    slots = worker_slots([RunConfig.from_flat(device="cpu")], len(cores))
    assigned = [s.env["FORGE_ZOO_CORES"] for s in slots]
    assert sorted(int(c) for c in assigned) == cores  # one core each, none shared
    over = worker_slots([RunConfig.from_flat(device="cpu")], 2 * len(cores))
    assert len(over) == 2 * len(cores)  # more jobs than cores: each still gets one


HOSTS = [f"tcp://node{i}:22222" for i in range(5)]


def test_hosts_split_into_equal_disjoint_groups():
    assert host_groups(HOSTS[:4], 2) == [tuple(HOSTS[:2]), tuple(HOSTS[2:4])]
    assert host_groups(HOSTS[:2], 2) == [(HOSTS[0],), (HOSTS[1],)]
    assert host_groups(HOSTS, 2) == [tuple(HOSTS[:2]), tuple(HOSTS[2:4])]  # node4 idles
    assert host_groups(HOSTS, 1) == [tuple(HOSTS)]
    with pytest.raises(ConfigError, match=r"--jobs 3 .* lists 2 hosts: use --jobs 2 or fewer"):
        host_groups(HOSTS[:2], 3)
    with pytest.raises(
        ConfigError,
        match=r"5 hosts into groups of 1, but one run .* needs 2 "
        r"hosts .* use --jobs 2 or fewer",
    ):
        host_groups(HOSTS, 3, per_run=2)


def test_a_run_needs_more_than_one_host_only_for_gpus_one_host_lacks():
    cpu = PlacementConfig(generator=ServiceLayout(num_replicas=2), hosts=HOSTS[:4])
    assert hosts_needed(cpu, gpus_per_host=0) == 1  # services without GPUs share a host
    gpus = PlacementConfig(
        trainer=ServiceLayout(procs=4, with_gpus=True),
        generator=ServiceLayout(procs=2, num_replicas=2, with_gpus=True),
        hosts=HOSTS[:4],
    )
    assert hosts_needed(gpus, gpus_per_host=8) == 1  # 4 + 2 x 2 GPUs on one host
    # on 2 hosts replica 1 joins the trainer on host 0 (1 + 1 mod 2): 6 > 4
    assert hosts_needed(gpus, gpus_per_host=4) == 3
    assert hosts_needed(gpus, gpus_per_host=3) == 5  # no number of the 4 hosts fits


def test_a_monarch_placement_spreads_over_its_hosts_or_is_refused():
    placed = PlacementConfig.from_dict({"hosts": HOSTS[:4]}, gpus_available=0).to_dict()
    slots = worker_slots([RunConfig.from_flat(placement="monarch", distributed=placed)], 2)
    assert [s.hosts for s in slots] == [tuple(HOSTS[:2]), tuple(HOSTS[2:4])]
    assert all(not s.env for s in slots)  # the hosts do the work: no cores or GPU here
    with pytest.raises(ConfigError, match="lists none; add hosts"):
        worker_slots([RunConfig.from_flat(placement="monarch")], 2)


def test_more_jobs_than_hosts_exit_2_naming_the_numbers(tmp_path: Path):
    (tmp_path / "hosts.yaml").write_text(f"hosts: [{', '.join(HOSTS[:2])}]\n")
    result = run_harness(
        "compare", "grpo", "--jobs", "3", "--config", "hosts.yaml", cwd=tmp_path, timeout=300
    )
    assert result.returncode == 2, result.stderr[-3000:]
    assert "--jobs 3 runs 3 runs at once" in result.stderr and "lists 2 hosts" in result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "results").exists()


def test_last_record_skips_a_line_being_written(tmp_path: Path):
    assert last_record(tmp_path) is None
    (tmp_path / "metrics.jsonl").write_text('{"step": 0}\n{"step": 1}\n{"step": 2, "rew')
    assert last_record(tmp_path) == {"step": 1}


PARENT = """
import multiprocessing, os, sys, time
from concurrent.futures import ProcessPoolExecutor
from harness.jobs import die_with_parent

if __name__ == "__main__":
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(1, mp_context=context, initializer=die_with_parent,
                             initargs=(os.getpid(),)) as pool:
        print(pool.submit(os.getpid).result(), flush=True)  # the worker, now waiting
        time.sleep(600)
"""


def test_a_worker_dies_when_its_compare_process_is_killed(tmp_path: Path):
    """SIGKILL gives the parent no chance to stop its workers: the kernel must (else a
    worker would go on writing a run folder that a --resume writes too)."""
    import signal
    import subprocess
    import sys

    script = tmp_path / "parent.py"
    script.write_text(PARENT)
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    worker = int(parent.stdout.readline())
    os.kill(worker, 0)  # alive
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.kill(worker, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    os.kill(worker, signal.SIGKILL)
    pytest.fail(f"worker {worker} outlived its killed parent by 30 s")


def test_jobs_below_one_exit_2(tmp_path: Path):
    result = run_harness("compare", "grpo", "--jobs", "0", cwd=tmp_path, timeout=120)
    assert result.returncode == 2 and "--jobs must be >= 1" in result.stderr


SMALL = [
    "--prompts-per-step",
    "16",
    "--eval-points",
    "2",
    "--eval-samples",
    "0",
    "--checkpoint-every",
    "0",
    "--budget",
    "2.5e10",
    "--seeds",
    "2",
    "--quiet",
]


def untimed(path: Path) -> list[dict]:
    records = [json.loads(x) for x in path.read_text().splitlines()]
    return [{k: v for k, v in r.items() if not is_timing_key(k)} for r in records]


@pytest.mark.slow  # ~2.5 minutes: the same 4 tiny runs twice
def test_two_jobs_give_the_numbers_of_one(tiny_model_path, tmp_path: Path):
    seconds = {}
    for jobs in (1, 2):
        start = time.perf_counter()
        result = run_harness(
            "compare",
            "grpo",
            "dapo",
            *SMALL,
            "--jobs",
            str(jobs),
            "--out",
            f"j{jobs}",
            cwd=tmp_path,
        )
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


ON_HOSTS = [
    "--prompts-per-step",
    "8",
    "--eval-points",
    "2",
    "--eval-samples",
    "0",
    "--env-set",
    "eval_size=20",
    "--checkpoint-every",
    "0",
    "--budget",
    "4e9",
    "--set",
    "beta=0",
    "--seeds",
    "2",
    "--quiet",
]
"""Two steps per run, a short held-out set, no reference model (beta 0): each run starts
its trainer and generator processes on its host(s)."""


@pytest.mark.slow  # 4 tiny runs on two stand-in hosts: ~4 minutes on 2 busy cores
@pytest.mark.extra  # CI keeps --jobs 2 locally; two hosts: test_placement's replicas test
def test_two_jobs_on_two_hosts_give_the_numbers_of_one(tiny_model_path, tmp_path: Path, two_hosts):
    """A placement file with two hosts (local Monarch workers standing in): with --jobs 2
    each worker takes one host and places all of its runs' services there; with --jobs 1
    each run spreads over both, as the file says. Same metrics either way; each session
    records its hosts."""
    addresses, _ = two_hosts
    (tmp_path / "hosts.yaml").write_text(f"hosts: [{', '.join(addresses)}]\n")
    seconds = {}
    for jobs in (1, 2):
        start = time.perf_counter()
        result = run_harness(
            "compare",
            "grpo",
            *ON_HOSTS,
            "--jobs",
            str(jobs),
            "--config",
            "hosts.yaml",
            "--out",
            f"j{jobs}",
            cwd=tmp_path,
        )
        seconds[jobs] = time.perf_counter() - start
        assert result.returncode == 0, result.stderr[-3000:]
    runs = sorted(p.name for p in (tmp_path / "j1" / "runs").iterdir())
    assert runs == ["grpo__arithmetic__seed0", "grpo__arithmetic__seed1"]
    used = set()
    for name in runs:
        one, two = (tmp_path / f"j{j}" / "runs" / name for j in (1, 2))
        assert untimed(one / "metrics.jsonl") == untimed(two / "metrics.jsonl"), name
        assert len(untimed(one / "metrics.jsonl")) >= 3  # the start and two steps or more
        recorded = [json.loads((d / "config.json").read_text())["run"] for d in (one, two)]
        assert recorded[0] == recorded[1]  # the file as given: resumable on any group
        assert recorded[0]["distributed"]["hosts"] == addresses
        sessions = [json.loads(x) for x in (two / "sessions.jsonl").read_text().splitlines()]
        assert len(sessions) == 1 and len(sessions[0]["hosts"]) == 1  # its group: one host
        used.update(sessions[0]["hosts"])
        assert json.loads((one / "sessions.jsonl").read_text())["hosts"] == addresses
    assert used == set(addresses)  # the two workers ran on different hosts
    summary = [pd.read_csv(tmp_path / f"j{j}" / "tables" / "summary.csv") for j in (1, 2)]
    pd.testing.assert_frame_equal(summary[0], summary[1])
    print(
        f"compare of 2 tiny runs on 2 hosts: --jobs 1 {seconds[1]:.0f} s, "
        f"--jobs 2 {seconds[2]:.0f} s"
    )
