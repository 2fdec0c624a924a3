"""`publish`: upload an experiment's board to a Hugging Face data set repository
(harness/publish.py; docs/publishing.md)."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_parser(sub: argparse._SubParsersAction, full: bool = False) -> None:
    p = sub.add_parser("publish", help="upload an experiment to a Hugging Face data set repository")
    p.add_argument("experiment", type=Path, help="the experiment folder (results/NAME)")
    p.add_argument("--repo", required=True, metavar="OWNER/NAME", help="the data set repository")
    p.add_argument("--token", help="a write token (default: HF_TOKEN, then `hf auth login`)")
    p.add_argument("--message", help="the commit message on the Hub")


def run(args: argparse.Namespace) -> int:
    from harness.publish import publish

    done = publish(args.experiment, args.repo, token=args.token, message=args.message)
    print(done.line())
    return 0
