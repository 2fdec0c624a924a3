"""A run resolved once: ``RunPlan``, what a ``RunConfig`` names made into objects (the
algorithm, the env, the device, the model's folder) and the numbers derived from them (the
budget, the tokens after the prompt), so that the pre-flight checks, the services, the loop
and config.json read one resolution instead of each redoing it.

It resolves in stages, so that what fails fast still fails before the costly parts:
``RunPlan.resolve(cfg, spec=False)`` validates the config and builds the algorithm and the
env (cheap); ``with_estimate()`` reads the model's shape without its weights (the ledger's
estimate of one step, for the pre-flight budget and memory checks); ``with_spec()``
resolves the model's folder (a download for a Qwen3 preset, the shipped weights' build for
a tiny one). Each stage runs once; a plan does not cross a process boundary (a worker of
``compare --jobs`` and the Monarch actors resolve from the config again).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from zoo.algorithms import Algorithm, get_algorithm
from zoo.core.config import ConfigError
from zoo.envs import Env, get_env, is_multi_turn
from zoo.models.presets import (
    ModelShape,
    ModelSpec,
    check_model_name,
    model_shape,
    prefetch_model_config,
)
from zoo.run.run_config import RunConfig
from zoo.services.ledger import Ledger

ESTIMATE_PROMPTS = 8
"""Train prompts whose longest sets the prompt length of the pre-flight estimates."""


@dataclass(frozen=True)
class StepEstimate:
    """The ledger's estimate of one rollout batch before any weights load: what the
    pre-flight checks hold the budget and the machine's memory against."""

    prompt: int
    """The longest of the first ESTIMATE_PROMPTS train prompts, in bytes (one token a byte
    at most for the tiny tokenizer; an over-estimate for real ones)."""
    response: int
    """Half the response budget: a typical response."""
    samples: int
    """Completions per step: prompts per step x group size."""
    flops: float
    """Generation, the old-log-prob pass, a forward and backward per epoch, the reference's
    pass where the algorithm needs it and the greedy baseline where it needs one."""


@dataclass(frozen=True)
class RunPlan:
    """One run's config and everything resolved from it, each resolved once."""

    cfg: RunConfig
    algorithm: Algorithm
    env: Env
    device: str
    """cpu or cuda (``PlacementSection.resolved_device``)."""
    budget: tuple[str, float]
    """(unit, amount) of what ends the run (``BudgetSection.limit``)."""
    episode_budget: int
    """Tokens after the prompt per sample: max_response_len, or a multi-turn env's token
    limit per episode (``episode_budget``)."""
    spec: ModelSpec | None = None
    """The model's Hugging Face folder; None until ``with_spec()``."""
    shape: ModelShape | None = None
    """The model's shape by name, before its weights (``with_estimate()``)."""
    step: StepEstimate | None = None
    """The ledger's estimate of one step (``with_estimate()``)."""

    @classmethod
    def resolve(
        cls,
        cfg: RunConfig,
        *,
        spec: bool = True,
        check_algorithm: Callable[[RunConfig, Algorithm], None] | None = None,
        env: Env | Callable[[RunConfig], Env] | None = None,
    ) -> RunPlan:
        """Validate ``cfg`` and resolve it (with ``spec``, the model's folder too).
        ``check_algorithm`` runs once the algorithm is built and before the env is: the
        pre-flight checks of the algorithm (harness.experiment) keep their place there.
        ``env``: the env already built, or what builds it from the checked config (an
        estimate's stand-in for an env whose data is not at hand,
        harness.capacity.estimate_plan); by default built from the config. This is the
        one place a run's config is checked (``RunConfig.validate``): every command
        resolves its configs here before any work."""
        cfg.validate()
        algorithm = get_algorithm(cfg.run.algorithm, **cfg.run.algorithm_config)
        if check_algorithm is not None:
            check_algorithm(cfg, algorithm)
        if env is None:
            env = get_env(cfg.run.env, **cfg.run.env_config)
        elif not isinstance(env, Env):
            env = env(cfg)
        if cfg.evaluation.eval_split == "validation":
            env.validation_prompts()  # (an env without one says so here)
        check_model_name(cfg.run.model)  # cheap: before the device or the budget is looked at
        plan = cls(
            cfg=cfg,
            algorithm=algorithm,
            env=env,
            device=cfg.placement.resolved_device(),
            budget=cfg.budget.limit,
            episode_budget=episode_budget(cfg, env),
        )
        return plan.with_spec() if spec else plan

    def with_spec(self) -> RunPlan:
        """This plan with the model's folder resolved (itself when it already is)."""
        if self.spec is not None:
            return self
        return dataclasses.replace(self, spec=self.cfg.run.model_spec())

    def with_estimate(self) -> RunPlan:
        """This plan with the model's shape (online, a Qwen3 preset's config.json is
        fetched first, not its weights, so that the shape is that of what will load) and
        the ledger's estimate of one step."""
        if self.step is not None:
            return self
        cfg, algorithm = self.cfg, self.algorithm
        prefetch_model_config(cfg.run.model, cfg.run.model_path, cfg.run.init)
        shape = model_shape(cfg.run.model, cfg.run.model_path)
        prompt = max(
            len(self.env.train_prompt(i, cfg.run.seed).text.encode())
            for i in range(ESTIMATE_PROMPTS)
        )
        response = max(1, cfg.sampling.max_response_len // 2)
        ledger = Ledger(shape)
        # generation, the old-log-prob forward (unless skipped), a forward + backward per epoch
        old_pass = 0 if cfg.skips_old_logprob_pass(algorithm) else 1
        per_sample = ledger.generation_flops(prompt, response) + (
            old_pass + 3 * cfg.regime.epochs
        ) * ledger.scoring_flops(prompt, response)
        if algorithm.needs_reference:
            per_sample += ledger.scoring_flops(prompt, response)
        samples = cfg.sampling.prompts_per_step * cfg.sampling.group_size
        flops = samples * per_sample
        if algorithm.needs_greedy_baseline:  # one greedy completion per prompt (ReMax)
            flops += cfg.sampling.prompts_per_step * ledger.generation_flops(prompt, response)
        step = StepEstimate(prompt=prompt, response=response, samples=samples, flops=flops)
        return dataclasses.replace(self, shape=shape, step=step)

    def for_config(self, cfg: RunConfig) -> RunPlan:
        """This plan for ``cfg``, a copy of its config that differs only where nothing is
        resolved from it (``compare --jobs``' hosts of a placement file)."""
        return dataclasses.replace(self, cfg=cfg)


def plan_of(run: RunConfig | RunPlan, *, spec: bool = True) -> RunPlan:
    """``run`` if it is a plan (its model's folder resolved with ``spec``), else the plan
    resolved from it: for callers that take either."""
    if isinstance(run, RunPlan):
        return run.with_spec() if spec else run
    return RunPlan.resolve(run, spec=spec)


def episode_budget(cfg: RunConfig, env: Env) -> int:
    """Tokens after the prompt that one sample of ``env`` may take: ``max_response_len``
    for a single-turn env, the episode's token limit for a multi-turn one. Raises
    ``ConfigError`` for settings the env cannot run with."""
    if not is_multi_turn(env):
        if cfg.sampling.max_episode_tokens:
            raise ConfigError(
                f"max_episode_tokens applies to multi-turn envs; {env.name!r} is single-turn "
                "(its budget is max_response_len)"
            )
        return cfg.sampling.max_response_len
    if cfg.placement.mode != "sync":
        raise ConfigError(
            f"env {env.name!r} is multi-turn, which runs in sync mode only (each turn waits "
            f"for the env's answer to the last); got mode {cfg.placement.mode!r}"
        )
    if cfg.sampling.max_episode_tokens:
        return cfg.sampling.max_episode_tokens
    turns, observation = env.turn_limit(), env.max_observation_tokens
    if not observation:  # as much room for the observations as for the turns
        return 2 * turns * cfg.sampling.max_response_len
    # Twice the longest episode: DAPO's overlong window (the last quarter by default) then
    # starts after every episode that fits in its turns.
    return 2 * (turns * cfg.sampling.max_response_len + (turns - 1) * observation)
