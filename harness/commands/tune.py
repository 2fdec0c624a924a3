"""`tune`: the same tuning budget for every algorithm, each setting scored on the env's
validation split; writes the sweep, selection.json and sweep.md."""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.parsing import folder, number
from harness.run_flags import command_line
from harness.third_party import LOG_NAME, routed_to
from zoo.core.config import ConfigError


def add_parser(sub: argparse._SubParsersAction, full: bool = False) -> None:
    p = sub.add_parser(
        "tune",
        help="the same tuning budget for every algorithm, selected on a validation split",
        description="Run every setting of a tuning plan (TOML: algorithms, env, model, shared "
        "run settings, a grid per algorithm of the same size for all) for the plan's seeds, "
        "evaluated on the env's validation split; write the experiment to --out, then "
        "selection.json (each algorithm's best setting) and sweep.md. Run a board at the "
        "chosen settings with `harness compare ... --tuned OUT/selection.json`.",
    )
    p.add_argument("plan", type=Path, help="the tuning plan, e.g. configs/tune/running_sum.toml")
    p.add_argument("--out", type=folder, required=True, help="experiment folder of the sweep")
    p.add_argument("--resume", action="store_true", help="continue an interrupted sweep")
    p.add_argument(
        "--jobs",
        type=number(int),
        default=1,
        metavar="N",
        help="run N runs at once (as compare --jobs)",
    )
    p.add_argument(
        "--only",
        action="append",
        default=None,
        metavar="ALGORITHM",
        help="run only these algorithms of the plan (repeatable); the "
        "selection is written once every algorithm's runs are done",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.add_argument(
        "--allow-mixed",
        action="store_true",
        help="let --resume add runs made at another commit or on another CPU model than the "
        "sweep's (refused by default; sweep.md then holds settings scored on both)",
    )
    p.add_argument("--verbose", action="store_true", help="service logs to the terminal")


def run(args: argparse.Namespace) -> int:
    from harness.experiment import check_experiment_folder, preflight, run_experiment
    from harness.tuning import SWEEP, extend_edges, load_plan, tuning_configs, write_selection

    plan = load_plan(args.plan)
    if args.only:
        unknown = sorted(set(args.only) - set(plan.algorithms))
        if unknown:
            raise ConfigError(f"--only {unknown[0]}: not in the plan ({plan.algorithms})")
    if args.jobs < 1:
        raise ConfigError(f"--jobs must be >= 1, got {args.jobs}")
    check_experiment_folder(args.out, args.resume)
    resume, extended = args.resume, {}
    while True:  # the grid, then each edge extension (TunePlan.extend) until none is due
        todo = [c for c in tuning_configs(plan) if not args.only or c.run.algorithm in args.only]
        plans = preflight(todo)
        with routed_to(args.out / LOG_NAME, args.verbose):
            run_experiment(
                todo,
                args.out,
                command_line(),
                resume,
                quiet=args.quiet,
                jobs=args.jobs,
                plans=plans if args.jobs == 1 else None,
                allow_mixed=args.allow_mixed,
            )
        resume = True  # the runs so far stay; only new settings run
        try:
            selection = write_selection(args.out, plan, extended)
        except ConfigError as exc:
            print(f"no selection yet: {exc}")
            return 0
        added = extend_edges(plan, selection)
        if not added:
            break
        for algorithm, values in added.items():
            extended.setdefault(algorithm, []).extend(values)
            print(f"{algorithm}: chose the grid's edge; adding {', '.join(values)}")
    print(f"wrote {args.out / 'selection.json'} and {args.out / SWEEP}")
    return 0
