"""`leaderboard`: aggregate the experiments under results/ into leaderboards/."""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.run_flags import RESULTS
from zoo.core.config import ConfigError


def add_parser(sub: argparse._SubParsersAction, full: bool = False) -> None:
    p = sub.add_parser(
        "leaderboard",
        help="aggregate experiments under results/ into leaderboards/",
        description="Write leaderboards/<model>__<env>.md, leaderboards/index.html (plots "
        "embedded) and leaderboards/leaderboard.json from every experiment under --results.",
    )
    p.add_argument(
        "--results",
        type=Path,
        default=RESULTS,
        help="folder whose experiments (each with experiment.json) are "
        "aggregated (default: results)",
    )
    p.add_argument(
        "--out",
        type=Path,
        default=Path("leaderboards"),
        help="where the boards are written (default: leaderboards)",
    )
    p.add_argument(
        "--allow-dirty",
        action="store_true",
        help="also build rows whose runs ran from a modified (dirty) working "
        "tree or without a recorded git state, marking their commits '+dirty'. "
        "Refused by default: no commit holds the code behind such numbers "
        "(the run folder's source.diff, or the file its source.diff.sha256 names in "
        "diffs/, does, where recorded)",
    )


def run(args: argparse.Namespace) -> int:
    from harness.leaderboard import build_leaderboards

    try:
        paths = build_leaderboards(args.results, args.out, args.allow_dirty)
    except FileNotFoundError as exc:  # no results folder, or no experiment in it
        raise ConfigError(str(exc)) from None
    for path in paths:
        print(f"wrote {path}")
    return 0
