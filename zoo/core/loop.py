"""The RL loop: one function per step, written against service interfaces.

    env.train_prompts        -> prompts (the env keeps the answers)
    generator.generate       -> G completions per prompt (ids, sampler logprobs, version)
    services.score_batch     -> rewards (the env, here or in scorer processes)
    algorithm.shape_rewards  -> e.g. DAPO's overlong punishment
    algorithm.advantages     -> per-response advantages
    algorithm.keep           -> e.g. DAPO's dynamic sampling (refill up to max rounds)
    trainer.logprobs         -> the old log-probs: the trainer's own, with the weights
                                that sampled the batch, once per batch
    offpolicy                -> trainer-sampler mismatch metrics, and the run's correction
                                (none, TIS, MIS, bypass) (zoo.core.offpolicy)
    reference.logprobs       -> only if algorithm.needs_reference
    trainer.train(batch, algorithm.loss)
                             -> mini_batches x epochs optimizer steps (zoo.core.trainer)
    services.sync_weights    -> trainer weights to the generators, new policy version
    ledger                   -> FLOPs, tokens, seconds per phase

One step of the loop is one rollout batch. Sync mode (the default) samples each batch
with the current weights; it then trains in ``mini_batches`` optimizer steps per pass
over ``epochs`` passes, so every update after the first sees a ratio away from 1 (where
the algorithms' clips, caps and gates act). Async mode (Monarch placement) requests
batches ``max_policy_age`` steps ahead, so generation overlaps training; the trainer keeps
the weights of those versions to compute the old log-probs with the weights that sampled
each batch. Services are built by ``build_services``, in this process or as Monarch actors
(zoo.core.placement): a placement only has to provide objects with the same methods.
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from zoo.algorithms import Algorithm, get_algorithm
from zoo.core.config import ConfigError
from zoo.core.evaluation import sampled_metrics
from zoo.core.generator import GENERATOR_BACKENDS, SamplingConfig, make_generator
from zoo.core.ledger import Ledger
from zoo.core.models import INITS, TINY_MODELS, ModelShape, ModelSpec, resolve_model
from zoo.core.offpolicy import CORRECTIONS, correction_weights, mismatch_metrics
from zoo.core.reference import Reference
from zoo.core.trainer import RolloutBatch, Trainer, TrainerConfig
from zoo.core.types import Completion
from zoo.envs import Env, Prompt, get_env

PLACEMENTS = ("local", "monarch")
"""Where services run (RunConfig.placement); the Monarch one is zoo.core.placement."""
WEIGHT_SYNCS = ("rdma", "endpoint")
"""Monarch weight-sync backends (TorchStore is not one: docs/stack.md, README)."""
MODES = ("sync", "async")
"""sync: sample with the current weights, then train. async: generation of the next
batches overlaps training on this one (sampled by weights at most max_policy_age old)."""
DEVICES = ("auto", "cpu", "cuda")
"""Where the trainer, reference and generator run (RunConfig.device)."""
CHOICES: dict[str, tuple[str, ...]] = {
    "init": INITS,
    "generator": GENERATOR_BACKENDS,
    "device": DEVICES,
    "placement": PLACEMENTS,
    "mode": MODES,
    "weight_sync": WEIGHT_SYNCS,
    "correction": CORRECTIONS,
}
"""The valid values of RunConfig's string fields that have a fixed set: ``validate`` and
the command line (harness/cli.py builds its flags from RunConfig) read them here."""


@dataclass
class RunConfig:
    """Everything that defines a run. Defaults: the tiny model's recipe, calibrated on this
    project's CPU machines (README, "Training regime"): 128 prompts x 8 samples per
    rollout batch, trained in 4 mini-batches at lr 5e-5, temperature 1, grad clip 1. There
    GRPO's clip acts on ~0.8% of tokens (papers: 0.1-1%) and the model learns as fast as
    the earlier on-policy recipe (one update per batch at lr 2e-4), in which no clip acts."""

    algorithm: str = "grpo"
    """Registered algorithm name (``harness list algorithms``)."""
    env: str = "arithmetic"
    """Registered environment name (``harness list envs``)."""
    model: str = "tiny"
    """Model preset (``harness list models``) or a local Hugging Face Qwen3 folder."""
    seed: int = 0
    """Seeds the prompts' order, the sampler and the trainer's initial state."""
    steps: int = 150
    """Rollout batches (loop steps) to train on when no budget is given."""
    prompts_per_step: int = 128
    """Prompts (groups of ``group_size`` completions) per rollout batch."""
    group_size: int = 8
    """G: completions sampled per prompt."""
    max_response_len: int = 6
    """Generation budget L_max in tokens."""
    temperature: float = 1.0
    """Sampling temperature T > 0; the trainer, reference and old-log-prob passes score
    tokens at the same T."""
    lr: float = 5e-5
    """AdamW learning rate."""
    grad_clip: float = 1.0
    """Clip the gradient's global norm to this before each optimizer step (> 0; inf: no
    clipping)."""
    micro_batch_size: int = 0
    """Sequences per forward/backward in the trainer; 0 = the whole mini-batch. Memory only."""
    mini_batches: int = 4
    """Optimizer steps per rollout batch and pass: the batch's groups are split into this
    many mini-batches (verl: train batch / ppo_mini_batch_size; TRL: steps_per_generation).
    Every update after the first sees a ratio away from 1: where clips, caps and gates act.
    1 (with epochs 1) is the on-policy regime, in which they never do."""
    epochs: int = 1
    """Passes over each rollout batch (verl: ppo_epochs; TRL: num_iterations)."""
    correction: str = "none"
    """Trainer-sampler mismatch correction (zoo.core.offpolicy): none, tis (truncated
    importance sampling), mis-token / mis-sequence (masked importance sampling), bypass
    (the sampler's log-probs as the old policy)."""
    correction_cap: float = 2.0
    """tis: the cap C on pi_old / pi_sampler per token."""
    correction_low: float = 0.5
    """mis-*: the lowest pi_old / pi_sampler kept (IcePop's 0.5)."""
    correction_high: float = 5.0
    """mis-*: the highest pi_old / pi_sampler kept (IcePop's 5)."""
    max_sampling_rounds: int = 10
    """Bound on refills when the algorithm drops groups (DAPO's dynamic sampling)."""
    eval_every: int = 25
    """Greedy evaluation on the held-out split every this many steps (and at 0 and end)."""
    eval_samples: int = 8
    """Sampled completions per held-out prompt at each evaluation, at the run's
    temperature, for pass@k (k in 1, 4, 8, up to this) and mean reward
    (zoo.core.evaluation); 0: greedy accuracy only."""
    budget_flops: float = 0.0
    """If > 0: stop once the ledger's model FLOPs reach it (all phases), not at ``steps``."""
    budget_samples: int = 0
    """If > 0: stop once this many completions have been generated (dropped ones count)."""
    budget_seconds: float = 0.0
    """If > 0: stop once this many wall seconds of training have passed."""
    eval_points: int = 8
    """With a budget: evaluate when 1/K, 2/K, ... K/K of it is spent (same points for all
    algorithms; evaluation is not charged to the budget)."""
    checkpoint_every: int = 10
    """Save a resumable checkpoint every this many steps, and at the end (0: end only).
    After a crash the run resumes from the last one; metrics after it are re-done."""
    model_path: str = ""
    """Hugging Face checkpoint folder for ``model`` (overrides the preset's lookup)."""
    init: str = "pretrained"
    """"random": the model's architecture with random weights (throughput without weights)."""
    generator: str = "auto"
    """Generation backend: vllm, hf (transformers), or auto (vLLM where it imports)."""
    placement: str = "local"
    """Where services run: local (this process) or monarch (generator, trainer and
    reference each in their own process, as Monarch actors; zoo.core.placement)."""
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
    """Monarch placement: processes per service (zoo.core.placement_config; a placement
    file's contents). Empty: one process each."""
    device: str = "auto"
    """Where the trainer, reference and generator run: cpu, cuda, or auto (cuda when
    available). On cuda the trainer computes in bf16 and generation is bf16."""
    algorithm_config: dict[str, Any] = field(default_factory=dict)
    env_config: dict[str, Any] = field(default_factory=dict)

    @property
    def budget(self) -> tuple[str, float]:
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
        for name in (
            "steps",
            "prompts_per_step",
            "max_response_len",
            "max_sampling_rounds",
            "eval_every",
            "eval_points",
        ):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
        if min(self.budget_flops, self.budget_samples, self.budget_seconds) < 0:
            raise ConfigError("budgets must be >= 0")
        if self.eval_samples < 0:
            raise ConfigError(f"eval_samples must be >= 0 (0: greedy only): {self.eval_samples}")
        self.budget  # noqa: B018 (raises on several budgets)
        if self.group_size < 2:
            raise ConfigError(
                f"group_size must be >= 2 (group advantages need a baseline), got {self.group_size}"
            )
        if not self.lr > 0 or self.temperature < 0:
            raise ConfigError("lr must be > 0 and temperature >= 0")
        if not self.grad_clip > 0:
            raise ConfigError(f"grad_clip must be > 0 (inf: no clipping), got {self.grad_clip}")
        if self.temperature == 0:
            raise ConfigError(
                f"temperature 0 is greedy decoding: the {self.group_size} samples of a group "
                "would be identical, so every group advantage is 0 and nothing is learned; "
                "use a temperature > 0 (1.0 samples the policy itself)"
            )
        for name in ("mini_batches", "epochs"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.mini_batches > self.prompts_per_step:
            raise ConfigError(
                f"mini_batches {self.mini_batches} > prompts_per_step {self.prompts_per_step}: "
                "a mini-batch holds whole groups, at least one"
            )
        if not 0 < self.correction_low <= 1 <= self.correction_high or self.correction_cap < 1:
            raise ConfigError(
                "need 0 < correction_low <= 1 <= correction_high and correction_cap >= 1, got "
                f"{self.correction_low}, {self.correction_high}, {self.correction_cap}"
            )
        for name, valid in CHOICES.items():
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
            from zoo.core.placement_config import PlacementConfig

            PlacementConfig.from_dict(self.distributed)

    @classmethod
    def from_record(cls, run: dict[str, Any]) -> RunConfig:
        """The config a run recorded in its config.json (``["run"]``). Fields added since
        take their defaults, unless the default changes what such a run did: a run
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
        return cls(**{**ADDED_LATER, **run})

    def resolved_device(self) -> str:
        if self.device == "auto":
            return "cuda" if torch.cuda.is_available() else "cpu"
        if self.device == "cuda" and not torch.cuda.is_available():
            raise ConfigError("--device cuda, but torch sees no CUDA device here; use cpu")
        return self.device

    def model_spec(self, quiet: bool = True) -> ModelSpec:
        return resolve_model(self.model, quiet=quiet, model_path=self.model_path, init=self.init)


PREDATES_REGIME = ("mini_batches", "epochs")
"""Run-config fields whose absence marks a run recorded before several updates per
rollout batch (RunConfig.from_record)."""

ADDED_LATER = {"eval_samples": 0}
"""Fields added since runs were first recorded, with the value that reproduces what a
run recorded without them did (RunConfig.from_record)."""


REAL_MODEL_DEFAULTS = {
    "prompts_per_step": 64,
    "group_size": 8,
    "max_response_len": 1024,
    "lr": 1e-6,
    "micro_batch_size": 8,
    "mini_batches": 4,
    "epochs": 1,
}
"""Where a run of a real model starts when the command line does not say: the scale of
published GRPO/DAPO recipes for 1-8B models (lr 1e-6, G = 8 or 16, responses of ~1k
tokens for GSM8K-level math), cut to a batch one GPU node handles, trained in 4
mini-batches per rollout batch (verl's common train / mini-batch ratio; DAPO uses 16).
Not measured here (no GPU): a starting point."""


def run_defaults(model: str) -> dict[str, Any]:
    """Batch, lengths and learning rate for ``model``: docs/training.md's recipe
    (RunConfig's defaults) for the tiny presets, REAL_MODEL_DEFAULTS for anything else."""
    if model in TINY_MODELS:
        return {name: getattr(RunConfig, name) for name in REAL_MODEL_DEFAULTS}
    return dict(REAL_MODEL_DEFAULTS)


@dataclass
class Services:
    env: Env
    algorithm: Algorithm
    generator: Any
    trainer: Any
    reference: Any | None
    encode: Callable[[Prompt], list[int]]
    """Prompt -> token ids (plain text, or the chat template when the env asks for it)."""
    ledger: Ledger
    close: Callable[[], None] = lambda: None
    """Release what the placement started (the Monarch placement's processes)."""
    scorer: Any | None = None
    """Scores completions in processes of their own (the Monarch placement's scorer
    service); None: the env scores them in this process."""
    publish_weights: Callable[[], None] | None = None
    """Send the trainer's current weights and version to every generator. Default: the
    trainer's Hugging Face state dict passed to ``generator.update_weights``; the Monarch
    placement's RDMA backend moves them between its processes without the loop."""

    def score_batch(self, prompts: list[Prompt], texts: list[str]) -> list[float]:
        return (self.scorer or self.env).score_batch(prompts, texts)

    def sync_weights(self) -> None:
        if self.publish_weights is not None:
            self.publish_weights()
        else:
            self.generator.update_weights(self.trainer.hf_state_dict(), self.trainer.version)


def trainer_config_of(cfg: RunConfig, device: str = "cpu") -> TrainerConfig:
    """The trainer's settings of a run (bf16 on GPUs)."""
    return TrainerConfig(
        lr=cfg.lr,
        grad_clip=cfg.grad_clip,
        micro_batch_size=cfg.micro_batch_size,
        mini_batches=cfg.mini_batches,
        epochs=cfg.epochs,
        temperature=cfg.temperature,
        # async: batches sampled by up to max_policy_age older versions are trained on
        max_policy_age=cfg.max_policy_age if cfg.mode == "async" else 0,
        mixed_precision="bf16" if device == "cuda" else "none",
    )


def build_services(cfg: RunConfig, quiet: bool = False, generator: Any = None) -> Services:
    """The run's services, placed as ``cfg.placement`` says. Local: every service in this
    process; a ``generator`` from an earlier run on the same model is reused (its weights
    reset to the model's), so comparisons start the engine once. Monarch: generator,
    trainer and reference in their own processes (zoo.core.placement)."""
    from transformers import AutoTokenizer

    algorithm = get_algorithm(cfg.algorithm, **cfg.algorithm_config)
    env = get_env(cfg.env, **cfg.env_config)
    spec = cfg.model_spec(quiet=quiet)
    device = cfg.resolved_device()
    torch.manual_seed(cfg.seed)
    tokenizer = AutoTokenizer.from_pretrained(spec.path)
    trainer_config = trainer_config_of(cfg, device)
    context_len = max_model_len(spec.path, cfg)
    shared = dict(env=env, algorithm=algorithm, encode=prompt_encoder(tokenizer),
                  ledger=Ledger(ModelShape.from_hf_dir(spec.path)))  # fmt: skip
    if cfg.placement == "monarch":
        from zoo.core.placement import spawn_monarch_services

        remote = spawn_monarch_services(cfg, spec, device, trainer_config,
                                        algorithm.needs_reference, context_len)  # fmt: skip
        return Services(**remote, **shared)
    trainer = Trainer(spec.path, trainer_config, max_response_len=cfg.max_response_len,
                      init=cfg.init, device=device)  # fmt: skip
    reference = None
    if algorithm.needs_reference:
        reference = Reference(trainer.model, cfg.micro_batch_size, cfg.temperature)
    if generator is None:
        # Every sampling request carries its own seed (sampling_seed), so the engine's
        # global seed never matters; a constant keeps shared and fresh engines identical.
        generator = make_generator(cfg.generator, spec.path, seed=0, init=cfg.init,
                                   device=device, max_model_len=context_len)  # fmt: skip
        if cfg.init == "random":  # the engine started without weights: send the trainer's
            generator.update_weights(trainer.hf_state_dict(), version=0)
    else:
        generator.update_weights(trainer.hf_state_dict(), version=0)
    return Services(generator=generator, trainer=trainer, reference=reference, **shared)


MAX_PROMPT_TOKENS = 1024
"""Room for the prompt in the generator's context (the math and code envs' chat prompts
are a few hundred tokens)."""


def max_model_len(model_path: Path, cfg: RunConfig) -> int:
    """The generator's context length: prompt room plus the generation budget, capped at
    the model's (256 for the tiny presets)."""
    config = json.loads((Path(model_path) / "config.json").read_text())
    return min(
        config.get("max_position_embeddings", 4096), MAX_PROMPT_TOKENS + cfg.max_response_len
    )


def prompt_encoder(tokenizer) -> Callable[[Prompt], list[int]]:
    """Token ids of a prompt: its chat messages through the tokenizer's chat template when
    the env set ``meta["messages"]`` (prompt_format "chat"), else its plain text."""

    def encode(prompt: Prompt) -> list[int]:
        messages = prompt.meta.get("messages")
        if messages is None:
            return tokenizer.encode(prompt.text, add_special_tokens=False)
        if not getattr(tokenizer, "chat_template", None):
            raise ConfigError(
                "the env asks for chat-formatted prompts but this model's tokenizer has no "
                "chat template; use --env-set prompt_format=plain"
            )
        ids = tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=True, return_dict=False
        )
        return list(ids)

    return encode


EVAL_SEED_OFFSET = 7_919
"""Held-out sampling uses the seeds of run seed + this, apart from the training stream's."""


def sampling_seed(run_seed: int, prompt_index: int) -> int:
    """Per-prompt sampler seed: samples do not depend on how prompts are batched."""
    return (run_seed * 1_000_003 + prompt_index) % (2**31)


def rollout_batch(
    groups: list[list[Completion]], advantages: torch.Tensor, in_loss: torch.Tensor | None = None
) -> RolloutBatch:
    """Pack groups of completions ([groups, G] advantages) into right-padded sequences,
    with the sampler's log-probs and policy version of each; responses with ``in_loss``
    False get an all-zero mask (they count nowhere)."""
    flat = [c for g in groups for c in g]
    width = max((len(c.token_ids) for c in flat), default=1) or 1
    length = max(len(c.prompt_ids) + len(c.token_ids) for c in flat)
    tokens = torch.zeros(len(flat), length, dtype=torch.long)
    mask = torch.zeros(len(flat), width)
    sampler = torch.zeros(len(flat), width)
    included = [True] * len(flat) if in_loss is None else in_loss.reshape(-1).tolist()
    for i, c in enumerate(flat):
        seq = c.prompt_ids + c.token_ids
        tokens[i, : len(seq)] = torch.tensor(seq)
        mask[i, : len(c.token_ids)] = float(included[i])
        sampler[i, : len(c.logprobs)] = torch.tensor(c.logprobs)
    return RolloutBatch(
        tokens=tokens,
        response_start=torch.tensor([len(c.prompt_ids) for c in flat]),
        mask=mask,
        advantages=advantages.reshape(-1),
        sampler_logprobs=sampler,
        policy_versions=torch.tensor([c.policy_version for c in flat]),
        group_size=len(groups[0]),
    )


class RLLoop:
    def __init__(self, cfg: RunConfig, services: Services) -> None:
        self.cfg = cfg
        self.s = services
        self.sampling = SamplingConfig(temperature=cfg.temperature, max_tokens=cfg.max_response_len)
        self.cursor = 0  # next index in the env's train stream for this seed
        self.samples = 0
        self.train_seconds = 0.0
        self.step_index = 0  # optimizer steps done
        self.evals_done = 0  # budget checkpoints evaluated
        self.version = 0  # the trainer's policy version (read at the start of each step)
        self.in_flight: deque[tuple[int, list[Prompt], Any]] = deque()
        """Async mode: (first prompt's cursor, prompts, pending generation), oldest first."""
        self.policy_ages: list[int] = []  # of the samples taken in this step
        self.stale_dropped = 0

    def sample_groups(self, n: int) -> tuple[list[Prompt], list[list[Completion]]]:
        """The next ``n`` prompts of the train stream and G completions of each, less any
        group sampled by weights more than ``max_policy_age`` steps old.

        Async mode: the prompts were requested ``max_policy_age`` steps ago (or now, the
        first time); before returning, requests for the batches after them are topped up,
        so the generator samples those while the trainer trains on these. An actor handles
        its messages in order, so a batch requested after the weight update of step k is
        sampled by version k and trained on at step k + max_policy_age + 1 at the latest."""
        cfg, s, ledger = self.cfg, self.s, self.s.ledger
        if cfg.mode == "sync":
            prompts = self._next_prompts(n)
            with ledger.timed("generate"):
                groups = s.generator.generate(
                    [s.encode(p) for p in prompts], n=cfg.group_size, sampling=self.sampling,
                    seeds=[sampling_seed(cfg.seed, p.index) for p in prompts],
                )  # fmt: skip
        else:
            _, prompts, pending = self.in_flight.popleft() if self.in_flight else self._submit(n)
            with ledger.timed("generate"):  # what overlapping did not hide
                groups = pending.result()
            while len(self.in_flight) < cfg.max_policy_age:
                self.in_flight.append(self._submit(n))
        for g in groups:
            for c in g:  # every generated token is charged, kept or not
                ledger.add(
                    "generate",
                    ledger.generation_flops(len(c.prompt_ids), len(c.token_ids)),
                    len(c.token_ids),
                )
        self.samples += n * cfg.group_size
        fresh = []
        for i, g in enumerate(groups):
            age = self.version - g[0].policy_version  # a group comes from one call: one version
            if age <= cfg.max_policy_age:
                fresh.append(i)
                self.policy_ages += [age] * len(g)
            else:
                self.stale_dropped += len(g)
        return [prompts[i] for i in fresh], [groups[i] for i in fresh]

    def _next_prompts(self, n: int) -> list[Prompt]:
        prompts = self.s.env.train_prompts(self.cursor, n, self.cfg.seed)
        self.cursor += n
        return prompts

    def _submit(self, n: int) -> tuple[int, list[Prompt], Any]:
        """Request completions for the next ``n`` prompts without waiting for them."""
        cfg, s = self.cfg, self.s
        start = self.cursor
        prompts = self._next_prompts(n)
        pending = s.generator.submit(
            [s.encode(p) for p in prompts], n=cfg.group_size, sampling=self.sampling,
            seeds=[sampling_seed(cfg.seed, p.index) for p in prompts],
        )  # fmt: skip
        return start, prompts, pending

    def step(self) -> dict[str, Any]:
        cfg, s, ledger = self.cfg, self.s, self.s.ledger
        algo = s.algorithm
        start = time.perf_counter()
        busy_before = s.generator.busy_seconds
        phase_before = dict(ledger.seconds)
        self.version = s.trainer.version
        kept_groups: list[list[Completion]] = []
        kept_adv: list[torch.Tensor] = []
        kept_in_loss: list[torch.Tensor] = []
        task_rewards: list[float] = []
        rounds = 0
        while len(kept_groups) < cfg.prompts_per_step and rounds < cfg.max_sampling_rounds:
            rounds += 1
            prompts, groups = self.sample_groups(cfg.prompts_per_step)
            with ledger.timed("score"):  # one call: envs may score a whole step in parallel
                flat = s.score_batch(
                    [p for p, g in zip(prompts, groups, strict=True) for _ in g],
                    [c.text for g in groups for c in g],
                )
                rewards = torch.tensor(flat).view(len(groups), cfg.group_size)
            ledger.add("score", tokens=sum(len(c.token_ids) for g in groups for c in g))
            task_rewards += rewards.flatten().tolist()
            lengths = torch.tensor([[len(c.token_ids) for c in g] for g in groups])
            shaped = algo.shape_rewards(rewards, lengths, cfg.max_response_len)
            advantages = algo.advantages(shaped)
            keep = algo.keep(rewards)
            truncated = torch.tensor([[c.finish_reason == "length" for c in g] for g in groups])
            in_loss = algo.train_mask(truncated)
            for i in torch.nonzero(keep).flatten().tolist():
                if len(kept_groups) < cfg.prompts_per_step:
                    kept_groups.append(groups[i])
                    kept_adv.append(advantages[i])
                    kept_in_loss.append(in_loss[i])

        record: dict[str, Any] = {
            "reward_mean": statistics.fmean(task_rewards),
            "reward_std": statistics.pstdev(task_rewards),
            "sampling_rounds": rounds,
            "kept_groups": len(kept_groups),
            "masked_responses": int(sum((~m).sum() for m in kept_in_loss)),
        }
        if kept_groups:
            batch = rollout_batch(kept_groups, torch.stack(kept_adv), torch.stack(kept_in_loss))
            shapes = [(len(c.prompt_ids), len(c.token_ids)) for g in kept_groups for c in g]
            record.update(self.train(batch, shapes))
            with ledger.timed("sync"):
                s.sync_weights()
        wall = time.perf_counter() - start
        self.train_seconds += wall
        spent = {k: v - phase_before.get(k, 0.0) for k, v in ledger.seconds.items()}
        # Idle: wall seconds of this step a service was not working for it (the trainer
        # works in old_logprobs, train and in exporting its weights for sync; generator
        # busy time is summed over replicas and counted when its samples arrive).
        trainer_busy = sum(spent.get(p, 0.0) for p in ("old_logprobs", "train", "sync"))
        generator_busy = s.generator.busy_seconds - busy_before
        record["trainer_idle_seconds"] = max(0.0, wall - trainer_busy)
        record["generator_busy_seconds"] = generator_busy
        record["generator_idle_seconds"] = max(0.0, wall * s.generator.replicas - generator_busy)
        if cfg.mode == "async":
            ages, self.policy_ages = self.policy_ages, []
            record.update({"policy_age_mean": statistics.fmean(ages) if ages else 0.0,
                           "policy_age_max": max(ages, default=0),
                           "stale_dropped": self.stale_dropped})  # fmt: skip
        self.policy_ages, self.stale_dropped = [], 0
        return record

    def train(self, batch: RolloutBatch, shapes: list[tuple[int, int]]) -> dict[str, Any]:
        """The old log-probs, the mismatch metrics and correction, the reference, then the
        trainer's updates on ``batch``; each phase timed and charged to the ledger by the
        (prompt, response) lengths of its rows, ``shapes`` (a response masked out of the
        loss still passes through every forward)."""
        cfg, s, ledger = self.cfg, self.s, self.s.ledger
        tokens = sum(p + r for p, r in shapes)
        forward = sum(ledger.scoring_flops(p, r) for p, r in shapes)
        with ledger.timed("old_logprobs"):
            batch.old_logprobs = s.trainer.logprobs(batch)
        ledger.add("old_logprobs", forward, tokens)
        record = mismatch_metrics(batch.old_logprobs, batch.sampler_logprobs, batch.mask)
        weights, correction = correction_weights(
            cfg.correction, batch.old_logprobs, batch.sampler_logprobs, batch.mask,
            cap=cfg.correction_cap, low=cfg.correction_low, high=cfg.correction_high,
        )  # fmt: skip
        record.update(correction)
        if weights is not None:  # on the policy-gradient term only: through the advantages
            advantages = batch.advantages
            advantages = advantages if advantages.dim() == 2 else advantages[:, None]
            batch.advantages = advantages * weights
        if cfg.correction == "bypass":
            batch.old_logprobs = batch.sampler_logprobs
        if s.algorithm.needs_reference:
            with ledger.timed("reference"):
                batch.ref_logprobs = s.reference.logprobs(batch)
            ledger.add("reference", forward, tokens)
        with ledger.timed("train"):
            record.update(s.trainer.train(batch, s.algorithm.loss))
        ledger.add("train", cfg.epochs * 3 * forward, cfg.epochs * tokens)
        return record

    def evaluate(self) -> dict[str, float]:
        """Held-out split (not charged to compute): mean reward of greedy decoding
        (``eval_reward``), and with ``eval_samples`` n > 0 pass@k and mean reward of n
        samples per prompt (zoo.core.evaluation), seeded per (run seed, prompt) so every
        checkpoint and every algorithm at this seed draws the same random numbers."""
        s, n = self.s, self.cfg.eval_samples
        start = time.perf_counter()
        prompts = s.env.eval_prompts()
        encoded = [s.encode(p) for p in prompts]
        groups = s.generator.generate(encoded, n=1, sampling=self.sampling, greedy=True)
        rewards = s.score_batch(prompts, [g[0].text for g in groups])
        record = {"eval_reward": statistics.fmean(rewards)}
        if n:
            eval_seed = self.cfg.seed + EVAL_SEED_OFFSET
            seeds = [sampling_seed(eval_seed, i) for i in range(len(prompts))]
            groups = s.generator.generate(encoded, n=n, sampling=self.sampling, seeds=seeds)
            flat = s.score_batch([p for p in prompts for _ in range(n)],
                                 [c.text for g in groups for c in g])  # fmt: skip
            record.update(sampled_metrics([flat[i * n : (i + 1) * n] for i in range(len(prompts))]))
        record["eval_seconds"] = time.perf_counter() - start
        return record

    def spent(self, step: int) -> float:
        """How much of the run's budget is used, in its unit."""
        unit, _ = self.cfg.budget
        return {"flops": self.s.ledger.total_flops, "samples": self.samples,
                "seconds": self.train_seconds, "steps": step}[unit]  # fmt: skip

    def eval_due(self, step: int) -> bool:
        """Evaluate now? Step mode: every ``eval_every`` steps and at the end. Budget mode:
        whenever the spend crosses the next of K evenly spaced points."""
        unit, amount = self.cfg.budget
        if unit == "steps":
            return step % self.cfg.eval_every == 0 or step >= amount
        due = self.spent(step) >= amount * (self.evals_done + 1) / self.cfg.eval_points
        if due:
            while self.spent(step) >= amount * (self.evals_done + 1) / self.cfg.eval_points:
                self.evals_done += 1  # one evaluation even if a step crossed two points
        return due

    def run(
        self,
        log: Callable[[dict[str, Any]], None],
        on_step: Callable[[dict[str, Any]], None] | None = None,
        checkpoint: Callable[[int], None] | None = None,
    ) -> list[dict[str, Any]]:
        """Train until the budget is spent, logging one record per step (plus step 0, the
        evaluation of the starting weights). Resumes from ``self.step_index`` if a
        checkpoint was loaded. ``checkpoint(step)`` is called every ``checkpoint_every``
        steps and at the end."""
        cfg, ledger = self.cfg, self.s.ledger
        _, amount = cfg.budget
        history = []
        if self.step_index == 0:
            first = {"step": 0, "samples": 0, "flops": 0.0, "seconds": 0.0, **self.evaluate()}
            log(first)
            history.append(first)
        while self.spent(self.step_index) < amount:
            step = self.step_index + 1
            record = {"step": step, **self.step()}
            delta = ledger.step_delta()
            record.update(delta)
            record.update(
                {
                    "samples": self.samples,
                    "flops": ledger.total_flops,
                    "seconds": self.train_seconds,
                    "policy_version": self.s.trainer.version,
                    "generate_tokens_per_s": _ratio(
                        delta["generate_tokens"], delta["generate_seconds"]
                    ),
                }
            )
            if self.eval_due(step) or self.spent(step) >= amount:
                record.update(self.evaluate())
            log(record)
            history.append(record)
            self.step_index = step  # only now is the step complete (and checkpointable)
            bad = [k for k, v in record.items() if isinstance(v, float) and not math.isfinite(v)]
            if bad:
                raise FloatingPointError(f"step {step}: {', '.join(bad)} not finite; stopping")
            if checkpoint and cfg.checkpoint_every and step % cfg.checkpoint_every == 0:
                checkpoint(step)
            if on_step:
                on_step(record)
        return history

    def state(self) -> dict[str, Any]:
        """Everything needed to continue this run exactly (with the trainer's state)."""
        ledger = self.s.ledger
        return {
            # prompts requested but not yet trained on are requested again after a resume
            "step_index": self.step_index, "samples": self.samples,
            "cursor": self.in_flight[0][0] if self.in_flight else self.cursor,
            "train_seconds": self.train_seconds, "evals_done": self.evals_done,
            "ledger": {"flops": dict(ledger.flops), "tokens": dict(ledger.tokens),
                       "seconds": dict(ledger.seconds)},
        }  # fmt: skip

    def load_state(self, state: dict[str, Any]) -> None:
        for key in ("step_index", "cursor", "samples", "train_seconds", "evals_done"):
            setattr(self, key, state[key])
        ledger = self.s.ledger
        for name in ("flops", "tokens", "seconds"):
            getattr(ledger, name).update(state["ledger"][name])
        ledger.step_delta()  # the next step's delta starts from the restored totals


def _ratio(a: float, b: float) -> float:
    return a / b if b > 0 else 0.0


def resolved_config(cfg: RunConfig, services: Services) -> dict[str, Any]:
    """The run config with every default filled in, for config.json."""
    return {
        "run": dataclasses.asdict(cfg),
        "algorithm": services.algorithm.describe(),
        "env": services.env.describe(),
        "model_path": str(Path(cfg.model_spec().path)),
        "device": cfg.resolved_device(),
        "seed": cfg.seed,
    }
