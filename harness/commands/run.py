"""`run`: train one algorithm on one env and model, into one run folder."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from harness.parsing import add_training_arguments, folder, number
from harness.run_flags import RESULTS, apply_placement_file, command_line, run_config
from harness.third_party import LOG_NAME, routed_to
from zoo.core.config import ConfigError


def add_parser(sub: argparse._SubParsersAction, full: bool = False) -> None:
    p = sub.add_parser(
        "run",
        help="train one algorithm on one env and model",
        description="Train ALGORITHM with RL. Writes config.json, metrics.jsonl (one JSON "
        "object per step) and resumable checkpoints to results/<run-id>/ or --out.",
    )
    p.add_argument("algorithm", help="algorithm name (see `list algorithms`)")
    p.add_argument("--env", default="arithmetic", help="environment (default: arithmetic)")
    p.add_argument(
        "--seed",
        type=number(int),
        default=0,
        help="seeds the prompts' order, the sampler and the trainer (a whole number >= 0; "
        "default 0)",
    )
    p.add_argument("--out", type=folder, help="run folder (default: results/<run-id>)")
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue the run in --out from its last checkpoint",
    )
    add_training_arguments(p, "run", add_parser, full)
    p.add_argument(
        "--set",
        dest="algo_set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="algorithm hyperparameter override, e.g. --set eps=0.3 (repeatable)",
    )


def run(args: argparse.Namespace) -> int:
    from harness.experiment import preflight
    from harness.runner import check_run_folder

    args.distributed = apply_placement_file(args)
    # validated by the pre-flight checks, which resolve it once into the run's plan
    cfg = run_config(args, args.algorithm, args.env, args.seed)
    if args.resume and not args.out:
        raise ConfigError("--resume needs --out DIR, the folder of the run to continue")
    print(args.budget_line, flush=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = (
        args.out
        or RESULTS / f"{cfg.run.algorithm}-{cfg.run.env}-{cfg.run.model}-seed{cfg.run.seed}-{stamp}"
    )
    check_run_folder(out, args.resume)
    (plan,) = preflight([cfg], conformance=not args.skip_conformance)

    with routed_to(out / LOG_NAME, args.verbose):
        history = _train(plan, out, args)
    evals = [(r["step"], r["eval_reward"]) for r in history if "eval_reward" in r]
    print(f"run folder: {out}")
    print("held-out reward by step: " + ", ".join(f"{s}: {v:.3f}" for s, v in evals))
    return 0


def _train(plan, out: Path, args: argparse.Namespace) -> list[dict]:
    from harness.runner import execute_run
    from zoo.run.progress import add_run_task, make_progress, run_columns, update_run_task
    from zoo.run.wiring import build_services

    cfg = plan.cfg
    started = time.perf_counter()
    services = build_services(plan, quiet=args.quiet)
    startup = time.perf_counter() - started
    with make_progress(args.quiet, *run_columns()) as progress:
        task = add_run_task(progress, f"{cfg.run.algorithm} on {cfg.run.env}", cfg)
        try:
            history = execute_run(
                cfg,
                out,
                services,
                command=command_line(),
                resume=args.resume,
                on_record=lambda r: update_run_task(progress, task, cfg, r),
                startup_seconds=startup,
            )
        finally:
            services.close()
    return history
