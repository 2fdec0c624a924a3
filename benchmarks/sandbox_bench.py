"""Sandbox throughput: executions per second, serial and pooled, and the cost of one.

    python benchmarks/sandbox_bench.py --n 40 [--workers 2]

Two programs: a trivial one (``print(1)``, the fixed cost of a sandbox: reaper, bwrap
namespaces and mounts, interpreter start) and a small test-running one (``run_tests`` of
a correct solution against five asserts, as a code env scores a completion). "serial"
runs them one after another in this thread; "pool" runs them through
``SandboxPool(workers).map``. executions/s = n / wall seconds of the whole batch;
ms/exec (wall) = wall seconds / n * 1000, what a batch pays per execution; ms/exec
(own) = mean of the executions' own durations (launch to the namespace being empty).
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from zoo.envs.sandbox import SandboxPool, execute, run_tests, sandbox_info

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


def machine() -> str:
    from zoo.core.runlog import cpu_model

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
        if kind == "trivial":
            result = execute(TRIVIAL, **LIMITS)
        else:
            verdict = run_tests(CANDIDATE, TESTS, **LIMITS)
            assert verdict.passed, verdict.result
            result = verdict.result
        assert result.status == "ok", result
        durations.append(result.duration_s)
    return time.monotonic() - start, sum(durations) / n


def pooled(kind: str, n: int, workers: int) -> tuple[float, float]:
    with SandboxPool(workers) as pool:
        if kind == "trivial":
            results = pool.map([TRIVIAL] * n, **LIMITS)
        else:
            verdicts = pool.map_tests([(CANDIDATE, TESTS)] * n, **LIMITS)
            assert all(v.passed for v in verdicts)
            results = [v.result for v in verdicts]
        assert all(r.status == "ok" for r in results)
        return pool.stats.wall_seconds, pool.stats.exec_seconds / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=40, help="executions per row")
    parser.add_argument("--workers", type=int, default=2, help="pool size")
    args = parser.parse_args()

    info = sandbox_info()
    execute(TRIVIAL, **LIMITS)  # warm the page cache; not counted
    print(f"machine: {machine()}")
    print(f"sandbox: sandboxed={info['sandboxed']} python={info['python']} uid={info['uid']}")
    print(f"n = {args.n} executions per row\n")
    header = f"{'program':<14}{'mode':<10}{'exec/s':>10}{'ms/exec (wall)':>17}"
    print(header + f"{'ms/exec (own)':>16}")
    print("-" * (len(header) + 16))
    for kind in ("trivial", "tests"):
        for mode in ("serial", f"pool({args.workers})"):
            if mode == "serial":
                wall, own = serial(kind, args.n)
            else:
                wall, own = pooled(kind, args.n, args.workers)
            print(
                f"{kind:<14}{mode:<10}{args.n / wall:>10.1f}{wall / args.n * 1e3:>17.1f}"
                f"{own * 1e3:>16.1f}"
            )


if __name__ == "__main__":
    main()
