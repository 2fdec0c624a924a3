"""Test verdicts decided in a process the model-written code never touched.

``run_tests(TestJob(candidate, tests, serve=(...)))`` starts two sandboxes (each one
``zoo.envs.sandbox.execute``, with its namespaces, uid and rlimits) joined by two pipes:

- the candidate's: runs the model-written program as ``__main__``, then serves calls to
  its top-level functions (``zoo.envs.plain_calls.serve_candidate``);
- the tests': runs the trusted ``prelude`` (e.g. HumanEval's prompt, whose helper
  functions the tests use; MBPP's setup code), binds each name in ``serve`` to a proxy
  that calls the candidate's function of that name, runs the hidden ``tests``, and only
  then prints a fresh 128-bit nonce. The verdict is "passed" when the tests' process
  exited 0 with that nonce on its stdout.

Only plain data crosses (None, bool, int, float, complex, str, bytes, and lists, tuples,
dicts, sets, frozensets of those, checked by exact type when encoded and rebuilt from
JSON on the test side); a candidate's exception comes back as the builtin exception of
that name, or ``CandidateError``; a dead or misbehaving candidate as ``CandidateGone``.
So the tests compare values built by their own interpreter, with their own builtins and
modules.

What this closes (each has an attack in tests/test_reward_hacking.py): objects or builtin
subclasses whose ``__eq__``, ``__hash__``, ``__str__`` lie (they cannot be encoded);
generators, iterators, functions returned as values (same); patching builtins,
``AssertionError``, or modules the tests use (``math.isclose``): they are patched in the
candidate's interpreter only; walking frames or the garbage collector for the nonce or
the tests: neither is in the candidate's process; reading the test process's memory
(``/proc/<pid>/mem``), ptrace, signals: the two sandboxes are separate PID namespaces
(each sees only its own processes; without a sandbox, in the explicit unsafe mode, the
test process marks itself not dumpable instead);
``sys.exit(0)`` / ``os._exit(0)`` at import or in a call, atexit hooks, threads, printing
a fake verdict or flooding stdout: the candidate's exit status and output are not read
for the verdict, its death fails the pending call, and output past the cap kills it.

What it does not protect against: a candidate that computes the right values by
exploiting the task (reading expected outputs shown in the prompt, or hard-coding the
tests' inputs it is called with); kernel exploits and timing side channels, as for any
sandboxed execution; candidates whose task needs objects other than plain data (a class
instance, a callable argument) cannot be tested this way and fail. Mutation of an
argument in place is not seen by the tests (arguments are copied across).
"""

from __future__ import annotations

import ast
import builtins
import os
import secrets
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zoo.envs import plain_calls
from zoo.envs.sandbox import ExecResult, SandboxPool, execute, sandbox_info

__all__ = ["TestJob", "TestVerdict", "free_names", "map_tests", "run_tests"]

PLAIN_CALLS_SOURCE = Path(plain_calls.__file__).read_text()
TESTS_GRACE_S = 0.5
"""The tests' process gets this much longer than the candidate's, so that a candidate
that runs out of time is what the verdict reports."""
CANDIDATE_EXIT_GRACE_S = 0.1
"""Once the tests are done, the candidate's process gets this long to see the end of its
request pipe, flush what it printed and exit; then it is stopped."""
FAILURE_STATUSES = ("timeout", "memory", "killed")


@dataclass(frozen=True)
class TestJob:
    """One verdict to decide. ``candidate``: model-written Python (untrusted). ``tests``:
    the hidden tests (trusted), run after ``prelude`` (trusted) with every name in
    ``serve`` bound to the candidate's top-level function of that name."""

    __test__ = False  # not a pytest class

    candidate: str
    tests: str
    serve: tuple[str, ...]
    prelude: str = ""


@dataclass(frozen=True)
class TestVerdict:
    __test__ = False

    passed: bool
    """The tests' process exited 0 and printed this verdict's nonce after the tests."""
    tests: ExecResult
    """The tests' process: its stdout (what the tests printed) and stderr (a failing
    assert's traceback)."""
    candidate: ExecResult
    """The candidate's process: what it printed, and how it ended ("stopped" when it was
    still running once the tests had finished)."""

    @property
    def status(self) -> str:
        """The first of the candidate's and the tests' statuses that is "timeout",
        "memory" or "killed" (tests that catch the failed calls can still pass); else
        "ok" when passed, "error" when not."""
        for result in (self.candidate, self.tests):
            if result.status in FAILURE_STATUSES:
                return result.status
        return "ok" if self.passed else "error"

    @property
    def duration_s(self) -> float:
        return max(self.tests.duration_s, self.candidate.duration_s)


def _candidate_program(source: str, request_fd: int, reply_fd: int) -> str:
    return f"{PLAIN_CALLS_SOURCE}\nserve_candidate({request_fd}, {reply_fd}, {source!r})\n"


_TESTS_MAIN = """
def _fz_main(request_fd, reply_fd, serve, prelude, tests, nonce, undumpable):
    import sys
    if undumpable:  # PR_SET_DUMPABLE = 4: no ptrace attach, /proc/<pid>/mem owned by root
        import ctypes
        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)
    connection = Connection(request_fd, reply_fd)
    env = {"__name__": "__main__", "__builtins__": builtins}
    exec(compile(prelude, "<prelude>", "exec", dont_inherit=True, optimize=0), env)
    for name in serve:
        env[name] = CandidateFunction(connection, name)
    exec(compile(tests, "<tests>", "exec", dont_inherit=True, optimize=0), env)
    sys.stdout.flush()
    os.write(1, b"\\n" + nonce.encode() + b"\\n")
    os._exit(0)
"""


def _tests_program(job: TestJob, request_fd: int, reply_fd: int, nonce: str) -> str:
    # In a sandbox the candidate cannot see this process at all (another PID namespace),
    # so the prctl (3-4 ms of ctypes import) is only made where there is no sandbox.
    undumpable = not sandbox_info()["sandboxed"]
    call = (
        f"_fz_main({request_fd}, {reply_fd}, {tuple(job.serve)!r}, {job.prelude!r}, "
        f"{job.tests!r}, {nonce!r}, {undumpable})"
    )
    return f"{PLAIN_CALLS_SOURCE}\n{_TESTS_MAIN}\n{call}\n"


def run_tests(job: TestJob, *, timeout_s: float, memory_mb: int, **limits: Any) -> TestVerdict:
    """Decide ``job`` in two sandboxes (module docstring). ``timeout_s`` bounds the
    candidate's process (the tests' gets ``TESTS_GRACE_S`` more); ``memory_mb`` and
    ``limits`` (``execute``'s keywords) apply to each process."""
    request_r, request_w = os.pipe()
    reply_r, reply_w = os.pipe()
    stop_r, stop_w = os.pipe()
    nonce = secrets.token_hex(16)
    outcome: dict[str, Any] = {}

    def candidate_side() -> None:
        try:
            outcome["result"] = execute(
                _candidate_program(job.candidate, request_r, reply_w),
                timeout_s=timeout_s, memory_mb=memory_mb, pass_fds=(request_r, reply_w),
                stop_fd=stop_r, **limits,
            )  # fmt: skip
        except BaseException as exc:  # re-raised in the caller's thread
            outcome["error"] = exc

    thread = threading.Thread(target=candidate_side, name="sandbox-candidate", daemon=True)
    thread.start()
    try:
        tests = execute(
            _tests_program(job, request_w, reply_r, nonce),
            timeout_s=timeout_s + TESTS_GRACE_S, memory_mb=memory_mb,
            pass_fds=(request_w, reply_r), **limits,
        )  # fmt: skip
    finally:
        thread.join(CANDIDATE_EXIT_GRACE_S)  # it normally exits on the end-of-file
        os.write(stop_w, b"x")
        thread.join()
        os.close(stop_r)
        os.close(stop_w)
    if "error" in outcome:
        raise outcome["error"]
    passed = tests.status == "ok" and nonce in tests.stdout.splitlines()
    return TestVerdict(passed=passed, tests=tests, candidate=outcome["result"])


def map_tests(pool: SandboxPool, jobs: Iterable[TestJob], **limits: Any) -> list[TestVerdict]:
    """``run_tests`` for each job, through ``pool`` (in parallel, in order)."""
    return pool.run_all(lambda job: run_tests(job, **limits), list(jobs), lambda v: v.duration_s)


def free_names(source: str, *context: str) -> list[str]:
    """Names ``source`` reads that neither it nor the ``context`` sources bind, and that
    are not builtins, each once: the candidate's functions the tests call
    (plus any module they use without importing it)."""
    bound: set[str] = set(vars(builtins))
    for text in (source, *context):
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
                bound.add(node.id)
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                bound.add(node.name)
            elif isinstance(node, ast.arg):
                bound.add(node.arg)
            elif isinstance(node, ast.alias):
                bound.add(node.asname or node.name.split(".")[0])
            elif isinstance(node, ast.ExceptHandler) and node.name:
                bound.add(node.name)
    used = [
        node.id
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)
    ]
    return [name for name in dict.fromkeys(used) if name not in bound]
