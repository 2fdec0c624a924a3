"""The run settings the services declare, without the services: the trainer's optimizer
and regime sections of RunConfig and the valid values of the generation backend and the
off-policy correction.

They live apart from zoo/services/trainer.py, offpolicy.py and generation/ because those
import torch (and TorchTitan, vLLM), which takes seconds; RunConfig, and so the command
line's ``--help`` and its errors for bad flags, needs only these declarations. The
services import them from here: each is still declared once."""

from __future__ import annotations

from dataclasses import dataclass

from zoo.core.config import ConfigError

GENERATOR_BACKENDS = ("by_size", "auto", "vllm", "hf")
"""``--generator``: by_size (the default: transformers for a model under SMALL_MODEL_PARAMS
on CPU, else as auto), auto (vLLM where it imports, else transformers), vllm, or hf
(transformers, zoo.services.generation.hf). Runs recorded before by_size existed say
auto and meant it: they reproduce with vLLM."""

CORRECTIONS = ("none", "tis", "mis-token", "mis-sequence", "bypass")
"""``--correction``: the trainer-sampler mismatch corrections (zoo.services.offpolicy)."""

LR_SCHEDULES = ("constant", "linear", "cosine")
"""OptimizerSection.lr_schedule's valid values (``lr_at``)."""


@dataclass
class OptimizerSection:
    """AdamW, its learning-rate schedule and the gradient clip: the "optimizer" section of a
    run's config (``cfg.optimizer``), declared here, where it is used. Defaults: the
    tiny model's recipe (docs/training.md)."""

    lr: float = 5e-5
    """AdamW learning rate (the peak, under a schedule)."""
    lr_schedule: str = "constant"
    """After the warm-up: constant, or a linear or cosine decay to ``min_lr_ratio * lr``
    over ``decay_steps`` optimizer steps, or else over the rest of the budget (TRL's
    default is linear, verl's constant)."""
    warmup_steps: int = 0
    """Optimizer steps of linear warm-up to ``lr`` (0: none)."""
    warmup_ratio: float = 0.0
    """Linear warm-up to ``lr`` over this share of the run's budget, in whatever unit the
    budget counts (TRL's warmup_ratio, verl's lr_warmup_steps_ratio); instead of
    ``warmup_steps``. With it, or with a decay and no ``decay_steps`` under a FLOPs,
    samples or seconds budget, the schedule follows the share of the budget spent,
    set once per rollout batch (zoo.services.trainer.lr_at_budget)."""
    decay_steps: int = 0
    """Optimizer steps of the decay after the warm-up; 0: the rest of the run (its steps x
    mini_batches x epochs, or the rest of any other budget)."""
    min_lr_ratio: float = 0.0
    """Where the decay ends, as a fraction of ``lr``."""
    weight_decay: float = 0.0
    """AdamW's decoupled weight decay (verl's default: 0.01; TRL's: 0)."""
    adam_beta1: float = 0.9
    """AdamW's decay rate of the gradient's running mean (0.9: torch, TRL and verl alike)."""
    adam_beta2: float = 0.999
    """AdamW's decay rate of the squared gradient's running mean (0.999: torch, TRL and
    verl alike)."""
    adam_eps: float = 1e-8
    """AdamW's epsilon."""
    grad_clip: float = 1.0
    """Clip the gradient's global norm to this before each optimizer step (> 0; inf: no
    clipping)."""

    def validate(self) -> None:
        if not self.lr > 0:
            raise ConfigError(f"lr must be > 0, got {self.lr}")
        if self.lr_schedule not in LR_SCHEDULES:
            raise ConfigError(
                f"unknown lr_schedule {self.lr_schedule!r}; valid: {', '.join(LR_SCHEDULES)}"
            )
        if self.warmup_steps < 0 or self.decay_steps < 0 or not 0 <= self.min_lr_ratio <= 1:
            raise ConfigError("need warmup_steps >= 0, decay_steps >= 0, 0 <= min_lr_ratio <= 1")
        if not (
            0 <= self.weight_decay < 1
            and 0 <= self.adam_beta1 < 1
            and 0 <= self.adam_beta2 < 1
            and self.adam_eps > 0
        ):
            raise ConfigError("need 0 <= weight_decay < 1, 0 <= adam betas < 1, adam_eps > 0")
        if not 0 <= self.warmup_ratio < 1:
            raise ConfigError(f"warmup_ratio must be in [0, 1), got {self.warmup_ratio}")
        if self.warmup_ratio and (self.warmup_steps or self.decay_steps):
            raise ConfigError(
                "--warmup-ratio schedules over the budget's share spent: leave --warmup-steps "
                "and --decay-steps (optimizer steps) unset, or use those two instead"
            )
        if not self.grad_clip > 0:
            raise ConfigError(f"grad_clip must be > 0 (inf: no clipping), got {self.grad_clip}")


OLD_LOGPROB_PASSES = ("when_needed", "always")
"""When the trainer runs its old-log-prob pass (RegimeSection.old_logprob_pass)."""

MINI_BATCH_ROWS = ("groups", "shuffled")
"""Which rows share a mini-batch (RegimeSection.mini_batch_rows)."""


@dataclass
class RegimeSection:
    """How a rollout batch is trained: the "training regime" section of a run's config."""

    micro_batch_size: int = 0
    """Sequences per forward/backward in the trainer; 0 = the whole mini-batch. Memory only:
    it never changes the numbers."""
    mini_batches: int = 4
    """Optimizer steps per rollout batch and pass: the batch's groups are split into this
    many mini-batches (verl: train batch / ppo_mini_batch_size; TRL: steps_per_generation).
    Every update after the first sees a ratio away from 1: where clips, caps and gates act.
    1 (with epochs 1) is the on-policy regime, in which they never do."""
    epochs: int = 1
    """Passes over each rollout batch (verl: ppo_epochs; TRL: num_iterations)."""
    mini_batch_rows: str = "groups"
    """Which rows share a mini-batch: "groups", whole groups in sampling order, contiguous,
    the same split every pass (verl's default); "shuffled", all the batch's rows in a new
    random order each pass (drawn from the run's seed, the policy version and the pass),
    cut into ``mini_batches`` slices as even as rows allow, so a group's completions meet
    in different optimizer steps (TRL's GRPOTrainer, which shuffles its generation batch
    before its steps_per_generation steps). Advantages are computed on the whole batch
    first, so both train the same objective; the steps' noise differs. The policy only:
    a critic (ppo) keeps whole groups."""
    old_logprob_pass: str = "when_needed"
    """The trainer's forward over a batch before it trains on it, for log pi_old:
    "when_needed" skips it where one update trains a batch the current weights sampled
    (mini_batches and epochs 1, synchronous) and nothing reads pi_old before training (no
    correction, adaptive KL, KL in the reward or critic): that update's own forward, at the
    same weights, is pi_old (as TRL and verl do), and gives the mismatch metrics after it;
    "always" runs it (what runs recorded before this field did)."""

    def validate(self) -> None:
        if self.mini_batch_rows not in MINI_BATCH_ROWS:
            raise ConfigError(
                f"unknown mini_batch_rows {self.mini_batch_rows!r}; valid: "
                f"{', '.join(MINI_BATCH_ROWS)}"
            )
        if self.old_logprob_pass not in OLD_LOGPROB_PASSES:
            raise ConfigError(
                f"unknown old_logprob_pass {self.old_logprob_pass!r}; valid: "
                f"{', '.join(OLD_LOGPROB_PASSES)}"
            )
        if self.micro_batch_size < 0:
            raise ConfigError(
                "micro_batch_size must be >= 0 (0: the whole mini-batch), got "
                f"{self.micro_batch_size}"
            )
        for name in ("mini_batches", "epochs"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
