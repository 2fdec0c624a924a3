"""What the trainer and the reference model compute on: a rollout batch laid out for a
decoder (``RolloutBatch``), and the log-probabilities of its response tokens under a model
(``response_logprobs``), which every pass of both computes.

Sequences are laid out prompt + response, right-padded, so causal attention never lets a
real token see a pad.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch.distributed.tensor import DTensor

from zoo.core.config import ConfigError
from zoo.core.entropy import token_entropy
from zoo.models.parallelism import OneProcess


@dataclass
class RolloutBatch:
    """Sequences ready for training. ``tokens`` holds prompt + response per row (right
    padded); response token t of row i sits at position ``response_start[i] + t``. Rows
    come in groups of ``group_size`` consecutive rows (the G responses of one prompt)."""

    tokens: torch.Tensor
    """[B, L] token ids."""
    response_start: torch.Tensor
    """[B] index of the first response token (= prompt length)."""
    mask: torch.Tensor
    """[B, T] 1 on response tokens."""
    advantages: torch.Tensor
    """[B] or [B, T]."""
    old_logprobs: torch.Tensor | None = None
    """[B, T] log pi_old, the policy the ratio is taken against: the trainer's own
    log-probs with the weights that sampled each row (``Trainer.logprobs``), or the
    sampler's. None: each update takes its own (detached), which is right only for a
    single update per batch."""
    ref_logprobs: torch.Tensor | None = None
    sampler_logprobs: torch.Tensor | None = None
    """[B, T] the generator's log-probs of the sampled tokens (the mismatch metrics and
    corrections of zoo/services/offpolicy.py read them)."""
    policy_versions: torch.Tensor | None = None
    """[B] the policy version that sampled each row; None: the trainer's current one."""
    group_size: int = 1
    """Rows per group: mini-batches split only between groups."""
    budget_spent: float | None = None
    """Share of the run's budget spent when this batch is trained (0-1], set by the loop:
    what a learning-rate schedule over the budget reads (RunConfig.warmup_ratio)."""
    kl_coef: float | None = None
    """The adaptive KL weight to train this batch with, set by the loop's KL controller
    (zoo.run.kl_control) for a trainer whose algorithm lives in another process
    (``Algorithm.set_kl_coef``); None: the algorithm's own."""
    values: torch.Tensor | None = None
    """[B, T] the critic's V(s_t) at sampling time (an algorithm with ``needs_values``;
    zoo/services/value.py): the centre of the value clip. None: no critic."""
    returns: torch.Tensor | None = None
    """[B, T] the critic's regression targets (the algorithm's ``token_advantages``)."""

    @property
    def size(self) -> int:
        return self.tokens.shape[0]

    def _map(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> RolloutBatch:
        """A batch with ``fn`` applied to every tensor field (others kept as they are)."""
        return RolloutBatch(
            **{
                f.name: fn(v) if isinstance(v := getattr(self, f.name), torch.Tensor) else v
                for f in dataclasses.fields(self)
            }
        )

    def to(self, device: torch.device) -> RolloutBatch:
        return self._map(lambda t: t.to(device, non_blocking=True))

    def rows(self, rows: slice | torch.Tensor) -> RolloutBatch:
        """The batch restricted to ``rows`` (a slice or an index tensor)."""
        return self._map(lambda t: t[rows])


def response_logprobs(
    model: torch.nn.Module,
    tokens: torch.Tensor,
    response_start: torch.Tensor,
    width: int,
    split: OneProcess | None = None,
    temperature: float = 1.0,
) -> torch.Tensor:
    """[B, width] log-probability of each response token under ``model`` (a TorchTitan
    decoder; under tensor parallelism, per ``split``, its LM head gives each rank a slice
    of the vocabulary), for sampling at ``temperature``: log softmax(logits / T), the
    distribution the generator sampled from. The LM head runs only where a response token
    is predicted: on prompt positions its output would be thrown away."""
    logits, targets = _response_logits(model, tokens, response_start, width)
    if split is not None and split.tensor_parallel > 1:  # (a parallelism.Split)
        return split.vocab_logprobs(logits.to_local().float() / temperature, targets)
    logits = logits.float() / temperature
    return torch.log_softmax(logits, dim=-1).gather(-1, targets[..., None]).squeeze(-1)


def response_logprobs_and_entropy(
    model: torch.nn.Module,
    tokens: torch.Tensor,
    response_start: torch.Tensor,
    width: int,
    split: OneProcess | None = None,
    temperature: float = 1.0,
    chunk: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``response_logprobs`` (the same numbers, by the same operations) and [B, width]
    the entropy of the whole next-token distribution at each response token, at
    ``temperature``, with its gradient (zoo/core/entropy.py ``token_entropy``, ``chunk``
    positions at a time: it reads the log-softmax the log-probs keep for their backward,
    so no other [B, width, V] tensor is kept). Not under tensor parallelism: there each
    rank holds a slice of the vocabulary (a ConfigError says so)."""
    if split is not None and split.tensor_parallel > 1:
        raise ConfigError(
            "the policy's entropy (entropy_coef / entropy_top_share) is not computed under "
            "tensor parallelism yet: run with tensor_parallel = 1"
        )
    logits, targets = _response_logits(model, tokens, response_start, width)
    log_probs = torch.log_softmax(logits.float() / temperature, dim=-1)
    picked = log_probs.gather(-1, targets[..., None]).squeeze(-1)
    return picked, token_entropy(log_probs, chunk)


def _response_logits(
    model: torch.nn.Module, tokens: torch.Tensor, response_start: torch.Tensor, width: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The LM head's logits [B, width, V] at the positions that predict response tokens
    (before any temperature), and the tokens they predict [B, width]."""
    picked, positions = response_hidden(model, tokens, response_start, width)
    return model.lm_head(picked), tokens.gather(1, positions + 1)


def response_hidden(
    model: torch.nn.Module, tokens: torch.Tensor, response_start: torch.Tensor, width: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The decoder's final hidden states [B, width, D] at the positions that predict
    response tokens (response token t of row i is predicted at ``response_start[i] - 1 +
    t``: the state before the token is chosen, where a critic reads V(s_t) too), and those
    positions [B, width]."""
    positions = (response_start[:, None] - 1 + torch.arange(width, device=tokens.device)).clamp(
        max=tokens.shape[1] - 2
    )
    model._skip_lm_head = True  # TorchTitan's Decoder flag: forward returns final hidden states
    try:
        hidden = model(tokens)
    finally:
        model._skip_lm_head = False
    if isinstance(hidden, DTensor):  # tensor parallel: replicated over the group
        hidden = hidden.to_local()  # (lm_head takes it back as a DTensor)
    return hidden.gather(1, positions[..., None].expand(-1, -1, hidden.shape[-1])), positions
