"""The policy's per-token entropy, and the two ways the shared clipped surrogate uses it.

Entropy (what the trainer computes, ``token_entropy``): for each response position t,
over the policy's whole next-token distribution at the run's sampling temperature,

    H_t = -sum_v p_v log p_v,        p = softmax(logits_t / T)

It is exact, not the sampled-token estimate ``-lp`` that the trainer logs as
``entropy_sampled``. The trainer computes it only for an algorithm whose
``needs_entropy`` is True (``Algorithm.needs_entropy``), so every other run computes
exactly what it did before, and hands it to the loss as ``TrainBatch.entropy`` ([B, T],
with its gradient) and logs its mean over response tokens as ``policy_entropy``.

Gradient: H_t carries its full gradient with respect to the logits,
dH/dz_j = -p_j (log p_j + H), through the model's weights, so an entropy bonus is
differentiated like any other term of the loss. A loss that only ranks tokens by entropy
(the top-share selection below) reads it detached.

Memory: ``token_entropy`` reads the log-softmax the log-prob computation already keeps
for its own backward and works through it a chunk of positions at a time, in the
forward and again in the backward, so no [B, T, V] tensor beyond that one is kept; the
temporaries are at most ``chunk`` positions x V (``ENTROPY_CHUNK_ELEMENTS`` floats).

The options, config fields of the group-relative PPO-clip built-ins (grpo, dr_grpo,
dapo; docs/algorithms.md), read by ``entropy_terms``:

- ``entropy_coef`` = c: an entropy bonus, loss -= c * aggregate(H) under the algorithm's
  own aggregation (as in PPO, Schulman et al., arXiv 1707.06347, eq. 9, and verl's
  ``entropy_coeff``). Off at 0.
- ``entropy_top_share`` = rho: the policy-gradient term only on the top rho share of the
  response tokens by entropy, the "forking tokens" of Wang et al., "Beyond the 80/20
  Rule: High-Entropy Minority Tokens Drive Effective Reinforcement Learning for LLM
  Reasoning", arXiv 2506.01939 (2025), whose default is rho = 0.2 (keep the top 20%).
  Off at 1.
"""

from __future__ import annotations

import math

import torch

from zoo.core.config import ConfigError
from zoo.core.losses import Aggregation, aggregate, masked_mean
from zoo.core.types import TrainBatch

ENTROPY_CHUNK_ELEMENTS = 1 << 24
"""Floats per chunk of ``token_entropy``'s temporaries (64 MiB in float32): 16 384
positions of the tiny model's 320 tokens, 110 of a 151 936-token vocabulary."""

FORKING_TOP_SHARE = 0.2
"""Wang et al., arXiv 2506.01939: the policy gradient on the top 20% of tokens by
entropy matches or beats the full gradient (Sec. 4); their default rho."""

KEPT_METRIC = "entropy_kept_frac"
"""The share of response tokens whose policy-gradient term the top-share selection kept."""
MASKED_METRIC = "entropy_masked_frac"
"""The share it masked out (1 - kept): the ``token_selection`` metric of an algorithm
run with ``entropy_top_share < 1``."""


class _ChunkedEntropy(torch.autograd.Function):
    """H = -sum_v exp(L_v) L_v over the last dim of log-probabilities L ([N, V]),
    ``chunk`` rows at a time. Saves L itself (the log-softmax output its producer saves
    anyway); the backward, dH/dL_v = -exp(L_v) (1 + L_v), is recomputed per chunk, and
    log_softmax's own backward turns it into dH/dz_j = -p_j (L_j + H)."""

    @staticmethod
    def forward(ctx, log_probs: torch.Tensor, chunk: int) -> torch.Tensor:  # type: ignore[override]
        ctx.save_for_backward(log_probs)
        ctx.chunk = chunk
        out = torch.empty(log_probs.shape[0], dtype=log_probs.dtype, device=log_probs.device)
        for lo in range(0, log_probs.shape[0], chunk):
            part = _finite(log_probs[lo : lo + chunk])
            out[lo : lo + chunk] = -(part.exp() * part).sum(-1)
        return out

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor) -> tuple[torch.Tensor, None]:  # type: ignore[override]
        (log_probs,) = ctx.saved_tensors
        grad = torch.empty_like(log_probs)
        for lo in range(0, log_probs.shape[0], ctx.chunk):
            part = _finite(log_probs[lo : lo + ctx.chunk])
            weight = grad_out[lo : lo + ctx.chunk, None]
            grad[lo : lo + ctx.chunk] = -part.exp() * (1 + part) * weight
        return grad, None


def _finite(log_probs: torch.Tensor) -> torch.Tensor:
    """-inf log-probabilities (a token the logits rule out) to the dtype's lowest value,
    so that p log p is 0 there, not 0 * -inf = nan."""
    return log_probs.clamp(min=torch.finfo(log_probs.dtype).min)


def token_entropy(log_probs: torch.Tensor, chunk: int | None = None) -> torch.Tensor:
    """[..., V] log-probabilities (log_softmax of the logits at the sampling temperature)
    -> [...] entropy of each distribution, differentiable, computed ``chunk`` positions
    at a time (default: ``ENTROPY_CHUNK_ELEMENTS`` floats per chunk). Pass the log-softmax
    that the log-prob computation keeps for its backward: nothing else of size [..., V]
    is then kept."""
    vocab = log_probs.shape[-1]
    if chunk is None:
        chunk = max(1, ENTROPY_CHUNK_ELEMENTS // max(vocab, 1))
    if chunk < 1:
        raise ValueError(f"entropy chunk must be >= 1 position, got {chunk}")
    flat = log_probs.reshape(-1, vocab)
    return _ChunkedEntropy.apply(flat, chunk).reshape(log_probs.shape[:-1])


def check_entropy_options(coef: float, top_share: float, owner: str) -> None:
    """ConfigError unless ``coef`` is finite and 0 < ``top_share`` <= 1."""
    if not math.isfinite(coef):
        raise ConfigError(f"{owner}: entropy_coef must be a finite number, got {coef}")
    if not 0.0 < top_share <= 1.0:
        raise ConfigError(
            f"{owner}: entropy_top_share must be in (0, 1] (the share of response tokens "
            f"kept; Wang et al., arXiv 2506.01939, keep 0.2), got {top_share}"
        )


def top_share_mask(entropy: torch.Tensor, mask: torch.Tensor, share: float) -> torch.Tensor:
    """[B, T] float 1.0 on the ceil(share * N) response tokens of highest entropy among
    the N response tokens of ``mask``, 0.0 elsewhere (padding included). Ties are broken
    by position, earlier rows first, then earlier tokens: the same rows always give the
    same selection. Reads ``entropy`` detached."""
    on = mask > 0
    where = torch.nonzero(on)  # row-major: padding cannot reorder the response tokens
    count = len(where)
    kept = min(count, math.ceil(share * count - 1e-9))  # (0.2 * 15 is 3.0000000000000004)
    keep = torch.zeros_like(mask)
    if kept == 0:
        return keep
    values = entropy.detach()[on]
    # a stable sort keeps equal entropies in position order
    order = torch.sort(values, descending=True, stable=True).indices[:kept]
    rows, cols = where[order].T
    keep[rows, cols] = 1.0
    return keep


def entropy_terms(
    batch: TrainBatch, coef: float, top_share: float
) -> tuple[torch.Tensor | None, torch.Tensor | None, dict[str, float]]:
    """The two entropy options of the shared clipped surrogate, on the rows of ``batch``:
    ``(keep, bonus, metrics)``.

    - ``keep``: [B, T] 1.0 on the tokens whose policy-gradient term stays
      (``top_share_mask``), None when ``top_share`` is 1. The surrogate applies it by
      multiplying the advantages, min(r A k, clip(r) A k) = k min(r A, clip(r) A) for
      k in {0, 1}, so the KL penalty still covers every token and the clip's acting shares
      count only kept tokens. The selection is among the rows one loss call sees (a
      micro-batch, the whole mini-batch by default), like Clip-Cov's; the aggregation
      still divides by all response tokens, as the paper's objective does.
    - ``bonus``: [B, T] c * H_t, with its gradient, to subtract from the per-token loss
      before aggregating (so the loss falls by c * aggregate(H)); None when ``coef`` is 0.
    - ``metrics``: ``entropy_kept_frac`` and ``entropy_masked_frac`` with a selection.

    Both off: (None, None, {}), and the loss computes exactly what it did without them."""
    keep: torch.Tensor | None = None
    bonus: torch.Tensor | None = None
    metrics: dict[str, float] = {}
    if coef == 0.0 and top_share >= 1.0:
        return keep, bonus, metrics
    if batch.entropy is None:
        raise ConfigError(
            "entropy_coef / entropy_top_share need the policy's entropy (batch.entropy): "
            "the trainer computes it for an algorithm whose needs_entropy is True"
        )
    if top_share < 1.0:
        keep = top_share_mask(batch.entropy, batch.mask, top_share)
        kept = masked_mean(keep, batch.mask)
        tokens = float(batch.mask.sum())
        metrics = {KEPT_METRIC: kept, MASKED_METRIC: 1.0 - kept if tokens else 0.0}
    if coef != 0.0:
        # where, not a product: junk entropy on padding must not reach the loss
        bonus = coef * torch.where(batch.mask > 0, batch.entropy, 0.0)
    return keep, bonus, metrics


def entropy_bonus_loss(batch: TrainBatch, coef: float, mode: Aggregation) -> torch.Tensor:
    """-c * aggregate(H) under ``mode``: what the bonus adds to the loss (for tests and
    the conformance check; the built-ins add ``bonus`` per token instead)."""
    if batch.entropy is None:
        raise ConfigError("the entropy bonus needs batch.entropy")
    return -coef * aggregate(torch.where(batch.mask > 0, batch.entropy, 0.0), batch, mode)
