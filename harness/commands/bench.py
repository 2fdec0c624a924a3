"""`bench`: run the performance benchmarks under benchmarks/ into OUT/performance.md."""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.run_flags import command_line


def add_parser(sub: argparse._SubParsersAction, full: bool = False) -> None:
    p = sub.add_parser(
        "bench",
        help="run the performance benchmarks, write performance.md and plots",
        description="Run the benchmarks under benchmarks/ (RL step against TRL and a bare "
        "torch loop, generation against transformers, training utilisation, cost scaling, "
        "sandbox, board runs, evaluation batching and overlap) and write OUT/performance.md, "
        "OUT/perf/*.png and OUT/perf/bench.json. Takes ~40 minutes on 2 cores (board alone "
        "~20, eval_overlap ~5); --quick runs tiny settings.",
    )
    p.add_argument(
        "--only",
        action="append",
        metavar="NAME",
        help="run only these (repeatable): rl_step, generation, utilisation, "
        "scaling, sandbox, board, evaluation, eval_overlap; parity (agreement with TRL, "
        "docs/parity.md) runs only when named",
    )
    p.add_argument(
        "--out",
        type=Path,
        default=Path("leaderboards"),
        help="folder whose perf/ gets the reports (default: leaderboards)",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="tiny settings: checks that every benchmark runs (figures meaningless)",
    )


def run(args: argparse.Namespace) -> int:
    from harness.bench import BY_DEFAULT, run_all

    report = run_all(args.only or list(BY_DEFAULT), args.out, args.quick, command_line())
    print(f"wrote {report}")
    return 0
