"""`check-plugin`: the conformance suite against one registered algorithm."""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction, full: bool = False) -> None:
    p = sub.add_parser(
        "check-plugin",
        help="run the conformance suite against a registered algorithm",
        description="Check an algorithm against the invariants every loss must satisfy "
        "(on-policy gradient, zero advantages, padding, micro-batching, clipping, "
        "sequence-level ratio) and report the mechanism it declares (Algorithm.mechanism) "
        "and whether it acted on a batch whose ratios moved. Exit 0 if every applicable "
        "property holds.",
    )
    p.add_argument("algorithm", help="algorithm name (see `list algorithms`)")


def run(args: argparse.Namespace) -> int:
    from harness.listing import cmd_check_plugin

    return cmd_check_plugin(args.algorithm)
