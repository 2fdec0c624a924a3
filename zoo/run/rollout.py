"""Rollouts: what a step draws for its prompts (``Rollouts``: single-turn completions
here, multi-turn episodes in zoo.run.episodes), per-prompt sampler seeds, and groups of
completions packed into the trainer's right-padded batch."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import torch

from zoo.core.types import Completion
from zoo.envs import Prompt
from zoo.run.run_config import MAX_SAMPLES_PER_PROMPT, SAMPLE_STREAMS
from zoo.services.batch import RolloutBatch
from zoo.services.sampling import SamplingConfig

if TYPE_CHECKING:  # (the wiring builds the services; a rollout only calls them)
    from zoo.run.services import Services

EVAL_SEED_OFFSET = 7_919
"""Held-out sampling uses the seeds of run seed + this, apart from the training stream's."""


SEED_SPACE = 2**32
"""Seeds that draw different noise: torch's CPU generator (which both backends seed) keeps
only a seed's low 32 bits (``manual_seed(2**32 + 5)`` draws what ``manual_seed(5)`` does)."""


def stride_for(samples: int) -> int:
    """Room between two prompts' seeds under "disjoint": the smallest power of two that
    holds a prompt's ``samples`` (at most MAX_SAMPLES_PER_PROMPT)."""
    if not 0 <= samples <= MAX_SAMPLES_PER_PROMPT:
        raise ValueError(f"samples per prompt must be 0..{MAX_SAMPLES_PER_PROMPT}, got {samples}")
    return 1 << max(samples - 1, 0).bit_length()


def sampling_seed(
    run_seed: int,
    prompt_index: int,
    noise_seed: int = 0,
    streams: str = "disjoint",
    *,
    samples: int,
) -> int:
    """Per-prompt sampler seed: samples do not depend on how prompts are batched. Both
    generators seed sample j of a prompt with this seed + j (as vLLM seeds the n samples of
    one request), so "disjoint" (the default) spaces the prompts' seeds by the stride that
    holds the prompt's ``samples`` (``stride_for``), modulo 2**32 (``SEED_SPACE``): no two
    samples of a run share a noise stream unless the run has more than 2**32 / stride
    prompts (2**29 at 8 samples a prompt).
    "consecutive" is what runs recorded before the field did: prompt seeds 1 apart, so
    sample j of prompt i drew the same noise as sample j - 1 of prompt i + 1, which made
    neighbouring prompts' rewards correlate (+0.03 on running_sum: docs/parity.md, "Step-1
    training reward"). A ``noise_seed`` other than 0 (RunConfig.noise_seed) mixes into the
    seed multiplicatively (an odd factor mod 2**31, so one-to-one), giving other seeds than
    any (run_seed, prompt_index) pair alone."""
    if streams not in SAMPLE_STREAMS:
        raise ValueError(f"unknown sample streams {streams!r} (valid: {', '.join(SAMPLE_STREAMS)})")
    seed = (run_seed * 1_000_003 + prompt_index) % (2**31)
    if noise_seed != 0:
        seed = (seed * 2_654_435_761 + noise_seed * 40_503 + 1) % (2**31)
    if streams == "consecutive":
        return seed
    return seed * stride_for(samples) % SEED_SPACE


class Rollouts(Protocol):
    """One shape for whatever a run samples per prompt, so the loop never asks which:
    single-turn completions (``CompletionRollouts``) or a multi-turn env's episodes
    (``zoo.run.episodes.EpisodeRollouts``), each sample one ``Completion`` of its group.
    Chosen once per run by ``zoo.run.episodes.make_rollouts``."""

    def sample(
        self,
        prompts: list[Prompt],
        encoded: list[list[int]],
        n: int,
        seeds: list[int] | None = None,
        greedy: bool = False,
    ) -> list[list[Completion]]:
        """``n`` samples of each prompt (``encoded``: its token ids), one group per prompt;
        ``seeds``: one per prompt (None with ``greedy``)."""
        ...

    def rewards(self, prompts: list[Prompt], groups: list[list[Completion]]) -> list[float]:
        """The task reward of every sample of ``groups`` (of ``prompts``), flat."""
        ...

    def turn_rewards(
        self, groups: list[list[Completion]], rewards: torch.Tensor
    ) -> torch.Tensor | None:
        """[groups, G, K] per-turn rewards, the last turn of each sample holding its
        (possibly shaped) reward in ``rewards`` [groups, G]; None when every sample is
        one turn (its reward is ``rewards``)."""
        ...

    def turn_states(self, groups: list[list[Completion]]) -> torch.Tensor | None:
        """[groups, G, K] ids of the history before each turn (equal within a group:
        the same tokens), -1 after a sample's last turn; None when every sample is one
        turn (all from the prompt)."""
        ...

    def metrics(self, groups: list[list[Completion]]) -> dict[str, float]:
        """Figures of the samples themselves for the step's (or, prefixed ``eval_``, the
        evaluation's) record; none for single-turn completions."""
        ...


class CompletionRollouts:
    """Single-turn rollouts: completions from the services' generator, scored by
    ``Services.score_batch`` (the env, here or in scorer processes). The services are
    read at each call, so a generator or scorer set on them later is the one used."""

    def __init__(self, services: Services, sampling: SamplingConfig) -> None:
        self.s = services
        self.sampling = sampling  # the loop's own object: a change to it applies here

    def sample(
        self,
        prompts: list[Prompt],
        encoded: list[list[int]],
        n: int,
        seeds: list[int] | None = None,
        greedy: bool = False,
    ) -> list[list[Completion]]:
        return self.s.generator.generate(
            encoded, n=n, sampling=self.sampling, seeds=seeds, greedy=greedy
        )

    def rewards(self, prompts: list[Prompt], groups: list[list[Completion]]) -> list[float]:
        # one scoring call for the whole batch (an env may score it in parallel)
        return self.s.score_batch(
            [p for p, g in zip(prompts, groups, strict=True) for _ in g],
            [c.text for g in groups for c in g],
        )

    def turn_rewards(
        self, groups: list[list[Completion]], rewards: torch.Tensor
    ) -> torch.Tensor | None:
        return None

    def turn_states(self, groups: list[list[Completion]]) -> torch.Tensor | None:
        return None

    def metrics(self, groups: list[list[Completion]]) -> dict[str, float]:
        return {}


def stack_advantages(advantages: list[torch.Tensor]) -> torch.Tensor:
    """Stack kept groups' advantages, each [G] or [G, K_i] (per turn; K_i may differ
    between sampling rounds), padding the turn axis with zeros."""
    if advantages[0].dim() == 1:
        return torch.stack(advantages)
    k = max(a.shape[-1] for a in advantages)
    return torch.stack([torch.nn.functional.pad(a, (0, k - a.shape[-1])) for a in advantages])


def turn_index(c: Completion) -> torch.Tensor:
    """[len(c.token_ids)] the assistant turn (0-based) of each token of ``c``: an
    observation's tokens belong to the turn before them (their mask is 0 anyway)."""
    if c.assistant_mask is None:
        return torch.zeros(len(c.token_ids), dtype=torch.long)
    mask = torch.tensor(c.assistant_mask)
    starts = torch.zeros_like(mask)
    starts[1:] = (mask[1:] == 1) & (mask[:-1] == 0)  # each turn after the first
    index = torch.cumsum(starts, 0)
    if len(c.token_ids) and int(index[-1]) + 1 != c.turns:
        raise ValueError(
            f"an episode's assistant mask holds {int(index[-1]) + 1} turns, but it records "
            f"{c.turns}: a turn sampled no tokens, so per-turn advantages cannot be placed"
        )
    return index


def rollout_batch(
    groups: list[list[Completion]], advantages: torch.Tensor, in_loss: torch.Tensor | None = None
) -> RolloutBatch:
    """Pack groups of completions into right-padded sequences, with the sampler's log-probs
    and policy version of each; responses with ``in_loss`` False get an all-zero mask (they
    count nowhere). A multi-turn episode's mask is its assistant mask: the env's tokens
    enter no loss, ratio, mismatch metric or correction. ``advantages``: [groups, G], one
    per response, or [groups, G, K], one per assistant turn, laid onto each turn's tokens
    ([B, T] in the batch)."""
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
    if advantages.dim() == 3:
        per_turn = advantages.reshape(len(flat), -1)
        per_token = torch.zeros(len(flat), width)
        for i, c in enumerate(flat):
            per_token[i, : len(c.token_ids)] = per_turn[i, turn_index(c)]
    return RolloutBatch(
        tokens=tokens,
        response_start=torch.tensor([len(c.prompt_ids) for c in flat]),
        mask=mask,
        advantages=per_token if advantages.dim() == 3 else advantages.reshape(-1),
        sampler_logprobs=sampler,
        policy_versions=torch.tensor([c.policy_version for c in flat]),
        group_size=len(groups[0]),
    )


def shown(c: Completion) -> str:
    """A sample's text in samples.jsonl: a multi-turn episode's whole transcript."""
    return c.text if c.transcript is None else c.transcript
