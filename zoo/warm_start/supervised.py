"""The warm start's supervised losses: cross-entropy on the answer's tokens (and the
end-of-text token) only, for single answers and for multi-turn demonstrations laid out
token for token as the RL loop lays out an episode."""

from __future__ import annotations

import random

import torch

from zoo.models.tiny import TinyRecipe
from zoo.models.tokenizer import EOS_ID, encode


def sft_loss(model: torch.nn.Module, pairs: list[tuple[str, str]]) -> torch.Tensor:
    """Cross-entropy on the answer tokens and the end-of-text token only."""
    seqs, masks = [], []
    for prompt, answer in pairs:
        p, a = encode(prompt), [*encode(answer), EOS_ID]
        seqs.append(p + a)
        masks.append([0] * len(p) + [1] * len(a))
    return masked_nll(model, seqs, masks)


def demonstration_mix(env, prompts: list, recipe: TinyRecipe, step: int) -> list:
    """The warm start's episodes for ``prompts``: each one, with probability
    ``recipe.tool_fraction`` (a seeded draw per step), the env's demonstration
    (``env.warm_start_trace``: a tool episode, or a revision after feedback), else the
    direct answer; as (prompt text, [(assistant turn, observation, learn), ...])."""
    # The seed string predates revisions; it stays, so tiny-tool's data (and key) are as built.
    rng = random.Random(f"tool-mix:{recipe.seed}:{step}")
    return [
        (
            p.text,
            env.warm_start_trace(p, prompts, rng)
            if rng.random() < recipe.tool_fraction
            else [(env.reference_answer(p), "", True)],
        )
        for p in prompts
    ]


def episode_sft_loss(model: torch.nn.Module, episodes: list) -> torch.Tensor:
    """Cross-entropy on the learned assistant turns' tokens and their end-of-text tokens
    only: the prompt, the observations and turns shown as context (a demonstration's
    mistake) are masked out, as the RL loop masks environment tokens. The tokens are laid
    out as the loop lays them out: prompt, turn, EOS, observation, turn, EOS, ... (the
    observation's bytes exactly)."""
    seqs, masks = zip(*(episode_tokens(prompt, turns) for prompt, turns in episodes), strict=True)
    return masked_nll(model, list(seqs), list(masks))


def episode_tokens(prompt: str, turns: list[tuple]) -> tuple[list[int], list[int]]:
    """(token ids, loss mask) of one episode, from its turns as (assistant turn,
    observation) or (assistant turn, observation, learn): 1 on each learned turn's bytes
    and its EOS, 0 on the prompt, the observations and turns with ``learn`` False."""
    seq = encode(prompt)
    mask = [0] * len(seq)
    for turn, observation, *flag in turns:
        learn = flag[0] if flag else True
        t, o = [*encode(turn), EOS_ID], encode(observation)
        seq += t + o
        mask += [int(learn)] * len(t) + [0] * len(o)
    return seq, mask


def masked_nll(model: torch.nn.Module, seqs: list[list[int]], masks: list[list[int]]):
    """Mean next-token cross-entropy over the positions whose mask is 1."""
    width = max(map(len, seqs))
    ids = torch.tensor([s + [EOS_ID] * (width - len(s)) for s in seqs])
    mask = torch.tensor([m + [0] * (width - len(m)) for m in masks], dtype=torch.float32)
    logits = model(input_ids=ids).logits[:, :-1]
    nll = torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1), reduction="none"
    ).view_as(mask[:, 1:])
    return (nll * mask[:, 1:]).sum() / mask[:, 1:].sum()
