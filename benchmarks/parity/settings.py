"""The settings map: every forge-zoo setting of a running_sum / tiny-sum run of grpo,
dr_grpo and dapo beside the TRL 1.16 ``GRPOConfig`` field that plays its part, and the
settings that cannot be matched, each with the effect to expect.

The forge-zoo side is the board's run (``RunConfig`` with the tiny-sum preset's defaults,
``zoo.run.run_config.run_defaults``) at the learning rate ``harness tune`` picked for all
three on running_sum at the papers' constants (results/tune-running-sum-paper,
lr 2.5e-5). The TRL side is built from it field by field (``trl_config``); ``settings_map``
reads both objects back, so a row's two values are what each config holds, not what this
file intends (tests/test_parity.py checks that every mapped row agrees).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ALGORITHMS = ("grpo", "dr_grpo", "dapo")
TUNED_LR = 2.5e-5
"""lr of grpo, dr_grpo and dapo on running_sum at the papers' constants
(results/tune-running-sum-paper/selection.json)."""

TRL_LOSS_TYPE = {"grpo": "grpo", "dr_grpo": "dr_grpo", "dapo": "dapo"}
"""TRL's ``loss_type`` per algorithm: its aggregation (grpo: per-sequence mean, then the
mean over sequences; dr_grpo: sum / (B * max_completion_length); dapo: sum / tokens of
the generation batch, rescaled per optimizer step)."""

TRL_SCALE_REWARDS = {"grpo": "group", "dr_grpo": "none", "dapo": "group"}
"""TRL's ``scale_rewards``: "group" divides by the group's std (forge-zoo's group_norm),
"none" only centres (forge-zoo's group_center)."""

AGGREGATION_OF_LOSS_TYPE = {"grpo": "seq_mean", "dr_grpo": "fixed", "dapo": "token_mean"}
ADVANTAGE_OF_SCALE = {"group": "group_norm", "none": "group_center"}


def forge_zoo_run_config(algorithm: str) -> Any:
    """The forge-zoo run compared: running_sum, tiny-sum, the preset's defaults, lr 2.5e-5."""
    from zoo.run.run_config import RunConfig, run_defaults

    return RunConfig.from_flat(
        algorithm=algorithm,
        env="running_sum",
        model="tiny-sum",
        **{**run_defaults("tiny-sum"), "lr": TUNED_LR},
    )


def forge_zoo_algorithm(algorithm: str) -> Any:
    """The algorithm object (its config at forge-zoo's defaults: the papers' constants)."""
    from zoo.algorithms import get_algorithm

    return get_algorithm(algorithm)


def clip_bounds(algorithm: Any) -> tuple[float, float]:
    """(eps_low, eps_high) of an algorithm's token-ratio clip, as TRL states them."""
    c = algorithm.config
    if hasattr(c, "eps"):
        return c.eps, c.eps
    if hasattr(c, "eps_low"):
        return c.eps_low, c.eps_high
    return 1 - c.clip_low, c.clip_high - 1


def trl_config(
    algorithm: str, output_dir: str | Path, run: Any | None = None, **overrides: Any
) -> Any:
    """TRL's ``GRPOConfig`` matched to ``run`` (a RunConfig; default
    ``forge_zoo_run_config(algorithm)``) and the algorithm's config: one generation batch
    of prompts_per_step x group_size completions, split into ``mini_batches`` optimizer
    steps (``steps_per_generation``, no gradient accumulation), one pass
    (``num_iterations`` 1), CPU, float32, no vLLM."""
    from trl import GRPOConfig

    cfg = forge_zoo_run_config(algorithm) if run is None else run
    algo = forge_zoo_algorithm(algorithm)
    low, high = clip_bounds(algo)
    completions = cfg.sampling.prompts_per_step * cfg.sampling.group_size
    kwargs: dict[str, Any] = {
        "output_dir": str(output_dir),
        "learning_rate": cfg.optimizer.lr,
        "lr_scheduler_type": cfg.optimizer.lr_schedule,
        "warmup_steps": cfg.optimizer.warmup_steps,
        "weight_decay": cfg.optimizer.weight_decay,
        "adam_beta1": cfg.optimizer.adam_beta1,
        "adam_beta2": cfg.optimizer.adam_beta2,
        "adam_epsilon": cfg.optimizer.adam_eps,
        "optim": "adamw_torch",
        "max_grad_norm": cfg.optimizer.grad_clip,
        "num_generations": cfg.sampling.group_size,
        "per_device_train_batch_size": completions // cfg.regime.mini_batches,
        "steps_per_generation": cfg.regime.mini_batches,
        "gradient_accumulation_steps": 1,
        "num_iterations": cfg.regime.epochs,
        "max_completion_length": cfg.sampling.max_response_len,
        "temperature": cfg.sampling.temperature,
        "top_p": 1.0,
        "top_k": 0,
        "repetition_penalty": 1.0,
        "beta": algo.config.beta,
        "epsilon": low,
        "epsilon_high": high,
        "loss_type": TRL_LOSS_TYPE[algorithm],
        "scale_rewards": next(
            k for k, v in ADVANTAGE_OF_SCALE.items() if v == algo.config.advantage
        ),
        "importance_sampling_level": "token",
        "use_bias_correction_kl": False,
        "top_entropy_quantile": algo.config.entropy_top_share,
        "entropy_coef": algo.config.entropy_coef,
        "mask_truncated_completions": bool(getattr(algo.config, "overlong_filtering", False)),
        "disable_dropout": True,
        "gradient_checkpointing": False,
        "use_vllm": False,
        "use_cpu": True,
        "bf16": False,
        "fp16": False,
        "report_to": "none",
        "logging_strategy": "no",
        "save_strategy": "no",
        "disable_tqdm": True,
        "seed": cfg.run.seed,
    }
    kwargs.update(overrides)
    return GRPOConfig(**kwargs)


@dataclass(frozen=True)
class Row:
    """One mapped setting: forge-zoo's name and value, TRL's field and value."""

    setting: str
    forge_zoo: str
    forge_zoo_value: Any
    trl: str
    trl_value: Any

    @property
    def equal(self) -> bool:
        a, b = self.forge_zoo_value, self.trl_value
        if isinstance(a, float) or isinstance(b, float):
            return math.isclose(float(a), float(b), rel_tol=1e-12, abs_tol=1e-15)
        return a == b


def settings_map(algorithm: str, trl: Any | None = None, run: Any | None = None) -> list[Row]:
    """The mapped settings of ``algorithm``, each value read back from the two configs
    (``trl``: a GRPOConfig, by default ``trl_config`` in a scratch folder; ``run``: the
    RunConfig, by default ``forge_zoo_run_config(algorithm)``). Where the two name a
    setting differently (TRL's loss_type for an aggregation, scale_rewards for an
    advantage estimator), TRL's value is translated to forge-zoo's vocabulary."""
    import tempfile

    cfg = forge_zoo_run_config(algorithm) if run is None else run
    algo = forge_zoo_algorithm(algorithm)
    if trl is None:
        with tempfile.TemporaryDirectory() as tmp:
            trl = trl_config(algorithm, tmp, run=cfg)
    low, high = clip_bounds(algo)
    completions = cfg.sampling.prompts_per_step * cfg.sampling.group_size
    trl_low = trl.epsilon
    trl_high = trl.epsilon_high if trl.epsilon_high is not None else trl.epsilon
    return [
        Row("learning rate", "lr", cfg.optimizer.lr, "learning_rate", trl.learning_rate),
        Row(
            "lr schedule",
            "lr_schedule",
            cfg.optimizer.lr_schedule,
            "lr_scheduler_type",
            str(getattr(trl.lr_scheduler_type, "value", trl.lr_scheduler_type)),
        ),
        Row(
            "warm-up steps",
            "warmup_steps",
            cfg.optimizer.warmup_steps,
            "warmup_steps",
            trl.warmup_steps,
        ),
        Row(
            "optimizer",
            "(AdamW, torch)",
            "adamw_torch",
            "optim",
            str(getattr(trl.optim, "value", trl.optim)),
        ),
        Row("AdamW beta1", "adam_beta1", cfg.optimizer.adam_beta1, "adam_beta1", trl.adam_beta1),
        Row("AdamW beta2", "adam_beta2", cfg.optimizer.adam_beta2, "adam_beta2", trl.adam_beta2),
        Row("AdamW eps", "adam_eps", cfg.optimizer.adam_eps, "adam_epsilon", trl.adam_epsilon),
        Row(
            "weight decay",
            "weight_decay",
            cfg.optimizer.weight_decay,
            "weight_decay",
            trl.weight_decay,
        ),
        Row(
            "grad clip (global norm)",
            "grad_clip",
            cfg.optimizer.grad_clip,
            "max_grad_norm",
            trl.max_grad_norm,
        ),
        Row(
            "group size G",
            "group_size",
            cfg.sampling.group_size,
            "num_generations",
            trl.num_generations,
        ),
        Row(
            "completions per rollout batch",
            "prompts_per_step x group_size",
            completions,
            "generation_batch_size",
            trl.generation_batch_size,
        ),
        Row(
            "optimizer steps per rollout batch",
            "mini_batches",
            cfg.regime.mini_batches,
            "steps_per_generation / gradient_accumulation_steps",
            trl.steps_per_generation // trl.gradient_accumulation_steps,
        ),
        Row(
            "completions per optimizer step",
            "prompts_per_step x G / mini_batches",
            completions // cfg.regime.mini_batches,
            "per_device_train_batch_size x gradient_accumulation_steps",
            trl.per_device_train_batch_size * trl.gradient_accumulation_steps,
        ),
        Row(
            "passes over the batch",
            "epochs",
            cfg.regime.epochs,
            "num_iterations",
            trl.num_iterations,
        ),
        Row(
            "max new tokens",
            "max_response_len",
            cfg.sampling.max_response_len,
            "max_completion_length",
            trl.max_completion_length,
        ),
        Row("temperature", "temperature", cfg.sampling.temperature, "temperature", trl.temperature),
        Row(
            "top-p / top-k",
            "(none: full distribution)",
            "1.0 / 0",
            "top_p / top_k",
            f"{trl.top_p} / {trl.top_k}",
        ),
        Row("clip eps low", f"{algorithm} clip (low)", low, "epsilon", trl_low),
        Row("clip eps high", f"{algorithm} clip (high)", high, "epsilon_high", trl_high),
        Row("KL weight beta", "beta", algo.config.beta, "beta", trl.beta),
        Row(
            "KL estimator",
            "kl",
            algo.config.kl,
            "(fixed: k3; use_bias_correction_kl)",
            "k3 x ratio" if trl.use_bias_correction_kl else "k3",
        ),
        Row(
            "advantages",
            "advantage",
            algo.config.advantage,
            "scale_rewards",
            ADVANTAGE_OF_SCALE.get(trl.scale_rewards, trl.scale_rewards),
        ),
        Row(
            "loss aggregation",
            "aggregation",
            algo.aggregation,
            "loss_type",
            AGGREGATION_OF_LOSS_TYPE.get(trl.loss_type, trl.loss_type),
        ),
        Row(
            "ratio level",
            "(token)",
            "token",
            "importance_sampling_level",
            trl.importance_sampling_level,
        ),
        Row(
            "policy loss",
            "loss",
            algo.config.loss,
            "loss_type (clipped family)",
            "ppo_clip" if trl.loss_type in ("grpo", "dr_grpo", "dapo", "bnpo") else trl.loss_type,
        ),
        Row(
            "entropy bonus",
            "entropy_coef",
            algo.config.entropy_coef,
            "entropy_coef",
            trl.entropy_coef,
        ),
        Row(
            "high-entropy token share",
            "entropy_top_share",
            algo.config.entropy_top_share,
            "top_entropy_quantile",
            trl.top_entropy_quantile,
        ),
        Row(
            "mask truncated responses",
            "overlong_filtering (dapo)",
            bool(getattr(algo.config, "overlong_filtering", False)),
            "mask_truncated_completions",
            trl.mask_truncated_completions,
        ),
        Row(
            "precision",
            "(float32 on CPU)",
            "float32",
            "bf16 / fp16",
            "float32" if not (trl.bf16 or trl.fp16) else "half",
        ),
    ]


UNMATCHED: dict[str, list[tuple[str, str]]] = {
    "all": [
        (
            "advantage std epsilon: forge-zoo (R - mean) / (std + 1e-6), TRL / (std + 1e-4)",
            "advantages of a group with std s differ by a factor (s + 1e-4) / (s + 1e-6); for "
            "0/1 rewards in groups of 8, s >= 0.35, so < 0.03% (level a feeds both losses the "
            "same advantages and reports this difference separately); dr_grpo does not divide",
        ),
        (
            "mini-batch make-up: TRL shuffles the generation batch's rows "
            "(shuffle_sequence_dict) before splitting it into steps_per_generation slices; "
            "forge-zoo keeps whole groups, in order, by default (--mini-batch-rows shuffled "
            "draws the same kind of make-up, not TRL's permutation)",
            "the same expected update, different per-step noise; level b reproduces TRL's "
            "order on forge-zoo's side (group_size 1 for the split) to compare the numbers; "
            "level c runs forge-zoo's default, as the board did",
        ),
        (
            "sampler RNG: TRL samples with transformers' generate under its seed; forge-zoo "
            "seeds each group of its generator (by_size: transformers here) per prompt",
            "different samples at the same seed: level c's runs of a seed share their "
            "prompts, not their samples",
        ),
        (
            "prompt order: TRL's RepeatSampler draws prompts from the dataset (shuffled with "
            "the trainer's seed); forge-zoo draws env.train_prompts(step, seed)",
            "none in expectation; level c turns TRL's shuffle off and gives it forge-zoo's "
            "stream of the seed in order (dapo's refill rounds still part the two)",
        ),
        (
            "padding: TRL left-pads prompts and right-pads completions (attention mask); "
            "forge-zoo right-pads prompt + response (response_start), causal attention only",
            "the same log-probs up to float rounding (level a measures the difference)",
        ),
        (
            "model code: TRL runs the transformers Qwen3 model (fused LM head log-probs); "
            "forge-zoo runs TorchTitan's Qwen3 from the same safetensors",
            "float32 rounding differences in log-probs (level a measures them)",
        ),
        (
            "old log-probs: forge-zoo's separate pass before the batch's updates; TRL "
            "computes old_per_token_logps in its generation step when steps_per_generation > "
            "gradient_accumulation_steps",
            "both: the weights that sampled, before any update; same numbers up to rounding",
        ),
        (
            "evaluation: forge-zoo evaluates greedy held-out reward at budget points; TRL's "
            "eval loop samples",
            "level c scores TRL's checkpoints with forge-zoo's evaluation",
        ),
        (
            "budget: forge-zoo counts ledger FLOPs (4e12 on running_sum); TRL counts "
            "optimizer steps (max_steps)",
            "level c gives TRL the optimizer steps of forge-zoo's run of the same seed "
            "(~36 rollout batches x 4)",
        ),
    ],
    "grpo": [],
    "dr_grpo": [],
    "dapo": [
        (
            "dynamic sampling (DAPO Sec. 3.2): forge-zoo drops all-equal groups and refills "
            "the batch up to max_sampling_rounds; TRL 1.16 has no refill",
            "TRL trains every group, all-equal ones with zero advantages: same gradient "
            "direction per group, fewer informative groups per step, and (token_mean) a "
            "larger denominator, so smaller updates",
        ),
        (
            "soft overlong punishment (DAPO eq. 13): forge-zoo's shape_rewards (L_cache = "
            "L_max / 4 = 16); TRL has it only as a reward function "
            "(trl.rewards.get_soft_overlong_punishment) that a run must add",
            "matched when that reward function is added with max_completion_len 64, "
            "soft_punish_cache 16; level a / b take the shaped rewards as given",
        ),
        (
            "token-mean normaliser per optimizer step: forge-zoo divides each mini-batch by "
            "its own tokens; TRL divides by the generation batch's tokens x "
            "gradient_accumulation_steps / steps_per_generation (the average mini-batch)",
            "each mini-batch's update is scaled by (its tokens / the average); equal over a "
            "rollout batch in sum, not per step (level b measures it)",
        ),
    ],
}
"""Settings that cannot be matched, per algorithm ("all": every one), with the effect to
expect."""


def markdown_tables(algorithms: tuple[str, ...] = ALGORITHMS) -> str:
    """The settings map, one table per algorithm, then the unmatched settings."""
    lines: list[str] = []
    for name in algorithms:
        lines += [
            f"### {name}",
            "",
            "| setting | forge-zoo | value | TRL GRPOConfig | value | equal |",
            "|---|---|---|---|---|---|",
        ]
        for row in settings_map(name):
            lines.append(
                f"| {row.setting} | `{row.forge_zoo}` | {row.forge_zoo_value} | "
                f"`{row.trl}` | {row.trl_value} | {'yes' if row.equal else 'NO'} |"
            )
        lines.append("")
    lines += ["### Settings that cannot be matched", ""]
    for name in ("all", *algorithms):
        for what, effect in UNMATCHED[name]:
            lines.append(f"- ({name}) {what}. Expected effect: {effect}.")
    return "\n".join(lines) + "\n"


def as_dicts(algorithm: str) -> list[dict[str, Any]]:
    return [{**dataclasses.asdict(r), "equal": r.equal} for r in settings_map(algorithm)]


if __name__ == "__main__":
    print(markdown_tables())
