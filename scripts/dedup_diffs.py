"""Convert the plain ``source.diff`` files of recorded runs into the store form: each
distinct diff kept once, ``<experiment>/diffs/<sha256>.diff`` (``<run>/diffs/`` for a run
in no experiment), and a ``source.diff.sha256`` pointer in each run folder
(zoo/run/diffs.py says why and how they are read; zoo.run.runlog.convert_diffs converts).
Later sessions' ``source-*.diff`` and earlier starts' diffs are converted the same way.

    .venv/bin/python scripts/dedup_diffs.py results/tiny-sum-on-policy [more folders ...]

Nothing is lost: a plain file is removed only after its bytes were written to the store,
read back, hashed, and found again through the new pointer; a pointer beside a plain file
that names other bytes stops the script with nothing changed for that file. Running it
again changes nothing. Each folder given is walked whole (no link followed, no checkpoint
entered): leave out a folder that a run in progress writes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from zoo.core.config import ConfigError
from zoo.run.diffs import STORE
from zoo.run.runlog import convert_diffs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="+", type=Path, help="experiment or run folders")
    args = parser.parse_args(argv)
    for folder in args.folders:
        if not folder.is_dir():
            print(f"error: {folder} is not a folder", file=sys.stderr)
            return 2
    total = 0
    for folder in args.folders:
        try:
            converted = convert_diffs(folder)
        except ConfigError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        stores = sorted({p for p in folder.rglob(f"{STORE}/*.diff")})
        print(f"{folder}: {len(converted)} diff(s) converted; its store(s) hold {len(stores)}")
        total += len(converted)
    print(f"{total} diff(s) converted in all")
    return 0


if __name__ == "__main__":
    sys.exit(main())
