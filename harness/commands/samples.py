"""`samples`: build the HTML samples pages of a run or of an experiment.

The pages are not committed (git ignores them): everything on them comes from a run's
samples.jsonl and metrics.jsonl, which are, so they are built when someone wants to read
them. `analyze` and `leaderboard` build them as well; this builds only them, in a second.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.parsing import folder
from zoo.core.config import ConfigError
from zoo.files import jsonl_exists
from zoo.run.runlog import METRICS, SAMPLES, read_samples


def add_parser(sub: argparse._SubParsersAction, full: bool = False) -> None:
    p = sub.add_parser(
        "samples",
        help="build the HTML samples pages of a run or an experiment",
        description="Write the samples page of a run folder (its samples.jsonl and curves "
        "as an offline HTML page), or of every run of an experiment folder and their "
        "samples/index.html. The pages are not committed; this builds them on demand.",
    )
    p.add_argument(
        "path",
        type=Path,
        metavar="PATH",
        help="a run folder (holding samples.jsonl) or an experiment folder (holding runs/)",
    )
    p.add_argument(
        "--out",
        type=folder,
        metavar="DIR",
        help="folder the pages are written to (default: the experiment's samples/, where "
        "its report.md links them; for a run outside an experiment, the run's samples/)",
    )


def experiment_of(run_dir: Path) -> Path | None:
    """The experiment folder a run folder belongs to (<experiment>/runs/<run>), if any."""
    parent = run_dir.absolute().parent
    if parent.name == "runs" and (parent.parent / "experiment.json").is_file():
        return run_dir.parent.parent
    return None


def is_run(path: Path) -> bool:
    """Whether ``path`` looks like a run folder, with or without samples (its .jsonl
    files plain or .gz)."""
    return (path / "config.json").is_file() or any(
        jsonl_exists(path / name) for name in (SAMPLES, METRICS)
    )


def run(args: argparse.Namespace) -> int:
    from harness.samples import runs_with_samples, write_run_page, write_samples_pages

    path: Path = args.path
    if not path.is_dir():
        raise ConfigError(f"{path}: no such folder (give a run or an experiment folder)")
    if is_run(path):
        if not read_samples(path):
            what = (
                "its samples.jsonl is empty" if jsonl_exists(path / SAMPLES) else "no samples.jsonl"
            )
            raise ConfigError(
                f"{path}: {what}, so no samples page (a run recorded before runs kept "
                "samples; `python -m harness reproduce` re-makes it with them)"
            )
        experiment = experiment_of(path)
        out = args.out or (experiment / "samples" if experiment else path / "samples")
        print(f"wrote {write_run_page(path, out)}")
        return 0
    if not (path / "runs").is_dir():
        raise ConfigError(
            f"{path}: neither a run folder (samples.jsonl, metrics.jsonl) nor an experiment "
            "folder (runs/)"
        )
    runs = runs_with_samples(path)
    if not runs:
        raise ConfigError(
            f"{path}: none of its runs kept samples.jsonl (recorded before runs kept "
            "samples), so there is no samples page to write"
        )
    index = write_samples_pages(path, args.out)
    print(f"wrote {index} and the pages of its {len(runs)} runs beside it")
    return 0
