"""Sandbox throughput: executions per second, serial and pooled, and the cost of one.

    python -m benchmarks.sandbox_bench --n 40 [--workers 2]

Three programs: a trivial one (``print(1)``, the fixed cost of a sandbox: reaper, bwrap
namespaces and mounts, interpreter start); "one process" (a correct solution and five
asserts in ONE sandbox: the shape of the verdict before the two-process design, the
baseline); and "verdict" (``zoo.envs.execution.verdict.run_tests`` of the same solution and asserts:
candidate and tests in two sandboxes joined by a pipe, as a code env scores a completion).
"serial" runs them one after another in this thread; "pool" through ``SandboxPool``.
executions/s = n / wall seconds of the whole batch; ms/exec (wall) = wall seconds / n *
1000, what a batch pays per execution; ms/exec (own) = mean of the executions' own
durations (launch to the namespace being empty); "x one process" = the verdict's
executions/s over the one-process baseline's, same mode, same run.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import time

from zoo.envs.execution.sandbox import SandboxPool, execute, sandbox_info
from zoo.envs.execution.verdict import TestJob, map_tests, run_tests

LIMITS = {"timeout_s": 10.0, "memory_mb": 256}
TRIVIAL = "print(1)\n"
CANDIDATE = "def add(a, b):\n    return a + b\n"
TESTS = """
def check(candidate):
    assert candidate(2, 3) == 5
    assert candidate(-1, 1) == 0
    assert candidate(0, 0) == 0
    assert candidate(10**6, 1) == 10**6 + 1
    assert candidate("a", "b") == "ab"

check(add)
"""
ONE_PROCESS = CANDIDATE + TESTS + "print('passed')\n"
JOB = TestJob(CANDIDATE, TESTS, serve=("add",))


def machine() -> str:
    from zoo.run.runlog import cpu_model

    bwrap = subprocess.run(["bwrap", "--version"], capture_output=True, text=True).stdout
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return (
        f"{cpu_model()}; nproc {len(os.sched_getaffinity(0))}; load average {load}; "
        f"{bwrap.strip() or 'no bwrap'}; {platform.platform()}"
    )


def serial(kind: str, n: int) -> tuple[float, float]:
    durations = []
    start = time.monotonic()
    for _ in range(n):
        if kind == "verdict":
            verdict = run_tests(JOB, **LIMITS)
            assert verdict.passed, verdict
            durations.append(verdict.duration_s)
        else:
            result = execute(TRIVIAL if kind == "trivial" else ONE_PROCESS, **LIMITS)
            assert result.status == "ok", result
            durations.append(result.duration_s)
    return time.monotonic() - start, sum(durations) / n


def pooled(kind: str, n: int, workers: int) -> tuple[float, float]:
    with SandboxPool(workers) as pool:
        if kind == "verdict":
            verdicts = map_tests(pool, [JOB] * n, **LIMITS)
            assert all(v.passed for v in verdicts)
        else:
            results = pool.map([TRIVIAL if kind == "trivial" else ONE_PROCESS] * n, **LIMITS)
            assert all(r.status == "ok" for r in results)
        return pool.stats.wall_seconds, pool.stats.exec_seconds / n


def sandbox_table(n: int = 40, workers: int = 2) -> list[dict[str, object]]:
    """One row per (program, mode): executions/s and milliseconds per execution."""
    execute(TRIVIAL, **LIMITS)  # warm the page cache; not counted
    rows, baseline = [], {}
    for kind in ("trivial", "one process", "verdict"):
        for mode in ("serial", f"pool({workers})"):
            wall, own = serial(kind, n) if mode == "serial" else pooled(kind, n, workers)
            rate = n / wall
            if kind == "one process":
                baseline[mode] = rate
            ratio = rate / baseline[mode] if kind == "verdict" else None
            rows.append(
                {
                    "program": kind,
                    "mode": mode,
                    "exec/s": rate,
                    "ms/exec (wall)": wall / n * 1e3,
                    "ms/exec (own)": own * 1e3,
                    "x one process": ratio,
                }
            )
    return rows


def main() -> None:
    import pandas as pd

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=40, help="executions per row")
    parser.add_argument("--workers", type=int, default=2, help="pool size")
    args = parser.parse_args()
    info = sandbox_info()
    print(f"machine: {machine()}")
    print(f"sandbox: sandboxed={info['sandboxed']} python={info['python']} uid={info['uid']}")
    print(f"n = {args.n} executions per row\n")
    print(
        pd.DataFrame(sandbox_table(args.n, args.workers)).to_markdown(index=False, floatfmt=".1f")
    )


if __name__ == "__main__":
    main()
