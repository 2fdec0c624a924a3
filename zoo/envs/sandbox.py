"""The only place model-written code runs: a bubblewrap sandbox with rlimits.

``execute(program, timeout_s=..., memory_mb=...)`` runs a Python program in a fresh
``bwrap`` sandbox and returns an ``ExecResult`` whose ``status`` ("ok", "error",
"timeout", "memory", "killed") this module decides from what the kernel reports: the
exit status, the kernel's resource accounting (``wait4``), and its own wall clock and
output counters. Nothing the sandboxed program prints changes its status.
``zoo.envs.verdict`` builds pass/fail verdicts on top of it, from two executions: the
candidate in one sandbox, the hidden tests in another.

What it protects against (each has an adversarial test in tests/test_sandbox.py):

- network access: its own network namespace (only a loopback with no listeners), so a
  connection to the host's 127.0.0.1 is refused;
- secrets in the environment: the environment is cleared (PATH, LANG and HOME only),
  and the host's /proc is not visible (own PID namespace, own /proc);
- writes outside its work dir: the root is a read-only tmpfs holding read-only binds of
  /usr (plus the /bin, /lib, /lib64, /sbin links); the work dir (cwd, /tmp) is a private
  tmpfs of ``tmp_mb`` (64 MiB), /dev/shm one of 16 MiB, both gone when the run ends;
- reading root's private files: run as root, the sandbox drops to uid/gid ``nobody``
  before bwrap starts (a real host uid, not only a namespace mapping), so the kernel's
  permission checks apply to it as to any unprivileged user; no capabilities, and
  PR_SET_NO_NEW_PRIVS (bwrap sets it; ``--cap-drop ALL``);
- fork bombs: RLIMIT_NPROC (``max_processes``, 16 by default), counted per user
  namespace on Linux >= 5.14 (so per execution) and per host uid before that;
- memory bombs: RLIMIT_AS (``memory_mb``) per process; the host's OOM killer is never
  reached by one process;
- runaway CPU: RLIMIT_CPU and the wall-clock timeout, which SIGKILLs the sandbox's init;
  the kernel then kills every process in its PID namespace, ignored SIGTERM or not;
- huge output: at most ``max_output_bytes`` (1 MiB) per stream is kept; past that the
  sandbox is killed (status "killed"); RLIMIT_FSIZE (``max_file_mb``) caps each file;
- signalling the parent: inside its PID namespace the caller does not exist (its
  parent pid reads 0; host pids are not there), and it runs under another uid;
- lingering children: the program is PID 1 of its namespace (``--as-pid-1``); when it
  exits, or the harness SIGKILLs it at the timeout, the kernel kills every process left
  in the namespace, and ``execute`` returns only after that has happened;
  ``--die-with-parent`` and the reaper's guard pipe cover the caller dying. (As PID 1 it
  ignores signals with default handlers sent from inside the namespace, itself
  included; it is PID 1 so that its peak memory reaches the harness, see ``_REAPER``.)

What it does not protect against:

- kernel exploits (namespaces and rlimits are kernel features; no seccomp filter is
  installed, so the whole syscall surface is reachable) and CPU side channels;
- reading world-readable files under /usr, and /proc's host-wide files such as
  /proc/cpuinfo and /proc/meminfo; /etc, /home, /root, /var, /opt, /work and the host's
  /tmp are not mounted at all;
- total memory across processes: RLIMIT_AS is per process, so one execution can hold
  up to ``max_processes * memory_mb`` (no cgroup is used); the tmpfs sizes add to it;
- CPU share: a sandbox can keep all its processes busy until the wall-clock timeout.

Status rules, in order: the caller's ``stop_fd`` became readable -> "stopped"; wall
clock exceeded -> "timeout"; output cap exceeded -> "killed"; exit 0 -> "ok"; SIGXCPU, or
SIGKILL after using the CPU limit -> "timeout"; a failure whose kernel-accounted peak
resident memory (``ru_maxrss``) reached ``MEMORY_STATUS_FRACTION`` of ``memory_mb`` ->
"memory"; an exit status of 128+N
(bwrap's report of death by signal N) -> "killed"; anything else -> "error". bwrap
reports death by signal N as exit status 128+N, so a program that calls
``sys.exit(137)`` reads as "killed"; either way it is not "ok". A refused allocation that
never touched its pages (``bytearray(10**12)``) is an "error": memory was not used up.

If isolation cannot be set up (no ``bwrap`` or ``prlimit``, no usable interpreter, or
bwrap cannot create its namespaces), ``execute`` raises ``SandboxUnavailable`` with the
reason. Setting ``FORGE_ZOO_UNSAFE_NO_SANDBOX=1`` in the environment lets it run the
code WITHOUT isolation in that case (rlimits, timeout, empty environment and a
temporary cwd still apply; network, filesystem, other processes and secrets readable by
the calling user are all reachable); it warns once on stderr. Never set it where
untrusted code runs. When bwrap works, the sandbox is used whatever that variable says.

bubblewrap comes from Debian (``apt-get install bubblewrap``; scripts/setup.sh does it).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

__all__ = [
    "UNSAFE_ENV_VAR",
    "ExecResult",
    "SandboxPool",
    "SandboxUnavailable",
    "execute",
    "sandbox_info",
]

UNSAFE_ENV_VAR = "FORGE_ZOO_UNSAFE_NO_SANDBOX"
"""Set to "1" to allow running code without isolation when bwrap cannot be used."""

PYTHON_ENV_VAR = "FORGE_ZOO_SANDBOX_PYTHON"
"""Optional path of the interpreter to run inside the sandbox (default: a python3 under
/usr, readable by uid nobody)."""

MEMORY_STATUS_FRACTION = 0.75
"""A failed run whose peak resident memory reached this fraction of ``memory_mb`` gets
status "memory" (the interpreter's own mappings take part of the address space, so
the peak RSS of a memory bomb stops short of the limit)."""

_WORKDIR = "/tmp"
_PROGRAM_PATH = "/tmp/.forge_zoo_main.py"
_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": _WORKDIR}
_READ_CHUNK = 1 << 16
_REAP_GRACE_S = 2.0


class SandboxUnavailable(RuntimeError):
    """Isolation cannot be set up here; the message says why and how to fix it."""


@dataclass(frozen=True)
class ExecResult:
    status: str
    """"ok", "error", "timeout", "memory", "killed" or "stopped" (rules in the module
    docstring)."""
    exit_code: int | None
    """Exit status as bwrap reports it (death by signal N reads 128+N); None when the
    harness killed the sandbox (timeout, output cap)."""
    stdout: str
    stderr: str
    duration_s: float
    """Wall seconds from launch to the moment every sandboxed process is gone."""
    reason: str = ""
    """Why the status is not "ok", in words decided by the harness."""
    peak_memory_mb: float = 0.0
    """Kernel-accounted peak resident memory (ru_maxrss) of the program, or of the largest
    child it waited for."""


# --- launch configuration (probed once per process) -------------------------------------


@dataclass(frozen=True)
class _Backend:
    sandboxed: bool
    python: str
    prlimit: str
    bwrap: str = ""
    mounts: tuple[str, ...] = ()
    uid: int | None = None
    gid: int | None = None


_backend: _Backend | None = None
_backend_lock = threading.Lock()
_warned_unsafe = False


def _nobody() -> tuple[int, int]:
    try:
        entry = pwd.getpwnam("nobody")
        return entry.pw_uid, entry.pw_gid
    except KeyError:
        return 65534, 65534


def _system_mounts(python: str) -> tuple[str, ...]:
    """Read-only binds of /usr and the merged-/usr links, plus the interpreter's prefix
    when it lives elsewhere."""
    args = ["--ro-bind", "/usr", "/usr"]
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        host = f"/{name}"
        if os.path.islink(host):
            args += ["--symlink", os.readlink(host), host]
        elif os.path.isdir(host):
            args += ["--ro-bind", host, host]
    real = os.path.realpath(python)
    if not real.startswith("/usr/"):
        prefix = os.path.dirname(os.path.dirname(real))
        args += ["--ro-bind", prefix, prefix]
    return tuple(args)


def _find_python() -> str | None:
    chosen = os.environ.get(PYTHON_ENV_VAR)
    candidates = [chosen] if chosen else ["/usr/bin/python3", "/usr/local/bin/python3"]
    for path in candidates:
        if path and os.access(path, os.X_OK):
            return path
    return None


def _probe_backend() -> _Backend:
    prlimit = shutil.which("prlimit") or "/usr/bin/prlimit"
    python = _find_python()
    problems = []
    if not os.access(prlimit, os.X_OK):
        problems.append("prlimit (util-linux) not found")
    if python is None:
        problems.append(f"no python3 under /usr (set {PYTHON_ENV_VAR})")
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        problems.append(
            "bwrap not found on PATH: install bubblewrap "
            "(scripts/setup.sh runs `apt-get install -y bubblewrap`)"
        )
    uid, gid = _nobody() if os.geteuid() == 0 else (None, None)
    if not problems:
        backend = _Backend(True, python, prlimit, bwrap, _system_mounts(python), uid, gid)
        try:
            probe = _run(backend, "print(6 * 7)", timeout_s=10.0, memory_mb=256, stdin=b"")
        except OSError as e:
            problems.append(f"launching the sandbox failed: {e}")
        else:
            if probe.status == "ok" and probe.stdout.strip() == "42":
                return backend
            problems.append(
                f"bubblewrap could not start a sandbox (status {probe.status}, exit "
                f"{probe.exit_code}): {probe.stderr.strip()[:500]}; if it cannot create "
                "namespaces, unprivileged user namespaces may be disabled "
                "(sysctl kernel.unprivileged_userns_clone, "
                "kernel.apparmor_restrict_unprivileged_userns)"
            )
    reason = "; ".join(problems)
    if os.environ.get(UNSAFE_ENV_VAR) == "1" and python is not None and os.access(prlimit, os.X_OK):
        return _Backend(False, python, prlimit, uid=uid, gid=gid)
    raise SandboxUnavailable(
        f"cannot isolate model-written code: {reason}. Code environments refuse to run "
        f"without isolation; {UNSAFE_ENV_VAR}=1 runs the code unisolated (unsafe)."
    )


def _get_backend() -> _Backend:
    global _backend, _warned_unsafe
    with _backend_lock:
        if _backend is None:
            _backend = _probe_backend()
        if not _backend.sandboxed and not _warned_unsafe:
            _warned_unsafe = True
            print(
                f"WARNING: {UNSAFE_ENV_VAR}=1 and bubblewrap is unusable: running "
                "model-written code WITHOUT isolation (network, files and processes of "
                "this user are reachable). Never do this with untrusted code.",
                file=sys.stderr,
                flush=True,
            )
        return _backend


def sandbox_info() -> dict[str, Any]:
    """How code runs on this machine (for run records and benchmark tables)."""
    backend = _get_backend()
    return {
        "sandboxed": backend.sandboxed,
        "bwrap": backend.bwrap,
        "python": backend.python,
        "uid": backend.uid if backend.uid is not None else os.geteuid(),
    }


# --- one execution -----------------------------------------------------------------------


def execute(
    program: str,
    *,
    timeout_s: float,
    memory_mb: int,
    stdin: str = "",
    max_output_bytes: int = 1 << 20,
    max_processes: int = 16,
    max_open_files: int = 64,
    max_file_mb: int = 16,
    tmp_mb: int = 64,
    pass_fds: Sequence[int] = (),
    stop_fd: int | None = None,
) -> ExecResult:
    """Run ``program`` (Python source) in a fresh sandbox; see the module docstring.

    ``timeout_s`` is wall-clock seconds; ``memory_mb`` the address-space limit of each
    process; ``max_output_bytes`` applies to stdout and stderr separately.
    ``pass_fds``: open descriptors (pipe ends) the program inherits under the same
    numbers; ``execute`` takes them over and closes this process's copies once the
    sandbox holds them. ``stop_fd``: when it becomes readable, the sandbox is killed and
    the status is "stopped".
    """
    return _run(
        _get_backend(),
        program,
        timeout_s=timeout_s,
        memory_mb=memory_mb,
        stdin=stdin.encode(errors="replace"),
        max_output_bytes=max_output_bytes,
        max_processes=max_processes,
        max_open_files=max_open_files,
        max_file_mb=max_file_mb,
        tmp_mb=tmp_mb,
        pass_fds=tuple(pass_fds),
        stop_fd=stop_fd,
    )


def _rlimit_args(timeout_s: float, memory_mb: int, nproc: int, nofile: int, fsize_mb: int):
    cpu = int(timeout_s) + 1
    return [
        f"--cpu={cpu}:{cpu + 1}",
        f"--as={memory_mb << 20}",
        f"--nproc={nproc}",
        f"--nofile={nofile}",
        f"--fsize={fsize_mb << 20}",
        "--core=0",
        "--",
    ]


# Our direct child starts as a copy of this (possibly multi-GB) process, and the kernel
# keeps that copy's resident size as the child's peak (ru_maxrss). So a small reaper
# runs between us and bwrap: it forks bwrap, reports bwrap's rusage (the sandboxed
# processes' peak memory and CPU seconds) on a pipe, and exits with bwrap's status. If
# this process dies, the guard pipe reads EOF and the reaper kills bwrap, whose
# --die-with-parent then kills the sandbox. Running as root, the reaper also drops to uid
# nobody, so that Popen can use vfork instead of copying this process's page tables.
# bwrap's rusage covers only the processes it reaps itself; with --as-pid-1 that is the
# program (bwrap's own init would leave the program's peak memory out).
_REAPER = """\
import os, select, sys
report, guard, ids, close, *command = sys.argv[1:]
report, guard = int(report), int(guard)
if ids != "-":
    uid, gid = map(int, ids.split(":"))
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)
pid = os.fork()
if pid == 0:
    os.close(report)
    os.close(guard)
    try:
        os.execv(command[0], command)
    finally:
        os._exit(127)
for fd in close.split(","):
    os.close(int(fd))
child = os.pidfd_open(pid)
if child not in select.select([child, guard], [], [])[0]:
    os.killpg(0, 9)
_, status, usage = os.wait4(pid, 0)
os.write(report, b"%d %.3f" % (usage.ru_maxrss, usage.ru_utime + usage.ru_stime))
code = os.waitstatus_to_exitcode(status)
os._exit(code if code >= 0 else 128 - code)
"""


def _run(
    backend: _Backend,
    program: str,
    *,
    timeout_s: float,
    memory_mb: int,
    stdin: bytes,
    max_output_bytes: int = 1 << 20,
    max_processes: int = 16,
    max_open_files: int = 64,
    max_file_mb: int = 16,
    tmp_mb: int = 64,
    pass_fds: tuple[int, ...] = (),
    stop_fd: int | None = None,
) -> ExecResult:
    fds: list[int] = list(pass_fds)  # ours to close, whatever happens
    if timeout_s <= 0 or memory_mb <= 0:
        for fd in fds:
            os.close(fd)
        raise ValueError("timeout_s and memory_mb must be positive")
    limits = _rlimit_args(timeout_s, memory_mb, max_processes, max_open_files, max_file_mb)
    python = [backend.python, "-I", "-S", "-B"]
    tmpdir = None
    try:
        program_fd = os.memfd_create("forge-zoo-program")
        fds.append(program_fd)
        os.write(program_fd, program.encode(errors="replace"))
        os.lseek(program_fd, 0, os.SEEK_SET)
        report_r, report_w = os.pipe()
        guard_r, guard_w = os.pipe()
        fds += [report_r, report_w, guard_r, guard_w]
        info_r = info_w = -1
        if backend.sandboxed:
            info_r, info_w = os.pipe()
            fds += [info_r, info_w]
            # fmt: off
            command = [
                backend.bwrap, "--unshare-all", "--die-with-parent", "--new-session",
                "--as-pid-1", "--cap-drop", "ALL", "--clearenv",
                *(a for k, v in _ENV.items() for a in ("--setenv", k, v)),
                *backend.mounts,
                "--dev", "/dev", "--size", str(16 << 20), "--tmpfs", "/dev/shm",
                "--remount-ro", "/dev", "--proc", "/proc",
                "--size", str(tmp_mb << 20), "--tmpfs", _WORKDIR,
                "--ro-bind-data", str(program_fd), _PROGRAM_PATH,
                "--remount-ro", "/", "--chdir", _WORKDIR, "--info-fd", str(info_w),
                backend.prlimit, *limits, *python, _PROGRAM_PATH,
            ]
            # fmt: on
            child_fds = [program_fd, info_w, *pass_fds]
            cwd, env = "/", _ENV
        else:
            tmpdir = tempfile.TemporaryDirectory(prefix="forge-zoo-unsafe-")
            os.chmod(tmpdir.name, 0o777)
            command = [backend.prlimit, *limits, *python, f"/dev/fd/{program_fd}"]
            child_fds = [program_fd, *pass_fds]
            cwd, env = tmpdir.name, {**_ENV, "HOME": tmpdir.name}
        argv = [
            backend.python, "-I", "-S", "-c", _REAPER, str(report_w), str(guard_r),
            "-" if backend.uid is None else f"{backend.uid}:{backend.gid}",
            ",".join(map(str, child_fds)), *command,
        ]  # fmt: skip
        start = time.monotonic()
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            pass_fds=(report_w, guard_r, *child_fds),
            cwd=cwd,
            env=env,
            start_new_session=True,
        )
        for fd in (report_w, guard_r, info_w, *pass_fds):
            if fd >= 0:
                os.close(fd)
                fds.remove(fd)
        ns_init = None  # host pid of the sandbox's PID 1, which is the program itself
        if info_r >= 0:
            info = _read_all(info_r)
            marker = b'"child-pid":'
            if marker in info:
                ns_init = int(info.split(marker, 1)[1].split(b",", 1)[0].split(b"\n", 1)[0])
        return _supervise(
            proc, start, ns_init, report_r, stdin, timeout_s, memory_mb, max_output_bytes,
            stop_fd,
        )  # fmt: skip
    finally:
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        if tmpdir is not None:
            tmpdir.cleanup()


def _supervise(
    proc, start, ns_init, report_r, stdin, timeout_s, memory_mb, cap, stop_fd
) -> ExecResult:
    pidfd = os.pidfd_open(proc.pid)
    try:
        out, err, stop = _pump(proc, pidfd, stdin, start + timeout_s, cap, stop_fd)
        if stop is not None:
            _kill(proc, pidfd, ns_init)
        _, wait_status, _ = os.wait4(proc.pid, 0)
    finally:
        os.close(pidfd)
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            with contextlib.suppress(OSError):
                stream.close()
    duration = time.monotonic() - start
    code = os.waitstatus_to_exitcode(wait_status)
    proc.returncode = code
    report = _read_all(report_r).split()
    peak_mb = int(report[0]) / 1024 if len(report) == 2 else 0.0
    cpu_s = float(report[1]) if len(report) == 2 else 0.0
    status, reason = _classify(stop, code, peak_mb, cpu_s, timeout_s, memory_mb, cap)
    return ExecResult(
        status=status,
        exit_code=None if stop is not None else code,
        stdout=out.decode(errors="replace"),
        stderr=err.decode(errors="replace"),
        duration_s=duration,
        reason=reason,
        peak_memory_mb=peak_mb,
    )


def _read_all(fd: int) -> bytes:
    data = b""
    while chunk := os.read(fd, 4096):
        data += chunk
    return data


def _pump(proc, pidfd: int, stdin: bytes, deadline: float, cap: int, stop_fd: int | None):
    """Feed stdin, collect at most ``cap`` bytes per stream, until the process is gone
    and both streams are closed. Returns (stdout, stderr, stop) with stop None, "timeout",
    "output" or "stopped" (``stop_fd`` became readable while the process ran)."""
    sel = selectors.DefaultSelector()
    bufs = {proc.stdout.fileno(): bytearray(), proc.stderr.fileno(): bytearray()}
    for fd in bufs:
        os.set_blocking(fd, False)
        sel.register(fd, selectors.EVENT_READ)
    stdin_fd = proc.stdin.fileno()
    view = memoryview(stdin)
    if view:
        os.set_blocking(stdin_fd, False)
        sel.register(stdin_fd, selectors.EVENT_WRITE)
    else:
        proc.stdin.close()
    sel.register(pidfd, selectors.EVENT_READ)
    if stop_fd is not None:
        sel.register(stop_fd, selectors.EVENT_READ)
    exited, stop, open_streams = False, None, len(bufs)
    try:
        while not (exited and open_streams == 0):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                stop = "timeout"
                break
            for key, _ in sel.select(remaining):
                fd = key.fd
                if fd == stop_fd:
                    if not exited:
                        stop = "stopped"
                    sel.unregister(fd)
                elif fd == pidfd:
                    exited = True
                    sel.unregister(pidfd)
                    # All sandboxed processes are gone once bwrap exits; the pipes only
                    # need draining. Past this grace, stop reading.
                    deadline = min(deadline, time.monotonic() + _REAP_GRACE_S)
                elif fd == stdin_fd:
                    try:
                        sent = os.write(fd, view[:_READ_CHUNK])
                    except (BrokenPipeError, BlockingIOError) as e:
                        sent = -1 if isinstance(e, BrokenPipeError) else 0
                    if sent < 0 or sent == len(view):
                        sel.unregister(fd)
                        proc.stdin.close()
                    view = view[max(sent, 0) :]
                else:
                    chunk = os.read(fd, _READ_CHUNK)
                    if not chunk:
                        sel.unregister(fd)
                        open_streams -= 1
                        continue
                    buf = bufs[fd]
                    room = cap - len(buf)
                    buf += chunk[:room]
                    if len(chunk) > room:
                        stop = "output"
            if stop is not None:
                break
        if stop == "timeout" and exited:
            stop = None  # finished in time; a stream kept open past the grace is dropped
    finally:
        sel.close()
    return bytes(bufs[proc.stdout.fileno()]), bytes(bufs[proc.stderr.fileno()]), stop


def _kill(proc, pidfd: int, ns_init: int | None) -> None:
    """SIGKILL the sandbox and return once every process in it is gone.

    Killing the namespace's PID 1 makes the kernel kill the rest of the namespace, and
    bwrap (still alive) reaps PID 1 only after that, then exits, and so does the reaper;
    so the reaper's exit proves the namespace is empty. (Killing bwrap first would orphan
    PID 1 mid-teardown.) Without a namespace, or as a fallback, SIGKILL the process
    group of the reaper (bwrap, or the unsandboxed program and its children)."""
    if ns_init is not None:
        _signal(lambda: os.kill(ns_init, signal.SIGKILL))
        with selectors.DefaultSelector() as sel:
            sel.register(pidfd, selectors.EVENT_READ)
            if sel.select(_REAP_GRACE_S):
                return
    _signal(lambda: os.killpg(proc.pid, signal.SIGKILL))


def _signal(send) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        send()


def _classify(stop, code, peak_mb, cpu_s, timeout_s, memory_mb, cap) -> tuple[str, str]:
    if stop == "stopped":
        return "stopped", "stopped by the caller"
    if stop == "timeout":
        return "timeout", f"wall-clock limit of {timeout_s:g} s exceeded; killed"
    if stop == "output":
        return "killed", f"output exceeded {cap} bytes on one stream; killed"
    if code == 0:
        return "ok", ""
    signum = -code if code < 0 else code - 128 if 128 < code < 128 + 65 else 0
    cpu_limit = int(timeout_s) + 1
    if signum == signal.SIGXCPU or (signum == signal.SIGKILL and cpu_s >= cpu_limit):
        return "timeout", f"CPU-time limit of {cpu_limit} s exceeded"
    if peak_mb >= MEMORY_STATUS_FRACTION * memory_mb:
        return "memory", (
            f"failed with peak resident memory {peak_mb:.0f} MB of its {memory_mb} MB limit"
        )
    if signum:
        name = signal.Signals(signum).name if signum in signal.valid_signals() else signum
        return "killed", f"terminated by signal {name}"
    return "error", f"exit status {code}"


# --- bounded parallel executions ---------------------------------------------------------


@dataclass
class PoolStats:
    executions: int = 0
    exec_seconds: float = 0.0
    """Sum of the executions' own wall durations."""
    wall_seconds: float = 0.0
    """Wall seconds spent inside ``map``/``map_tests`` calls."""

    @property
    def executions_per_s(self) -> float:
        return self.executions / self.wall_seconds if self.wall_seconds else 0.0


class SandboxPool:
    """At most ``max_workers`` sandboxes at a time (threads waiting on subprocesses).

    ``stats`` counts executions and seconds for executions-per-second reports."""

    def __init__(self, max_workers: int) -> None:
        if max_workers < 1:
            raise ValueError("max_workers must be >= 1")
        self.max_workers = max_workers
        self._executor = ThreadPoolExecutor(max_workers, thread_name_prefix="sandbox")
        self._lock = threading.Lock()
        self.stats = PoolStats()

    def map(self, programs: Iterable[str], **limits: Any) -> list[ExecResult]:
        return self.run_all(lambda p: execute(p, **limits), list(programs), lambda r: r.duration_s)

    def run_all(
        self, fn: Callable[[Any], Any], items: Sequence, seconds_of: Callable[[Any], float]
    ) -> list:
        """``fn`` over ``items`` (each a unit of sandboxed work), at most ``max_workers`` at
        a time, results in order; ``seconds_of(result)`` is its own wall duration."""
        _get_backend()  # probe (and raise SandboxUnavailable) once, in this thread
        start = time.monotonic()
        out = list(self._executor.map(fn, items))
        wall = time.monotonic() - start
        with self._lock:
            self.stats.executions += len(out)
            self.stats.exec_seconds += sum(seconds_of(x) for x in out)
            self.stats.wall_seconds += wall
        return out

    def close(self) -> None:
        self._executor.shutdown(wait=True)

    def __enter__(self) -> SandboxPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
