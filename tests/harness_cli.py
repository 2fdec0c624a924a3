"""Running `python -m harness` as a user would, in a subprocess (shared by CLI tests)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run_harness(
    *args: str,
    cwd: Path,
    extra_path: tuple[Path, ...] = (),
    timeout: float = 600,
    env: dict[str, str] | None = None,
    without: tuple[str, ...] = (),
    root: Path = REPO,
) -> subprocess.CompletedProcess:
    """Exit code, stdout and stderr of ``python -m harness ARGS`` run in ``cwd``, with
    ``extra_path`` (e.g. a site directory of installed plugins) on PYTHONPATH, ``env``
    added to the environment, and the packages named in ``without`` unimportable (as on
    a machine where they are not installed). ``root``: the source tree whose ``harness``
    and ``zoo`` run (first on PYTHONPATH; another commit's files, for the refactor guard)."""
    path = os.pathsep.join(str(p) for p in (root, *extra_path))
    env = {**os.environ, "PYTHONPATH": path, "FORGE_ZOO_PROGRESS": "0", **(env or {})}
    # a W&B run earlier in this pytest process leaves its service's address here; a child
    # that inherits it logs through that (finished) service, not a service of its own
    env.pop("WANDB_SERVICE", None)
    command = [sys.executable, "-m", "harness"]
    if without:
        command = [
            sys.executable,
            "-c",
            "import sys; sys.modules.update(dict.fromkeys("
            f"{list(without)!r})); from harness.cli import main; sys.exit(main())",
        ]
    return subprocess.run(
        [*command, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def committed_configs() -> list[str]:
    """Every config.json committed under results/, as paths relative to the repository."""
    listed = subprocess.run(
        ["git", "ls-files", "results/*/config.json", "results/**/config.json"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    return listed.stdout.split()
