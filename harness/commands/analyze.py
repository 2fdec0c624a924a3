"""`analyze`: re-write an experiment's tables, plots and report from its runs."""

from __future__ import annotations

import argparse
from pathlib import Path

from zoo.core.config import ConfigError


def add_parser(sub: argparse._SubParsersAction, full: bool = False) -> None:
    p = sub.add_parser("analyze", help="re-write an experiment's tables, plots, report")
    p.add_argument("experiment", type=Path)


def run(args: argparse.Namespace) -> int:
    from harness.analysis import write_analysis

    try:
        write_analysis(args.experiment)
    except FileNotFoundError as exc:  # not an experiment folder, or no run in it
        raise ConfigError(str(exc)) from None
    print(f"wrote {args.experiment}/report.md")
    return 0
