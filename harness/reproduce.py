"""`harness reproduce`: re-run a recorded run from its config.json and say whether the
numbers match. On the same CPU (model and vector instruction sets) with the same versions
and seed, a run on CPU must match exactly (every non-timing field of every step); elsewhere
the check is whether the new headline falls inside the interval the leaderboard recorded."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from harness.runner import execute_run, read_metrics
from zoo.core.config import ConfigError
from zoo.run.loop import resolved_config
from zoo.run.run_config import RunConfig
from zoo.run.runlog import is_timing_key, machine, package_versions, start_weights
from zoo.run.wiring import build_services


@dataclass
class Verdict:
    matches: bool
    exact: bool
    """True when an exact comparison was possible (same versions, CPU, no time budget)."""
    detail: str


def comparable(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if not is_timing_key(k)} for r in records]


def first_difference(old: list[dict], new: list[dict]) -> str | None:
    if len(old) != len(new):
        return f"{len(old)} recorded steps, {len(new)} reproduced"
    for a, b in zip(old, new, strict=True):
        for key in sorted(set(a) | set(b)):
            if a.get(key) != b.get(key):
                return f"step {a.get('step')}: {key} recorded {a.get(key)!r}, got {b.get(key)!r}"
    return None


def same_cpu(recorded: dict[str, Any], now: dict[str, Any]) -> bool:
    """The recorded machine's CPU is this one's: same model and, where recorded, the same
    vector instruction sets (runs from before they were recorded compare the model only)."""
    if recorded.get("cpu") != now.get("cpu"):
        return False
    return "cpu_vector_flags" not in recorded or recorded["cpu_vector_flags"] == now.get(
        "cpu_vector_flags"
    )


def describe_cpu(record: dict[str, Any]) -> str:
    flags = record.get("cpu_vector_flags")
    return f"{record.get('cpu', '?')} [{flags if flags is not None else 'flags not recorded'}]"


def weights_mismatch(config: dict[str, Any], cfg: RunConfig, now: str | None,
                     model_path: Path) -> str:  # fmt: skip
    """Why the starting weights differ, as far as the record tells."""
    recorded = config["start_weights_sha256"]
    what = (f"its starting weights (sha256 {recorded[:12]}) differ from what {cfg.model!r} "
            f"resolves to here ({(now or 'none')[:12]}, {model_path})")  # fmt: skip
    made_on, here = config.get("machine", {}), machine()
    if not cfg.model_path and (not same_cpu(made_on, here) or "cpu_vector_flags" not in made_on):
        # The tiny presets are warm-started on first use, with the machine's own kernels.
        maybe = "" if "cpu_vector_flags" in made_on else "probably "
        return (f"{maybe}not reproducible on this CPU: {what}. Models built on first use (the "
                f"tiny presets' warm start) follow the CPU's math kernels; the run was made on "
                f"{describe_cpu(made_on)}, this machine is {describe_cpu(here)}. Pass the "
                f"run's starting weights with `reproduce --model-path DIR`, or reproduce on "
                f"that kind of CPU")  # fmt: skip
    commit = config.get("git", {}).get("commit", "?")
    return (
        f"not reproducible with this version: {what}; check out the commit it records "
        f"({commit}) or pass the original weights with `reproduce --model-path DIR`"
    )


@contextlib.contextmanager
def recorded_threads(config: dict[str, Any]) -> Iterator[None]:
    """Run with the thread count the run recorded: the order of float reductions follows
    it, so a run of ``compare --jobs N`` (each worker on its share of the cores) gives
    other floats with all of them. Set before the engine starts (vLLM sizes its OpenMP
    pool by OMP_NUM_THREADS)."""
    threads = config.get("machine", {}).get("torch_threads")
    before, env_before = torch.get_num_threads(), os.environ.get("OMP_NUM_THREADS")
    if threads:
        os.environ["OMP_NUM_THREADS"] = str(threads)
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)
        if env_before is None:
            os.environ.pop("OMP_NUM_THREADS", None)
        else:
            os.environ["OMP_NUM_THREADS"] = env_before


def reproduce_run(run_dir: Path, interval: tuple[float, float] | None = None,
                  model_path: Path | None = None) -> Verdict:  # fmt: skip
    """Re-run ``run_dir`` from its config.json (with ``model_path`` as its starting
    weights, when given; they must hash to the recorded ones) and compare."""
    config = json.loads((run_dir / "config.json").read_text())
    try:
        # a re-run for checking streams to no tracker
        cfg = dataclasses.replace(RunConfig.from_record(config["run"]), report_to="")
    except ConfigError as exc:
        commit = config.get("git", {}).get("commit", "?")
        return Verdict(False, False, f"not reproducible with this version: {exc} (recorded "
                       f"at commit {commit})")  # fmt: skip
    if model_path is not None:
        cfg = dataclasses.replace(cfg, model_path=str(model_path))
    cfg.validate()
    recorded = read_metrics(run_dir)
    if not recorded:
        raise ConfigError(f"{run_dir}: no metrics.jsonl to compare against")
    with tempfile.TemporaryDirectory(prefix="reproduce-") as tmp, recorded_threads(config):
        services = build_services(cfg, quiet=True)
        try:
            resolved = Path(resolved_config(cfg, services)["model_path"])
            now = start_weights(resolved, cfg.init, cfg.seed)["start_weights_sha256"]
            if config.get("start_weights_sha256") and now != config["start_weights_sha256"]:
                return Verdict(False, False, weights_mismatch(config, cfg, now, resolved))
            fresh = execute_run(cfg, Path(tmp) / run_dir.name, services,
                                command=f"reproduce {run_dir}")  # fmt: skip
        finally:
            services.close()
    same_setup = (
        config.get("versions") == package_versions()
        and same_cpu(config["machine"], machine())
        and not config["machine"].get("cuda")
        and not machine().get("cuda")
        and not cfg.budget_seconds
    )
    diff = first_difference(comparable(recorded), comparable(fresh))
    if same_setup:
        if diff is None:
            return Verdict(True, True, f"all {len(fresh)} steps match exactly")
        return Verdict(False, True, f"numbers differ: {diff}")
    final = headline(fresh)
    if interval is None:
        interval = (headline(recorded), headline(recorded))
    inside = interval[0] <= final <= interval[1]
    return Verdict(inside, False, f"different setup (versions, CPU, device or time budget); "
                   f"headline {final:.4f} {'inside' if inside else 'outside'} "
                   f"[{interval[0]:.4f}, {interval[1]:.4f}]")  # fmt: skip


def headline(records: list[dict[str, Any]]) -> float:
    """A run's headline (harness/analysis.py): the mean held-out reward of its last
    HEADLINE_POINTS evaluations."""
    from harness.analysis import HEADLINE_POINTS

    evals = [r["eval_reward"] for r in records if "eval_reward" in r][1:]  # not the start
    return sum(evals[-HEADLINE_POINTS:]) / len(evals[-HEADLINE_POINTS:])
