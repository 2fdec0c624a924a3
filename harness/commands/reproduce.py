"""`reproduce`: re-run a recorded run or leaderboard row and check its numbers."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_parser(sub: argparse._SubParsersAction, full: bool = False) -> None:
    p = sub.add_parser(
        "reproduce",
        help="re-run a recorded run (or leaderboard row) and check the numbers",
        description="TARGET is a leaderboard row id or a run folder (with config.json and "
        "metrics.jsonl). Where this machine has the run's setup (CPU model and vector "
        "instruction sets, package versions; the recorded thread count is applied), the "
        "re-run must match every non-timing number of every step exactly: MATCH or DIFFERS. "
        "Elsewhere (or with --statistical) float rounding changes the sampled tokens, so the "
        "lowest --seeds seeds of the row (a run folder: itself first, then its siblings: same "
        "config, other seeds, same experiment folder) are re-run and their headlines tested "
        "against the row's per-seed headlines: a Welch two-sample t-test at 5% decides, "
        "a TOST equivalence test within the row's MDD 80% says how close (AGREES: no "
        "difference and equivalent; CONSISTENT: no difference, equivalence not shown; "
        "DIFFERS). Exit 0 when the numbers match or agree, 1 when they do not, 2 for a "
        "target that cannot be checked (docs/provenance.md).",
    )
    p.add_argument("target", help="leaderboard row id, or a run folder")
    p.add_argument(
        "--leaderboards",
        type=Path,
        default=Path("leaderboards"),
        help="folder of the leaderboard.json that holds the row id (default: leaderboards)",
    )
    p.add_argument(
        "--statistical",
        action="store_true",
        help="check statistically even where an exact check is possible",
    )
    p.add_argument(
        "--seeds",
        type=int,
        default=None,
        metavar="N",
        help="how many seeds to re-run, the lowest of the row (at most the row's number). "
        "Default: a statistical check 3 (the fewest whose own spread the t-test can use "
        "with 2 degrees of freedom); an exact check every run of a row, or the run folder "
        "alone",
    )
    p.add_argument(
        "--verbose",
        action="store_true",
        help="show other libraries' warnings and logs (vLLM, torch) while the "
        "runs re-run; by default they go to a log discarded with the "
        "re-run",
    )
    p.add_argument(
        "--model-path",
        type=Path,
        default=None,
        help="start from the weights in this folder instead of what the recorded model "
        "name resolves to here (their sha256 must equal the recorded one). For runs of a "
        "tiny preset made on another CPU: its warm start follows the CPU's kernels",
    )


def run(args: argparse.Namespace) -> int:
    from harness.reproduce import reproduce

    return reproduce(
        args.target,
        args.leaderboards,
        statistical=args.statistical,
        seeds=args.seeds,
        model_path=args.model_path,
        verbose=args.verbose,
    )
