"""Store the JSON Lines files of finished runs compressed: each ``metrics.jsonl``,
``samples.jsonl`` and ``sessions.jsonl`` of a run that holds complete.json becomes
``metrics.jsonl.gz`` ... (gzip level 9, no time or name in the header, so the same bytes
always give the same file), and each source diff of an experiment's store
(``diffs/<sha256>.diff`` -> ``.diff.gz``). Every reader takes either form (zoo/files.py,
``jsonl_file``; zoo/run/diffs.py).

    .venv/bin/python scripts/compress_jsonl.py results/tiny-sum-running-sum [more ...]

Each folder given may be a run, an experiment or a folder of them, and is walked whole (no
link followed, no checkpoint entered); an earlier start (``earlier-starts/<k>/``) of a
finished run is compressed with it. Nothing is lost: a plain file is removed only after its
.gz was written, read back from the disk and decompressed to the same bytes (and the plain
file did not change meanwhile). A run without complete.json (running, or stopped) is left
as it is, with a note: a run appends to its plain files, and a resume turns .gz files plain
again before it does (zoo.run.runlog.expand_jsonl). Running the script again changes
nothing. Exit status 2, with one line, for a damaged file or a folder that holds a file in
both forms that differ.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from zoo.core.config import ConfigError
from zoo.run.runlog import compress_jsonl


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="+", type=Path, help="run or experiment folders")
    args = parser.parse_args(argv)
    for folder in args.folders:
        if not folder.is_dir():
            print(f"error: {folder} is not a folder", file=sys.stderr)
            return 2
    files = before = after = 0
    for folder in args.folders:
        try:
            done = compress_jsonl(folder)
        except ConfigError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        for run in done.unfinished:
            print(f"note: {run}: not finished (no complete.json), left as it is", file=sys.stderr)
        mb = f"{done.plain_bytes / 1e6:.1f} MB -> {done.packed_bytes / 1e6:.1f} MB"
        print(f"{folder}: {len(done.files)} file(s) compressed ({mb})")
        files += len(done.files)
        before += done.plain_bytes
        after += done.packed_bytes
    print(f"{files} file(s) compressed in all ({before / 1e6:.1f} MB -> {after / 1e6:.1f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
