"""RL step throughput: forge-zoo's synchronous GRPO step against two baselines on the same
tiny model weights, prompts, group size, batch, max new tokens and one optimizer step per
batch (``mini_batches`` 1; beta = 0 everywhere: no reference model). In this on-policy
regime forge-zoo skips its old-log-prob pass as the baselines do (``old_logprob_pass``
when_needed: the one update's forward is pi_old); its mismatch metrics come from that
forward:

- bare: ~100 lines of plain torch (benchmarks/baselines/bare_grpo.py), the floor;
- TRL: GRPOTrainer (trl 1.16, CPU, no vLLM), with its default config and with gradient
  checkpointing off (benchmarks/baselines/trl_grpo.py).

    python -m benchmarks.rl_step [--quick]
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zoo.envs import get_env


@dataclass
class StepSetting:
    prompts_per_step: int = 128
    group_size: int = 8
    max_new_tokens: int = 6
    steps: int = 5
    warmup: int = 1


def forge_zoo_steps(
    model: str | Path,
    setting: StepSetting,
    *,
    init: str = "pretrained",
    ignore_eos: bool = False,
    generator: Any = None,
    generator_backend: str = "vllm",
    placement: str = "local",
    **run: Any,
) -> dict[str, float]:
    """Median wall seconds of forge-zoo's RL step (RLLoop.step) and of its phases, GRPO
    with beta 0, after ``warmup`` steps; ``run``: further RunConfig fields (mode,
    weight_sync). Per-step idle seconds of trainer and generator are medians too."""
    from zoo.run.loop import RLLoop
    from zoo.run.run_config import RunConfig
    from zoo.run.wiring import build_services

    cfg = RunConfig.from_flat(
        model=str(model),
        init=init,
        generator=generator_backend,
        device="cpu",
        prompts_per_step=setting.prompts_per_step,
        group_size=setting.group_size,
        max_response_len=setting.max_new_tokens,
        algorithm_config={"beta": 0.0},
        mini_batches=1,
        eval_every=10**9,
        checkpoint_every=0,
        placement=placement,
        **run,
    )
    services = build_services(cfg, quiet=True, generator=generator)
    loop = RLLoop(cfg, services)
    loop.sampling.ignore_eos = ignore_eos
    walls, records = [], []
    for i in range(setting.warmup + setting.steps):
        start = time.perf_counter()
        record = {**loop.step(), **services.ledger.step_delta()}  # + seconds per phase
        if i >= setting.warmup:
            walls.append(time.perf_counter() - start)
            records.append(record)
    load = None
    if placement != "local":
        services.generator.settle()
        load = services.generator.load_seconds / (setting.warmup + setting.steps)
        services.close()
    phases = {
        f"{p}_seconds": statistics.median(r[f"{p}_seconds"] for r in records)
        for p in (
            "generate",
            "score",
            "old_logprobs",
            "reference",
            "train",
            "sync",
            "trainer_idle",
            "generator_idle",
        )
    }
    tokens = statistics.mean(r["response_tokens"] for r in records)
    return {
        "step_seconds": statistics.median(walls),
        "response_tokens": tokens,
        **phases,
        "generator": services.generator,
        "weight_load_seconds": load,
    }


def arithmetic_batches(setting: StepSetting, seed: int = 0, env_name: str = "arithmetic"):
    """The prompts of each step (the same for every system), and the env that scores them."""
    env = get_env(env_name)
    batches = [
        env.train_prompts(i * setting.prompts_per_step, setting.prompts_per_step, seed)
        for i in range(setting.warmup + setting.steps)
    ]
    return env, batches


def bare_records(
    model_path: Path, setting: StepSetting, env_name: str = "arithmetic"
) -> list[dict[str, float]]:
    """The bare loop's record (``BareGRPO.step``: its seconds and reward) of every step
    after ``setting.warmup``, on ``env_name``'s training prompts (byte-level ids: the tiny
    models' tokenizer)."""
    from benchmarks.baselines.bare_grpo import BareGRPO

    env, batches = arithmetic_batches(setting, env_name=env_name)
    loop = BareGRPO(model_path)
    records = []
    for i, prompts in enumerate(batches):
        repeated = [p for p in prompts for _ in range(setting.group_size)]

        def rewards(texts: list[str], repeated=repeated) -> list[float]:
            return env.score_batch(repeated, texts)

        record = loop.step(
            [list(p.text.encode()) for p in prompts],
            rewards,
            setting.group_size,
            setting.max_new_tokens,
        )
        if i >= setting.warmup:
            records.append(record)
    return records


def bare_steps(model_path: Path, setting: StepSetting) -> dict[str, float]:
    records = bare_records(model_path, setting)
    return {
        "step_seconds": statistics.median(r["step_seconds"] for r in records),
        "generate_seconds": statistics.median(r["generate_seconds"] for r in records),
        "train_seconds": statistics.median(r["train_seconds"] for r in records),
    }


def trl_steps(model_path: Path, setting: StepSetting, checkpointing: bool) -> dict[str, float]:
    from benchmarks.baselines.trl_grpo import trl_grpo_step_seconds

    env, batches = arithmetic_batches(setting)
    prompts = [p for batch in batches for p in batch]
    by_text = {p.text: p for p in prompts}

    def rewards(texts: list[str], prompt_texts: list[str]) -> list[float]:
        return env.score_batch([by_text[t] for t in prompt_texts], texts)

    out = trl_grpo_step_seconds(
        model_path,
        [p.text for p in prompts],
        [p.text for p in prompts],
        rewards,
        group_size=setting.group_size,
        prompts_per_step=setting.prompts_per_step,
        max_new_tokens=setting.max_new_tokens,
        steps=setting.steps,
        warmup=setting.warmup,
        gradient_checkpointing=checkpointing,
    )
    return {"step_seconds": out["step_seconds"]}


SYSTEMS = {
    "forge-zoo, local sync, default generator (by_size: transformers here)": (
        "forge-zoo",
        "by_size",
    ),
    "forge-zoo, local sync, --generator vllm": ("forge-zoo", "vllm"),
    "forge-zoo, Monarch sync (vLLM, RDMA weight sync)": ("forge-zoo-monarch", "sync"),
    "forge-zoo, Monarch sync, endpoint weight sync": ("forge-zoo-monarch", "sync-endpoint"),
    "forge-zoo, Monarch async, max_policy_age 1": ("forge-zoo-monarch", "async"),
    "bare torch loop": ("bare", None),
    "TRL GRPOTrainer, default config (gradient checkpointing on)": ("trl", True),
    "TRL GRPOTrainer, gradient checkpointing off": ("trl", False),
}
"""Row name -> (system, option). The bare loop is the floor the ratios are taken against.
The default generator, ``by_size``, is transformers for the tiny model on CPU
(zoo.services.generation.SMALL_MODEL_PARAMS). Monarch rows (vLLM): generator, trainer (and
the loop) in processes of their own on the same two cores; async overlaps generation of
the next batch with training on this one."""


def measure(system: str, option: Any, setting: StepSetting) -> dict[str, float]:
    from zoo.models.tiny import tiny_model_path

    path = tiny_model_path()
    if system.startswith("forge-zoo"):
        if system == "forge-zoo":  # option: the generator backend
            run = {"generator_backend": option}
        else:  # option: mode[-weight sync]; vLLM generates
            mode, _, sync = option.partition("-")
            run = {"placement": "monarch", "mode": mode, "weight_sync": sync or "rdma"}
        out = forge_zoo_steps(path, setting, **run)
        out.pop("generator")
        return out
    if system == "bare":
        return bare_steps(path, setting)
    return trl_steps(path, setting, checkpointing=option)


def rl_step_table(setting: StepSetting, rounds: int = 3) -> list[dict[str, Any]]:
    """One row per system, each measured in a fresh process (vLLM's start-up changes
    process-wide settings such as thread binding; no system should inherit another's),
    ``rounds`` times round-robin so that drift in the machine's speed hits every system
    alike: seconds per step (median over rounds of each round's median step), steps/s,
    samples/s, bare seconds / this system's seconds (> 1: faster than the floor) and the
    spread of the rounds (max - min over median)."""
    measured: dict[str, list[dict[str, float]]] = {name: [] for name in SYSTEMS}
    for _ in range(rounds):
        for name in SYSTEMS:
            measured[name].append(in_subprocess(*SYSTEMS[name], setting))
    results = {}
    for name, runs in measured.items():
        results[name] = {
            key: statistics.median(r[key] for r in runs)
            for key in runs[0]
            if runs[0][key] is not None
        }
        steps = [r["step_seconds"] for r in runs]
        results[name]["spread"] = (max(steps) - min(steps)) / statistics.median(steps)
    floor = results["bare torch loop"]["step_seconds"]
    samples = setting.prompts_per_step * setting.group_size
    return [
        {
            "system": name,
            "s/step": r["step_seconds"],
            "steps/s": 1 / r["step_seconds"],
            "samples/s": samples / r["step_seconds"],
            "generate s": r.get("generate_seconds", float("nan")),
            "train s": r.get("train_seconds", float("nan")),
            "old log-probs s": r.get("old_logprobs_seconds", float("nan")),
            "weight sync s": r.get("sync_seconds", float("nan")),
            "generator weight load s": r.get("weight_load_seconds", float("nan")),
            "trainer idle s": r.get("trainer_idle_seconds", float("nan")),
            "generator idle s": r.get("generator_idle_seconds", float("nan")),
            "bare s / this s": floor / r["step_seconds"],
            f"spread of {rounds} rounds": r["spread"],
        }
        for name, r in results.items()
    ]


def in_subprocess(system: str, option: Any, setting: StepSetting) -> dict[str, float]:
    import dataclasses
    import json
    import subprocess
    import sys

    payload = json.dumps(
        {"system": system, "option": option, "setting": dataclasses.asdict(setting)}
    )
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.rl_step", "--measure", payload],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{system} ({option}) failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


QUICK = StepSetting(8, 4, 4, 1, 1)
"""A smoke-test setting (figures meaningless)."""


def table(root: Path, quick: bool = False) -> list[dict[str, Any]]:
    return rl_step_table(QUICK, rounds=1) if quick else rl_step_table(StepSetting())


if __name__ == "__main__":
    import json
    import sys

    if len(sys.argv) == 3 and sys.argv[1] == "--measure":  # one system, for rl_step_table
        job = json.loads(sys.argv[2])
        print(json.dumps(measure(job["system"], job["option"], StepSetting(**job["setting"]))))
    else:
        from benchmarks.common import script_main

        script_main(__doc__, table, ".3f")
