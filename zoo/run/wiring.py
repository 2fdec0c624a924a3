"""Wiring a run: the services it needs (generator, trainer, reference, critic, scorer, env,
algorithm, ledger), built in this process or as Monarch actors, and how prompts become
token ids. The loop (zoo.run.loop) only calls their methods."""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from zoo.algorithms import Algorithm
from zoo.core.config import ConfigError
from zoo.envs import Env, Prompt, is_multi_turn
from zoo.models.presets import ModelShape
from zoo.run.plan import RunPlan, plan_of
from zoo.run.run_config import RunConfig
from zoo.run.services import Services  # (also imported from here: harness, tests)
from zoo.services.conversation import Conversation, chat_prompt_ids
from zoo.services.generation import make_generator
from zoo.services.ledger import Ledger
from zoo.services.protocols import (
    GeneratorService,
)
from zoo.services.reference import Reference
from zoo.services.trainer import Trainer, TrainerConfig
from zoo.services.value import Critic


def resolved_config(cfg: RunConfig, services: Services) -> dict[str, Any]:
    """The run config with every default filled in, for config.json: the model's folder
    and the device as the run's plan resolved them (services assembled without a plan:
    resolved here)."""
    plan = services.plan
    spec = plan.spec if plan is not None and plan.spec is not None else cfg.run.model_spec()
    return {
        "run": cfg.to_flat(),
        "algorithm": services.algorithm.describe(),
        "env": services.env.describe(),
        "model_path": str(Path(spec.path)),
        "device": plan.device if plan is not None else cfg.placement.resolved_device(),
        "seed": cfg.run.seed,
    }


def trainer_config_of(cfg: RunConfig, device: str = "cpu") -> TrainerConfig:
    """The trainer's settings of a run: its optimizer and regime sections themselves, and
    what the run resolves from the rest: a decay of unset length runs over the run's
    optimizer steps, the schedule may follow the budget, bf16 on GPUs."""
    optimizer, regime = cfg.optimizer, cfg.regime
    optimizer_steps = cfg.budget.steps * regime.mini_batches * regime.epochs
    return TrainerConfig(
        optimizer=optimizer,
        regime=regime,
        decay_steps=optimizer.decay_steps or max(1, optimizer_steps - optimizer.warmup_steps),
        schedule_over_budget=cfg.schedule_over_budget,
        mixed_precision="bf16" if device == "cuda" else "none",
        shuffle_seed=cfg.run.seed,
    )


def trainer_options(cfg: RunConfig) -> dict[str, Any]:
    """The Trainer's arguments from the run's sampling and placement sections: it scores
    tokens at the sampling temperature, and (async) keeps the weights of the versions that
    may have sampled a batch it trains on."""
    return {
        "temperature": cfg.sampling.temperature,
        "max_policy_age": cfg.placement.max_policy_age if cfg.placement.mode == "async" else 0,
    }


def critic_config_of(cfg: RunConfig, algorithm: Algorithm, device: str = "cpu") -> TrainerConfig:
    """The critic's settings in a run: the trainer's (AdamW settings, grad clip,
    mini-batches, epochs and micro-batches: verl's critic shares the actor's mini-batches
    and epochs) at the algorithm's constant learning rate for it."""
    own = dataclasses.replace(cfg.optimizer, lr=algorithm.critic_lr(cfg.optimizer.lr))
    return dataclasses.replace(trainer_config_of(cfg, device), optimizer=own)


def build_services(
    run: RunPlan | RunConfig, quiet: bool = False, generator: GeneratorService | None = None
) -> Services:
    """The services of ``run`` (a plan, or a config resolved into one here), placed as its
    ``placement`` says. Local: every service in this process; a ``generator`` from an
    earlier run on the same model is reused (its weights reset to the model's), so
    comparisons start the engine once. Monarch: generator, trainer, reference and critic in
    their own processes (zoo.placement). The critic (zoo.services.value) exists only for an
    algorithm with ``needs_values``."""
    from transformers import AutoTokenizer

    plan = plan_of(run)  # the model's folder resolved (a tiny preset's weights built) here
    cfg, algorithm, env, spec, device = plan.cfg, plan.algorithm, plan.env, plan.spec, plan.device
    assert spec is not None  # (plan_of resolves it)
    torch.manual_seed(cfg.run.seed)
    tokenizer = AutoTokenizer.from_pretrained(spec.path)
    trainer_config = trainer_config_of(cfg, device)
    budget = plan.episode_budget  # tokens after the prompt: a response, or an episode
    context_len = max_model_len(spec.path, cfg, budget)
    if is_multi_turn(env) and context_len <= budget:
        raise ConfigError(
            f"max_episode_tokens {budget} leaves no room for the prompt in the model's "
            f"context of {context_len} tokens; give a smaller --max-episode-tokens"
        )
    encode = prompt_encoder(tokenizer, context_len - budget, cfg.sampling.long_prompts)
    check_held_out_prompts(env, encode, cfg.evaluation.eval_split)
    shared = dict(
        env=env,
        algorithm=algorithm,
        encode=encode,
        plan=plan,
        ledger=Ledger(ModelShape.from_hf_dir(spec.path)),
        observe=Conversation(tokenizer),
    )
    if cfg.placement.placement == "monarch":
        from zoo.placement.spawn import spawn_monarch_services

        critic_config = critic_config_of(cfg, algorithm, device) if algorithm.needs_values else None
        remote = spawn_monarch_services(
            cfg,
            spec,
            device,
            trainer_config,
            trainer_options(cfg),
            algorithm.needs_reference,
            context_len,
            budget,
            critic_config,
        )
        return Services(**remote, **shared)
    trainer = Trainer(
        spec.path,
        trainer_config,
        max_response_len=budget,
        init=cfg.run.init,
        device=device,
        **trainer_options(cfg),
    )
    reference = None
    if algorithm.needs_reference:
        reference = Reference(trainer.model, cfg.regime.micro_batch_size, cfg.sampling.temperature)
    critic = (
        Critic(trainer.model, critic_config_of(cfg, algorithm, device))
        if algorithm.needs_values
        else None
    )
    if generator is None:
        # Every sampling request carries its own seed (sampling_seed), so the engine's
        # global seed never matters; a constant keeps shared and fresh engines identical.
        generator = make_generator(
            cfg.placement.generator,
            spec.path,
            seed=0,
            init=cfg.run.init,
            device=device,
            max_model_len=context_len,
        )
        if cfg.run.init == "random":  # the engine started without weights: send the trainer's
            generator.update_weights(trainer.hf_state_dict(), version=0)
    else:
        generator.update_weights(trainer.hf_state_dict(), version=0)
    return Services(
        generator=generator, trainer=trainer, reference=reference, critic=critic, **shared
    )


MAX_PROMPT_TOKENS = 1024
"""Room for the prompt in the generator's context (the math and code envs' chat prompts
are a few hundred tokens)."""


def max_model_len(model_path: Path, cfg: RunConfig, budget: int | None = None) -> int:
    """The generator's context length: prompt room plus the generation budget (``budget``:
    a multi-turn env's tokens per episode; default max_response_len), capped at the
    model's (256 for the tiny presets)."""
    config = json.loads((Path(model_path) / "config.json").read_text())
    return min(
        config.get("max_position_embeddings", 4096),
        MAX_PROMPT_TOKENS + (budget or cfg.sampling.max_response_len),
    )


class PromptTooLong(ConfigError):
    """A prompt does not fit the context next to the response budget."""


def prompt_encoder(
    tokenizer, room: int | None = None, long_prompts: str = "refuse"
) -> Callable[[Prompt], list[int]]:
    """Token ids of a prompt: its chat messages through the tokenizer's chat template when
    the env set ``meta["messages"]`` (prompt_format "chat"), else its plain text. A prompt
    longer than ``room`` tokens (the context less the response budget) raises
    ``PromptTooLong`` ("refuse"), or keeps its last ``room`` tokens ("truncate-left"; a
    warning, once, says so)."""
    warned = []

    def encode(prompt: Prompt) -> list[int]:
        messages = prompt.meta.get("messages")
        if messages is None:
            ids = tokenizer.encode(prompt.text, add_special_tokens=False)
        elif not getattr(tokenizer, "chat_template", None):
            raise ConfigError(
                "the env asks for chat-formatted prompts but this model's tokenizer has no "
                "chat template; use --env-set prompt_format=plain (tool_arithmetic: "
                "tool_format=calc)"
            )
        else:
            ids = chat_prompt_ids(tokenizer, prompt)  # (with the tools of meta["tools"])
        ids = list(ids)
        if room is None or len(ids) <= room:
            return ids
        if long_prompts == "truncate-left":
            if not warned:
                warned.append(True)
                print(
                    f"warning: prompts longer than {room} tokens are cut to their last {room} "
                    f"(--long-prompts truncate-left; the first: {prompt.split} prompt "
                    f"{prompt.index}, {len(ids)} tokens)",
                    file=sys.stderr,
                )
            return ids[-room:]
        raise PromptTooLong(
            f"{prompt.split} prompt {prompt.index} has {len(ids)} tokens, more than the {room} "
            "the model's context leaves next to the response budget; --long-prompts "
            "truncate-left keeps the last tokens of such prompts, or use shorter prompts, a "
            "smaller --max-response-len or a model with a longer context"
        )

    return encode


def check_held_out_prompts(
    env: Env, encode: Callable[[Prompt], list[int]], split: str = "heldout"
) -> None:
    """Before the run: with "refuse", every prompt of the evaluation split (held-out, or
    validation when tuning) must fit; the error counts the ones that do not."""
    too_long = []
    held_out = env.eval_split(split)
    for prompt in held_out:
        try:
            encode(prompt)
        except PromptTooLong as exc:
            too_long.append(exc)
    if too_long:
        raise PromptTooLong(
            f"{len(too_long)} of {len(held_out)} held-out prompts do not fit; the first: "
            f"{too_long[0]}"
        )
