"""`harness compare`: every algorithm on the same footing, then tables, plots, a report.

Matched compute: every run gets the same model, env, prompt order per seed (the env's
seeded stream), sampling settings, generation budget and compute budget, and is evaluated
on the held-out split at the same points of that budget. Runs execute one after another
in this process, sharing one generation engine per model (its weights reset per run; all
sampling is seeded per request, so a run's numbers do not depend on what ran before).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, replace
from pathlib import Path

from harness.runner import execute_run, is_complete
from zoo.algorithms import get_algorithm
from zoo.core.config import ConfigError
from zoo.core.ledger import Ledger
from zoo.core.memory import memory_estimate
from zoo.core.models import TINY_MODELS, check_model_name, model_shape, prefetch_model_config
from zoo.core.progress import add_run_task, make_progress, run_columns, update_run_task
from zoo.core.run_config import RunConfig
from zoo.core.runlog import machine, now_iso, package_versions
from zoo.core.wiring import build_services
from zoo.envs import get_env


def run_name(cfg: RunConfig) -> str:
    return f"{cfg.algorithm}__{cfg.env}__seed{cfg.seed}"


def preflight(cfgs: list[RunConfig], conformance: bool = True) -> None:
    """Fail before any work: unknown names, an algorithm that breaks the loss contract
    (unless ``conformance`` is False), a budget below one step, a model the machine cannot
    hold by the ledger's estimate."""
    checked: set[str] = set()
    for cfg in cfgs:
        cfg.validate()
        algorithm = get_algorithm(cfg.algorithm, **cfg.algorithm_config)
        key = json.dumps([cfg.algorithm, cfg.algorithm_config], sort_keys=True, default=str)
        if conformance and key not in checked:
            check_conformance(cfg.algorithm, cfg.algorithm_config)
            checked.add(key)
        env = get_env(cfg.env, **cfg.env_config)
        check_model_name(cfg.model)
        device = cfg.resolved_device()
        prefetch_model_config(cfg.model, cfg.model_path, cfg.init)  # online: the real shape
        shape = model_shape(cfg.model, cfg.model_path)
        prompt = max(len(env.train_prompt(i, cfg.seed).text.encode()) for i in range(8))
        response = max(1, cfg.max_response_len // 2)
        ledger = Ledger(shape)
        # generation, the old-log-prob forward, and a forward + backward per epoch
        per_sample = ledger.generation_flops(prompt, response) + (
            1 + 3 * cfg.epochs
        ) * ledger.scoring_flops(prompt, response)
        if algorithm.needs_reference:
            per_sample += ledger.scoring_flops(prompt, response)
        step_samples = cfg.prompts_per_step * cfg.group_size
        step_flops = step_samples * per_sample
        if cfg.budget_flops and cfg.budget_flops < step_flops:
            raise ConfigError(
                f"--budget {cfg.budget_flops:.3g} FLOPs is less than one step of "
                f"{cfg.algorithm} on {cfg.env} (~{step_flops:.3g} FLOPs, estimated with "
                f"{step_samples} samples of ~{prompt}+{response} tokens); raise --budget"
            )
        if cfg.budget_samples and cfg.budget_samples < step_samples:
            raise ConfigError(
                f"--budget-samples {cfg.budget_samples} is less than one step "
                f"({step_samples} samples); raise it"
            )
        check_memory(cfg, shape, step_samples, prompt + cfg.max_response_len,
                     algorithm.needs_reference, device)  # fmt: skip
        if cfg.model not in TINY_MODELS or cfg.model_path:  # (tiny presets are built later)
            cfg.model_spec()  # the weights are there (or --init random)


def check_conformance(name: str, overrides: dict) -> None:
    """The conformance suite (``harness check-plugin``), ~20 ms: a loss that breaks a
    property would train to numbers that mean something else, so it is refused here with
    the property, what went wrong and how to fix it."""
    from zoo.algorithms import ALGORITHMS
    from zoo.algorithms.conformance import FIXES, run_conformance

    failed = [r for r in run_conformance(ALGORITHMS.load(name), overrides) if r.passed is False]
    if failed:
        lines = [f"  {r.name}: {r.detail}\n    fix: {FIXES.get(r.name, '')}" for r in failed]
        raise ConfigError(
            f"algorithm {name!r} breaks {len(failed)} propert"
            f"{'y' if len(failed) == 1 else 'ies'} every loss must hold:\n"
            + "\n".join(lines)
            + f"\n`python -m harness check-plugin {name}` shows them all; "
            "--skip-conformance runs it anyway"
        )


def check_memory(cfg: RunConfig, shape, sequences: int, seq_len: int, reference: bool,
                 device: str, capacity: int | None = None) -> None:  # fmt: skip
    """Refuse a run whose estimated minimum memory (MemoryEstimate.minimum) exceeds 90% of
    the device's (``capacity`` bytes; by default GPU memory on cuda, host memory on cpu).
    On GPUs a placement file's trainer processes each have a GPU of their own; on the CPU
    they all share the host's memory."""
    need = memory_estimate(
        shape,
        sequences=sequences,
        seq_len=seq_len,
        micro_batch=cfg.micro_batch_size or sequences,
        reference=reference,
        compute_bytes=2 if device == "cuda" else 4,
        kept_versions=cfg.max_policy_age if cfg.mode == "async" else 0,
    )
    trainer_procs = (cfg.distributed or {}).get("services", {}).get("trainer", {}).get("procs", 1)
    if device == "cuda" and trainer_procs > 1:
        need = need.trainer_split(trainer_procs)
    where = "this GPU" if device == "cuda" else "this machine"
    if capacity is not None:
        have = capacity
    elif device == "cuda":
        import torch

        have = torch.cuda.get_device_properties(0).total_memory
    else:
        have = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if need.minimum > 0.9 * have:
        parts = ", ".join(f"{k.replace('_', ' ')} {v / 2**30:.1f}"
                          for k, v in asdict(need).items() if v and k != "kv_cache")  # fmt: skip
        raise ConfigError(
            f"model {cfg.model!r} needs ~{need.minimum / 2**30:.1f} GiB by the ledger's estimate "
            f"({parts} GiB); {where} has {have / 2**30:.1f} GiB. Use a smaller model, "
            "--micro-batch-size, fewer --prompts-per-step or a shorter --max-response-len."
        )


def write_manifest(out: Path, cfgs: list[RunConfig], command: str, resume: bool) -> dict:
    """Write ``out/experiment.json``, stating the headline metric before any run. A resume
    keeps the first start's ``created`` (ISO UTC) and its ``command`` (unless the resume
    asks for other runs, e.g. more seeds: then its own) and appends ``{"at", "command"}``
    to ``resumed``; the runs, versions and machine are this process's."""
    from harness.analysis import HEADLINE

    path = out / "experiment.json"
    now = now_iso()
    manifest = {
        "command": command,
        "headline": HEADLINE,
        "runs": {run_name(c): asdict(c) for c in cfgs},
        "versions": package_versions(),
        "machine": machine(),
        "created": now,
    }
    if resume and path.exists():
        first = json.loads(path.read_text())
        if set(first.get("runs", {})) == set(manifest["runs"]):  # else: the new command's runs
            manifest["command"] = first.get("command", command)
        manifest["created"] = first.get("created", now)
        manifest["resumed"] = [*first.get("resumed", []), {"at": now, "command": command}]
    path.write_text(json.dumps(manifest, indent=2, default=str))
    return manifest


def run_experiment(cfgs: list[RunConfig], out: Path, command: str, resume: bool,
                   quiet: bool = False) -> list[dict]:  # fmt: skip
    """Run every config into ``out/runs/<name>`` (skipping finished runs and resuming
    partial ones with ``resume``), then write tables, plots and report.md."""
    from harness.analysis import write_analysis

    runs_dir = out / "runs"
    if out.exists() and any(runs_dir.glob("*/metrics.jsonl")) and not resume:
        raise ConfigError(f"{out} already holds runs; add --resume to continue it")
    runs_dir.mkdir(parents=True, exist_ok=True)
    write_manifest(out, cfgs, command, resume)

    summary = []
    generators: dict[tuple, object] = {}
    with make_progress(quiet, *run_columns()) as progress:
        overall = progress.add_task("all runs", total=len(cfgs), reward=float("nan"),
                                    eval=float("nan"), tps=0.0)  # fmt: skip
        for cfg in cfgs:
            run_dir = runs_dir / run_name(cfg)
            if is_complete(run_dir):
                progress.advance(overall)
                continue
            key = (cfg.model, cfg.model_path, cfg.init, cfg.generator, cfg.device)
            if cfg.placement == "local":  # one engine per model, its weights reset per run
                services = build_services(cfg, quiet=True, generator=generators.get(key))
                generators[key] = services.generator
            else:
                services = build_services(cfg, quiet=True)
            task = add_run_task(progress, run_name(cfg), cfg)
            try:
                history = execute_run(
                    cfg, run_dir, services, command=command, resume=resume,
                    on_record=lambda r, t=task, c=cfg: update_run_task(progress, t, c, r),
                )  # fmt: skip
            finally:
                services.close()
            progress.remove_task(task)
            progress.advance(overall)
            summary.append({"run": run_name(cfg), "steps": history[-1]["step"],
                            "final_eval": history[-1].get("eval_reward")})  # fmt: skip
    write_analysis(out)
    return summary


def expand(base: RunConfig, algorithms: list[str], envs: list[str], seeds: int) -> list[RunConfig]:
    """One config per (env, algorithm, seed), everything else shared."""
    return [
        replace(base, algorithm=a, env=e, seed=s)
        for e in envs
        for a in algorithms
        for s in range(seeds)
    ]
