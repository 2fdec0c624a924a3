"""`compare --jobs N`: an experiment's independent runs, N at a time, each in a worker
process of its own.

On the CPU the machine's cores are split between the workers (each pinned to its own
cores, with that many torch and OpenMP threads); on GPUs each worker gets one GPU
(CUDA_VISIBLE_DEVICES). With a placement file that lists Monarch hosts, the hosts are
split into N disjoint groups instead, one per worker: the worker's runs place their
services on its group only (the file's placement rule over the group's hosts, e.g. every
service on one host when a group has one), so runs never share a host; the loop of each
run stays in its worker on this machine. A worker keeps its generation engine from one
run to the next, as the one-process path does (on the local placement). Runs seed
everything per run and per request, so a run's numbers do not depend on which worker or
hosts ran it or on what ran beside it: the tables equal those of `--jobs 1`
(tests/test_jobs.py checks it). Each run writes its own folder and checkpoints, so
`--resume` continues whatever a killed experiment left, one by one or concurrently, on
any group. The parent follows the runs by reading their metrics.jsonl; a worker dies with
it (on Linux), so a killed compare leaves no run training unwatched.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import sys
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, field, replace
from pathlib import Path

from rich.progress import Progress

from zoo.core.config import ConfigError
from zoo.placement.config import PlacementConfig
from zoo.run.progress import add_run_task, update_run_task
from zoo.run.run_config import RunConfig

POLL_SECONDS = 1.0
PR_SET_PDEATHSIG = 1
"""prctl option (linux/prctl.h): the signal a process gets when its parent dies."""


@dataclass(frozen=True)
class Slot:
    """What one worker process gets for all of its runs."""

    env: dict[str, str] = field(default_factory=dict)
    """Set in the worker's environment: its cores (FORGE_ZOO_CORES) or its GPU."""
    hosts: tuple[str, ...] = ()
    """Its group of the placement file's Monarch hosts (empty: no hosts in the file)."""


def hosts_needed(layout: PlacementConfig, gpus_per_host: int) -> int:
    """The fewest hosts one run of ``layout`` can be placed on. Any number of services can
    share a host, except that the GPU processes the file's rule puts on one host
    (``PlacementConfig.host_index`` over k hosts) must fit its GPUs; hosts are taken to
    have ``gpus_per_host`` each, the figure the file's own check uses (this machine's).
    Returns ``len(layout.hosts) + 1`` when no number of the file's hosts fits."""
    most = max(len(layout.hosts), 1)
    for count in range(1, most + 1):
        placed = replace(layout, hosts=layout.hosts[:count] or [""])
        on_host = [0] * count
        for name in ("trainer", "reference", "generator", "scorer"):
            service = getattr(layout, name)
            if not service.with_gpus or service.procs == 0:
                continue
            replicas = service.num_replicas if name in ("generator", "scorer") else 1
            for replica in range(replicas):
                index = placed.host_index(name, replica)
                on_host[index] += service.procs
        if max(on_host) <= gpus_per_host:
            return count
    return most + 1


def host_groups(hosts: list[str], jobs: int, per_run: int = 1) -> list[tuple[str, ...]]:
    """``hosts`` split into ``jobs`` disjoint groups of equal size (len(hosts) // jobs, in
    the file's order), each with at least ``per_run`` hosts. Equal groups keep the runs'
    timings comparable; the hosts left over stay idle. Refuses (ConfigError, naming the
    numbers) what the hosts cannot give."""
    most = len(hosts) // per_run
    if jobs > len(hosts):
        raise ConfigError(
            f"--jobs {jobs} runs {jobs} runs at once, each on hosts of its own, but the "
            f"placement file lists {len(hosts)} host{'s' * (len(hosts) != 1)}: use --jobs "
            f"{most} or fewer, or list more hosts"
        )
    size = len(hosts) // jobs
    if size < per_run:
        raise ConfigError(
            f"--jobs {jobs} splits the placement file's {len(hosts)} hosts into groups of "
            f"{size}, but one run of its services needs {per_run} hosts (its GPU processes "
            f"do not fit fewer; see services.*.with_gpus): use --jobs {most} or fewer"
        )
    return [tuple(hosts[i * size : (i + 1) * size]) for i in range(jobs)]


def worker_slots(cfgs: list[RunConfig], jobs: int) -> list[Slot]:
    """What each worker gets: a group of the placement file's hosts on Monarch, else its
    cores on the CPU or its GPU on CUDA. Refuses what the machine or file cannot serve."""
    if any(cfg.placement.placement != "local" for cfg in cfgs):
        hosts = (cfgs[0].placement.distributed or {}).get("hosts", [])
        if not hosts:
            raise ConfigError(
                "--jobs > 1 with the Monarch placement spreads the runs over the hosts of "
                "the placement file (--config), and it lists none; add hosts: [...] to it "
                "(see docs/placement.md, Several hosts) or use --jobs 1"
            )
        import torch

        layout = PlacementConfig.from_dict(cfgs[0].placement.distributed)
        need = hosts_needed(layout, torch.cuda.device_count())
        return [Slot(hosts=group) for group in host_groups(hosts, jobs, need)]
    if any(cfg.placement.resolved_device() == "cuda" for cfg in cfgs):
        import torch

        gpus = torch.cuda.device_count()
        if jobs > gpus:
            raise ConfigError(f"--jobs {jobs} asks for one GPU per run; this machine has {gpus}")
        return [Slot(env={"CUDA_VISIBLE_DEVICES": str(i)}) for i in range(jobs)]
    cores = sorted(os.sched_getaffinity(0))
    share = max(1, len(cores) // jobs)
    shares = [cores[i * share : (i + 1) * share] or cores for i in range(jobs)]
    return [Slot(env={"FORGE_ZOO_CORES": ",".join(map(str, mine))}) for mine in shares]


_HOSTS: tuple[str, ...] = ()
"""This worker's group of hosts (set by _start_worker; empty without hosts)."""


def die_with_parent(parent: int) -> None:
    """Linux: have the kernel send this process SIGTERM when ``parent`` (the process that
    started it) dies, however it dies. A worker left training after its compare was killed
    would keep writing into run folders that a ``--resume`` then writes too."""
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != parent:  # it died before the request took effect
        os._exit(1)


def _start_worker(slots, parent: int) -> None:
    """Runs first in each worker process: tie it to the compare process, take a slot and
    confine the process to it."""
    global _HOSTS
    die_with_parent(parent)
    slot: Slot = slots.get()
    os.environ.update(slot.env)
    _HOSTS = slot.hosts
    if "FORGE_ZOO_CORES" in slot.env:
        import torch

        cores = [int(c) for c in slot.env["FORGE_ZOO_CORES"].split(",")]
        os.sched_setaffinity(0, cores)
        os.environ["OMP_NUM_THREADS"] = str(len(cores))  # vLLM sizes its OpenMP pool by it
        torch.set_num_threads(len(cores))


_GENERATORS: dict[tuple, object] = {}
"""Each worker's generation engines, kept from one run to its next."""


def _run_in_worker(cfg: dict, run_dir: str, command: str, resume: bool) -> dict:
    from harness.runner import train_one

    return train_one(
        RunConfig.from_flat(cfg),
        Path(run_dir),
        command,
        resume,
        _GENERATORS,
        hosts=list(_HOSTS) or None,
    )


def run_concurrently(
    cfgs: list[RunConfig],
    runs_dir: Path,
    command: str,
    resume: bool,
    jobs: int,
    progress: Progress,
    overall,
) -> list[dict]:
    """Run ``cfgs`` into ``runs_dir`` with ``jobs`` workers; a bar per run while it trains.
    A failed run stops the experiment once the runs in flight have finished (their folders
    stay resumable), with that run's error."""
    import multiprocessing

    from harness.runner import run_name

    context = multiprocessing.get_context("spawn")  # a fresh interpreter: no forked threads
    slots = context.Queue()
    for slot in worker_slots(cfgs, jobs):
        slots.put(slot)
    summary: list[dict] = []
    with ProcessPoolExecutor(
        jobs, mp_context=context, initializer=_start_worker, initargs=(slots, os.getpid())
    ) as pool:
        running: dict[Future, RunConfig] = {
            pool.submit(
                _run_in_worker, cfg.to_flat(), str(runs_dir / run_name(cfg)), command, resume
            ): cfg
            for cfg in cfgs
        }
        tasks = {run_name(cfg): add_run_task(progress, run_name(cfg), cfg) for cfg in cfgs}
        failure: BaseException | None = None
        while running:
            done, _ = wait(running, timeout=POLL_SECONDS, return_when=FIRST_COMPLETED)
            for cfg in running.values():
                last = last_record(runs_dir / run_name(cfg))
                if last is not None:
                    update_run_task(progress, tasks[run_name(cfg)], cfg, last)
            for future in done:
                cfg = running.pop(future)
                progress.remove_task(tasks[run_name(cfg)])
                if future.exception() is not None:
                    failure = failure or future.exception()
                    for pending in running:
                        pending.cancel()  # not started yet; the ones in flight finish
                    continue
                progress.advance(overall)
                summary.append(future.result())
            for future in [f for f in running if f.cancelled()]:
                progress.remove_task(tasks[run_name(running.pop(future))])
        if failure is not None:
            raise failure
    return summary


def last_record(run_dir: Path) -> dict | None:
    """The last complete line of a run's metrics.jsonl (None before its first)."""
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return None
    # (the progress bars only: a damaged file is the worker's to refuse, in its words)
    lines = path.read_text(errors="replace").splitlines()
    for line in reversed(lines):
        try:
            record = json.loads(line)
        except (json.JSONDecodeError, RecursionError):
            continue  # a line being written
        return record if isinstance(record, dict) else None
    return None
