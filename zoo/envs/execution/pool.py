"""The sandbox pools that env instances of a process share, and the probe that refuses to
build an env that would run model-written code without isolation (``require_sandbox``):
used by the code envs and ``tool_arithmetic``."""

from __future__ import annotations

import os
import threading
from typing import Any

from zoo.core.config import ConfigError
from zoo.envs.execution.sandbox import SandboxPool, SandboxUnavailable, sandbox_info

MAX_WORKERS = 16


class CodeEnvUnavailable(ConfigError, SandboxUnavailable):
    """A code env cannot isolate model-written code here; the message says why."""


# --- shared sandbox pools --------------------------------------------------------------

_pools: dict[int, SandboxPool] = {}
_pools_lock = threading.Lock()


def default_workers() -> int:
    return max(1, min(8, os.cpu_count() or 1))


def shared_pool(workers: int) -> SandboxPool:
    """One pool per size per process, so env instances share their threads."""
    with _pools_lock:
        if workers not in _pools:
            _pools[workers] = SandboxPool(workers)
        return _pools[workers]


def require_sandbox(env: str) -> dict[str, Any]:
    """``sandbox_info()``, or ``CodeEnvUnavailable`` saying why code cannot be isolated."""
    try:
        return sandbox_info()
    except SandboxUnavailable as exc:
        raise CodeEnvUnavailable(f"{env}: {exc}") from exc
