"""Grading math answers with math-verify, under a timeout that works from any thread.

math-verify's own timeouts (``parse(parsing_timeout=...)``, ``verify(timeout_seconds=...)``)
use ``signal.alarm``: they raise when called off the main thread, and a signal cannot
interrupt long C-level work anyway (``\\boxed{9^{9^{9^{9}}}}`` spends its time in one
big-integer power). So grading runs in small worker processes, each started as

    python -P zoo/envs/math/math_grading.py --worker

(by path, importing nothing from ``zoo``), which call ``parse`` and ``verify`` with both
math-verify timeouts disabled (``parsing_timeout=None``, ``timeout_seconds=None``). The
calling thread sends one JSON line per grading request and waits for the answer with
``select`` for at most ``timeout_s`` seconds; on expiry it SIGKILLs the worker (a fresh one
starts on the next request) and the outcome is ``"timeout"``. A worker found dead instead
of answering (killed from outside, a crash) is replaced and the request tried once more.
Each worker also caps its own address space (``memory_mb``) and, per request, its CPU
time (the kernel kills it with SIGXCPU past the budget), so a stuck worker cannot outlive
a parent that died.

Outcomes of one grading: ``"correct"``, ``"wrong"``, ``"parse_failure"`` (nothing in the
prediction could be read as an answer), ``"timeout"``, ``"error"`` (the worker crashed or
answered nonsense). ``MathGrader`` is safe to call from many threads; ``workers`` requests
run in parallel.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import queue
import select
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor

OUTCOMES = ("correct", "wrong", "parse_failure", "timeout", "error")


class GraderError(RuntimeError):
    """The grading worker could not be started."""


class _Worker:
    """One worker process; used by one thread at a time (the grader hands it out)."""

    def __init__(self, timeout_s: float, memory_mb: int, startup_timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.memory_mb = memory_mb
        self.startup_timeout_s = startup_timeout_s
        self.proc: subprocess.Popen | None = None
        self._buf = b""

    def _start(self) -> None:
        cmd = [sys.executable, "-P", os.path.abspath(__file__), "--worker"]
        cmd += [f"--memory-mb={self.memory_mb}", f"--cpu-s={math.ceil(self.timeout_s) + 2}"]
        self.proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            bufsize=0,
            start_new_session=True,  # a Ctrl-C of the caller's terminal does not reach it
        )
        self._buf = b""
        line = self._read_line(time.monotonic() + self.startup_timeout_s)
        reply = _loads(line)
        if reply.get("ready") is not True:
            self.kill()
            why = reply.get("error") or (line or b"no answer").decode(errors="replace")
            raise GraderError(f"math-verify grading worker did not start: {why}")

    def _read_line(self, deadline: float) -> bytes | None:
        """The next line from the worker, or None at the deadline or end of file."""
        assert self.proc is not None and self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        poller = select.poll()  # not select.select: no FD_SETSIZE limit in busy processes
        poller.register(fd, select.POLLIN)
        while b"\n" not in self._buf:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not poller.poll(math.ceil(remaining * 1000)):
                return None
            chunk = os.read(fd, 65536)
            if not chunk:
                return None
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return line

    def grade(self, gold: str, prediction: str) -> str:
        outcome, died = self._attempt(gold, prediction)
        if died:
            # The worker was gone: killed from outside (a SIGKILL between two requests is
            # not seen by poll() until it lands), the OOM killer, a crash. One more try, on
            # a fresh worker, so a right answer is not scored 0 for it; a prediction that
            # kills workers itself costs one more worker and is an "error" or "timeout".
            outcome, _ = self._attempt(gold, prediction)
        return outcome

    def _attempt(self, gold: str, prediction: str) -> tuple[str, bool]:
        """(outcome, whether the worker died instead of answering)."""
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        assert self.proc is not None and self.proc.stdin is not None
        request = json.dumps({"gold": gold, "pred": prediction}).encode() + b"\n"
        try:
            view = memoryview(request)
            while view:  # a raw pipe may take a long line in parts
                view = view[self.proc.stdin.write(view) :]
        except (BrokenPipeError, OSError):
            self.kill()
            return "error", True
        deadline = time.monotonic() + self.timeout_s
        line = self._read_line(deadline)
        if line is None:
            # Past the deadline, or the worker died (SIGXCPU past its CPU budget, memory).
            # End of file before the deadline is a death even when the exit is not yet
            # reaped: a dying process closes its pipes before it becomes a zombie.
            died = self.proc.poll() is not None or time.monotonic() < deadline
            if died:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.proc.wait(timeout=5)  # its exit status says why
            self.kill()
            return ("timeout" if not died or self._killed_for_cpu() else "error"), died
        outcome = _loads(line).get("outcome")
        if outcome not in OUTCOMES:
            self.kill()
            return "error", False
        return outcome, False

    def _killed_for_cpu(self) -> bool:
        import signal

        return self.proc is not None and self.proc.returncode in (
            -signal.SIGXCPU,
            -signal.SIGKILL,
        )

    def kill(self) -> None:
        if self.proc is not None:
            _kill(self.proc)
        self._buf = b""


def _kill(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    for stream in (proc.stdin, proc.stdout):
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()


def _kill_all(workers: list[_Worker]) -> None:
    for w in workers:
        w.kill()


def _loads(line: bytes | None) -> dict:
    try:
        value = json.loads(line) if line else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


class MathGrader:
    """``grade(gold, prediction) -> outcome`` (one of ``OUTCOMES``), with a per-request
    wall-clock limit of ``timeout_s`` seconds that holds from any thread.

    ``gold`` is a reference answer in LaTeX or plain text (``"72"``, ``"\\frac{14}{3}"``);
    it is parsed as ``$gold$``. ``prediction`` is the model's whole completion; math-verify
    extracts the answer from it (a ``\\boxed{}`` first, then LaTeX and plain expressions).
    Workers start on first use (about a second each) and are killed when the grader is
    closed or garbage-collected, or at interpreter exit.
    """

    def __init__(
        self,
        timeout_s: float = 5.0,
        workers: int = 1,
        memory_mb: int = 2048,
        startup_timeout_s: float = 120.0,
    ) -> None:
        if timeout_s <= 0 or workers < 1 or memory_mb < 256:
            raise ValueError("MathGrader needs timeout_s > 0, workers >= 1, memory_mb >= 256")
        self.timeout_s = timeout_s
        self.workers = workers
        self._all = [_Worker(timeout_s, memory_mb, startup_timeout_s) for _ in range(workers)]
        self._idle: queue.SimpleQueue[_Worker] = queue.SimpleQueue()
        for w in self._all:
            self._idle.put(w)
        self._finalizer = weakref.finalize(self, _kill_all, self._all)

    def grade(self, gold: str, prediction: str) -> str:
        worker = self._idle.get()
        try:
            return worker.grade(str(gold), str(prediction))
        finally:
            self._idle.put(worker)

    def grade_many(self, pairs: Iterable[tuple[str, str]]) -> list[str]:
        pairs = list(pairs)
        if self.workers == 1 or len(pairs) <= 1:
            return [self.grade(g, p) for g, p in pairs]
        with ThreadPoolExecutor(max_workers=min(self.workers, len(pairs))) as pool:
            return list(pool.map(lambda gp: self.grade(*gp), pairs))

    def close(self) -> None:
        self._finalizer()


_shared: dict[tuple, MathGrader] = {}
_shared_lock = threading.Lock()


def shared_grader(timeout_s: float, workers: int, memory_mb: int = 2048) -> MathGrader:
    """One grader per setting per process, so env instances share their workers."""
    key = (float(timeout_s), int(workers), int(memory_mb))
    with _shared_lock:
        if key not in _shared:
            _shared[key] = MathGrader(timeout_s=timeout_s, workers=workers, memory_mb=memory_mb)
        return _shared[key]


# ---- the worker process (runs this file as a script; imports nothing from zoo) ----


def _worker_main(argv: list[str]) -> None:
    import logging
    import resource

    opts = dict(a[2:].split("=", 1) for a in argv if a.startswith("--") and "=" in a)
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # stray prints from libraries must not corrupt the protocol
    try:
        from math_verify import parse, verify

        logging.disable(logging.WARNING)  # math-verify's "timeout is disabled" warnings
        parse("$1$", parsing_timeout=None)  # warm the parser
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # SIGXCPU must not dump core
        memory = int(opts.get("memory-mb", 2048)) * 2**20
        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        if hard == resource.RLIM_INFINITY or hard > memory:
            resource.setrlimit(resource.RLIMIT_AS, (memory, hard))
    except BaseException as exc:  # reported to the parent, then exit
        out.write(json.dumps({"ready": False, "error": f"{type(exc).__name__}: {exc}"}) + "\n")
        return
    cpu_budget = int(opts.get("cpu-s", 7))
    out.write(json.dumps({"ready": True}) + "\n")

    gold_cache: dict[str, list] = {}
    for line in sys.stdin:
        used = resource.getrusage(resource.RUSAGE_SELF)
        soft = math.ceil(used.ru_utime + used.ru_stime) + cpu_budget
        _, hard = resource.getrlimit(resource.RLIMIT_CPU)
        if hard == resource.RLIM_INFINITY or soft < hard:
            resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))
        try:
            request = json.loads(line)
            gold, pred = str(request["gold"]), str(request["pred"])
            if gold not in gold_cache:
                if len(gold_cache) > 4096:
                    gold_cache.clear()
                gold_cache[gold] = parse(f"${gold}$", parsing_timeout=None) or [gold]
            parsed = parse(pred, parsing_timeout=None)
            if not parsed:
                outcome = "parse_failure"
            elif verify(gold_cache[gold], parsed, timeout_seconds=None):
                outcome = "correct"
            else:
                outcome = "wrong"
        except BaseException:  # MemoryError, RecursionError, bad request
            outcome = "error"
        out.write(json.dumps({"outcome": outcome}) + "\n")


if __name__ == "__main__" and "--worker" in sys.argv:
    _worker_main(sys.argv[1:])
