"""Adversarial tests of zoo.envs.sandbox: one per property it claims.

Each attack test asserts that the attack was contained AND that the harness keeps going
(a normal program run right after still succeeds). They need bubblewrap (`bwrap`),
which scripts/setup.sh installs; without it they fail with the reason, on purpose.
"""

from __future__ import annotations

import os
import secrets
import signal
import socket
import textwrap
import threading
import time

import pytest

from zoo.envs import sandbox
from zoo.envs.sandbox import SandboxPool, SandboxUnavailable, execute

LIMITS = {"timeout_s": 5.0, "memory_mb": 256}


def run(program: str, **overrides):
    return execute(textwrap.dedent(program), **{**LIMITS, **overrides})


def assert_harness_keeps_going() -> None:
    start = time.monotonic()
    result = run("print(sum(range(10)))")
    assert result.status == "ok", result
    assert result.stdout == "45\n"
    assert time.monotonic() - start < 5.0, "the machine did not stay responsive"


def host_processes_with(marker: str) -> list[int]:
    """Host pids whose command line contains ``marker``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if marker.encode() in f.read():
                    found.append(int(entry))
        except OSError:
            continue
    return found


# --- plain behaviour ---------------------------------------------------------------------


def test_ok_program_has_status_ok_and_its_stdout():
    result = run("import sys; print('hello'); print('warn', file=sys.stderr)")
    assert (result.status, result.exit_code) == ("ok", 0)
    assert result.stdout == "hello\n"
    assert result.stderr == "warn\n"
    assert 0 < result.duration_s < LIMITS["timeout_s"]


def test_stdin_is_passed_to_the_program():
    result = run("print(sum(int(x) for x in input().split()))", stdin="1 2 3\n")
    assert (result.status, result.stdout) == ("ok", "6\n")


def test_syntax_error_is_an_error():
    result = run("def f(:\n    pass")
    assert (result.status, result.exit_code) == ("error", 1)
    assert "SyntaxError" in result.stderr


def test_work_dir_is_private_and_writable():
    result = run(
        """
        import os
        open("scratch.txt", "w").write("data")
        print(os.getcwd(), open("scratch.txt").read(), sorted(os.environ))
        """
    )
    assert result.status == "ok", result
    assert result.stdout == "/tmp data ['HOME', 'LANG', 'PATH', 'PWD']\n"


# --- attacks -----------------------------------------------------------------------------


def test_infinite_loop_times_out():
    result = run("while True:\n    pass", timeout_s=1.0)
    assert result.status == "timeout"
    assert result.exit_code is None
    assert 1.0 <= result.duration_s < 4.0
    assert_harness_keeps_going()


def test_fork_bomb_is_contained():
    marker = f"forge-zoo-forkbomb-{secrets.token_hex(8)}"
    # How many processes can it make? Each child sleeps, so they all count at once.
    counted = run(
        """
        import os, time
        n = 0
        while True:
            try:
                pid = os.fork()
            except OSError:
                break
            if pid == 0:
                time.sleep(30)
                os._exit(0)
            n += 1
        print(n)
        """
    )
    assert counted.status == "ok", counted
    assert 0 < int(counted.stdout) < 16  # RLIMIT_NPROC = 16 processes including itself
    # The real thing: every process forks forever. Re-exec to carry a marker in argv.
    bomb = f"""
        import os, sys
        if len(sys.argv) < 2:
            os.execv(sys.executable, [sys.executable, "-I", "-S", "-c", open(__file__).read(),
                                      "{marker}"])
        while True:
            try:
                os.fork()
            except OSError:
                pass
        """
    result = run(bomb, timeout_s=1.0)
    assert result.status == "timeout"
    assert host_processes_with(marker) == []
    assert_harness_keeps_going()


def test_memory_bomb_is_stopped_by_its_own_limit():
    result = run(
        """
        chunks = []
        while True:
            chunks.append(b"x" * (1 << 20))
        """,
        memory_mb=128,
    )
    assert result.status in ("memory", "killed"), result
    assert result.peak_memory_mb <= 128
    assert_harness_keeps_going()


def test_writing_outside_the_work_dir_fails(tmp_path):
    targets = [
        tmp_path / "escaped.txt",
        f"/root/forge-zoo-escape-{secrets.token_hex(4)}",
        "/usr/forge-zoo-escape",
        "/forge-zoo-escape",
        "/dev/forge-zoo-escape",
    ]
    result = run(
        f"""
        for path in {[str(t) for t in targets]!r}:
            try:
                with open(path, "w") as f:
                    f.write("escaped")
                print("WROTE", path)
            except OSError as e:
                print("refused", path, type(e).__name__)
        """
    )
    assert result.status == "ok", result
    assert "WROTE" not in result.stdout
    assert result.stdout.count("refused") == len(targets)
    for target in targets:
        assert not os.path.exists(target)
    assert_harness_keeps_going()


def test_reading_a_secret_from_the_environment_fails(monkeypatch):
    secret = f"forge-zoo-secret-{secrets.token_hex(8)}"
    monkeypatch.setenv("FORGE_ZOO_TEST_SECRET", secret)
    result = run(
        f"""
        import os
        print(dict(os.environ))
        for path in ["/proc/{os.getpid()}/environ", "/proc/1/environ", "/proc/self/environ"]:
            try:
                print(open(path, "rb").read())
            except OSError as e:
                print("refused", path, type(e).__name__)
        """
    )
    assert result.status == "ok", result
    assert "FORGE_ZOO_TEST_SECRET" not in result.stdout + result.stderr
    assert secret not in result.stdout + result.stderr
    assert_harness_keeps_going()


def test_network_connection_to_host_loopback_fails():
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.setblocking(False)
    port = listener.getsockname()[1]
    try:
        result = run(
            f"""
            import socket
            try:
                socket.create_connection(("127.0.0.1", {port}), timeout=2).close()
                print("CONNECTED")
            except OSError as e:
                print("refused", type(e).__name__)
            """
        )
        assert result.status == "ok", result
        assert "CONNECTED" not in result.stdout
        assert result.stdout.startswith("refused")
        with pytest.raises(BlockingIOError):
            listener.accept()  # nothing ever reached the listener
    finally:
        listener.close()
    assert_harness_keeps_going()


def test_killing_or_signalling_the_parent_fails():
    received = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: received.append(signum))
    try:
        result = run(
            f"""
            import os, signal
            print("ppid", os.getppid())
            for pid, sig in [(os.getppid(), signal.SIGKILL), ({os.getpid()}, signal.SIGTERM),
                             (-1, signal.SIGKILL)]:
                try:
                    os.kill(pid, sig)
                    print("sent", pid)
                except OSError as e:
                    print("refused", pid, type(e).__name__)
            """
        )
        time.sleep(0.1)
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert received == []
    assert result.status == "ok", result
    assert f"refused {os.getpid()} ProcessLookupError" in result.stdout
    assert_harness_keeps_going()


def test_ignoring_sigterm_is_still_killed_at_the_timeout():
    result = run(
        """
        import signal
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        while True:
            pass
        """,
        timeout_s=1.0,
    )
    assert result.status == "timeout"
    assert result.duration_s < 4.0
    assert_harness_keeps_going()


def test_huge_stdout_is_capped():
    cap = 1 << 20
    result = run(
        """
        import sys
        while True:
            sys.stdout.write("x" * 65536)
        """,
        max_output_bytes=cap,
    )
    assert result.status == "killed"
    assert "output" in result.reason
    assert len(result.stdout) == cap
    assert_harness_keeps_going()


def test_no_child_survives_the_timeout():
    marker = f"forge-zoo-orphan-{secrets.token_hex(8)}"
    result = run(
        f"""
        import subprocess, sys, time
        child = subprocess.Popen(
            [sys.executable, "-c", "import time\\nwhile True: time.sleep(0.05)", "{marker}"],
            start_new_session=True,
        )
        print("spawned", flush=True)
        while True:
            time.sleep(0.05)
        """,
        timeout_s=1.5,
    )
    assert result.status == "timeout"
    assert result.stdout == "spawned\n"
    assert host_processes_with(marker) == []
    assert_harness_keeps_going()


def test_no_child_survives_the_program_exiting():
    marker = f"forge-zoo-daemon-{secrets.token_hex(8)}"
    result = run(
        f"""
        import os, sys, time
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(60)",
                                          "{marker}"])
            os._exit(0)
        time.sleep(0.3)
        print("daemonized")
        """
    )
    assert result.status == "ok", result
    assert result.duration_s < 3.0  # returns when the program exits, not at the timeout
    assert host_processes_with(marker) == []
    assert_harness_keeps_going()


# --- descriptors passed in, and stopping from outside ----------------------------------------


def test_passed_descriptors_reach_the_program_and_are_taken_over():
    read_end, write_end = os.pipe()
    result = run(f"import os\nos.write({write_end}, b'through the pipe')\n", pass_fds=(write_end,))
    assert result.status == "ok", result
    # execute closed this process's copy of the write end: the read sees all, then EOF.
    with os.fdopen(read_end, "rb") as pipe:
        assert pipe.read() == b"through the pipe"
    with pytest.raises(OSError):
        os.fstat(write_end)


def test_a_readable_stop_fd_stops_the_sandbox_at_once():
    stop_r, stop_w = os.pipe()
    marker = f"forge-zoo-stop-{secrets.token_hex(4)}"
    threading.Timer(0.3, os.write, (stop_w, b"x")).start()
    start = time.monotonic()
    result = run(f"import time\n# {marker}\ntime.sleep(30)\n", stop_fd=stop_r)
    assert result.status == "stopped" and result.reason == "stopped by the caller"
    assert time.monotonic() - start < 3.0
    assert host_processes_with(marker) == []
    os.close(stop_r)
    os.close(stop_w)
    assert_harness_keeps_going()


# --- availability, opt-in and the pool ---------------------------------------------------


def test_refuses_to_run_without_isolation(monkeypatch):
    monkeypatch.setattr(sandbox, "_backend", None)
    monkeypatch.setattr(sandbox.shutil, "which", lambda name: None)
    monkeypatch.delenv(sandbox.UNSAFE_ENV_VAR, raising=False)
    with pytest.raises(SandboxUnavailable, match="bwrap not found"):
        run("print('should not run')")


def test_unsafe_opt_in_runs_unisolated_with_limits_and_warns(monkeypatch, capsys):
    monkeypatch.setattr(sandbox, "_backend", None)
    monkeypatch.setattr(sandbox, "_warned_unsafe", False)
    monkeypatch.setattr(sandbox.shutil, "which", lambda name: None)
    monkeypatch.setenv(sandbox.UNSAFE_ENV_VAR, "1")
    monkeypatch.setenv("FORGE_ZOO_TEST_SECRET", "hidden")
    result = run("import os; print(sorted(os.environ))")
    assert result.status == "ok", result
    assert "FORGE_ZOO_TEST_SECRET" not in result.stdout
    assert run("while True:\n    pass", timeout_s=0.5).status == "timeout"
    warnings = capsys.readouterr().err
    assert warnings.count("WITHOUT isolation") == 1
    assert not sandbox.sandbox_info()["sandboxed"]


def test_pool_runs_in_parallel_in_order_and_counts():
    programs = [f"import time; time.sleep(0.4); print({i})" for i in range(4)]
    with SandboxPool(max_workers=4) as pool:
        start = time.monotonic()
        results = pool.map(programs, **LIMITS)
        wall = time.monotonic() - start
        doubled = pool.run_all(lambda n: run(f"print({n} * 2)"), [1, 2], lambda r: r.duration_s)
    assert [r.stdout for r in results] == [f"{i}\n" for i in range(4)]
    assert wall < 4 * 0.4  # overlapping, not one after another
    assert [r.stdout for r in doubled] == ["2\n", "4\n"]
    assert pool.stats.executions == 6
    assert pool.stats.executions_per_s > 0
    assert pool.stats.exec_seconds >= 4 * 0.4


def test_sandbox_runs_the_system_interpreter_not_this_process():
    result = run("import sys; print(sys.flags.isolated, sys.flags.no_site)")
    assert result.stdout == "1 1\n"
    info = sandbox.sandbox_info()
    assert info["sandboxed"] is True
    assert info["python"].startswith("/usr/")
