"""`fetch`: download a published board into a folder, every file checked against the
repository's manifest (harness/publish.py; docs/publishing.md)."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_parser(sub: argparse._SubParsersAction, full: bool = False) -> None:
    p = sub.add_parser("fetch", help="download a published experiment, checked file by file")
    p.add_argument("repo", metavar="OWNER/NAME", help="the data set repository")
    p.add_argument("--out", type=Path, required=True, help="the folder to write it into")
    p.add_argument("--revision", help="a branch, tag or commit id (default: main)")
    p.add_argument("--token", help="a token, for a private repository")


def run(args: argparse.Namespace) -> int:
    from harness.publish import fetch

    out = fetch(args.repo, args.out, revision=args.revision, token=args.token)
    print(f"fetched {args.repo} into {out}")
    return 0
