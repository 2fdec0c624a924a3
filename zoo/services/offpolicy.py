"""The gap between the policy that sampled a batch and the one that trains on it: how big
it is, and the corrections that compose with any algorithm.

Three log-probabilities of each sampled response token travel in a rollout batch:

    sampler   the generator's (vLLM's) log-prob when it sampled the token
    old       the trainer's, with the weights that sampled the row, computed once before
              the batch's first update (Trainer.logprobs): the "old" policy of the ratio
    lp        the trainer's at the current weights, in every update (with gradient)

At equal weights ``sampler`` and ``old`` differ only by kernels and precision (the
trainer-sampler mismatch); ``lp`` moves away from ``old`` with every update on the batch
and, in async mode, with the staleness of the weights that sampled it (the trainer's
``staleness_kl``). The mismatch is measured every step (``mismatch_metrics``) and can be
corrected, whatever the algorithm, by a run setting (``CORRECTIONS``):

    none          the ratio lp - old as it is (verl's default, with old recomputed)
    tis           truncated importance sampling: each token's policy-gradient term
                  weighted by min(pi_old / pi_sampler, C) (Yao et al., "Your efficient
                  RL framework secretly brings you off-policy RL training", 2025)
    mis-token     masked importance sampling: tokens whose pi_old / pi_sampler lies
                  outside [low, high] get no policy gradient (IcePop, Ring-1T, arXiv
                  2510.18855, which uses [0.5, 5])
    mis-sequence  the same for whole responses, by their length-normalised ratio
                  exp(mean_t (old - sampler))
    bypass        no recompute for the ratio: the sampler's log-probs are the old policy
                  (what async mode did before; the recompute still runs, for the metrics)

The weights act through the advantages (A_it <- w_it * A_it), so they multiply exactly
the policy-gradient term of every loss that is linear in A token by token (every
built-in), and leave a KL penalty to the reference alone (as verl applies them). A
sequence-level loss (GSPO) sees the mean of its tokens' weights.
"""

from __future__ import annotations

import torch

from zoo.core.losses import k3_kl, masked_mean
from zoo.services.settings import CORRECTIONS


def mismatch_metrics(
    old: torch.Tensor, sampler: torch.Tensor, mask: torch.Tensor
) -> dict[str, float]:
    """How far the trainer's log-probs (``old``) are from the sampler's on the same
    tokens: mean and max |difference| over response tokens, and a k3 estimate of
    KL(pi_sampler || pi_old) (the tokens were drawn from the sampler), in float64: the
    gaps are often below float32's resolution of exp near 1."""
    old, sampler, mask = old.double(), sampler.double(), mask.double()
    gap = (old - sampler).abs() * mask
    return {
        "mismatch_logprob_mean": masked_mean(gap, mask),
        "mismatch_logprob_max": float(gap.max()) if mask.any() else 0.0,
        "mismatch_kl": masked_mean(k3_kl(sampler, old) * mask, mask),
    }


def correction_weights(
    kind: str,
    old: torch.Tensor,
    sampler: torch.Tensor,
    mask: torch.Tensor,
    cap: float = 2.0,
    low: float = 0.5,
    high: float = 5.0,
) -> tuple[torch.Tensor | None, dict[str, float]]:
    """Per-token weights [B, T] for the policy-gradient term, and their metrics. None for
    ``none`` and ``bypass`` (no weights). ``cap``: TIS's C; ``low``, ``high``: the range
    of pi_old / pi_sampler that masked importance sampling keeps."""
    if kind not in CORRECTIONS:
        raise ValueError(f"unknown correction {kind!r}; valid: {', '.join(CORRECTIONS)}")
    if kind in ("none", "bypass"):
        return None, {}
    log_ratio = torch.where(mask > 0, old - sampler, 0.0)  # 0 on padding: no overflow
    if kind == "tis":
        ratio = log_ratio.exp()
        weights = ratio.clamp(max=cap)
        return weights, {
            "is_weight_mean": masked_mean(weights, mask),
            "is_truncated_frac": masked_mean((ratio > cap).float(), mask),
        }
    if kind == "mis-sequence":
        mean_log = (log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1)
        log_ratio = mean_log[:, None].expand_as(log_ratio)
    ratio = log_ratio.exp()
    weights = ((ratio >= low) & (ratio <= high)).float()
    return weights, {"is_masked_frac": masked_mean(1.0 - weights, mask)}
