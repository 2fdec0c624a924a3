"""What both sides are fed: one rollout batch sampled once from the tiny-sum start weights
(running_sum prompts, rewards from the env), laid out the way each side wants it, and the
two trainers built from the same weights and matched settings (benchmarks.parity.settings).

forge-zoo lays a row out as prompt + response, right-padded (``RolloutBatch``); TRL as a
left-padded prompt and a right-padded completion with attention masks (the dict its
``_generate_and_score_completions`` returns). Both hold the same token ids and the same
response mask: the completion up to and including its first end-of-text token.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from benchmarks.parity.settings import (
    TRL_SCALE_REWARDS,
    forge_zoo_algorithm,
    forge_zoo_run_config,
    trl_config,
)
from zoo.models.tokenizer import EOS_ID, decode, encode


@dataclass
class SharedBatch:
    """One rollout batch: ``groups`` prompts x ``group_size`` completions, rows in groups."""

    prompt_texts: list[str]
    prompt_ids: list[list[int]]
    """Per row (repeated over a group)."""
    completion_ids: torch.Tensor
    """[B, T] sampled ids, EOS after the end (T = max new tokens)."""
    mask: torch.Tensor
    """[B, T] float, 1 on response tokens (their end-of-text token included)."""
    rewards: torch.Tensor
    """[groups, G] task rewards from the env."""
    group_size: int
    max_response_len: int

    @property
    def size(self) -> int:
        return self.completion_ids.shape[0]

    @property
    def lengths(self) -> torch.Tensor:
        """[groups, G] response lengths in tokens."""
        return self.mask.sum(-1).view(-1, self.group_size).long()

    def rows(self, index: torch.Tensor) -> SharedBatch:
        """The batch with its rows in ``index``'s order (rewards keep the groups)."""
        return SharedBatch(
            [self.prompt_texts[i] for i in index.tolist()],
            [self.prompt_ids[i] for i in index.tolist()],
            self.completion_ids[index],
            self.mask[index],
            self.rewards,
            self.group_size,
            self.max_response_len,
        )


def model_path() -> Path:
    return forge_zoo_run_config("grpo").run.model_spec().path


def sample_batch(prompts: int = 64, seed: int = 0) -> SharedBatch:
    """``prompts`` running_sum training prompts x G completions sampled from the tiny-sum
    start weights with transformers' ``generate`` at the run's temperature (full
    distribution, max_response_len new tokens), scored by the env."""
    from transformers import AutoModelForCausalLM

    from zoo.envs import get_env

    cfg = forge_zoo_run_config("grpo")
    g, width = cfg.sampling.group_size, cfg.sampling.max_response_len
    env = get_env("running_sum")
    problems = env.train_prompts(0, prompts, seed)
    model = AutoModelForCausalLM.from_pretrained(model_path(), dtype=torch.float32).eval()
    torch.manual_seed(seed)
    completions, prompt_ids, texts = [], [], []
    for problem in problems:
        ids = encode(problem.text)
        with torch.no_grad():
            out = model.generate(
                torch.tensor([ids] * g),
                do_sample=True,
                temperature=cfg.sampling.temperature,
                top_k=0,
                top_p=1.0,
                max_new_tokens=width,
                eos_token_id=EOS_ID,
                pad_token_id=EOS_ID,
                attention_mask=torch.ones(g, len(ids), dtype=torch.long),
            )
        new = out[:, len(ids) :]
        completions.append(torch.nn.functional.pad(new, (0, width - new.shape[1]), value=EOS_ID))
        prompt_ids += [ids] * g
        texts += [problem.text] * g
    completion_ids = torch.cat(completions)
    is_eos = completion_ids == EOS_ID
    first_eos = torch.where(is_eos.any(-1), is_eos.float().argmax(-1), width - 1)
    mask = (torch.arange(width)[None, :] <= first_eos[:, None]).float()
    answers = [
        decode(row[: int(n)].tolist()) for row, n in zip(completion_ids, mask.sum(-1), strict=True)
    ]
    repeated = [p for p in problems for _ in range(g)]
    rewards = torch.tensor(env.score_batch(repeated, answers)).view(prompts, g)
    return SharedBatch(texts, prompt_ids, completion_ids, mask, rewards, g, width)


def forge_zoo_advantages(algorithm: str, batch: SharedBatch) -> torch.Tensor:
    """[B] forge-zoo's advantages: the algorithm's reward shaping (DAPO's overlong
    punishment), then its group estimator, as the loop calls them."""
    algo = forge_zoo_algorithm(algorithm)
    shaped = algo.shape_rewards(batch.rewards, batch.lengths, batch.max_response_len)
    return algo.group_advantages(shaped, batch.lengths).flatten().float()


def trl_advantages(algorithm: str, batch: SharedBatch) -> torch.Tensor:
    """[B] the advantages TRL 1.16 computes from the same (shaped) rewards: its
    ``_generate_and_score_completions`` does this inline (group mean; with scale_rewards
    "group", divided by its ``nanstd`` + 1e-4), so it is restated here with TRL's nanstd."""
    from trl.trainer.utils import nanstd

    algo = forge_zoo_algorithm(algorithm)
    shaped = algo.shape_rewards(batch.rewards, batch.lengths, batch.max_response_len).float()
    centred = shaped - shaped.mean(dim=1, keepdim=True)
    # (TRL_SCALE_REWARDS is what trl_config sets; building a GRPOConfig here would reset
    # accelerate's state under a live trainer)
    if TRL_SCALE_REWARDS[algorithm] == "group":
        centred = centred / (nanstd(shaped, dim=1, keepdim=True) + 1e-4)
    return centred.flatten()


# --- forge-zoo's side -------------------------------------------------------------------


def forge_zoo_trainer(algorithm: str, **regime: Any) -> Any:
    """forge-zoo's Trainer (TorchTitan Qwen3, AdamW) on the tiny-sum start weights with the
    run's optimizer and regime settings (``regime`` overrides, e.g. mini_batches)."""
    from zoo.run.wiring import trainer_config_of, trainer_options
    from zoo.services.trainer import Trainer

    cfg = forge_zoo_run_config(algorithm)
    config = trainer_config_of(cfg, "cpu")
    config = dataclasses.replace(config, regime=dataclasses.replace(config.regime, **regime))
    return Trainer(
        model_path(), config, cfg.sampling.max_response_len, device="cpu", **trainer_options(cfg)
    )


def rollout_batch(batch: SharedBatch, advantages: torch.Tensor, group_size: int) -> Any:
    """forge-zoo's layout: prompt + response per row, right-padded with EOS."""
    from zoo.services.batch import RolloutBatch

    rows = [p + c.tolist() for p, c in zip(batch.prompt_ids, batch.completion_ids, strict=True)]
    length = max(len(r) for r in rows)
    tokens = torch.tensor([r + [EOS_ID] * (length - len(r)) for r in rows])
    start = torch.tensor([len(p) for p in batch.prompt_ids])
    return RolloutBatch(
        tokens=tokens,
        response_start=start,
        mask=batch.mask.clone(),
        advantages=advantages,
        group_size=group_size,
    )


def forge_zoo_logprobs(trainer: Any, batch: SharedBatch) -> torch.Tensor:
    """[B, T] forge-zoo's log-probs of the response tokens (its own model code), no grad."""
    return trainer.logprobs(rollout_batch(batch, torch.zeros(batch.size), batch.group_size))


# --- TRL's side ---------------------------------------------------------------------------


@contextlib.contextmanager
def trl_without_vllm() -> Iterator[None]:
    """Import TRL's GRPO trainer as if vLLM were not installed: it is never used here
    (``use_vllm`` False), and importing it (TRL's vLLM generation module imports vLLM
    when it finds it) costs a minute of a busy 2-core machine. Where the trainer module is
    already imported this changes nothing; TRL's check is restored after the import."""
    import importlib
    import warnings

    utils = importlib.import_module("trl.import_utils")
    real = utils.is_vllm_available
    utils.is_vllm_available = lambda *a, **k: False
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            importlib.import_module("trl.trainer.grpo_trainer")
        yield
    finally:
        utils.is_vllm_available = real


def trl_trainer(algorithm: str, output_dir: str | Path, **overrides: Any) -> Any:
    """TRL's GRPOTrainer on the same start weights (transformers' Qwen3, float32, CPU) with
    ``trl_config(algorithm)`` (``overrides`` on top). Its reward function is never called:
    level a and b hand it finished batches."""
    with trl_without_vllm():
        from datasets import Dataset
        from transformers import AutoModelForCausalLM, AutoTokenizer
        from trl import GRPOTrainer

    def unused_reward(completions: list[str], **_: Any) -> list[float]:
        raise RuntimeError("the parity levels hand TRL finished batches")

    model = AutoModelForCausalLM.from_pretrained(model_path(), dtype=torch.float32)
    prompts = forge_zoo_run_config(algorithm).sampling.prompts_per_step
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=unused_reward,
        args=trl_config(algorithm, output_dir, **overrides),
        train_dataset=Dataset.from_dict({"prompt": ["1+1="] * prompts}),
        processing_class=AutoTokenizer.from_pretrained(model_path()),
    )
    if not hasattr(trainer, "current_gradient_accumulation_steps"):  # set by train() only
        trainer.current_gradient_accumulation_steps = trainer.args.gradient_accumulation_steps
    return trainer


def trl_inputs(batch: SharedBatch, advantages: torch.Tensor) -> dict[str, Any]:
    """TRL's layout (what ``_generate_and_score_completions`` returns): left-padded prompt
    ids and mask, completion ids and mask, advantages, and ``num_items_in_batch`` (the
    generation batch's response tokens, the dapo normaliser's base)."""
    width = max(len(p) for p in batch.prompt_ids)
    prompt_ids = torch.tensor([[EOS_ID] * (width - len(p)) + p for p in batch.prompt_ids])
    prompt_mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in batch.prompt_ids])
    return {
        "prompt_ids": prompt_ids,
        "prompt_mask": prompt_mask,
        "completion_ids": batch.completion_ids.clone(),
        "completion_mask": batch.mask.long(),
        "advantages": advantages.clone(),
        "num_items_in_batch": batch.mask.sum(),
    }


def trl_logprobs(trainer: Any, inputs: dict[str, Any]) -> torch.Tensor:
    """[B, T] TRL's log-probs of the completion tokens, by its own method
    (``_get_per_token_logps_and_entropies``: transformers' model, fused LM head at the
    config's temperature), no grad."""
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
    attention = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
    with torch.no_grad():
        logps, _, _ = trainer._get_per_token_logps_and_entropies(
            trainer.model, ids, attention, inputs["completion_ids"].shape[1]
        )
    return logps.float()
