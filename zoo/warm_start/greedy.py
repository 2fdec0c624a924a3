"""The warm start's greedy evaluation of a model in training: single-turn accuracy, and
multi-turn episodes through the run layer's episode runner (zoo.run.episodes), so the warm
start lays out and ends an episode exactly as a run does.

``GreedyModel`` puts the model being trained behind the generator protocol: greedy only,
contexts grouped by length so no row is padded (a padded row decodes slightly differently
on CPU, and the stopping step must not depend on batch composition).
"""

from __future__ import annotations

import torch

from zoo.core.types import Completion
from zoo.envs import Env, Prompt
from zoo.models.tokenizer import EOS_ID, decode, encode, hf_byte_tokenizer
from zoo.run.episodes import rollout_episodes
from zoo.services.conversation import Conversation
from zoo.services.sampling import SamplingConfig

NO_TOKEN_LIMIT = 1 << 30
"""Episode token limit of the warm start's evaluation: none; episodes end by the env or
its turn limit (the runs' --max-episode-tokens is a run setting, not a recipe's)."""


class GreedyModel:
    """The ``generate`` of a ``GeneratorService`` over an in-memory causal LM (what
    ``rollout_episodes`` calls), greedy decoding only; it takes no new weights: it decodes
    with the model object it was given, as that model trains. It reports
    no log-probs (0.0 per token): the warm start scores rewards, it does not train on
    these samples."""

    replicas = 1
    busy_seconds = 0.0
    policy_version = 0

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model

    @torch.no_grad()
    def generate(
        self,
        prompts: list[list[int]],
        n: int,
        sampling: SamplingConfig,
        seeds: list[int] | None = None,
        greedy: bool = False,
    ) -> list[list[Completion]]:
        if not greedy or n != 1:
            raise ValueError("GreedyModel decodes greedily, one completion per prompt")
        by_len: dict[int, list[int]] = {}
        for i, ids in enumerate(prompts):
            by_len.setdefault(len(ids), []).append(i)
        out: list[list[Completion]] = [[] for _ in prompts]
        for rows in by_len.values():
            ids = torch.tensor([prompts[i] for i in rows])
            new = self.model.generate(
                input_ids=ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=sampling.max_tokens,
                do_sample=False,
                eos_token_id=EOS_ID,
                pad_token_id=EOS_ID,
            )[:, ids.shape[1] :].tolist()
            for i, row in zip(rows, new, strict=True):
                # a row that stopped early is padded with end-of-text: cut after the first
                stop = EOS_ID in row
                tokens = row[: row.index(EOS_ID) + 1] if stop else row
                out[i] = [
                    Completion(
                        prompt_ids=prompts[i],
                        token_ids=tokens,
                        logprobs=[0.0] * len(tokens),
                        text=decode(tokens),
                        finish_reason="stop" if stop else "length",
                        policy_version=0,
                    )
                ]
        return out


def greedy_accuracy(
    model: torch.nn.Module, env: Env, prompts: list[Prompt], max_new_tokens: int = 6
) -> float:
    """Accuracy (mean reward) of greedy decoding on ``prompts``, scored with one
    ``env.score_batch`` call."""
    out = GreedyModel(model).generate(
        [encode(p.text) for p in prompts],
        n=1,
        sampling=SamplingConfig(max_tokens=max_new_tokens),
        greedy=True,
    )
    scores = env.score_batch(list(prompts), [g[0].text for g in out])
    # summed prompts of one length together, as the shipped recipes' figures were summed
    by_len: dict[int, list[float]] = {}
    for p, score in zip(prompts, scores, strict=True):
        by_len.setdefault(len(encode(p.text)), []).append(score)
    return sum(s for group in by_len.values() for s in group) / len(prompts)


def greedy_episodes(
    model: torch.nn.Module, env: Env, prompts: list[Prompt], max_new_tokens: int
) -> dict[str, float]:
    """Greedy multi-turn episodes of a ``MultiTurnEnv`` run by the run layer's
    ``rollout_episodes``: each turn ends at the end-of-text token (kept in the context) or
    after ``max_new_tokens``, the observation's bytes follow it exactly, until the env says
    done or ``env.turn_limit()`` turns. Returns the mean ``reward``, ``tool_rate`` (the
    fraction of episodes with a tool call), ``direct_reward`` (mean reward of the others)
    and ``turns`` (mean assistant turns per episode)."""
    groups = rollout_episodes(
        env,
        GreedyModel(model),
        Conversation(hf_byte_tokenizer()),
        prompts,
        [encode(p.text) for p in prompts],
        n=1,
        sampling=SamplingConfig(max_tokens=max_new_tokens),
        token_limit=NO_TOKEN_LIMIT,
        greedy=True,
    )
    episodes = [g[0] for g in groups]
    rewards = [float(e.reward) for e in episodes]
    direct = [r for r, e in zip(rewards, episodes, strict=True) if not e.tool_calls]
    return {
        "reward": sum(rewards) / len(rewards),
        "tool_rate": sum(bool(e.tool_calls) for e in episodes) / len(episodes),
        "direct_reward": sum(direct) / len(direct) if direct else 0.0,
        "turns": sum(e.turns for e in episodes) / len(episodes),
    }
