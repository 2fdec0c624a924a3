"""`warm-start`: rebuild a tiny preset's start weights from its recipe on this machine.

The only importer of zoo.warm_start outside it (tests/test_architecture.py checks this):
a run starts from the shipped weights and never reaches the supervised stage.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def add_parser(sub: argparse._SubParsersAction, full: bool = False) -> None:
    p = sub.add_parser(
        "warm-start",
        help="rebuild a tiny preset's start weights from its recipe (they ship built)",
        description="Run a tiny preset's warm-start recipe (a short supervised stage, about "
        "a minute on 2 cores) on this machine. The weights ship with forge-zoo "
        "(zoo/models/start_weights, checked by sha256 when a run loads them) because the "
        "bytes depend on the CPU: two CPUs with other vector instructions give different "
        "weights from the same recipe and seed. By default this replaces the shipped folder "
        "and its manifest entry (for a changed recipe: commit both, and re-run or mark the "
        "rows made from the old weights); --check only says whether this CPU reproduces "
        "the shipped bytes.",
    )
    p.add_argument("preset", help="tiny preset (see `list models`)")
    what = p.add_mutually_exclusive_group()
    what.add_argument(
        "--out",
        type=Path,
        default=None,
        help="write the model to this folder instead of the shipped one",
    )
    what.add_argument(
        "--check",
        action="store_true",
        help="build into a temporary folder and compare with the shipped bytes; "
        "exit 1 when they differ",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    import tempfile
    from importlib.metadata import version

    from zoo.models.tiny import SHIPPED, read_manifest
    from zoo.run.runlog import cpu_model, cpu_vector_flags
    from zoo.warm_start import rebuild_start_weights

    shipped = read_manifest().get(args.preset)
    here = {"cpu": cpu_model(), "cpu_vector_flags": cpu_vector_flags(), "torch": version("torch")}
    with tempfile.TemporaryDirectory(prefix="warm-start-") as tmp:
        out = Path(tmp) / args.preset if args.check else args.out
        entry = rebuild_start_weights(args.preset, here, out, quiet=args.quiet)
    print(
        f"{args.preset}: {entry['steps']} supervised steps, validation accuracy "
        f"{entry['validation_accuracy']:.1%}, sha256 {entry['sha256']}, built on "
        f"{machine_text(entry['built_on'])}"
    )
    same = shipped is not None and shipped["sha256"] == entry["sha256"]
    if shipped is not None:
        print(
            f"the shipped weights (sha256 {shipped['sha256'][:12]}, built on "
            f"{machine_text(shipped['built_on'])}) are "
            f"{'the same bytes' if same else 'different bytes'}"
        )
    if args.check:
        return 0 if same else 1
    if out is None:
        print(
            f"wrote {SHIPPED / args.preset} and {SHIPPED / 'manifest.json'}: commit both; "
            "runs and leaderboard rows made from the previous weights no longer start from "
            "what the preset resolves to (re-run them, or mark them)"
        )
    else:
        print(f"wrote {out}")
    return 0


def machine_text(built_on: dict) -> str:
    return (
        f"{built_on['cpu']} [{built_on['cpu_vector_flags']}], torch {built_on['torch']}, "
        f"{built_on['torch_threads']} threads"
    )
