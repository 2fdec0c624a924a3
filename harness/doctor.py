"""``python -m harness doctor``: check this machine before a long run, and say what to fix.

It takes the flags of ``run`` (the same RunConfig), and checks, for that run:

- sandbox: a program in the code sandbox tries to connect to a port this process listens
  on and to write a file into a folder of this host; both must fail (zoo/envs/execution/sandbox.py);
- vllm: a vLLM engine starts in this process on the tiny model (its shipped weights,
  zoo/models/tiny.py) and generates; skipped where the run generates with transformers
  (``--generator hf``, or by_size's choice for a model under 10M weights on the CPU: the
  tiny presets), which saves the engine's start (~80 s on 2 cores);
- disk: that a file can be written where the run writes (``--out``, else ``results/``;
  the nearest folder of it that exists), and its free space against two checkpoints of
  the model (a save writes the new one before it removes the old), plus
  the metrics; how much the cadence (``--checkpoint-every``) writes over the run is shown;
- memory: the run's estimate (zoo/models/memory.py, as ``list models`` and the pre-flight
  check compute it) against this machine's memory (or the GPU's).

Each check is PASS, WARN or FAIL with what to do; the exit status is 1 when one FAILs.
``--plan`` runs none of them: it prints the run's capacity plan on N GPUs
(harness/capacity.py), which needs neither a GPU nor the model's weights.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from zoo.run.plan import RunPlan
from zoo.run.run_config import RunConfig

CHECKS = ("sandbox", "vllm", "disk", "memory")
CHECKPOINT_EXTRA_BYTES = 4 * 2**20
"""Beside the weights and AdamW state: tokenizer, configs, loop state."""


@dataclass(frozen=True)
class Check:
    name: str
    status: str
    """PASS, WARN or FAIL."""
    detail: str
    """What was measured."""
    fix: str = ""
    """What to do (empty on PASS)."""


def checkpoint_bytes(params: int) -> int:
    """One checkpoint: float32 weights (4 bytes a parameter) and AdamW's two moments (8)."""
    return 12 * params + CHECKPOINT_EXTRA_BYTES


def check_disk(cfg: RunConfig, out: Path, free_bytes: int | None = None) -> Check:
    """Room for two checkpoints at once (the new one is written before the old is removed)
    and the metrics, on the disk that holds ``out``."""
    from zoo.models.presets import model_shape

    where = next((p for p in [out, *out.parents] if p.exists()), Path.cwd())
    refused = write_refused(where)
    if refused:
        return Check(
            "disk",
            "FAIL",
            f"cannot write in {where} ({refused})",
            "give --out a folder this user can write to (permissions, a read-only mount)",
        )
    free = shutil.disk_usage(where).free if free_bytes is None else free_bytes
    one = checkpoint_bytes(model_shape(cfg.run.model, cfg.run.model_path).params)
    need = 2 * one + 16 * 2**20
    saves = (
        cfg.budget.steps // cfg.output.checkpoint_every if cfg.output.checkpoint_every else 0
    ) + 1
    detail = (
        f"{free / 2**30:.2f} GiB free at {where}; a checkpoint is ~{one / 2**30:.2f} "
        f"GiB, two at once while saving; every {cfg.output.checkpoint_every or 'end-only'} "
        f"steps: ~{saves} saves, {saves * one / 2**30:.2f} GiB written"
    )
    if free < need:
        return Check(
            "disk",
            "FAIL",
            detail,
            f"free {(need - free) / 2**30:.2f} GiB there, or give --out on a larger disk",
        )
    if free < 2 * need:
        return Check(
            "disk", "WARN", detail, "little room to spare: free space, or --out on a larger disk"
        )
    return Check("disk", "PASS", detail)


def write_refused(folder: Path) -> str:
    """Why a file cannot be written, flushed and removed in ``folder`` ("" when it can):
    free space says nothing of a folder that refuses writes (its permissions, a read-only
    mount), and a run would fail at its first record there."""
    try:
        fd, probe = tempfile.mkstemp(prefix=".forge-zoo-doctor-", dir=folder)
    except OSError as exc:
        return exc.strerror or str(exc)
    try:
        os.write(fd, b"forge-zoo doctor\n")
        os.fsync(fd)
    except OSError as exc:
        return exc.strerror or str(exc)
    finally:
        os.close(fd)
        os.unlink(probe)
    return ""


def check_memory(run: RunConfig | RunPlan, capacity_bytes: int | None = None) -> Check:
    """The run's memory estimate (``list models``) against this machine's (or GPU's). A
    sequence is the prompt and every token after it: a multi-turn episode's token limit.
    ``run``: the run's plan (a config is resolved into one here)."""
    from harness.capacity import Workload
    from zoo.run.plan import plan_of

    # the plan's estimate of a step (the model's shape, the longest prompt, the samples),
    # sized as `doctor --plan` and `list models` size it
    plan = plan_of(run, spec=False).with_estimate()
    cfg, device = plan.cfg, plan.device
    need = Workload.of_plan(plan).memory(compute_bytes=2 if device == "cuda" else 4)
    if capacity_bytes is not None:
        total = available = capacity_bytes
    elif device == "cuda":
        import torch

        available, total = torch.cuda.mem_get_info(0)
    else:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        available = _meminfo_available() or total
    where = "the GPU" if device == "cuda" else "this machine"
    detail = (
        f"{cfg.run.model} needs ~{need.minimum / 2**30:.2f} GiB at the smallest KV cache "
        f"(~{need.total / 2**30:.2f} GiB with the whole step's); {where} has "
        f"{total / 2**30:.1f} GiB, {available / 2**30:.1f} GiB free"
    )
    smaller = (
        "use a smaller model, --micro-batch-size, fewer --prompts-per-step or a "
        "shorter --max-response-len"
    )
    if need.minimum > 0.9 * total:
        return Check("memory", "FAIL", detail, smaller)
    if need.minimum > available:
        return Check(
            "memory",
            "WARN",
            detail,
            "other processes hold the memory this run needs: stop them, or " + smaller,
        )
    return Check("memory", "PASS", detail)


def _meminfo_available() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return None


PROBE = """
import socket, sys
try:
    socket.create_connection(("127.0.0.1", {port}), timeout=2).close()
    print("network: reached the host")
except OSError:
    print("network: refused")
try:
    with open({target!r}, "w") as f:
        f.write("escaped")
    print("write: wrote outside")
except OSError:
    print("write: refused")
"""


def check_sandbox() -> Check:
    """Model-written code must not reach the host's network or files."""
    from zoo.envs.execution.sandbox import SandboxUnavailable, execute

    with tempfile.TemporaryDirectory(prefix="forge-zoo-doctor-") as host_dir:
        target = Path(host_dir) / "escaped.txt"
        with socket.socket() as listener:
            listener.bind(("127.0.0.1", 0))
            listener.listen(1)
            port = listener.getsockname()[1]
            try:
                result = execute(
                    PROBE.format(port=port, target=str(target)), timeout_s=20, memory_mb=512
                )
            except SandboxUnavailable as exc:
                return Check(
                    "sandbox",
                    "FAIL",
                    f"no isolation: {exc}",
                    "install bubblewrap (apt-get install bubblewrap; scripts/setup.sh does it)",
                )
        escaped = target.exists()
    lines = result.stdout.split()
    if result.status != "ok" or "network:" not in lines:
        return Check(
            "sandbox",
            "FAIL",
            f"the probe did not run: {result.status} {result.stderr.strip()[-200:]}",
            "see zoo/envs/execution/sandbox.py's requirements (bubblewrap, prlimit)",
        )
    if escaped or "reached" in result.stdout or "wrote outside" in result.stdout:
        return Check(
            "sandbox",
            "FAIL",
            f"the probe escaped: {result.stdout.strip()}",
            "do not run code envs here; check that bwrap can create namespaces "
            "(unprivileged user namespaces enabled)",
        )
    return Check(
        "sandbox",
        "PASS",
        f"a sandboxed program could not reach a host port nor write a host file "
        f"({result.duration_s:.2f} s)",
    )


def run_generator(plan: RunPlan) -> str:
    """The backend the run would generate with, decided from the model's shape (no weights
    read): "hf", "vllm", or "auto" (vLLM where it imports)."""
    from zoo.models.presets import model_shape
    from zoo.placement.config import PlacementConfig
    from zoo.services.generation import by_size

    cfg = plan.cfg
    if cfg.placement.generator != "by_size":
        return cfg.placement.generator
    procs = (
        PlacementConfig.from_dict(cfg.placement.distributed).generator.procs
        if cfg.placement.distributed
        else 1
    )
    return by_size(model_shape(cfg.run.model, cfg.run.model_path).params, plan.device, procs)


def check_vllm(plan: RunPlan) -> Check:
    """A vLLM engine starts on the tiny model (its shipped weights) and generates; skipped
    (in a second, not the engine's ~80) where the run generates with transformers."""
    cfg = plan.cfg
    if run_generator(plan) == "hf":
        why = (
            "--generator hf"
            if cfg.placement.generator == "hf"
            else f"--generator by_size: {cfg.run.model} is under 10M weights, on the CPU"
        )
        return Check(
            "vllm",
            "PASS",
            f"skipped: this run generates with transformers ({why}); "
            "--generator vllm or auto checks vLLM",
        )
    start = time.monotonic()
    try:
        from zoo.models.tiny import tiny_model_path
        from zoo.models.tokenizer import encode
        from zoo.services.generation.vllm import VLLMGenerator
        from zoo.services.sampling import SamplingConfig

        engine = VLLMGenerator(tiny_model_path(), seed=0)
        out = engine.generate([encode("12+34=")], n=2, sampling=SamplingConfig(max_tokens=4))
        tokens = sum(len(c.token_ids) for c in out[0])
    except Exception as exc:  # an import error, an engine that does not start
        fix = (
            "reinstall (scripts/setup.sh)"
            if cfg.placement.generator == "vllm"
            else "runs will fall back to transformers (--generator auto); to use vLLM, "
            "reinstall it (scripts/setup.sh)"
        )
        status = "FAIL" if cfg.placement.generator == "vllm" else "WARN"
        return Check("vllm", status, f"{type(exc).__name__}: {str(exc)[:200]}", fix)
    return Check(
        "vllm",
        "PASS",
        f"an engine started on the tiny model and generated {tokens} "
        f"tokens in {time.monotonic() - start:.1f} s",
    )


def run_checks(
    run: RunConfig | RunPlan,
    out: Path,
    only: Iterable[str] = CHECKS,
    free_bytes: int | None = None,
    capacity_bytes: int | None = None,
) -> list[Check]:
    """The checks named in ``only`` (in CHECKS' order) for ``run``, a plan or a config
    (resolved into one here, before any check: it validates the config and builds the
    env once for all of them); ``free_bytes`` and ``capacity_bytes`` stand for the disk's
    free space and the memory (tests)."""
    from zoo.run.plan import plan_of

    plan = plan_of(run, spec=False)
    runners: dict[str, Callable[[], Check]] = {
        "sandbox": check_sandbox,
        "vllm": lambda: check_vllm(plan),
        "disk": lambda: check_disk(plan.cfg, out, free_bytes),
        "memory": lambda: check_memory(plan, capacity_bytes),
    }
    wanted = set(only)
    return [runners[name]() for name in CHECKS if name in wanted]


def print_checks(checks: list[Check]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="forge-zoo doctor")
    for col in ("check", "status", "what was found", "what to do"):
        table.add_column(col, overflow="fold")
    colour = {"PASS": "green", "WARN": "yellow", "FAIL": "red"}
    for c in checks:
        table.add_row(c.name, f"[{colour[c.status]}]{c.status}[/]", c.detail, c.fix or "-")
    Console().print(table)  # (as wide as the terminal; rich folds the cells to fit)


def cmd_doctor(cfg: RunConfig, out: Path, only: Iterable[str], verbose: bool = False) -> int:
    """``harness doctor``: ``cfg`` is resolved once into its plan (validated there), before
    any check runs, so a config the run would refuse stops here with its message."""
    from harness.third_party import LOG_NAME, routed_to

    plan = RunPlan.resolve(cfg, spec=False)
    with (
        tempfile.TemporaryDirectory(prefix="forge-zoo-doctor-") as logs,  # vLLM's noise
        routed_to(Path(logs) / LOG_NAME, verbose),
    ):
        checks = run_checks(plan, out, only)
    print_checks(checks)
    failed = [c.name for c in checks if c.status == "FAIL"]
    if failed:
        print(f"doctor: {', '.join(failed)} failed; fix before a long run")
        return 1
    return 0


def cmd_doctor_plan(cfg: RunConfig, gpus: int, gpu: str) -> int:
    """``harness doctor --plan``: the run's capacity plan on ``gpus`` GPUs of kind ``gpu``
    (harness.capacity); exit 1 when it does not fit their memory."""
    from harness.capacity import cmd_plan

    return cmd_plan(cfg, gpus, gpu)  # (resolved there: an env without its data is assumed)
