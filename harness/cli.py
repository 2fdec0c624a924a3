"""``python -m harness``: train one run, list what is registered.

Exit status: 0 on success, 2 for bad input (unknown names or fields, invalid values;
nothing is written for a run that never started), 1 when a run fails.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

from zoo.core.config import ConfigError, field_docs, parse_overrides
from zoo.core.registry import PluginError

RESULTS = Path("results")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m harness",
        description="forge-zoo: RL algorithms for language models on one shared infra core.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser(
        "run",
        help="train one algorithm on one env and model",
        description="Train ALGORITHM with RL. Writes config.json and metrics.jsonl (one JSON "
        "object per step) to results/<run-id>/ or --out.",
    )
    run.add_argument("algorithm", help="algorithm name (see `list algorithms`)")
    run.add_argument("--env", default="arithmetic", help="environment (default: arithmetic)")
    run.add_argument(
        "--model",
        default="tiny",
        help="model preset or local HF checkpoint directory (default: tiny)",
    )
    run.add_argument("--steps", type=int, default=150, help="optimizer steps (default: 150)")
    run.add_argument("--seed", type=int, default=0)
    run.add_argument("--out", type=Path, help="run folder (default: results/<run-id>)")
    run.add_argument(
        "--set",
        dest="algo_set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="algorithm hyperparameter override, e.g. --set eps=0.3 (repeatable)",
    )
    run.add_argument(
        "--env-set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="environment config override, e.g. --env-set digits=3",
    )
    run.add_argument("--prompts-per-step", type=int, default=128)
    run.add_argument("--group-size", type=int, default=8, help="completions per prompt (G)")
    run.add_argument("--max-response-len", type=int, default=6, help="generation budget in tokens")
    run.add_argument("--lr", type=float, default=2e-4)
    run.add_argument("--temperature", type=float, default=1.0)
    run.add_argument(
        "--micro-batch-size",
        type=int,
        default=0,
        help="sequences per trainer forward/backward (0: whole batch)",
    )
    run.add_argument("--eval-every", type=int, default=25)
    run.add_argument("--quiet", action="store_true", help="no progress bar")

    lst = sub.add_parser("list", help="list registered algorithms, envs or models")
    lst.add_argument("what", choices=["algorithms", "envs", "models"])

    check = sub.add_parser(
        "check-plugin",
        help="run the conformance suite against a registered algorithm",
        description="Check an algorithm against the invariants of shared/algorithms.md "
        "(on-policy gradient, zero advantages, padding, micro-batching, clipping, "
        "sequence-level ratio). Exit 0 if every applicable property holds.",
    )
    check.add_argument("algorithm", help="algorithm name (see `list algorithms`)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "run":
            return cmd_run(args)
        if args.command == "check-plugin":
            return cmd_check_plugin(args.algorithm)
        return cmd_list(args.what)
    except (ConfigError, PluginError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def run_config(args: argparse.Namespace):
    from zoo.core.loop import RunConfig

    cfg = RunConfig(
        algorithm=args.algorithm,
        env=args.env,
        model=args.model,
        seed=args.seed,
        steps=args.steps,
        prompts_per_step=args.prompts_per_step,
        group_size=args.group_size,
        max_response_len=args.max_response_len,
        temperature=args.temperature,
        lr=args.lr,
        micro_batch_size=args.micro_batch_size,
        eval_every=args.eval_every,
        algorithm_config=parse_overrides(args.algo_set),
        env_config=parse_overrides(args.env_set),
    )
    cfg.validate()
    return cfg


def validate_names(cfg) -> None:
    """Fail fast, before any model is built or folder written."""
    from zoo.algorithms import get_algorithm
    from zoo.core.models import check_model_name
    from zoo.envs import get_env

    get_algorithm(cfg.algorithm, **cfg.algorithm_config)
    get_env(cfg.env, **cfg.env_config)
    check_model_name(cfg.model)


def cmd_run(args: argparse.Namespace) -> int:
    cfg = run_config(args)
    validate_names(cfg)

    from rich.progress import TextColumn

    from zoo.core.loop import RLLoop, build_local_services, resolved_config
    from zoo.core.progress import make_progress
    from zoo.core.runlog import RunWriter

    services = build_local_services(cfg, quiet=args.quiet)
    run_id = (
        f"{cfg.algorithm}-{cfg.env}-{cfg.model}-seed{cfg.seed}-{time.strftime('%Y%m%d-%H%M%S')}"
    )
    out = args.out or RESULTS / run_id
    writer = RunWriter(out)
    writer.write_config(
        {
            "run_id": out.name,
            "command": "python -m harness " + " ".join(sys.argv[1:]),
            **resolved_config(cfg, services),
        }
    )
    loop = RLLoop(cfg, services)
    status = {"reward": float("nan"), "eval": float("nan"), "tps": 0.0}
    columns = (
        TextColumn("reward {task.fields[reward]:.3f}"),
        TextColumn("eval {task.fields[eval]:.1%}"),
        TextColumn("{task.fields[tps]:,.0f} gen tok/s"),
    )
    with make_progress(args.quiet, *columns) as progress:
        task = progress.add_task(f"{cfg.algorithm} on {cfg.env}", total=cfg.steps, **status)

        def log(record: dict) -> None:
            writer.log(record)
            if "eval_reward" in record:
                status["eval"] = record["eval_reward"]
            if record["step"] > 0:
                status["reward"] = record["reward_mean"]
                status["tps"] = record["generate_tokens_per_s"]
                progress.update(task, advance=1, **status)
            else:
                progress.update(task, **status)

        try:
            history = loop.run(log)
        finally:
            writer.close()
            services.trainer.save_hf(
                out / "checkpoint", Path(resolved_config(cfg, services)["model_path"])
            )
    evals = [(r["step"], r["eval_reward"]) for r in history if "eval_reward" in r]
    print(f"run folder: {out}")
    print("held-out reward by step: " + ", ".join(f"{s}: {v:.3f}" for s, v in evals))
    return 0


def cmd_check_plugin(name: str) -> int:
    from zoo.algorithms import ALGORITHMS
    from zoo.algorithms.conformance import run_conformance

    cls = ALGORITHMS.load(name)
    source = ALGORITHMS.specs()[name].source
    print(f"conformance of {name!r} ({source}):")
    results = run_conformance(cls)
    marks = {True: "PASS", False: "FAIL", None: "n/a "}
    for r in results:
        print(f"  {marks[r.passed]}  {r.name}: {r.detail}")
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
        from zoo.algorithms import ALGORITHMS

        print_shadowed(ALGORITHMS)
        for name, spec in sorted(ALGORITHMS.specs().items()):
            try:
                cls = ALGORITHMS.load(name)
            except PluginError as exc:
                print(f"{name:10s} [{spec.source}] BROKEN: {exc}")
                continue
            defaults = dataclasses.asdict(cls.config_class())
            print(f"{name:10s} [{spec.source}] {cls.paper}")
            docs = field_docs(cls.config_class)
            for key, value in defaults.items():
                print(f"    {key} = {value!r}  {docs.get(key, '')}")
    elif what == "envs":
        from zoo.envs import ENVS

        print_shadowed(ENVS)
        for name, spec in sorted(ENVS.specs().items()):
            try:
                cls = ENVS.load(name)
            except PluginError as exc:
                print(f"{name:12s} [{spec.source}] BROKEN: {exc}")
                continue
            defaults = json.dumps(dataclasses.asdict(cls.config_class()))
            print(f"{name:12s} [{spec.source}] rewards: {cls.reward_values}; config {defaults}")
    else:
        from zoo.core.models import MODEL_PRESETS

        for name, text in MODEL_PRESETS.items():
            print(f"{name:12s} {text}")
    return 0
