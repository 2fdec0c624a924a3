"""``python -m harness doctor``: the checks run for real here and pass; each fails when the
machine cannot hold the run (a disk too small for two checkpoints, a memory need past the
machine's)."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
from pathlib import Path

import pytest
from harness_cli import run_harness
from test_faults import small_disk

from harness.cli import main
from harness.doctor import check_disk, check_memory, checkpoint_bytes, run_checks, run_generator
from zoo.models.presets import model_shape
from zoo.run.run_config import RunConfig


def doctor(*args: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["doctor", *args])
    return code, out.getvalue()


def test_the_fast_checks_pass_on_this_machine(tmp_path):
    checks = run_checks(RunConfig.from_flat(), tmp_path, only=("sandbox", "disk", "memory"))
    assert [c.name for c in checks] == ["sandbox", "disk", "memory"]
    assert all(c.status == "PASS" for c in checks), checks
    assert "could not reach a host port nor write a host file" in checks[0].detail


def test_a_disk_too_small_for_two_checkpoints_fails(tmp_path):
    one = checkpoint_bytes(model_shape("tiny").params)
    with small_disk(tmp_path / "disk", f"{int(one * 1.5) // 1024}k") as disk:
        check = check_disk(RunConfig.from_flat(), disk / "run")
        assert check.status == "FAIL" and "--out on a larger disk" in check.fix, check
        code, text = doctor("--only", "disk", "--out", str(disk / "run"))
    assert code == 1 and "FAIL" in text and "disk failed" in text
    assert check_disk(RunConfig.from_flat(), tmp_path, free_bytes=10 * 2**30).status == "PASS"


def test_an_impossible_memory_need_fails_with_what_to_change():
    check = check_memory(RunConfig.from_flat(max_response_len=10**8))
    assert check.status == "FAIL" and "--micro-batch-size" in check.fix, check
    assert check_memory(RunConfig.from_flat(), capacity_bytes=2**20).status == "FAIL"
    code, text = doctor("--only", "memory", "--max-response-len", "100000000")
    assert code == 1 and "memory failed" in text


def test_a_multi_turn_runs_memory_counts_its_whole_episode():
    # the same per-turn budget; only the episode's token limit differs
    assert check_memory(RunConfig.from_flat(env="tool_arithmetic")).status == "PASS"
    check = check_memory(RunConfig.from_flat(env="tool_arithmetic", max_episode_tokens=10**8))
    assert check.status == "FAIL", check


def test_doctor_takes_the_run_flags_and_refuses_bad_ones():
    with pytest.raises(SystemExit) as info, contextlib.redirect_stderr(io.StringIO()):
        main(["doctor", "--steps", "x"])
    assert info.value.code == 2
    with contextlib.redirect_stderr(io.StringIO()) as err:
        assert main(["doctor", "--lr", "nan"]) == 2
    assert "lr must be a finite number" in err.getvalue()


@pytest.mark.slow
def test_the_whole_doctor_passes_here_through_the_command(tiny_model_path, tmp_path):
    # (--generator vllm: a tiny run by default generates with transformers, and then the
    # doctor does not start vLLM)
    result = run_harness(
        "doctor", "--generator", "vllm", "--out", str(tmp_path / "run"), cwd=tmp_path, timeout=600
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    for name in ("sandbox", "vllm", "disk", "memory"):
        assert name in result.stdout
    assert "FAIL" not in result.stdout and "generated" in result.stdout
    assert not Path(tmp_path / "run").exists()  # the doctor writes nothing there


def test_the_disk_check_fails_where_no_file_can_be_written(tmp_path):
    """Free space says nothing of a folder that refuses writes: the disk check writes a
    file where the run would (here a read-only mount, or a folder without write
    permission where the tests do not run as root) and fails when it cannot."""
    locked = tmp_path / "locked"
    locked.mkdir()
    if os.geteuid() == 0:  # root writes through permissions: mount the folder read-only
        mounted = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "ro,size=64m", "tmpfs", str(locked)], capture_output=True
        )
        if mounted.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    else:
        locked.chmod(0o500)
    try:
        check = check_disk(RunConfig.from_flat(), locked / "run", free_bytes=100 * 2**30)
        assert check.status == "FAIL" and f"cannot write in {locked}" in check.detail, check
        code, text = doctor("--only", "disk", "--out", str(locked / "run"))
        assert code == 1 and "disk failed" in text
    finally:
        if os.geteuid() == 0:
            subprocess.run(["umount", "-l", str(locked)], check=False)
        else:
            locked.chmod(0o700)
    # a folder that takes writes passes, and keeps nothing of the probe
    assert (
        check_disk(RunConfig.from_flat(), tmp_path / "run", free_bytes=100 * 2**30).status == "PASS"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["locked"]


def test_the_vllm_check_runs_only_where_the_run_would_start_vllm():
    """It took 81 of the doctor's 94 s on a tiny run, which generates with transformers
    (--generator by_size); now it is skipped there, and kept where vLLM would start."""
    import time

    from zoo.run.plan import RunPlan

    started = time.monotonic()
    (check,) = run_checks(RunConfig.from_flat(), Path("results"), only=("vllm",))
    assert check.status == "PASS" and "skipped" in check.detail and "by_size" in check.detail
    assert time.monotonic() - started < 30  # (an engine's start alone took ~80 s here)

    def backend(**settings) -> str:
        return run_generator(RunPlan.resolve(RunConfig.from_flat(**settings), spec=False))

    assert backend() == "hf" and backend(generator="hf") == "hf"
    assert backend(generator="vllm") == "vllm" and backend(generator="auto") == "auto"
    assert backend(model="qwen3-0.6b") == "auto"  # 0.6B weights: vLLM where it imports
