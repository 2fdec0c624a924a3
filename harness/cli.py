"""``python -m harness``: train one run, compare algorithms, build the boards, list what
is registered.

Exit status: 0 on success, 2 for bad input (unknown names or fields, invalid values;
nothing is written for a run that never started), 1 when a run fails.

Each command lives in its own module under harness/commands/ (its flags and what it does
with them); this module is the table from command names to those modules. What flags
become (budgets, the model, the RunConfig) is harness/run_flags.py; the argparse pieces
the parsers share are harness/parsing.py.
"""

from __future__ import annotations

import argparse
import sys

from harness.commands import (
    analyze,
    bench,
    check_plugin,
    compare,
    doctor,
    fetch,
    leaderboard,
    publish,
    reproduce,
    run,
    samples,
    tune,
    warm_start,
    worker,
)
from harness.commands import list as list_
from harness.commands.compare import print_summary
from harness.parsing import PROG, Parser
from harness.run_flags import (
    CLI_OWN_FIELDS,
    REPO_ROOT,
    RESULTS,
    apply_placement_file,
    command_line,
    default_model,
    resolve_budget,
    run_config,
)
from zoo.core.config import ConfigError
from zoo.core.registry import PluginError

# Besides main and build_parser: names other code and the tests import from here (this
# module held them all before harness/commands/ existed), re-exported so those imports
# keep working.
__all__ = [
    "CLI_OWN_FIELDS",
    "COMMANDS",
    "REPO_ROOT",
    "RESULTS",
    "apply_placement_file",
    "build_parser",
    "command_line",
    "default_model",
    "main",
    "print_summary",
    "resolve_budget",
    "run_config",
]

COMMANDS = {
    "run": run,
    "compare": compare,
    "tune": tune,
    "analyze": analyze,
    "leaderboard": leaderboard,
    "samples": samples,
    "publish": publish,
    "fetch": fetch,
    "reproduce": reproduce,
    "bench": bench,
    "list": list_,
    "check-plugin": check_plugin,
    "doctor": doctor,
    "worker": worker,
    "warm-start": warm_start,
}
"""Command name -> its module (``add_parser``, ``run``), in the order `--help` lists them."""


def build_parser(full: bool = False) -> argparse.ArgumentParser:
    """The command line. ``full``: every run option with its help under ``--help`` (as
    ``--help-all`` shows them); by default the common ones, each section naming the rest."""
    parser = Parser(
        prog=PROG,
        description="forge-zoo: RL algorithms for language models on one shared infra core.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in COMMANDS.values():
        module.add_parser(sub, full)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return COMMANDS[args.command].run(args)
    except (ConfigError, PluginError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except RuntimeError as exc:
        # (zoo.placement's, imported lazily; zoo.run.runlog's: a disk that is full)
        if type(exc).__name__ not in ("ServiceFailure", "StorageError"):
            raise
        print(f"error: {exc}", file=sys.stderr)
        return 1
