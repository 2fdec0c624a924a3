"""`compare --jobs N`: an experiment's independent runs, N at a time, each in a worker
process of its own.

On the CPU the machine's cores are split between the workers (each pinned to its own
cores, with that many torch and OpenMP threads); on GPUs each worker gets one GPU
(CUDA_VISIBLE_DEVICES). A worker keeps its generation engine from one run to the next,
as the one-process path does. Runs seed everything per run and per request, so a run's
numbers do not depend on which worker ran it or on what ran beside it: the tables equal
those of `--jobs 1` (tests/test_jobs.py checks it). Each run writes its own folder and
checkpoints, so `--resume` continues whatever a killed experiment left, one by one or
concurrently. The parent follows the runs by reading their metrics.jsonl.
"""

from __future__ import annotations

import json
import os
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import asdict
from pathlib import Path

from rich.progress import Progress

from zoo.core.config import ConfigError
from zoo.core.progress import add_run_task, update_run_task
from zoo.run.run_config import RunConfig

POLL_SECONDS = 1.0


def worker_slots(cfgs: list[RunConfig], jobs: int) -> list[dict[str, str]]:
    """The environment of each worker: its cores on the CPU, its GPU on CUDA."""
    if any(cfg.placement != "local" for cfg in cfgs):
        raise ConfigError(
            "--jobs > 1 runs each run in one process (placement local); a Monarch placement "
            "spreads one run over processes and hosts itself: use --jobs 1 with --config"
        )
    if any(cfg.resolved_device() == "cuda" for cfg in cfgs):
        import torch

        gpus = torch.cuda.device_count()
        if jobs > gpus:
            raise ConfigError(f"--jobs {jobs} asks for one GPU per run; this machine has {gpus}")
        return [{"CUDA_VISIBLE_DEVICES": str(i)} for i in range(jobs)]
    cores = sorted(os.sched_getaffinity(0))
    share = max(1, len(cores) // jobs)
    return [
        {"FORGE_ZOO_CORES": ",".join(map(str, cores[i * share : (i + 1) * share] or cores))}
        for i in range(jobs)
    ]


def _start_worker(slots) -> None:
    """Runs first in each worker process: take a slot and confine the process to it."""
    slot = slots.get()
    os.environ.update(slot)
    if "FORGE_ZOO_CORES" in slot:
        import torch

        cores = [int(c) for c in slot["FORGE_ZOO_CORES"].split(",")]
        os.sched_setaffinity(0, cores)
        os.environ["OMP_NUM_THREADS"] = str(len(cores))  # vLLM sizes its OpenMP pool by it
        torch.set_num_threads(len(cores))


_GENERATORS: dict[tuple, object] = {}
"""Each worker's generation engines, kept from one run to its next."""


def _run_in_worker(cfg: dict, run_dir: str, command: str, resume: bool) -> dict:
    from harness.runner import train_one

    return train_one(RunConfig(**cfg), Path(run_dir), command, resume, _GENERATORS)


def run_concurrently(cfgs: list[RunConfig], runs_dir: Path, command: str, resume: bool,
                     jobs: int, progress: Progress, overall) -> list[dict]:  # fmt: skip
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
    with ProcessPoolExecutor(jobs, mp_context=context, initializer=_start_worker,
                             initargs=(slots,)) as pool:  # fmt: skip
        running: dict[Future, RunConfig] = {
            pool.submit(_run_in_worker, asdict(cfg), str(runs_dir / run_name(cfg)), command,
                        resume): cfg
            for cfg in cfgs
        }  # fmt: skip
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
    lines = path.read_text().splitlines()
    for line in reversed(lines):
        try:
            return json.loads(line)
        except json.JSONDecodeError:
            continue  # a line being written
    return None
