"""`list` and `check-plugin`: what is registered (algorithms, envs, models with their
memory needs) and whether an algorithm keeps the loss contract."""

from __future__ import annotations

import dataclasses
import json
import sys
from typing import TYPE_CHECKING

from zoo.core.config import field_docs
from zoo.core.registry import PluginError

if TYPE_CHECKING:
    from zoo.run.run_config import RunConfig


def cmd_check_plugin(name: str) -> int:
    """Every conformance property of algorithm ``name``, one line each; each failed one
    followed by its ``fix:`` hint, the one `harness run` prints when it refuses the
    plugin. Exit 1 when one fails."""
    from zoo.algorithms import ALGORITHMS
    from zoo.algorithms.conformance import FIXES, run_conformance

    cls = ALGORITHMS.load(name)
    source = ALGORITHMS.specs()[name].source
    print(f"conformance of {name!r} ({source}):")
    results = run_conformance(cls)
    marks = {True: "PASS", False: "FAIL", None: "n/a "}
    for r in results:
        print(f"  {marks[r.passed]}  {r.name}: {r.detail}")
        if r.passed is False:
            print(f"        fix: {FIXES.get(r.name, '')}")
    failed = [r.name for r in results if r.passed is False]
    print(
        f"{len(results) - len(failed)} of {len(results)} properties hold or do not apply"
        + (f"; failed: {', '.join(failed)}" if failed else "")
    )
    return 1 if failed else 0


def print_shadowed(registry) -> None:
    for spec in registry.shadowed():
        print(
            f"warning: {spec.source} registers {registry.kind} {spec.name!r} "
            f"({spec.target}), a name already taken; ignored",
            file=sys.stderr,
        )


def cmd_list(what: str) -> int:
    if what == "algorithms":
        print_algorithms()
    elif what == "envs":
        from rich.console import Console
        from rich.table import Table

        from zoo.envs import ENVS

        print_shadowed(ENVS)
        table = Table(title="environments (config: --env-set KEY=VALUE)")
        for col in (
            "name",
            "registered by",
            "what it is / data source",
            "rewards",
            "held-out split",
            "config defaults",
        ):
            table.add_column(col, overflow="fold")
        for name, spec in sorted(ENVS.specs().items()):
            try:
                cls = ENVS.load(name)
            except PluginError as exc:
                table.add_row(name, spec.source, f"BROKEN: {exc}", "", "", "")
                continue
            defaults = dataclasses.asdict(cls.config_class())
            doc = (cls.__doc__ or sys.modules[cls.__module__].__doc__ or "").strip()
            held_out = f"{defaults['eval_size']} problems" if "eval_size" in defaults else "fixed"
            table.add_row(
                name,
                spec.source,
                doc.split("\n\n")[0].replace("\n", " "),
                cls.reward_values,
                held_out,
                json.dumps(defaults),
            )
        Console().print(table)  # (as wide as the terminal; rich folds the cells to fit)
    else:
        print_models()
    return 0


FAMILY_ORDER = (
    "group-relative PPO-clip",
    "sequence-level",
    "soft/capped ratio",
    "REINFORCE-style",
    "geometric mean",
    "entropy control",
    "actor-critic",
    "control",
)
"""The order ``list algorithms`` shows the built-in families in; any other family follows
alphabetically, then "other" (a plugin that declares none), then the broken plugins."""


def family_rank(family: str) -> tuple[int, str]:
    if family in FAMILY_ORDER:
        return FAMILY_ORDER.index(family), ""
    return len(FAMILY_ORDER) + (family == "other"), family


def mechanism_line(cls) -> str:
    """What the algorithm adds, from its declarations (zoo/algorithms/base.py)."""
    parts = []
    if cls.mechanism:  # acting shares, each idle at 0
        parts.append(f"mechanism acting shares: {', '.join(cls.mechanism)}")
    else:
        parts.append("mechanism: none declared")
    if cls.token_selection:
        parts.append(f"token selection: {cls.token_selection}")
    parts.append(f"clip {cls.clip_style}")
    parts.append(f"aggregation {cls.aggregation}")
    if cls.sequence_level:
        parts.append("sequence-level ratio")
    return "; ".join(parts)


def print_algorithms() -> None:
    """Every registered algorithm, grouped by ``Algorithm.family``: name, where it comes
    from and its paper, what it adds, then its config fields with their defaults. Each
    algorithm's line starts with its name."""
    from zoo.algorithms import ALGORITHMS

    print_shadowed(ALGORITHMS)
    groups: dict[str, list[tuple[str, str, object]]] = {}
    for name, spec in sorted(ALGORITHMS.specs().items()):
        try:
            cls = ALGORITHMS.load(name)
        except PluginError as exc:
            groups.setdefault("", []).append((name, spec.source, exc))
            continue
        groups.setdefault(cls.family or "other", []).append((name, spec.source, cls))
    broken = groups.pop("", [])
    for family in sorted(groups, key=family_rank):
        print(f"== {family} ==")
        for name, source, cls in groups[family]:
            print(f"{name:10s} [{source}] {cls.paper}")
            print(f"    {mechanism_line(cls)}")
            docs = field_docs(cls.config_class)
            for key, value in dataclasses.asdict(cls.config_class()).items():
                print(f"    {key} = {value!r}  {docs.get(key, '')}")
    if broken:
        print("== broken plugins ==")
    for name, source, exc in broken:
        print(f"{name:10s} [{source}] BROKEN: {exc}")


def default_run(model: str) -> RunConfig:
    """The run ``list models`` sizes a preset for: GRPO (with its reference) at the
    preset's default batch on its env: the env a tiny preset was warm-started on, gsm8k
    (the recipe's, harness/recipes.py) for a Qwen3 preset."""
    from harness.recipes import RECIPES
    from zoo.envs import ENVS
    from zoo.run.run_config import RunConfig, run_defaults

    if model in RECIPES:
        env = RECIPES[model].env
    else:
        env = next(n for n in sorted(ENVS.specs()) if ENVS.load(n).tiny_model == model)
    return RunConfig.from_flat(algorithm="grpo", model=model, env=env, **run_defaults(model))


def print_models() -> None:
    """Every preset with its size and the memory a run needs, by part: the estimate
    ``doctor --plan`` and the pre-flight check make (harness.capacity.Workload, one
    computation), for the run ``default_run`` names: the tiny presets in float32 on the
    CPU, the Qwen3 presets in bf16 on a GPU."""
    from rich.console import Console
    from rich.table import Table

    from harness.capacity import Workload, estimate_plan
    from zoo.models.presets import MODEL_PRESETS, TINY_MODELS

    gib = "{:.2f}".format
    models = Table(title="models (--model)")
    memory = Table(title="memory in GiB, one process, GRPO with a reference model")
    models.add_column("model", no_wrap=True)  # (names whole at any width; the rest folds)
    memory.add_column("model", no_wrap=True)
    for column in ("params", "what it is"):
        models.add_column(column, overflow="fold")
    for column in ("min / all", "state", "activ.", "gen + KV min / all", "ref.", "sized for"):
        memory.add_column(column, overflow="fold")
    notes = set()
    for name, text in MODEL_PRESETS.items():
        tiny = name in TINY_MODELS
        run, note = estimate_plan(default_run(name))
        work = Workload.of_plan(run)
        m = work.memory(compute_bytes=4 if tiny else 2)
        notes |= {note} if note else set()
        at = (
            f"grpo, {run.cfg.run.env}{'*' if note else ''}, {work.sequences} x {work.max_len}, "
            f"mb {work.micro_batch}, {'fp32 CPU' if tiny else 'bf16 GPU'}"
        )
        models.add_row(name, f"{work.shape.params / 1e6:,.1f}M", text)
        memory.add_row(
            name,
            f"{gib(m.minimum / 2**30)} / {gib(m.total / 2**30)}",
            gib((m.weights + m.gradients + m.optimizer) / 2**30),
            gib(m.activations / 2**30),
            f"{gib((m.generator + m.kv_cache_minimum) / 2**30)} / "
            f"{gib((m.generator + m.kv_cache) / 2**30)}",
            gib(m.reference / 2**30),
            at,
        )
    console = Console()  # (as wide as the terminal; rich folds the cells to fit)
    console.print(models)
    console.print(memory)
    console.print(
        "min: with the KV cache of one micro-batch (the generator then batches fewer "
        "sequences; the pre-flight check asks this); all: of every sequence of a step at once. "
        "state: float32 weights, gradients and AdamW moments; activ.: one micro-batch's, kept "
        "for backward; gen + KV: the generator's copy and its KV cache; ref.: the reference "
        "model's copy. Sized for GRPO on the preset's env at its default batch: sequences x "
        "tokens (prompt + response budget), mb: the micro-batch. The "
        "same computation as `doctor --plan --model MODEL --env ENV` (which plans in bf16 "
        "on GPUs, so a tiny preset's figures there are smaller) and the pre-flight check of "
        "that run; other flags (a batch, --micro-batch-size, another env) change them. "
        "Qwen3 presets: downloaded from the Hugging Face Hub by the id shown on first use; "
        "offline (HF_HUB_OFFLINE=1 or no network): the Hugging Face cache or --model-path; "
        "or --init random." + "".join(f" *{n}." for n in sorted(notes))
    )
