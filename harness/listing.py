"""`list` and `check-plugin`: what is registered (algorithms, envs, models with their
memory needs) and whether an algorithm keeps the loss contract."""

from __future__ import annotations

import dataclasses
import json
import sys

from zoo.core.config import field_docs
from zoo.core.registry import PluginError


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
        for col in ("name", "registered by", "what it is / data source", "rewards",
                    "held-out split", "config defaults"):  # fmt: skip
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
            table.add_row(name, spec.source, doc.split("\n\n")[0].replace("\n", " "),
                          cls.reward_values, held_out, json.dumps(defaults))  # fmt: skip
        Console(width=200).print(table)
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


def print_models() -> None:
    """Every preset with its size and the memory a run needs, by part (the pre-flight
    check's estimate), at the run's default batch: the tiny presets in float32 on the CPU,
    the Qwen3 presets in bf16 on a GPU."""
    from rich.console import Console
    from rich.table import Table

    from zoo.models.memory import memory_estimate
    from zoo.models.presets import MODEL_PRESETS, TINY_MODELS, model_shape
    from zoo.run.run_config import run_defaults

    gib = "{:.2f}".format
    table = Table(title="models (memory in GiB, one process, GRPO with a reference model)")
    for column in ("model", "description", "params", "weights+grads+AdamW", "generator",
                   "reference", "KV cache (all / min)", "activations", "total / min",
                   "at"):  # fmt: skip
        table.add_column(column, overflow="fold")
    for name, text in MODEL_PRESETS.items():
        shape, d = model_shape(name), run_defaults(name)
        tiny = name in TINY_MODELS
        sequences = d["prompts_per_step"] * d["group_size"]
        seq_len = (32 if tiny else 256) + d["max_response_len"]  # prompt room: arithmetic, gsm8k
        m = memory_estimate(shape, sequences=sequences, seq_len=seq_len, reference=True,
                            micro_batch=d["micro_batch_size"] or sequences,
                            compute_bytes=4 if tiny else 2)  # fmt: skip
        at = (
            f"{sequences} seqs x {seq_len} tokens, micro-batch "
            f"{d['micro_batch_size'] or sequences}, {'fp32 CPU' if tiny else 'bf16 GPU'}"
        )
        table.add_row(name, text, f"{shape.params / 1e6:,.1f}M",
                      gib((m.weights + m.gradients + m.optimizer) / 2**30),
                      gib(m.generator / 2**30), gib(m.reference / 2**30),
                      f"{gib(m.kv_cache / 2**30)} / {gib(m.kv_cache_minimum / 2**30)}",
                      gib(m.activations / 2**30),
                      f"{gib(m.total / 2**30)} / {gib(m.minimum / 2**30)}", at)  # fmt: skip
    Console(width=220).print(table)
    print(
        "all: KV cache for every sequence of a step at once; min: for one micro-batch "
        "(the generator then batches fewer sequences; the pre-flight check uses min). "
        "Qwen3 presets: downloaded from the Hugging Face Hub by the id shown on first use; "
        "offline (HF_HUB_OFFLINE=1 or no network): the Hugging Face cache or --model-path; "
        "or --init random."
    )
