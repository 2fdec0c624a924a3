"""A step's sampling rounds: what the loop collects before it trains.

Each round samples G responses for each of ``prompts_per_step`` prompts (the loop's
``sample_groups``), scores them, lets the algorithm shape the rewards (DAPO's overlong
punishment, say), gives a multi-turn episode its per-turn rewards and start states when
the algorithm credits turns (``uses_turn_rewards``, ``uses_turn_states``), adds a greedy
baseline completion per prompt when the algorithm needs one (ReMax), and asks the
algorithm for the advantages and which groups to keep (DAPO's dynamic sampling). Rounds
repeat until the step has ``prompts_per_step`` kept groups or ``max_sampling_rounds`` ran;
every sample drawn counts in the step's figures, kept or not. ``Rounds`` holds the
result: the kept groups packed for training, and the step's sampling figures."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from zoo.core.config import ConfigError
from zoo.core.types import Completion
from zoo.envs import Prompt
from zoo.run.rollout import Rollouts, rollout_batch, shown, stack_advantages
from zoo.run.run_config import RunConfig
from zoo.services.batch import RolloutBatch
from zoo.services.ledger import Ledger

if TYPE_CHECKING:  # (the run reaches plugins only through their registries)
    from zoo.algorithms.base import Algorithm

SAMPLE_GROUPS = 2
"""Groups (prompts, with all their G completions) per step kept for samples.jsonl."""

Sample = Callable[[int], tuple[list[Prompt], list[list[Completion]]]]
"""n -> the next n prompts and their groups (``RLLoop.sample_groups``)."""
Baseline = Callable[[list[Prompt], list[list[Completion]]], tuple[torch.Tensor, torch.Tensor]]
"""(prompts, groups) -> greedy task rewards and lengths per prompt (``RLLoop.baseline_groups``)."""


@dataclass
class Rounds:
    """One step's sampling rounds: the groups kept for training, with their advantages
    and loss masks, and the figures of every sample drawn."""

    groups: list[list[Completion]] = field(default_factory=list)
    advantages: list[torch.Tensor] = field(default_factory=list)
    in_loss: list[torch.Tensor] = field(default_factory=list)
    task_rewards: list[float] = field(default_factory=list)
    response_lengths: list[int] = field(default_factory=list)
    greedy_rewards: list[float] = field(default_factory=list)
    greedy_lengths: list[int] = field(default_factory=list)
    informative: int = 0
    """Groups whose task rewards differ: they carry gradient."""
    drawn_groups: int = 0
    count: int = 0
    """Rounds run."""
    rows: list[dict[str, Any]] = field(default_factory=list)
    """samples.jsonl rows of the first round's first ``SAMPLE_GROUPS`` groups."""
    with_baseline: bool = False
    """A greedy baseline was generated (its figures go to the record)."""

    def record(self, drawn: dict[str, Any], advantage: dict[str, Any]) -> dict[str, Any]:
        """The step's sampling figures, with ``drawn`` (the rollouts' figures of every
        group drawn) and ``advantage`` (the algorithm's advantage figures) in their
        place among them."""
        record: dict[str, Any] = {
            "reward_mean": statistics.fmean(self.task_rewards),
            "reward_std": statistics.pstdev(self.task_rewards),
            "sampling_rounds": self.count,
            "kept_groups": len(self.groups),
            "informative_group_frac": self.informative / self.drawn_groups,
            "masked_responses": int(sum((~m).sum() for m in self.in_loss)),
            **length_metrics(self.response_lengths, self.task_rewards),
        }
        record.update(drawn)
        record.update(advantage)
        if self.with_baseline:
            record.update(baseline_metrics(self.greedy_rewards, self.greedy_lengths))
        return record

    def batch(self) -> RolloutBatch:
        """The kept groups as one training batch (there must be some)."""
        return rollout_batch(
            self.groups, stack_advantages(self.advantages), torch.stack(self.in_loss)
        )

    def shapes(self) -> list[tuple[int, int]]:
        """(prompt, response) lengths of the batch's rows: what the ledger charges."""
        return [(len(c.prompt_ids), len(c.token_ids)) for g in self.groups for c in g]


def sampling_rounds(
    cfg: RunConfig,
    algo: Algorithm,
    rollouts: Rollouts,
    ledger: Ledger,
    budget: int,
    sample: Sample,
    baseline: Baseline | None,
) -> Rounds:
    """Run a step's sampling rounds (the module's docstring). ``budget``: the tokens after
    the prompt a sample may take (length shaping's L_max); ``baseline``: the greedy
    baseline, or None when the algorithm needs none."""
    out = Rounds(with_baseline=baseline is not None)
    while (
        len(out.groups) < cfg.sampling.prompts_per_step
        and out.count < cfg.sampling.max_sampling_rounds
    ):
        out.count += 1
        prompts, groups = sample(cfg.sampling.prompts_per_step)
        with ledger.timed("score"):
            flat = rollouts.rewards(prompts, groups)
        rewards = torch.tensor(flat).view(len(groups), cfg.sampling.group_size)
        ledger.add("score", tokens=sum(len(c.token_ids) for g in groups for c in g))
        out.task_rewards += rewards.flatten().tolist()
        out.informative += int((rewards.amax(dim=1) > rewards.amin(dim=1)).sum())
        out.drawn_groups += len(groups)
        # an episode's length is every token after its prompt, observations included,
        # against its token limit (budget)
        lengths = torch.tensor([[len(c.token_ids) for c in g] for g in groups])
        out.response_lengths += lengths.flatten().tolist()
        shaped = algo.shape_rewards(rewards, lengths, budget)
        per_turn = rollouts.turn_rewards(groups, shaped) if algo.uses_turn_rewards else None
        states = rollouts.turn_states(groups) if algo.uses_turn_states else None
        greedy_shaped = None
        if baseline is not None:
            greedy, greedy_len = baseline(prompts, groups)
            out.greedy_rewards += greedy.tolist()
            out.greedy_lengths += greedy_len.tolist()
            # shaped as the samples' rewards are, so that R - b compares like with like
            greedy_shaped = algo.shape_rewards(greedy[:, None], greedy_len[:, None], budget)
            greedy_shaped = greedy_shaped[:, 0]
        advantages = algo.group_advantages(shaped, lengths, per_turn, greedy_shaped, states)
        keep = algo.keep(rewards)
        truncated = torch.tensor([[c.finish_reason == "length" for c in g] for g in groups])
        in_loss = algo.train_mask(truncated)
        if out.count == 1:
            out.rows += train_samples(prompts[:SAMPLE_GROUPS], groups, rewards, advantages, keep)
        for i in torch.nonzero(keep).flatten().tolist():
            if len(out.groups) < cfg.sampling.prompts_per_step:
                out.groups.append(groups[i])
                out.advantages.append(advantages[i])
                out.in_loss.append(in_loss[i])
    return out


def greedy_baseline(
    rollouts: Rollouts, ledger: Ledger, prompts: list[Prompt], groups: list[list[Completion]]
) -> tuple[torch.Tensor, torch.Tensor]:
    """ReMax's baseline (arXiv 2310.10505, Algorithm 1): one greedy (argmax) completion of
    each prompt of ``groups``, from the same generator and weights that sampled them and
    the same prompt ids (a multi-turn env: a greedy episode, every turn greedy), scored by
    the env like the samples. Timed and charged to the ledger's ``baseline`` phase as
    generation (FLOPs as ``generate``, its generated tokens). Returns the [groups] task
    rewards and [groups] lengths (tokens after the prompt) of the greedy completions."""
    with ledger.timed("baseline"):
        encoded = [g[0].prompt_ids for g in groups]
        greedy = rollouts.sample(prompts, encoded, 1, greedy=True)
        rewards = torch.tensor(rollouts.rewards(prompts, greedy))
    for g in greedy:
        c = g[0]
        ledger.add("baseline", ledger.sample_flops(c), len(c.token_ids))
    return rewards, torch.tensor([len(g[0].token_ids) for g in greedy])


def check_greedy_baseline(cfg: RunConfig, algorithm: Algorithm) -> None:
    """Refuse a run whose algorithm needs a greedy baseline (``needs_greedy_baseline``)
    in a mode that does not generate one: async mode requests each batch's samples steps
    ahead, and no greedy completion is requested with them (ConfigError naming the
    setting)."""
    if algorithm.needs_greedy_baseline and cfg.placement.mode != "sync":
        raise ConfigError(
            f"algorithm {algorithm.name!r} generates a greedy baseline completion per prompt, "
            f"which runs in sync mode only; got mode {cfg.placement.mode!r}: use --mode sync"
        )


def baseline_metrics(rewards: list[float], lengths: list[int]) -> dict[str, float]:
    """The greedy baseline's completions of a step (every sampling round):
    ``baseline_reward_mean``, their mean task reward (before any shaping), to set beside
    ``reward_mean`` of the samples, and ``baseline_len_mean``, their mean length in tokens
    after the prompt."""
    return {
        "baseline_reward_mean": statistics.fmean(rewards),
        "baseline_len_mean": statistics.fmean(lengths),
    }


def train_samples(
    prompts: list[Prompt],
    groups: list[list[Completion]],
    rewards: torch.Tensor,
    advantages: torch.Tensor,
    keep: torch.Tensor,
) -> list[dict[str, Any]]:
    """samples.jsonl rows of ``prompts`` (the first of a sampling round) and their groups:
    the env's reward, the algorithm's advantage, whether the algorithm kept the group, and
    the sampler's finish reason and policy version."""
    rows = []
    for i, p in enumerate(prompts):
        for j, c in enumerate(groups[i]):
            rows.append(
                {
                    "kind": "train",
                    "index": p.index,
                    "prompt": p.text,
                    "completion": shown(c),
                    "reward": float(rewards[i, j]),
                    "advantage": _advantage(advantages[i, j], c),
                    "kept": bool(keep[i]),
                    "finish_reason": c.finish_reason,
                    "policy_version": c.policy_version,
                }
            )
    return rows


def length_metrics(lengths: list[int], rewards: list[float]) -> dict[str, float]:
    """Response lengths (tokens after the prompt) of every sample a step drew:
    ``response_len_mean``, and over the samples whose task reward is > 0 (correct) and
    those whose reward is <= 0 (incorrect) ``response_len_correct_mean`` and
    ``response_len_incorrect_mean`` (each left out when a step has no such sample).
    Dr. GRPO's claim (arXiv 2503.20783, Sec. 3.1) is about the last: under GRPO's
    per-sequence mean a long wrong answer is penalised less per token, so wrong answers
    grow longer."""
    out = {}
    selections: tuple[tuple[str, Callable[[float], bool]], ...] = (
        ("", lambda r: True),
        ("_correct", lambda r: r > 0),
        ("_incorrect", lambda r: r <= 0),
    )
    for name, keep in selections:
        chosen = [n for n, r in zip(lengths, rewards, strict=True) if keep(r)]
        if chosen:
            out[f"response_len{name}_mean"] = statistics.fmean(chosen)
    return out


def _advantage(advantage: torch.Tensor, c: Completion) -> float | list[float]:
    """A sample's advantage in samples.jsonl: a number, or one per turn of its episode."""
    return float(advantage) if advantage.dim() == 0 else advantage[: c.turns].tolist()
