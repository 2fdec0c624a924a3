"""`list`: the registered algorithms, envs or models."""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction, full: bool = False) -> None:
    p = sub.add_parser("list", help="list registered algorithms, envs or models")
    p.add_argument("what", choices=["algorithms", "envs", "models"])


def run(args: argparse.Namespace) -> int:
    from harness.listing import cmd_list

    return cmd_list(args.what)
