"""Calls to actors: a bounded wait, and one error type for a failed service."""

from __future__ import annotations

import sys
from typing import Any

CALL_TIMEOUT_S = 3600.0
"""Upper bound on one call to an actor: a dead or hung process surfaces as an error."""


def one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:500]


class ServiceFailure(RuntimeError):
    """A service's process died or a call to it failed or timed out."""


def report_fault(failure: Any) -> None:
    """Monarch's hook for a failed process that nobody is waiting on. Its default ends the
    main thread with KeyboardInterrupt; instead, say what failed and let the pending call
    (if any) raise ServiceFailure, so the run stops with its metrics and checkpoint."""
    print(f"forge-zoo: a service process failed: {one_line(failure)}", file=sys.stderr)


def result_of(service: str, call: Any) -> Any:
    try:
        return call.get(timeout=CALL_TIMEOUT_S)
    except Exception as exc:
        raise ServiceFailure(
            f"the {service} service failed ({type(exc).__name__}: {one_line(exc)}); the run "
            "stops here: metrics up to the last finished step and the last checkpoint are "
            "kept, continue with --resume"
        ) from exc
