"""The headline comparison on a real model: ``compare A B --model qwen3-1.7b`` as typed.

Each Qwen3 preset has a recipe (``RECIPES``): the env, a FLOPs budget per run and the
seeds; the batch is the real models' defaults (zoo.run.run_config.MODEL_RECIPES: 64
prompts x 8 samples, responses up to 1,024 tokens, lr 1e-6, 4 mini-batches). The memory
settings follow the GPU: the micro-batch is the largest of MICRO_BATCHES whose
``doctor --plan`` estimate (harness/capacity.py) fits the GPU this machine has (8 on an
H200; 4 on an 80 GB card for qwen3-1.7b), unless ``--micro-batch-size`` is given.

Before any work, ``compare`` on a real model prints the plan (``print_plan``): the runs,
the recipe as flags, and per GPU (this machine's, or each class of GPUS where it has none)
the micro-batch, memory, steps and time by the capacity plan's estimate. Where this
machine cannot run it (no GPU, the weights not here offline, a plan that does not fit
its GPU) it stops there with each reason and its fix (exit 2); ``--dry-run`` prints the
same and exits 0. Nothing in these figures was measured on a GPU for these runs: they are
the ledger's FLOPs at the efficiencies one H200 reached in leaderboards/gpu_check.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import shlex
from dataclasses import dataclass
from typing import TYPE_CHECKING

from zoo.core.config import ConfigError
from zoo.run.run_config import REAL_MODELS, RunConfig, run_defaults

if TYPE_CHECKING:  # (harness.capacity builds envs and algorithms: imported when planning)
    from harness.capacity import GPUKind, Workload
    from zoo.run.plan import RunPlan


@dataclass(frozen=True)
class Recipe:
    """What ``compare --model <preset>`` runs when the command line does not say."""

    budget_flops: float
    """FLOPs per run (the ledger's, all phases): ~40 GRPO steps of the default batch on
    gsm8k by ``doctor --plan``'s estimate (tests/test_recipes.py holds it to 30-50)."""
    env: str = "gsm8k"
    """Grade-school math, graded by math-verify: the env whose scale the real-model batch
    defaults were taken from (responses of ~1k tokens)."""
    seeds: int = 3
    """compare's default: enough for a paired verdict's spread, not for a small margin."""


RECIPES = {
    "qwen3-0.6b": Recipe(budget_flops=1e17),
    "qwen3-1.7b": Recipe(budget_flops=3e17),
    "qwen3-4b": Recipe(budget_flops=8e17),
    "qwen3-8b": Recipe(budget_flops=1.5e18),
}
"""The Qwen3 presets' recipes (docs/gpu.md gives each GPU class's command and costs)."""

MICRO_BATCHES = (8, 4, 2, 1)
"""Micro-batches tried, largest first: the first whose plan fits the GPU is chosen. It
changes memory only, never the numbers (zoo.services.settings.RegimeSection)."""

PLANNED_GPUS = ("h200", "h100", "a100")
"""The GPU classes the plan shows where this machine has no GPU."""


def prepare(args: argparse.Namespace) -> Recipe | None:
    """Fill in what the command line left to ``args.model``'s recipe (the env and the
    seeds; the budget is resolve_budget's, the micro-batch ``print_plan``'s), and note
    whether the micro-batch was given. None for a model without a recipe."""
    recipe = RECIPES.get(args.model)
    args.micro_batch_given = args.micro_batch_size is not None
    if args.seeds is None:
        args.seeds = recipe.seeds if recipe else 3
    if recipe is not None and not args.envs:
        args.envs = [recipe.env]
    return recipe


@dataclass(frozen=True)
class GPUPlan:
    """The comparison on one GPU of a kind: the micro-batch chosen, and its estimates."""

    gpu: GPUKind
    micro_batch: int | None
    """None: no micro-batch fits one such GPU."""
    memory_gib: float
    """The most any row needs, per GPU, at micro-batch ``sized_at``."""
    sized_at: int
    """The micro-batch of the figures: the one chosen, else the smallest tried."""
    steps: dict[str, float]
    """Rollout steps per run, by row."""
    run_seconds: dict[str, float]
    """Seconds per run (steps and evaluations), by row."""
    total_seconds: float
    gpus_needed: int | None = None
    """Where none fits one: the fewest GPUs whose FSDP2 split of the trainer would."""


def plan_on(
    works: dict[str, Workload],
    runs: dict[str, RunPlan],
    counts: dict[str, int],
    gpu: GPUKind,
    micro: int | None,
) -> GPUPlan:
    """``works`` (row -> Workload) and ``runs`` (row -> RunPlan) on one GPU of kind
    ``gpu``: ``micro`` if given, else the largest of MICRO_BATCHES that fits every row."""
    from harness.capacity import capacity_plan, evaluation_seconds, gpus_needed, run_steps

    tried = (micro,) if micro else MICRO_BATCHES
    for size in tried:
        sized = {row: dataclasses.replace(w, micro_batch=size) for row, w in works.items()}
        plans = {row: capacity_plan(w, 1, gpu) for row, w in sized.items()}
        if all(p.fits for p in plans.values()) or size == tried[-1]:
            break
    fits = all(p.fits for p in plans.values())
    steps = {row: run_steps(runs[row], p, sized[row]) for row, p in plans.items()}
    seconds = {
        row: steps[row] * p.step_seconds + evaluation_seconds(runs[row], p, sized[row])
        for row, p in plans.items()
    }
    need = None
    if not fits:
        needs = [gpus_needed(w, gpu) for w in sized.values()]
        need = None if None in needs else max(n for n in needs if n is not None)
    return GPUPlan(
        gpu=gpu,
        micro_batch=size if fits else None,
        memory_gib=max(p.memory.minimum for p in plans.values()) / 2**30,
        sized_at=size,
        steps=steps,
        run_seconds=seconds,
        total_seconds=sum(seconds[row] * n for row, n in counts.items()),
        gpus_needed=need,
    )


def duration(seconds: float) -> str:
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def span(seconds: list[float]) -> str:
    """The range of ``seconds`` in one unit (that of the longest): "35-36 min", "1.8-1.9 h"."""
    low, high = duration(seconds[0]).split()[0], duration(seconds[-1])
    if seconds[-1] >= 5400 > seconds[0]:
        low = f"{seconds[0] / 3600:.1f}"
    return high if low == high.split()[0] else f"{low}-{high}"


def command_text(args: argparse.Namespace, cfg: RunConfig, micro: int | None) -> str:
    """The recipe's choices as flags: the comparison's command with its env, seeds, budget
    and micro-batch spelled out (and --init, --device where not the default); other flags
    given on the command line keep their values and are not repeated here."""
    words = ["python", "-m", "harness", "compare", *args.algorithms, "--model", args.model]
    words += ["--init", cfg.run.init] if cfg.run.init != "pretrained" else []
    words += ["--device", cfg.placement.device] if cfg.placement.device != "auto" else []
    words += [w for env in args.envs for w in ("--env", env)] + ["--seeds", str(args.seeds)]
    unit, amount = cfg.budget.limit
    flag = {
        "flops": "--budget",
        "samples": "--budget-samples",
        "seconds": "--budget-seconds",
        "steps": "--steps",
    }[unit]
    words += [flag, f"{amount:g}" if unit in ("flops", "seconds") else str(int(amount))]
    if micro is not None:
        words += ["--micro-batch-size", str(micro)]
    return shlex.join(words)


def blockers(
    cfg: RunConfig, gpu: GPUKind | None, on_gpu: GPUPlan | None, dry_run: bool, given_micro: bool
) -> list[str]:
    """Why this machine cannot run the comparison, each with its fix ([] when it can)."""
    from zoo.models.presets import check_weights_available

    found = []
    if gpu is None and cfg.placement.device != "cpu":  # (--device cpu: the user's choice, sized by
        found.append(  # the pre-flight memory check like any CPU run)
            "no GPU: torch sees no CUDA device on this machine, and a real model's RL runs "
            "need one. Fix: run it on a machine with an NVIDIA GPU (`bash scripts/setup.sh` "
            "installs the CUDA builds there; docs/gpu.md)"
            + ("" if dry_run else ", or add --dry-run to print this plan only")
        )
    try:
        check_weights_available(cfg.run.model, cfg.run.model_path, cfg.run.init)
    except ConfigError as exc:
        found.append(str(exc))
    if on_gpu is not None and on_gpu.micro_batch is None:
        if given_micro:
            more = "a smaller --micro-batch-size, or none (the plan then picks one that fits)"
        elif on_gpu.gpus_needed:
            more = (
                f"a placement file that splits the trainer over {on_gpu.gpus_needed} GPUs "
                "(--config, docs/placement.md; not yet run on GPUs), or a smaller model"
            )
        else:
            more = "a GPU with more memory, or a smaller model"
        found.append(
            f"{cfg.run.model} does not fit this GPU ({on_gpu.gpu.name}) at micro-batch "
            f"{on_gpu.sized_at}: ~{on_gpu.memory_gib:.1f} GiB by the estimate, of "
            f"{on_gpu.gpu.memory_bytes / 2**30:.1f} (90% usable). Fix: {more}"
        )
    return found


def print_plan(
    args: argparse.Namespace, cfgs: list[RunConfig], recipe: Recipe | None
) -> int | None:
    """Print the comparison's plan (before any work); raise ConfigError with every reason
    this machine cannot run it, unless ``args.dry_run``. Returns the micro-batch chosen
    for this machine's GPU (None: keep the configs' own)."""
    from harness.capacity import GPUS, Workload, detect_gpu, estimate_plan, evaluation_text
    from harness.runner import run_name
    from zoo.models.presets import TINY_MODELS

    rows: dict[str, RunConfig] = {}
    counts: dict[str, int] = {}
    for cfg in cfgs:
        row = f"{cfg.run.variant or cfg.run.algorithm} on {cfg.run.env}"
        rows.setdefault(row, cfg)
        counts[row] = counts.get(row, 0) + 1
    base = cfgs[0]
    names = [run_name(c) for c in cfgs]
    if len(names) > 12:  # (a large board: its first and last runs name the pattern)
        names = [*names[:8], f"... {len(names) - 10} more ...", *names[-2:]]
    jobs = getattr(args, "jobs", 1)
    at_once = "one after another" if jobs == 1 else f"{jobs} at once, a GPU each"
    print(f"plan: {len(cfgs)} runs, {at_once} ({', '.join(names)})")
    if recipe is not None:
        d = run_defaults(REAL_MODELS)
        print(
            f"  recipe for {args.model} (docs/gpu.md): --env {recipe.env}, --budget "
            f"{recipe.budget_flops:g} FLOPs per run, --seeds {recipe.seeds}; the batch of "
            f"real models: {d['prompts_per_step']} prompts x {d['group_size']} samples, "
            f"responses <= {d['max_response_len']} tokens, lr {d['lr']:g}, "
            f"{d['mini_batches']} mini-batches; a flag given replaces its part"
        )
    if base.run.model in TINY_MODELS and not base.run.model_path:
        from harness.doctor import check_memory

        memory = check_memory(base)
        print(
            f"  on this machine: memory {memory.status}: {memory.detail} (the pre-flight "
            "estimate); time not estimated (the default budget takes about a minute a run "
            "on 2 cores: docs/running.md)"
        )
        return None
    runs, works, notes = {}, {}, set()
    for row, cfg in rows.items():
        runs[row], note = estimate_plan(cfg)
        works[row] = Workload.of_plan(runs[row])
        if note:
            notes.add(note)
    gpu = detect_gpu()
    micro = base.regime.micro_batch_size if args.micro_batch_given else None
    targets = [gpu] if gpu is not None else [GPUS[k] for k in PLANNED_GPUS]
    plans = [plan_on(works, runs, counts, g, micro) for g in targets]
    if jobs > 1:  # (--jobs N on N GPUs: the runs' time shared out, none of them shorter)
        plans = [dataclasses.replace(p, total_seconds=p.total_seconds / jobs) for p in plans]
    first = next(iter(runs.values()))
    print(
        f"  estimate, not measured (the ledger's FLOPs at the efficiencies one H200 reached "
        f"in leaderboards/gpu_check.md, zoo/models/memory.py's upper estimate of memory"
        f"{'; ' + '; '.join(sorted(notes)) if notes else ''}); per run: its steps, then "
        f"{evaluation_text(first)}; start-up not counted:"
    )
    for p in plans:
        gib = p.gpu.memory_bytes / 2**30
        where = "this machine's GPU: " if gpu is not None else ""
        if p.micro_batch is None:
            print(
                f"    {where}{p.gpu.name} ({gib:.0f} GiB): does not fit one at micro-batch "
                f"{p.sized_at} "
                f"(~{p.memory_gib:.1f} GiB)"
                + (f"; {p.gpus_needed} GPUs with the trainer split" if p.gpus_needed else "")
            )
            continue
        steps = ", ".join(f"{row.split(' on ')[0]} ~{s:.0f}" for row, s in p.steps.items())
        per_run = span(sorted(p.run_seconds.values()))
        print(
            f"    {where}{p.gpu.name} ({gib:.0f} GiB): micro-batch {p.micro_batch}, "
            f"{p.memory_gib:.1f} GiB per GPU; steps per run: {steps}; {per_run} per run, "
            f"{duration(p.total_seconds)} for all {len(cfgs)}"
        )
        print(f"      as flags: {command_text(args, base, p.micro_batch)}")
    on_gpu = plans[0] if gpu is not None else None
    found = blockers(base, gpu, on_gpu, args.dry_run, args.micro_batch_given)
    if found and not args.dry_run:
        raise ConfigError(
            "this machine cannot run this comparison (the plan above is what "
            "it would run):\n  - " + "\n  - ".join(found)
        )
    if found:
        print("this machine cannot run it as is:\n  - " + "\n  - ".join(found))
    elif args.dry_run:
        print("this machine can run it: the same command without --dry-run starts it")
    return None if on_gpu is None else on_gpu.micro_batch
