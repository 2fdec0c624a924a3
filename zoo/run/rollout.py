"""Rollouts: per-prompt sampler seeds, and groups of completions packed into the
trainer's right-padded batch."""

from __future__ import annotations

import torch

from zoo.core.types import Completion
from zoo.services.batch import RolloutBatch

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
    False get an all-zero mask (they count nowhere). A multi-turn episode's mask is its
    assistant mask: the env's tokens enter no loss, ratio, mismatch metric or correction."""
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
        if c.assistant_mask is None:
            mask[i, : len(c.token_ids)] = float(included[i])
        else:
            mask[i, : len(c.token_ids)] = torch.tensor(c.assistant_mask) * float(included[i])
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
