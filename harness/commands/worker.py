"""`worker`: serve this machine as a Monarch host for multi-host runs."""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction, full: bool = False) -> None:
    p = sub.add_parser(
        "worker",
        help="serve this machine as a host for multi-host runs (a Monarch worker)",
        description="Run a Monarch worker that a run's placement file names under hosts: "
        "the run starts its service processes here. Start one per machine before the run; "
        "it serves runs until killed. Connections are not authenticated (Monarch 0.7 has no "
        "TLS yet): use only on a trusted cluster network.",
    )
    p.add_argument(
        "--address",
        default="tcp://0.0.0.0:22222",
        help="where to listen (default: tcp://0.0.0.0:22222)",
    )


def run(args: argparse.Namespace) -> int:
    from monarch.actor import run_worker_loop_forever

    print(f"forge-zoo worker listening on {args.address}", flush=True)
    run_worker_loop_forever(address=args.address, ca="trust_all_connections")
    return 0
