"""`doctor`: check this machine for the run the flags describe (sandbox, vLLM, disk,
memory), or with --plan predict its memory and step time on GPUs."""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.parsing import add_training_arguments, gpu_count
from harness.run_flags import RESULTS, apply_placement_file, run_config
from zoo.core.config import ConfigError


def add_parser(sub: argparse._SubParsersAction, full: bool = False) -> None:
    p = sub.add_parser(
        "doctor",
        help="check this machine before a long run (sandbox, vLLM, disk, memory)",
        description="Check, for the run these flags describe, that the code sandbox "
        "isolates, that vLLM starts (where the run would generate with it: not for the tiny "
        "presets on the CPU, which --generator by_size gives to transformers), that the disk "
        "holds its checkpoints and that the memory holds the model; print PASS/WARN/FAIL and "
        "what to fix. Exit 1 on a FAIL.",
    )
    p.add_argument(
        "algorithm",
        nargs="?",
        default="grpo",
        help="algorithm of the run to check for (default grpo)",
    )
    p.add_argument("--env", default="arithmetic", help="environment (default: arithmetic)")
    p.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument(
        "--out",
        type=Path,
        default=RESULTS,
        help="where the run would write (default: results/)",
    )
    p.add_argument(
        "--only",
        action="append",
        choices=("sandbox", "vllm", "disk", "memory"),
        help="run only these checks (repeatable; default: all)",
    )
    p.add_argument(
        "--plan",
        action="store_true",
        help="instead of the checks, predict memory per GPU and seconds per "
        "step on --gpus GPUs of kind --gpu from the ledger's FLOPs and the "
        "efficiencies measured in leaderboards/gpu_check.md; needs no GPU, "
        "no weights and no data (an env's data that is not here, as gsm8k's "
        "offline, is assumed and the plan says so)",
    )
    p.add_argument(
        "--gpus",
        type=gpu_count,
        default=None,
        metavar="N",
        help="with --plan: GPUs the run gets, the trainer split over them by FSDP2 (default 1)",
    )
    p.add_argument(
        "--gpu",
        choices=("h200", "h100", "a100"),
        default=None,
        help="with --plan: the GPU kind (default h200)",
    )
    add_training_arguments(p, "doctor", add_parser, full)


def run(args: argparse.Namespace) -> int:
    from harness.doctor import CHECKS, cmd_doctor, cmd_doctor_plan

    args.distributed = apply_placement_file(args)
    # validated once, where cmd_doctor resolves it into the run's plan; a plan reads the
    # model's shape only, so it needs no weights
    cfg = run_config(args, args.algorithm, args.env, args.seed, weights=not args.plan)
    if args.plan:
        if args.only:
            raise ConfigError("--plan runs no checks: drop --only, or --plan")
        return cmd_doctor_plan(cfg, args.gpus or 1, args.gpu or "h200")
    if args.gpus is not None or args.gpu is not None:
        raise ConfigError("--gpus and --gpu describe a --plan: add --plan")
    return cmd_doctor(cfg, args.out, args.only or CHECKS, args.verbose)
