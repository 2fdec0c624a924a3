"""What defines a run: ``RunConfig``, its valid choices, validation and size-dependent
defaults. The command line is generated from these fields (harness/parsing.py), and every run
records them in its config.json."""

from __future__ import annotations

import dataclasses
import math
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from zoo.core.config import ConfigError, Limit, check_number, field_docs
from zoo.models.presets import INITS, TINY_MODELS, ModelSpec, resolve_model
from zoo.run.trackers import check_installed, parse_report_to
from zoo.services.settings import (
    CORRECTIONS,
    GENERATOR_BACKENDS,
    LR_SCHEDULES,
    MINI_BATCH_ROWS,
    OLD_LOGPROB_PASSES,
    OptimizerSection,
    RegimeSection,
)

if TYPE_CHECKING:
    from zoo.algorithms.base import Algorithm

MAX_SAMPLES_PER_PROMPT = 16384
"""vLLM's bound on samples of one prompt (group_size, eval_samples): checked before a run."""
RUN_LIMITS = {
    "steps": Limit(
        1_000_000,
        "a step appends ~5 kB to metrics.jsonl and samples.jsonl and "
        "takes a second or more even on the tiny model: 5 GB and 12 days at the "
        "bound",
    ),
    "eval_points": Limit(10_000, "each is a pass over the held-out split"),
}
"""Upper bounds of RunConfig's numbers past those vLLM or the memory estimate refuse."""
PLACEMENTS = ("local", "monarch")
"""Where services run (``cfg.placement.placement``); the Monarch one is zoo.placement."""
WEIGHT_SYNCS = ("rdma", "endpoint")
"""Monarch weight-sync backends (TorchStore is not one: docs/stack.md, docs/placement.md)."""
MODES = ("sync", "async")
"""sync: sample with the current weights, then train. async: generation of the next
batches overlaps training on this one (sampled by weights at most max_policy_age old)."""
DEVICES = ("auto", "cpu", "cuda")
"""Where the trainer, reference and generator run (``cfg.placement.device``)."""
EVAL_SPLITS = ("heldout", "validation")
"""What a run evaluates on (``cfg.evaluation.eval_split``)."""
EVAL_OVERLAPS = ("off", "on")
"""Whether an evaluation runs while the trainer trains the next step
(``cfg.evaluation.eval_overlap``)."""
LONG_PROMPTS = ("refuse", "truncate-left")
"""What a run does with a prompt longer than the context leaves for it (RunConfig)."""
SAMPLE_STREAMS = ("disjoint", "consecutive")
"""How prompt seeds are spaced (SamplingSection.sample_streams); the first is the default."""
CHOICES: dict[str, tuple[str, ...]] = {
    "init": INITS,
    "generator": GENERATOR_BACKENDS,
    "device": DEVICES,
    "placement": PLACEMENTS,
    "mode": MODES,
    "weight_sync": WEIGHT_SYNCS,
    "correction": CORRECTIONS,
    "long_prompts": LONG_PROMPTS,
    "lr_schedule": LR_SCHEDULES,
    "eval_split": EVAL_SPLITS,
    "eval_overlap": EVAL_OVERLAPS,
    "old_logprob_pass": OLD_LOGPROB_PASSES,
    "mini_batch_rows": MINI_BATCH_ROWS,
    "sample_streams": SAMPLE_STREAMS,
}
"""The valid values of RunConfig's string fields that have a fixed set: ``validate`` and
the command line (harness/parsing.py builds its flags from RunConfig) read them here."""


@dataclass
class RunSection:
    """What runs: the algorithm, the env, the model and the seed."""

    algorithm: str = "grpo"
    """Registered algorithm name (``harness list algorithms``)."""
    env: str = "arithmetic"
    """Registered environment name (``harness list envs``)."""
    model: str = "tiny"
    """Model preset (``harness list models``) or a local Hugging Face Qwen3 folder."""
    seed: int = 0
    """Seeds the prompts' order, the sampler and the trainer's initial state."""
    model_path: str = ""
    """Hugging Face checkpoint folder for ``model`` (overrides the preset's lookup)."""
    init: str = "pretrained"
    """"random": the model's architecture with random weights (throughput without weights)."""
    algorithm_config: dict[str, Any] = field(default_factory=dict)
    env_config: dict[str, Any] = field(default_factory=dict)
    variant: str = ""
    """The run's row name in a comparison when it is not the algorithm's plain name:
    ``compare --vary`` names each setting of a grid by its overrides (``grpo@eps=0.28``)."""

    def validate(self) -> None:
        if self.init not in INITS:
            raise ConfigError(f"unknown init {self.init!r}; valid: {', '.join(INITS)}")
        if self.seed < 0:  # (numpy's and the env's generators take none below 0)
            raise ConfigError(f"seed must be >= 0, got {self.seed}")

    def model_spec(self) -> ModelSpec:
        return resolve_model(self.model, model_path=self.model_path, init=self.init)


@dataclass
class SamplingSection:
    """The rollout batch: how many prompts, how many samples each, how long, how hot."""

    prompts_per_step: int = 128
    """Prompts (groups of ``group_size`` completions) per rollout batch."""
    group_size: int = 8
    """G: completions sampled per prompt."""
    max_response_len: int = 6
    """Generation budget L_max in tokens (per assistant turn in a multi-turn env)."""
    max_episode_tokens: int = 0
    """Multi-turn envs: tokens after the prompt per episode at most, the env's
    observations included (an episode that reaches it ends with finish reason "length");
    0: twice the longest episode, 2 x (turns x max_response_len + (turns - 1) x the env's
    bound on an observation) where the env declares that bound (pyfunc_feedback: 25), else
    2 x turns x max_response_len (as much room for observations as for the turns).
    Single-turn envs: must stay 0."""
    temperature: float = 1.0
    """Sampling temperature T > 0; the trainer, reference and old-log-prob passes score
    tokens at the same T."""
    max_sampling_rounds: int = 10
    """Bound on refills when the algorithm drops groups (DAPO's dynamic sampling)."""
    noise_seed: int = 0
    """Draws the training samples' noise anew while the prompts' order, the evaluation and
    the trainer keep ``seed``'s: two runs that differ only here see the same prompts with
    independent sampling noise (a board's A/A control, harness/controls.py)."""
    sample_streams: str = "disjoint"
    """How the samples' noise streams are seeded (zoo.run.rollout.sampling_seed): disjoint,
    every sample of a run its own; consecutive, what runs recorded before this field did
    (neighbouring prompts' samples shared streams). Kept so that those runs resume and
    reproduce (ADDED_LATER)."""
    long_prompts: str = "refuse"
    """A prompt longer than the context leaves next to the response budget: refuse (the
    run stops with the count of such held-out prompts before it starts, or names the train
    prompt when it comes) or truncate-left (keep its last tokens, with a warning)."""

    def validate(self) -> None:
        for name in ("prompts_per_step", "max_response_len", "max_sampling_rounds"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.noise_seed < 0:
            raise ConfigError(f"noise_seed must be >= 0, got {self.noise_seed}")
        if self.sample_streams not in SAMPLE_STREAMS:
            raise ConfigError(
                f"unknown sample_streams {self.sample_streams!r}; valid: "
                f"{', '.join(SAMPLE_STREAMS)}"
            )
        if self.group_size < 2:
            raise ConfigError(
                f"group_size must be >= 2 (group advantages need a baseline), got {self.group_size}"
            )
        if self.group_size > MAX_SAMPLES_PER_PROMPT:
            raise ConfigError(
                f"group_size must be <= {MAX_SAMPLES_PER_PROMPT} (vLLM's limit of samples "
                f"per prompt), got {self.group_size}"
            )
        if self.max_episode_tokens and self.max_episode_tokens < self.max_response_len:
            raise ConfigError(
                f"max_episode_tokens {self.max_episode_tokens} < max_response_len "
                f"{self.max_response_len}: an episode must hold at least one whole turn "
                "(0: the default, 2 x turn limit x max_response_len)"
            )
        if self.temperature < 0:
            raise ConfigError(f"temperature must be >= 0, got {self.temperature}")
        if self.temperature == 0:
            raise ConfigError(
                f"temperature 0 is greedy decoding: the {self.group_size} samples of a group "
                "would be identical, so every group advantage is 0 and nothing is learned; "
                "use a temperature > 0 (1.0 samples the policy itself)"
            )
        if self.long_prompts not in LONG_PROMPTS:
            raise ConfigError(
                f"unknown long_prompts {self.long_prompts!r}; valid: {', '.join(LONG_PROMPTS)}"
            )


@dataclass
class CorrectionSection:
    """What corrects for the trainer and the sampler computing different probabilities."""

    correction: str = "none"
    """Trainer-sampler mismatch correction (zoo.services.offpolicy): none, tis (truncated
    importance sampling), mis-token / mis-sequence (masked importance sampling), bypass
    (the sampler's log-probs as the old policy)."""
    correction_cap: float = 2.0
    """tis: the cap C on pi_old / pi_sampler per token."""
    correction_low: float = 0.5
    """mis-*: the lowest pi_old / pi_sampler kept (IcePop's 0.5)."""
    correction_high: float = 5.0
    """mis-*: the highest pi_old / pi_sampler kept (IcePop's 5)."""

    def validate(self) -> None:
        if self.correction not in CORRECTIONS:
            raise ConfigError(
                f"unknown correction {self.correction!r}; valid: {', '.join(CORRECTIONS)}"
            )
        if not 0 < self.correction_low <= 1 <= self.correction_high or self.correction_cap < 1:
            raise ConfigError(
                "need 0 < correction_low <= 1 <= correction_high and correction_cap >= 1, got "
                f"{self.correction_low}, {self.correction_high}, {self.correction_cap}"
            )


@dataclass
class BudgetSection:
    """What ends a run: one of steps, FLOPs, samples or seconds."""

    steps: int = 150
    """Rollout batches (loop steps) to train on, unless one of the budgets below is set."""
    budget_flops: float = 0.0
    """Stop once the ledger's model FLOPs reach this many (all phases)."""
    budget_samples: int = 0
    """Stop once this many completions have been generated (dropped ones count)."""
    budget_seconds: float = 0.0
    """Stop once this many wall seconds of training have passed."""

    @property
    def limit(self) -> tuple[str, float]:
        """(unit, amount) of what ends the run: flops, samples, seconds or steps."""
        chosen = [
            (unit, float(v))
            for unit, v in (
                ("flops", self.budget_flops),
                ("samples", self.budget_samples),
                ("seconds", self.budget_seconds),
            )
            if v
        ]
        if len(chosen) > 1:
            raise ConfigError(f"give one budget, not {', '.join(u for u, _ in chosen)}")
        return chosen[0] if chosen else ("steps", float(self.steps))

    def validate(self) -> None:
        if self.steps < 1:
            raise ConfigError(f"steps must be >= 1, got {self.steps}")
        if min(self.budget_flops, self.budget_samples, self.budget_seconds) < 0:
            raise ConfigError("budgets must be >= 0")
        self.limit  # noqa: B018 (raises on several budgets)


@dataclass
class EvaluationSection:
    """When and how a run is evaluated (not charged to its budget)."""

    eval_every: int = 25
    """Greedy evaluation on the held-out split every this many steps (and at 0 and end)."""
    eval_samples: int = 8
    """Sampled completions per held-out prompt at each evaluation, at the run's
    temperature, for pass@k (k in 1, 4, 8, up to this) and mean reward
    (zoo.services.evaluation); 0: greedy accuracy only."""
    sampled_eval_points: int = 3
    """Draw the ``eval_samples`` only at the last this many evaluations (0: at every
    one). The summary's sampled metrics average the same last 3 evaluations as the
    headline, so 3 reports the same numbers as sampling at every evaluation (the same
    seeds per problem) for 3/K of the sampling; the sampled curves then have those points
    only. Sampled evaluation was ~70% of an evaluation's time on the tiny boards, where
    the earlier points bought no standard error of any summary figure (docs/statistics.md).
    Runs recorded before it was 3 said 0 (ADDED_LATER covers those without the field)."""
    eval_split: str = "heldout"
    """What every evaluation scores: the env's fixed held-out split (the headline), or its
    validation split, disjoint from train and held-out, on which ``harness tune`` selects
    settings so that the board's held-out numbers are not tuned on."""
    eval_points: int = 8
    """With a budget: evaluate when 1/K, 2/K, ... K/K of it is spent (same points for all
    algorithms; evaluation is not charged to the budget)."""
    eval_overlap: str = "off"
    """on: the evaluation of step k's weights runs on the generators while the trainer
    trains step k+1, and step k's record is written when it is back. The same numbers as
    off (tested): the generators keep step k's weights until it is back, and its samples
    are seeded per problem. Needs --placement monarch (the generators in processes of
    their own), sync mode and a single-turn env; the evaluations of a checkpoint's step
    and of the last step run in place, so a checkpoint never holds a step without its
    record. It does not change what a run computes, so a resume may change it."""

    def validate(self) -> None:
        for name in ("eval_every", "eval_points"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.eval_samples < 0:
            raise ConfigError(f"eval_samples must be >= 0 (0: greedy only): {self.eval_samples}")
        if self.eval_samples > MAX_SAMPLES_PER_PROMPT:
            raise ConfigError(
                f"eval_samples must be <= {MAX_SAMPLES_PER_PROMPT} (vLLM's limit of samples "
                f"per prompt), got {self.eval_samples}"
            )
        if self.sampled_eval_points < 0:
            raise ConfigError(
                "sampled_eval_points must be >= 0 (0: every evaluation): "
                f"{self.sampled_eval_points}"
            )
        for name, valid in (("eval_split", EVAL_SPLITS), ("eval_overlap", EVAL_OVERLAPS)):
            if getattr(self, name) not in valid:
                raise ConfigError(
                    f"unknown {name} {getattr(self, name)!r}; valid: {', '.join(valid)}"
                )


@dataclass
class PlacementSection:
    """Where the services run and how generation and training interleave."""

    device: str = "auto"
    """Where the trainer, reference and generator run: cpu, cuda, or auto (cuda when
    available). On cuda the trainer computes in bf16 and generation is bf16."""
    generator: str = "by_size"
    """Generation backend: vllm, hf (transformers), auto (vLLM where it imports), or
    by_size: transformers for a model of under 10M weights on CPU (faster there, the same
    distribution), otherwise as auto (zoo.services.generation.resolve_backend)."""
    placement: str = "local"
    """Where services run: local (this process) or monarch (generator, trainer and
    reference each in their own process, as Monarch actors; zoo.placement)."""
    mode: str = "sync"
    """sync, or async: the generator samples the next batches while the trainer trains on
    this one (needs --placement monarch, where they are separate processes)."""
    max_policy_age: int = 1
    """Async mode: batches are requested this many optimizer steps ahead; a sample whose
    weights are older than this many steps at training time is dropped (and counted)."""
    weight_sync: str = "rdma"
    """Monarch placement: how weights reach the generators. rdma: the generators read the
    trainer's weights from a registered buffer (Monarch RDMA; a TCP fallback on machines
    without RDMA NICs); endpoint: the state dict travels in messages, through the loop."""
    distributed: dict[str, Any] = field(default_factory=dict)
    """Monarch placement: processes per service (zoo.placement.config; a placement
    file's contents). Empty: one process each."""

    def validate(self) -> None:
        for name, valid in (
            ("device", DEVICES),
            ("generator", GENERATOR_BACKENDS),
            ("placement", PLACEMENTS),
            ("mode", MODES),
            ("weight_sync", WEIGHT_SYNCS),
        ):
            if getattr(self, name) not in valid:
                raise ConfigError(
                    f"unknown {name} {getattr(self, name)!r}; valid: {', '.join(valid)}"
                )
        if self.max_policy_age < 1:
            raise ConfigError(f"max_policy_age must be >= 1, got {self.max_policy_age}")
        if self.placement != "monarch" and (self.mode == "async" or self.distributed):
            what = "asynchronous mode" if self.mode == "async" else "a placement file"
            raise ConfigError(
                f"{what} needs --placement monarch (generation and training overlap only "
                "when they run in processes of their own)"
            )
        if self.distributed:
            from zoo.placement.config import PlacementConfig

            PlacementConfig.from_dict(self.distributed)

    def resolved_device(self) -> str:
        import torch  # (here: a config, its validation and --help need no torch)

        if self.device == "auto":
            return "cuda" if torch.cuda.is_available() else "cpu"
        if self.device == "cuda" and not torch.cuda.is_available():
            raise ConfigError("--device cuda, but torch sees no CUDA device here; use cpu")
        return self.device


@dataclass
class OutputSection:
    """What a run writes beside its metrics: checkpoints, and where else metrics go."""

    checkpoint_every: int = 10
    """Save a resumable checkpoint every this many steps, and at the end (0: end only).
    After a crash the run resumes from the last one; metrics after it are re-done."""
    report_to: str = ""
    """Experiment trackers that also get every step's metrics, the resolved config, the
    evaluation points and the kept samples: tensorboard, wandb, mlflow, comma-separated
    for several (none by default). Each is an extra: pip install -e '.[trackers]'. The runs
    of a compare are one experiment (one MLflow store and experiment, one W&B group); W&B
    runs offline without an API key (zoo.run.trackers)."""

    def validate(self) -> None:
        if self.checkpoint_every < 0:
            raise ConfigError(
                f"checkpoint_every must be >= 0 (0: at the end only), got {self.checkpoint_every}"
            )
        check_installed(parse_report_to(self.report_to))


SECTIONS: tuple[tuple[str, str, type], ...] = (
    ("what runs", "run", RunSection),
    ("sampling", "sampling", SamplingSection),
    ("optimizer", "optimizer", OptimizerSection),
    ("training regime", "regime", RegimeSection),
    ("off-policy correction", "correction", CorrectionSection),
    ("budget", "budget", BudgetSection),
    ("evaluation", "evaluation", EvaluationSection),
    ("placement", "placement", PlacementSection),
    ("output", "output", OutputSection),
)
"""RunConfig's sections, in the order ``--help`` shows them: (heading, RunConfig's field,
class). Each declares its fields once and validates them; the trainer gets two of them
(zoo.services.trainer), the sampler its own."""

SECTION_OF: dict[str, str] = {
    f.name: attr for _, attr, cls in SECTIONS for f in dataclasses.fields(cls)
}
"""The section (RunConfig's field) of every flat name: ``lr`` -> ``optimizer``."""


@dataclass
class RunConfig:
    """Everything that defines a run, as its sections: ``cfg.optimizer.lr``. Flat, one
    name per field (``from_flat`` / ``to_flat``), it is the command line's flags, the
    ``run`` record of config.json, a leaderboard's grouping and what ``reproduce`` reads
    back; every flat name belongs to exactly one section (SECTION_OF). Defaults: the tiny
    model's recipe, calibrated on this project's CPU machines (docs/training.md): 128
    prompts x 8 samples per rollout batch, trained in 4 mini-batches at lr 5e-5,
    temperature 1, grad clip 1. There GRPO's clip acts on ~0.8% of tokens (papers:
    0.1-1%) and the model learns as fast as the earlier on-policy recipe (one update per
    batch at lr 2e-4), in which no clip acts. Other models start from their recipe
    (``run_defaults``)."""

    run: RunSection = field(default_factory=RunSection)
    sampling: SamplingSection = field(default_factory=SamplingSection)
    optimizer: OptimizerSection = field(default_factory=OptimizerSection)
    regime: RegimeSection = field(default_factory=RegimeSection)
    correction: CorrectionSection = field(default_factory=CorrectionSection)
    budget: BudgetSection = field(default_factory=BudgetSection)
    evaluation: EvaluationSection = field(default_factory=EvaluationSection)
    placement: PlacementSection = field(default_factory=PlacementSection)
    output: OutputSection = field(default_factory=OutputSection)

    @classmethod
    def from_flat(cls, flat: Mapping[str, Any] | None = None, **more: Any) -> RunConfig:
        """The config of flat names (``{"lr": 1e-5, "steps": 10}``, and keywords), each
        into its section; a name left out takes its default. An unknown name is a
        ``ConfigError`` that names it and the valid ones."""
        given = {**(flat or {}), **more}
        unknown = sorted(k for k in given if k not in SECTION_OF)
        if unknown:
            raise ConfigError(
                f"unknown run setting{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}; "
                f"valid: {', '.join(SECTION_OF)}"
            )
        parts: dict[str, dict[str, Any]] = {attr: {} for _, attr, _ in SECTIONS}
        for name, value in given.items():
            parts[SECTION_OF[name]][name] = value
        return cls(**{attr: kind(**parts[attr]) for _, attr, kind in SECTIONS})

    def to_flat(self) -> dict[str, Any]:
        """One key per field, in the sections' order (config.json's ``run``, the flags),
        values copied as ``dataclasses.asdict`` copies them."""
        out: dict[str, Any] = {}
        for _, attr, _ in SECTIONS:
            out.update(dataclasses.asdict(getattr(self, attr)))
        return out

    @classmethod
    def flat_fields(cls) -> tuple[dataclasses.Field, ...]:
        """The fields of every section, flat, in the sections' order."""
        return tuple(f for _, _, kind in SECTIONS for f in dataclasses.fields(kind))

    @classmethod
    def flat_types(cls) -> dict[str, Any]:
        """The type of every flat name (the command line's flag types)."""
        out: dict[str, Any] = {}
        for _, _, kind in SECTIONS:
            out.update(typing.get_type_hints(kind))
        return out

    @classmethod
    def flat_docs(cls) -> dict[str, str]:
        """The docstring of every flat name (the command line's help)."""
        out: dict[str, str] = {}
        for _, _, kind in SECTIONS:
            out.update(field_docs(kind))
        return out

    def flat(self, name: str) -> Any:
        """The value of the flat name ``name`` (``cfg.flat("lr")`` is ``cfg.optimizer.lr``)."""
        if name not in SECTION_OF:
            raise ConfigError(f"unknown run setting {name}; valid: {', '.join(SECTION_OF)}")
        return getattr(getattr(self, SECTION_OF[name]), name)

    def replace(self, **changes: Any) -> RunConfig:
        """A copy with the flat names in ``changes`` set (``cfg.replace(steps=2)``); the
        sections not changed are shared with this config, as ``dataclasses.replace`` shares
        its fields."""
        unknown = sorted(k for k in changes if k not in SECTION_OF)
        if unknown:
            raise ConfigError(
                f"unknown run setting{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}; "
                f"valid: {', '.join(SECTION_OF)}"
            )
        parts: dict[str, dict[str, Any]] = {}
        for name, value in changes.items():
            parts.setdefault(SECTION_OF[name], {})[name] = value
        return dataclasses.replace(
            self,
            **{
                attr: dataclasses.replace(getattr(self, attr), **values)
                for attr, values in parts.items()
            },
        )

    def validate(self) -> None:
        """Every field a finite number where it is one, each section's own checks, then
        the checks that span sections."""
        for name, value in self.to_flat().items():  # nan passes every comparison below
            if not (name == "grad_clip" and value == math.inf):  # inf: no clipping
                check_number(value, name, RUN_LIMITS.get(name))
        for _, attr, _ in SECTIONS:
            getattr(self, attr).validate()
        evaluation, placement = self.evaluation, self.placement
        if evaluation.eval_overlap == "on" and (
            placement.placement != "monarch" or placement.mode != "sync"
        ):
            raise ConfigError(
                f"eval_overlap on needs --placement monarch and --mode sync (got placement "
                f"{placement.placement!r}, mode {placement.mode!r}): the evaluation runs on "
                "the generators while the trainer, in its own process, trains the next step; "
                "async mode keeps the generators busy with the next batches instead"
            )
        if self.regime.mini_batches > self.sampling.prompts_per_step:
            raise ConfigError(
                f"mini_batches {self.regime.mini_batches} > prompts_per_step "
                f"{self.sampling.prompts_per_step}: at most one mini-batch per group (a mini-batch "
                "of whole groups holds at least one)"
            )

    @classmethod
    def from_record(cls, run: dict[str, Any]) -> RunConfig:
        """The config a run recorded in its config.json (``["run"]``, flat). Fields added
        since take their defaults, unless the default changes what such a run did: a run
        recorded before forge-zoo trained in mini-batches is refused, with the reason."""
        missing = [k for k in PREDATES_REGIME if k not in run]
        if missing:
            raise ConfigError(
                f"this run was recorded by an older forge-zoo (before {', '.join(missing)} "
                "existed: one optimizer step per rollout batch, the trainer's own log-probs "
                "as the old policy, the old-log-prob pass not charged); this version would "
                "give other numbers. Check out the commit its config.json records to "
                "re-run or continue it"
            )
        return cls.from_flat({**ADDED_LATER, **run})

    def skips_old_logprob_pass(self, algorithm: Algorithm) -> bool:
        """Does the trainer's one update take its own forward as pi_old, so that the
        old-log-prob pass is skipped (``old_logprob_pass`` when_needed)? Where one update
        (mini_batches and epochs 1) trains, synchronously, a batch the current weights
        sampled, and nothing reads pi_old before it: no correction, no KL in the reward,
        no adaptive KL, no critic. The ratio is then 1 in value (its gradient the policy
        gradient), as in TRL and verl with one update per batch."""
        regime = self.regime
        return (
            regime.old_logprob_pass == "when_needed"
            and regime.mini_batches * regime.epochs == 1
            and self.placement.mode == "sync"
            and self.correction.correction == "none"
            and not (algorithm.needs_values or algorithm.kl_in_reward_by_loop)
            and algorithm.options.kl_target <= 0
        )

    @property
    def schedule_over_budget(self) -> bool:
        """Does the learning rate follow the share of the budget spent (not optimizer
        steps)? With ``warmup_ratio``, or a decay of unset length under a budget other
        than steps, whose optimizer steps are not known ahead."""
        optimizer = self.optimizer
        decay_of_unknown_length = (
            optimizer.lr_schedule != "constant"
            and not optimizer.decay_steps
            and self.budget.limit[0] != "steps"
        )
        return optimizer.warmup_ratio > 0 or decay_of_unknown_length


PREDATES_REGIME = ("mini_batches", "epochs")
"""Run-config fields whose absence marks a run recorded before several updates per
rollout batch (RunConfig.from_record)."""

NOT_DEFINING = ("report_to", "eval_overlap")
"""Run-config fields that do not change what a run computes: a resume may change them, and
leaderboard rows are grouped without them."""

ADDED_LATER = {
    "eval_samples": 0,
    "sampled_eval_points": 0,
    "eval_split": "heldout",
    "warmup_ratio": 0.0,
    "old_logprob_pass": "always",
    "noise_seed": 0,
    "sample_streams": "consecutive",
}
"""Fields added since runs were first recorded, with the value that reproduces what a
run recorded without them did (RunConfig.from_record)."""


RECIPE_FIELDS = (
    "prompts_per_step",
    "group_size",
    "max_response_len",
    "lr",
    "micro_batch_size",
    "mini_batches",
    "epochs",
    "grad_clip",
    "temperature",
)
"""The settings a model's recipe gives (``ModelRecipe``): a flag left unset takes its
model's, so that one command line trains the tiny presets and a 1-8B model sensibly."""

DEFAULT_STEPS = BudgetSection.steps
"""`run` and `doctor` without a budget: this many rollout batches (RunConfig's default)."""


@dataclass(frozen=True)
class ModelRecipe:
    """Where a model's runs start when the command line does not say."""

    settings: dict[str, Any]
    """RECIPE_FIELDS where the model differs from RunConfig's defaults (which are the tiny
    model's recipe, docs/training.md)."""
    compare_budget: float = 0.0
    """FLOPs per run of `compare` without a budget flag (0: none here; a Qwen3 preset's
    comes with its GPU recipe, harness.recipes, and any other model needs a flag)."""

    def defaults(self) -> dict[str, Any]:
        """Every RECIPE_FIELDS setting: the recipe's, else RunConfig's default."""
        plain = RunConfig.from_flat()
        return {name: self.settings.get(name, plain.flat(name)) for name in RECIPE_FIELDS}


TINY_COMPARE_BUDGET = 2e12
"""FLOPs per run of `compare` on a tiny preset: ~44 GRPO steps on the tiny model (rollout
batches of 4 mini-batches each), ~1 minute per run on 2 cores."""

REAL_MODELS = "real"
"""MODEL_RECIPES' key for every model that is not a tiny preset (the Qwen3 presets, a
local folder)."""

MODEL_RECIPES: dict[str, ModelRecipe] = {
    "tiny": ModelRecipe({}, TINY_COMPARE_BUDGET),  # RunConfig's defaults (docs/training.md)
    "tiny-code": ModelRecipe(
        {"max_response_len": 12, "prompts_per_step": 64},
        TINY_COMPARE_BUDGET,
    ),
    "tiny-tool": ModelRecipe(
        {"max_response_len": 16, "prompts_per_step": 64},
        TINY_COMPARE_BUDGET,
    ),
    "tiny-code-feedback": ModelRecipe(
        {"max_response_len": 12, "prompts_per_step": 64},
        TINY_COMPARE_BUDGET,
    ),
    "tiny-sum": ModelRecipe(
        {"max_response_len": 64, "prompts_per_step": 64, "grad_clip": 2.0, "temperature": 0.7},
        4e12,
    ),
    REAL_MODELS: ModelRecipe(
        {
            "prompts_per_step": 64,
            "group_size": 8,
            "max_response_len": 1024,
            "lr": 1e-6,
            "micro_batch_size": 8,
            "mini_batches": 4,
            "epochs": 1,
            "grad_clip": 1.0,
            "temperature": 1.0,
        },
    ),
}
"""One recipe per model preset (and one for every real model), the one table of where a
run starts when the command line does not say; read by ``recipe_of``.

The tiny presets other than ``tiny`` have longer answers (a pyfunc expression takes up to
9 tokens with its end; a tool call up to 11, and DAPO's overlong window must stay clear of
both), and 64 prompts per step keep a step's sandbox executions in check. tiny-sum clips
the gradient norm at 2: at 1 the bound rescaled 18-59% of DAPO's optimizer steps on
running_sum (median norm 0.9-1.07), while the largest norm any built-in reached there was
1.36 (results/archive/tune-running-sum-grad-clip-1/). tiny-sum samples at temperature 0.7
so that about half of running_sum's groups carry a gradient from the start: from the
shipped start (greedy 0.30), 256 prompts x 8 gave a sampled reward of 0.055 and 36% of
groups with differing rewards at T = 1, 0.084 and 45% at 0.8, 0.104 and 51% at 0.7, 0.122
and 52% at 0.6 (docs/envs.md; fewer terms, 2-4, gave 28%: the warm start learned 3-5).
Its compare budget is 4e12: a running_sum step costs ~1.1e11 (answers of ~30 tokens), so
~36 GRPO steps, within which its learning curves flatten (docs/envs.md).

Real models: the scale of published GRPO/DAPO recipes for 1-8B models (lr 1e-6, G = 8 or
16, sampling at T = 1, responses of ~1k tokens for GSM8K-level math), cut to a batch one
GPU node handles, trained in 4 mini-batches per rollout batch (verl's common train /
mini-batch ratio; DAPO uses 16). Not measured here (no GPU): a starting point."""


def recipe_of(model: str) -> ModelRecipe:
    """``model``'s recipe: its tiny preset's, else the real models'."""
    return MODEL_RECIPES[model if model in TINY_MODELS else REAL_MODELS]


def run_defaults(model: str) -> dict[str, Any]:
    """Batch, lengths and learning rate for ``model``: its recipe (``recipe_of``), every
    RECIPE_FIELDS setting."""
    return recipe_of(model).defaults()
