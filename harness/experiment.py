"""`harness compare`: every algorithm on the same footing, then tables, plots, a report.

Matched compute: every run gets the same model, env, prompt order per seed (the env's
seeded stream), sampling settings, generation budget and compute budget, and is evaluated
on the held-out split at the same points of that budget. Runs execute one after another
in this process, sharing one generation engine per model (its weights reset per run; all
sampling is seeded per request, so a run's numbers do not depend on what ran before).
"""

from __future__ import annotations

import itertools
import json
import math
import os
import string
from dataclasses import asdict
from pathlib import Path

from harness.runner import check_out, is_complete, run_name, train_one
from zoo.algorithms import Algorithm
from zoo.core.config import ConfigError, coerce, shown
from zoo.files import UnreadableFile, read_json
from zoo.models.memory import memory_estimate
from zoo.models.presets import TINY_MODELS, check_weights_available
from zoo.run.loop import check_greedy_baseline
from zoo.run.plan import RunPlan
from zoo.run.progress import add_run_task, make_progress, run_columns, update_run_task
from zoo.run.run_config import SECTION_OF, RunConfig
from zoo.run.runlog import AGAIN, RESUME, machine, now_iso, package_versions, write_whole


def preflight(cfgs: list[RunConfig], conformance: bool = True) -> list[RunPlan]:
    """Fail before any work: unknown names, an algorithm that breaks the loss contract
    (unless ``conformance`` is False), a budget below one step, a model the machine cannot
    hold by the ledger's estimate. Returns each config's plan (zoo.run.plan), which the
    run reads instead of resolving its config again: validated, its algorithm and env
    built, and its model's folder resolved unless it is a tiny preset's (built later,
    when its run starts)."""
    checked: set[str] = set()

    def check_algorithm(cfg: RunConfig, algorithm: Algorithm) -> None:
        algorithm.check_run(
            cfg.sampling.group_size, cfg.sampling.prompts_per_step * cfg.sampling.group_size
        )
        check_greedy_baseline(cfg, algorithm)
        checked_as = [cfg.run.algorithm, cfg.run.algorithm_config, cfg.sampling.group_size]
        key = json.dumps(checked_as, sort_keys=True, default=str)
        if conformance and key not in checked:
            check_conformance(cfg.run.algorithm, cfg.run.algorithm_config, cfg.sampling.group_size)
            checked.add(key)

    plans = []
    for cfg in cfgs:
        check_weights_available(
            cfg.run.model, cfg.run.model_path, cfg.run.init
        )  # offline, empty cache
        plan = RunPlan.resolve(cfg, spec=False, check_algorithm=check_algorithm)
        plan = plan.with_estimate()  # online: the real shape
        step = plan.step
        assert step is not None and plan.shape is not None  # (with_estimate sets them)
        prompt, response = step.prompt, step.response
        if cfg.budget.budget_flops and cfg.budget.budget_flops < step.flops:
            raise ConfigError(
                f"--budget {cfg.budget.budget_flops:.3g} FLOPs is less than one step of "
                f"{cfg.run.algorithm} on {cfg.run.env} (~{step.flops:.3g} FLOPs, estimated with "
                f"{step.samples} samples of ~{prompt}+{response} tokens); raise --budget"
            )
        if cfg.budget.budget_samples and cfg.budget.budget_samples < step.samples:
            raise ConfigError(
                f"--budget-samples {cfg.budget.budget_samples} is less than one step "
                f"({step.samples} samples); raise it"
            )
        # a multi-turn episode's trajectory: up to its token limit after the prompt
        check_memory(
            cfg,
            plan.shape,
            step.samples,
            prompt + plan.episode_budget,
            plan.algorithm.needs_reference,
            plan.device,
        )
        if cfg.run.model not in TINY_MODELS or cfg.run.model_path:  # (tiny presets are built later)
            plan = plan.with_spec()  # the weights are there (or --init random)
        plans.append(plan)
    return plans


def check_conformance(name: str, overrides: dict, group_size: int = 8) -> None:
    """The conformance suite (``harness check-plugin``), ~50 ms: a loss that breaks a
    property, or advantages that rank a worse answer above a better one (on groups of the
    run's ``group_size``), would train to numbers that mean something else, so it is
    refused here with the property, what went wrong and how to fix it."""
    from zoo.algorithms import ALGORITHMS
    from zoo.algorithms.conformance import failure_report, run_conformance

    results = run_conformance(ALGORITHMS.load(name), overrides, group_size)
    failed = [r for r in results if r.passed is False]
    if failed:
        lines = failure_report(results)
        raise ConfigError(
            f"algorithm {name!r} breaks {len(failed)} propert"
            f"{'y' if len(failed) == 1 else 'ies'} every loss must hold:\n"
            + "\n".join(lines)
            + f"\n`python -m harness check-plugin {name}` shows them all; "
            "--skip-conformance runs it anyway"
        )


def check_memory(
    cfg: RunConfig,
    shape,
    sequences: int,
    seq_len: int,
    reference: bool,
    device: str,
    capacity: int | None = None,
) -> None:
    """Refuse a run whose estimated minimum memory (MemoryEstimate.minimum) exceeds 90% of
    the device's (``capacity`` bytes; by default GPU memory on cuda, host memory on cpu).
    On GPUs a placement file's trainer processes each have a GPU of their own; on the CPU
    they all share the host's memory."""
    need = memory_estimate(
        shape,
        sequences=sequences,
        seq_len=seq_len,
        micro_batch=cfg.regime.micro_batch_size or sequences,
        reference=reference,
        compute_bytes=2 if device == "cuda" else 4,
        kept_versions=cfg.placement.max_policy_age if cfg.placement.mode == "async" else 0,
    )
    trainer_procs = (
        (cfg.placement.distributed or {}).get("services", {}).get("trainer", {}).get("procs", 1)
    )
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
        parts = ", ".join(
            f"{k.replace('_', ' ')} {v / 2**30:.1f}"
            for k, v in asdict(need).items()
            if v and k != "kv_cache"
        )
        raise ConfigError(
            f"model {cfg.run.model!r} needs ~{need.minimum / 2**30:.1f} GiB by the ledger's "
            f"estimate ({parts} GiB); {where} has {have / 2**30:.1f} GiB. Use a smaller model, "
            "--micro-batch-size, fewer --prompts-per-step or a shorter --max-response-len."
        )


def write_manifest(
    out: Path,
    cfgs: list[RunConfig],
    command: str,
    resume: bool,
    controls: dict | None = None,
    design: dict | None = None,
    power_plan: dict | None = None,
) -> dict:
    """Write ``out/experiment.json``, stating the headline metric and the decision design
    (baseline, pairs, delta, alpha: harness/board.py) before any run. A resume keeps the
    first start's ``created`` (ISO UTC) and its ``command`` (unless the resume asks for
    other runs, e.g. more seeds: then its own) and appends ``{"at", "command"}`` to
    ``resumed``; the runs, versions and machine are this process's. ``power_plan``: how
    the seeds were chosen (compare --resolve)."""
    from harness.scores import HEADLINE

    path = out / "experiment.json"
    now = now_iso()
    manifest = {
        "command": command,
        "headline": HEADLINE,
        "runs": {run_name(c): c.to_flat() for c in cfgs},
        "versions": package_versions(),
        "machine": machine(),
        "created": now,
    }
    if controls:
        manifest["controls"] = controls
    if design:
        manifest["design"] = design
    if power_plan:
        manifest["power_plan"] = power_plan
    if resume and path.exists():
        first = read_json(path)
        if set(first.get("runs", {})) == set(manifest["runs"]):  # else: the new command's runs
            manifest["command"] = first.get("command", command)
        manifest["created"] = first.get("created", now)
        manifest["resumed"] = [*first.get("resumed", []), {"at": now, "command": command}]
    write_whole(path, json.dumps(manifest, indent=2, default=str), RESUME if resume else AGAIN)
    return manifest


MAX_RUNS = 10_000
"""The most runs one experiment holds (algorithms x envs x settings x seeds): every run's
config is built and listed in experiment.json before the first starts, and 10,000 runs of
the tiny model already take a week at ~1 minute each."""


def check_size(algorithms: int, envs: int, settings: int, seeds: int, jobs: int) -> None:
    """Refuse an experiment of more than MAX_RUNS runs, or more workers than that."""
    runs = algorithms * envs * settings * seeds
    if runs > MAX_RUNS:
        raise ConfigError(
            f"{algorithms} algorithm(s) x {envs} env(s) x {settings} setting(s) x {seeds} "
            f"seed(s) is {runs} runs; an experiment holds {MAX_RUNS} at most (each run's "
            "config is built first, and that many tiny runs take a week)"
        )
    if jobs > MAX_RUNS:
        raise ConfigError(f"--jobs must be <= {MAX_RUNS} (the most runs an experiment holds)")


def holds_runs(runs_dir: Path) -> bool:
    """Whether ``runs_dir`` holds a run folder with a metrics.jsonl (or .jsonl.gz)."""
    return any(runs_dir.glob("*/metrics.jsonl")) or any(runs_dir.glob("*/metrics.jsonl.gz"))


def check_experiment_folder(out: Path, resume: bool) -> None:
    """``check_out``, then: with ``resume``, ``out`` must hold an experiment (its
    experiment.json); without, it must not hold runs already."""
    check_out(out)
    if resume and not (out / "experiment.json").exists():
        raise ConfigError(
            f"--resume: {out} holds no experiment to continue (no experiment.json); leave "
            "out --resume to start one there"
        )
    if resume:  # its first command and date are kept from it: read it whole, or stop here
        try:
            read_json(out / "experiment.json")
        except UnreadableFile as exc:
            raise exc.advised("nothing was changed: restore it to continue") from None
    if not resume and holds_runs(out / "runs"):
        raise ConfigError(f"{out} already holds runs; add --resume to continue it")


def check_one_provenance(runs_dir: Path) -> None:
    """One commit and one CPU class per experiment: refuse to add runs to an experiment
    whose recorded runs were made at another commit, from modified code, or on another CPU
    model than this process (``--allow-mixed`` lifts it; the report lists each row's commits
    and machines). Runs without a config.json have not started and do not count."""
    from zoo.run.runlog import cpu_model, git_commit

    here = git_commit()
    cpu = cpu_model()
    for path in sorted(runs_dir.glob("*/config.json")):
        recorded = read_json(path)  # (a damaged one: exit 2 naming it)
        git, made_on = recorded.get("git", {}), recorded.get("machine", {}).get("cpu")
        differs = []
        if code_of(git) != code_of(here):
            differs.append(f"code {code_text(git)}, here {code_text(here)}")
        if made_on != cpu:
            differs.append(f"made on {made_on}, this machine is {cpu}")
        if differs:
            raise ConfigError(
                f"--resume: {path.parent.name} was made under other conditions "
                f"({'; '.join(differs)}); one experiment holds runs of one commit and one "
                "CPU class. Check out that commit on such a machine, or add --allow-mixed "
                "(the report then lists each row's commits and machines)"
            )


def code_of(git: dict) -> tuple:
    """What identifies a run's code: its commit and, when modified, the diff's hash."""
    return git.get("commit"), git.get("diff_sha256") if git.get("dirty") else None


def code_text(git: dict) -> str:
    return str(git.get("commit"))[:7] + (" with local changes" if git.get("dirty") else "")


def run_experiment(
    cfgs: list[RunConfig],
    out: Path,
    command: str,
    resume: bool,
    quiet: bool = False,
    jobs: int = 1,
    controls: dict | None = None,
    plans: list[RunPlan] | None = None,
    design: dict | None = None,
    power_plan: dict | None = None,
    allow_mixed: bool = False,
) -> list[dict]:
    """Run every config into ``out/runs/<name>`` (skipping finished runs and resuming
    partial ones with ``resume``), ``jobs`` at a time (harness/jobs.py), then write
    tables, plots and report.md. ``controls`` (harness/controls.py) go into
    experiment.json, and the report checks them. ``plans``: the configs' plans from
    ``preflight``, which the runs of this process read instead of resolving their configs
    again (a worker process of ``jobs`` > 1 resolves its runs' configs itself: a plan
    holds an env, which stays in the process that built it)."""
    from harness.analysis import write_analysis
    from harness.jobs import run_concurrently

    runs_dir = out / "runs"
    if out.exists() and holds_runs(runs_dir) and not resume:
        raise ConfigError(f"{out} already holds runs; add --resume to continue it")
    runs_dir.mkdir(parents=True, exist_ok=True)
    if resume and not allow_mixed:
        check_one_provenance(runs_dir)
    write_manifest(out, cfgs, command, resume, controls, design, power_plan)

    todo = [cfg for cfg in cfgs if not is_complete(runs_dir / run_name(cfg))]
    summary = []
    with make_progress(quiet, *run_columns()) as progress:
        overall = progress.add_task(
            "all runs", total=len(cfgs), reward=float("nan"), eval=float("nan"), tps=0.0
        )
        progress.advance(overall, len(cfgs) - len(todo))
        if jobs > 1 and len(todo) > 1:
            summary = run_concurrently(todo, runs_dir, command, resume, jobs, progress, overall)
        else:
            generators: dict[tuple, object] = {}
            planned = {run_name(p.cfg): p for p in plans or []}
            for cfg in todo:
                task = add_run_task(progress, run_name(cfg), cfg)
                summary.append(
                    train_one(
                        cfg,
                        runs_dir / run_name(cfg),
                        command,
                        resume,
                        generators,
                        on_record=lambda r, t=task, c=cfg: update_run_task(progress, t, c, r),
                        plan=planned.pop(run_name(cfg), None),  # (its env freed after its run)
                    )
                )
                progress.remove_task(task)
                progress.advance(overall)
    write_analysis(out)
    return summary


def expand(
    base: RunConfig,
    algorithms: list[str],
    envs: list[str],
    seeds: int,
    grid: list[dict[str, str]] | None = None,
) -> list[RunConfig]:
    """One config per (env, algorithm, setting of ``grid``, seed), everything else shared:
    every setting of an ablation runs the same seeds, so rows compare seed by seed."""
    cfgs = [
        with_variant(base.replace(algorithm=a, env=e, seed=s), setting)
        for e in envs
        for a in algorithms
        for setting in (grid or [{}])
        for s in range(seeds)
    ]
    longest = max((run_name(c) for c in cfgs), key=lambda n: len(n.encode()), default="")
    if len(longest.encode()) > RUN_NAME_BYTES:
        raise ConfigError(
            f"the run name {shown(longest)} is {len(longest.encode())} bytes long; run "
            f"folders take {RUN_NAME_BYTES} at most: give shorter --vary values"
        )
    return cfgs


RUN_NAME_BYTES = 240
"""Run folders are named ``<row>__<env>__seed<k>`` and their sample pages ``<name>.html``:
both must fit the 255 bytes a file name takes on Linux filesystems."""


VARIED_ELSEWHERE = (
    "algorithm",
    "env",
    "seed",
    "model",
    "variant",
    "distributed",
    "algorithm_config",
    "env_config",
)
"""RunConfig fields that --vary cannot take: compare spans them its own way."""
VALUE_CHARS = frozenset(string.ascii_letters + string.digits + "._+-")
"""--vary values become part of run folder names and leaderboard row ids."""


def parse_vary(specs: list[str]) -> list[tuple[str, list[str]]]:
    """``["eps=0.2,0.28", "aggregation=seq_mean,token_mean"]`` -> ``[("eps", ["0.2",
    "0.28"]), ("aggregation", [...])]``, refusing malformed, repeated or unsafe values."""
    parsed: list[tuple[str, list[str]]] = []
    for spec in specs:
        key, sep, values = spec.partition("=")
        key = key.strip()
        options = [v.strip() for v in values.split(",")]
        if not sep or not key or not all(options):
            raise ConfigError(f"--vary wants KEY=V1,V2,... with no empty value; got {spec!r}")
        if key in VARIED_ELSEWHERE:
            raise ConfigError(
                f"--vary {key}: compare spans algorithms, --env and --seeds itself; vary an "
                "algorithm hyperparameter (see --set) or a run setting (lr, epochs, ...)"
            )
        if key in dict(parsed):
            raise ConfigError(f"--vary {key} is given twice; list all its values in one")
        if len(set(options)) != len(options):
            raise ConfigError(f"--vary {key} lists a value twice: {values!r}")
        unsafe = [v for v in options if not VALUE_CHARS.issuperset(v)]
        if unsafe:
            raise ConfigError(
                f"--vary {key}: the value {unsafe[0]!r} would not make a clean run name; "
                "use letters, digits and . _ + - only"
            )
        parsed.append((key, options))
    return parsed


def count_variants(vary: list[tuple[str, list[str]]], one_at_a_time: bool = False) -> int:
    """How many settings ``variants`` gives, without building them."""
    if one_at_a_time:
        return 1 + sum(len(values) - 1 for _, values in vary)
    return math.prod(len(values) for _, values in vary)


def variants(vary: list[tuple[str, list[str]]], one_at_a_time: bool = False) -> list[dict]:
    """The settings of an ablation: the full grid of the values, or (``one_at_a_time``)
    the first value of every key, then each other value of one key with the rest at their
    first values. No --vary: one empty setting."""
    if not vary:
        return [{}]
    if one_at_a_time:
        first = {key: values[0] for key, values in vary}
        return [first] + [{**first, key: v} for key, values in vary for v in values[1:]]
    keys = [key for key, _ in vary]
    return [
        dict(zip(keys, combo, strict=True))
        for combo in itertools.product(*(values for _, values in vary))
    ]


def with_variant(cfg: RunConfig, setting: dict[str, str]) -> RunConfig:
    """``cfg`` with one ablation setting applied (``harness.tuning.apply_setting``: keys
    that are RunConfig fields set the run, the others go to the algorithm as --set does,
    its config refusing unknown ones). The row is named ``<algorithm>@k=v,...`` in the
    order of the --vary flags."""
    if not setting:
        return cfg
    label = f"{cfg.run.algorithm}@" + ",".join(f"{k}={v}" for k, v in setting.items())
    return apply_setting(cfg.replace(variant=label), setting)


def apply_setting(cfg: RunConfig, setting: dict[str, str]) -> RunConfig:
    """``cfg`` with ``setting`` applied (run fields to the run, the rest to the
    algorithm's config), the row name unchanged."""
    types = RunConfig.flat_types()
    run_names = set(SECTION_OF) - set(VARIED_ELSEWHERE)
    run = {k: coerce(v, types[k], f"--vary {k}") for k, v in setting.items() if k in run_names}
    algo = {k: v for k, v in setting.items() if k not in run_names}
    return cfg.replace(**run, algorithm_config={**cfg.run.algorithm_config, **algo})
