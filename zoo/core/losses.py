"""Shared pieces of policy-gradient losses, named so plugins read like their papers'
formulas. Definitions follow docs/algorithms.md ("Aggregation modes", "Advantage
estimators", "KL to the reference").

Three registries let an algorithm pick a piece by name from its config (``--set
advantage=rloo``, ``--set kl=k2``, ``--set loss=cispo``): ``ADVANTAGE_ESTIMATORS``
([groups, G] rewards and response lengths -> advantages), ``KL_ESTIMATORS`` (per-token lp,
ref -> KL estimate) and ``POLICY_LOSSES`` (ratio, advantages, bounds -> the per-token
policy objective and what its bounds changed). ``choose`` turns an unknown name into a
ConfigError that lists the valid ones."""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Literal

import torch

from zoo.core.config import ConfigError
from zoo.core.types import TrainBatch, ValueBatch

Aggregation = Literal["seq_mean", "token_mean", "fixed"]
AGGREGATIONS: tuple[str, ...] = ("seq_mean", "token_mean", "fixed")
STD_EPS = 1e-6


def group_norm(rewards: torch.Tensor) -> torch.Tensor:
    """GRPO's advantage: (R - mean_g R) / (std_g R + 1e-6), unbiased std, per group.
    ``rewards`` is [groups, G]; an all-equal group gets exact zeros."""
    return group_center(rewards) / (rewards.std(dim=1, unbiased=True, keepdim=True) + STD_EPS)


def group_center(rewards: torch.Tensor) -> torch.Tensor:
    """Dr. GRPO's advantage: R - mean_g R (no division by the std). An all-equal group
    gets exact zeros (the float mean of equal values need not equal them)."""
    check_groups(rewards)
    all_equal = all_equal_groups(rewards)[:, None]
    return (rewards - rewards.mean(dim=1, keepdim=True)).masked_fill(all_equal, 0.0)


def leave_one_out(rewards: torch.Tensor) -> torch.Tensor:
    """RLOO's advantage (Ahmadian et al., arXiv 2402.14740, eq. 7): each response's
    baseline is the mean reward of the other G - 1 in its group,
    A_i = R_i - (sum_j R_j - R_i) / (G - 1)  (= G/(G-1) * (R_i - mean_g R)).
    An all-equal group gets exact zeros."""
    check_groups(rewards)
    others_mean = (rewards.sum(dim=1, keepdim=True) - rewards) / (rewards.shape[1] - 1)
    return (rewards - others_mean).masked_fill(all_equal_groups(rewards)[:, None], 0.0)


def batch_norm(advantages: torch.Tensor, center: bool = True) -> torch.Tensor:
    """REINFORCE++'s global normalisation (Hu et al., arXiv 2501.03262): (A - mean) /
    (std + 1e-6), mean and unbiased std taken over every response of the batch (all
    groups), not per group. REINFORCE++ applies it to raw rewards; REINFORCE++-baseline to
    group-centred rewards, whose batch mean is already 0: ``center=False`` then only
    divides, so groups centred to exact zeros stay exactly 0. A batch whose values are all
    equal gets exact zeros."""
    if advantages.numel() < 2:
        raise ConfigError(
            f"batch normalisation needs at least 2 responses in the batch, got shape "
            f"{tuple(advantages.shape)}"
        )
    flat = advantages.flatten()
    if bool((flat == flat[0]).all()):
        return torch.zeros_like(advantages)
    centred = advantages - flat.mean() if center else advantages
    return centred / (flat.std(unbiased=True) + STD_EPS)


def optimal_baseline(rewards: torch.Tensor, lengths: torch.Tensor | None) -> torch.Tensor:
    """OPO's advantage (Hao et al., arXiv 2505.23585): the variance-minimising
    baseline under the paper's assumption that ||grad log pi(o)||^2 grows as |o|, i.e. the
    length-weighted mean reward of the group, the response itself included, and no std:

        b   = sum_j |o_j| R_j / sum_j |o_j|
        A_i = R_i - b

    ``lengths`` [groups, G] are response lengths in tokens. A group whose lengths are all 0
    falls back to the plain mean; an all-equal group gets exact zeros."""
    check_groups(rewards)
    if lengths is None:
        raise ConfigError(
            "the optimal (length-weighted) baseline needs response lengths: call "
            "Algorithm.group_advantages(rewards, lengths), as the loop does"
        )
    if lengths.shape != rewards.shape:
        raise ConfigError(
            f"lengths of shape {tuple(lengths.shape)} do not match rewards {tuple(rewards.shape)}"
        )
    weights = lengths.to(rewards.dtype)
    total = weights.sum(dim=1, keepdim=True)
    weighted = (weights * rewards).sum(dim=1, keepdim=True) / total.clamp(min=1)
    baseline = torch.where(total > 0, weighted, rewards.mean(dim=1, keepdim=True))
    return (rewards - baseline).masked_fill(all_equal_groups(rewards)[:, None], 0.0)


PASS_REWARD = 1.0
"""For pass@k advantages a response is correct when its reward is at least this (less
1e-9): the env's full reward, as for the pass@k the evaluation reports
(zoo.services.evaluation.FULL_REWARD)."""
DEFAULT_PASS_K = 4


def pass_at_k_advantages(
    rewards: torch.Tensor, lengths: torch.Tensor | None = None, k: int = DEFAULT_PASS_K
) -> torch.Tensor:
    """Pass@k Training's analytic advantage (Chen et al., "Pass@k Training for Adaptively
    Balancing Exploration and Exploitation of Large Reasoning Models", arXiv 2508.10751,
    Sec. 4.3, as the authors' ``passk_adv.py`` computes it). A group of N responses, c of
    them correct, is read as every size-k subset of it, each rewarded 1 if it holds a
    correct response (its pass@k). The subsets' mean reward and std are

        R     = 1 - C(N - c, k) / C(N, k)          (the group's unbiased pass@k)
        sigma = sqrt(R (1 - R))                      (the subsets' rewards are 0 or 1)

    and a response's advantage is the mean normalised advantage of the subsets holding
    it: every subset holding a correct one passes; of the C(N-1, k-1) holding a wrong one,
    C(N-c-1, k-1) hold only wrong ones:

        A_correct = (1 - R) / (sigma + 1e-6)
        A_wrong   = (1 - R - C(N-c-1, k-1) / C(N-1, k-1)) / (sigma + 1e-6)

    k = 1 is GRPO's group_norm with the population std (G, not G - 1, in the
    denominator). Rewards are read as pass / fail: correct means a reward of at least
    ``PASS_REWARD`` (the env's full reward), so partial credit counts as a failure. A group
    all correct or all wrong gets exact zeros. ``lengths`` is unused (the registry's
    signature). The binomial ratios are taken as exact fractions, then rounded once."""
    check_groups(rewards)
    n = rewards.shape[1]
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= n:
        raise ConfigError(
            f"pass@k advantages need 1 <= pass_k <= the group size; got pass_k = {k!r} "
            f"with groups of {n} responses (set --set pass_k=K or --group-size)"
        )
    correct = rewards >= PASS_REWARD - 1e-9
    right, wrong = [], []  # by the number c of correct responses in the group
    for c in range(n + 1):
        if c in (0, n):  # no spread: every subset passes, or none does
            right.append(0.0)
            wrong.append(0.0)
            continue
        fail = Fraction(math.comb(n - c, k), math.comb(n, k))  # 1 - R
        sigma = math.sqrt(float(fail * (1 - fail)))
        only_wrong = Fraction(math.comb(n - c - 1, k - 1), math.comb(n - 1, k - 1))
        right.append(float(fail) / (sigma + STD_EPS))
        wrong.append(float(fail - only_wrong) / (sigma + STD_EPS))
    count = correct.sum(dim=1)
    by_count = torch.tensor([right, wrong], dtype=rewards.dtype)[:, count]  # [2, groups]
    return torch.where(correct, by_count[0][:, None], by_count[1][:, None])


def token_whiten(values: torch.Tensor, lengths: torch.Tensor | None) -> torch.Tensor:
    """Whitening over the tokens of the batch (REINFORCE++, arXiv 2501.03262, eq. 10; verl's
    ``masked_whiten``, OpenRLHF's advantage normalisation): each response's value stands on
    each of its |o_i| tokens, and the mean and the unbiased std are taken over all those
    tokens of every group, so a long response weighs |o_i| times, not once:

        mean = sum_i |o_i| v_i / sum_i |o_i|
        var  = sum_i |o_i| (v_i - mean)^2 / (sum_i |o_i| - 1)
        A_i  = (v_i - mean) / (sqrt(var) + 1e-6)

    ``values`` and ``lengths`` (tokens) are [groups, G]. verl adds 1e-8 to the variance and
    OpenRLHF divides by the token count (no Bessel correction): both differ from this by
    a factor 1 + O(1e-6 + 1 / tokens). A batch whose tokens all carry the same value gets
    exact zeros."""
    if lengths is None:
        raise ConfigError(
            "whitening over tokens needs response lengths: call "
            "Algorithm.group_advantages(rewards, lengths), as the loop does"
        )
    if lengths.shape != values.shape:
        raise ConfigError(
            f"lengths of shape {tuple(lengths.shape)} do not match values {tuple(values.shape)}"
        )
    weights = lengths.to(values.dtype)
    tokens = weights.sum()
    if float(tokens) < 2:
        raise ConfigError(f"whitening over tokens needs at least 2 response tokens, got {tokens}")
    present = values[weights > 0]
    if bool((present == present[0]).all()):
        return torch.zeros_like(values)
    mean = (weights * values).sum() / tokens
    var = (weights * (values - mean) ** 2).sum() / (tokens - 1)
    return (values - mean) / (var.sqrt() + STD_EPS)


AdvantageEstimator = Callable[..., torch.Tensor]
ADVANTAGE_ESTIMATORS: Mapping[str, AdvantageEstimator] = {
    "group_norm": lambda rewards, lengths: group_norm(rewards),
    "group_center": lambda rewards, lengths: group_center(rewards),
    "rloo": lambda rewards, lengths: leave_one_out(rewards),
    "reinforce_pp": lambda rewards, lengths: batch_norm(rewards),
    "reinforce_pp_baseline": lambda rewards, lengths: batch_norm(
        group_center(rewards), center=False
    ),
    "opo": optimal_baseline,
    "pass_at_k": pass_at_k_advantages,
}
"""Advantage estimators by the name a config's ``advantage`` field takes: each maps
[groups, G] rewards and [groups, G] response lengths (or None) to [groups, G] advantages;
one that takes options has them as keyword parameters (pass_at_k's ``k``), which
``estimate_advantages`` passes on. docs/algorithms.md, "Advantage estimators"."""


def choose(registry: Mapping[str, Callable[..., torch.Tensor]], name: str, what: str) -> Callable:
    """``registry[name]``, or a ConfigError naming the valid choices."""
    if name not in registry:
        raise ConfigError(f"unknown {what} {name!r}; valid: {', '.join(registry)}")
    return registry[name]


def estimate_advantages(
    name: str, rewards: torch.Tensor, lengths: torch.Tensor | None = None, **options: Any
) -> torch.Tensor:
    """The advantages of the estimator ``name`` (``ADVANTAGE_ESTIMATORS``), given those of
    ``options`` its signature names (e.g. ``k=`` for pass_at_k); the others are not its
    own and are left out."""
    estimator = choose(ADVANTAGE_ESTIMATORS, name, "advantage estimator")
    own = inspect.signature(estimator).parameters
    return estimator(rewards, lengths, **{k: v for k, v in options.items() if k in own})


def all_equal_groups(rewards: torch.Tensor) -> torch.Tensor:
    """Bool [groups]: the groups whose G rewards are exactly equal (zero advantages)."""
    return (rewards == rewards[:, :1]).all(dim=1)


def check_groups(rewards: torch.Tensor) -> None:
    if rewards.dim() != 2 or rewards.shape[1] < 2:
        raise ConfigError(
            f"group advantages need rewards of shape [groups, G] with G >= 2 "
            f"(group size 1 has no baseline); got shape {tuple(rewards.shape)}"
        )


def k1_kl(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """Per-token k1 estimator of KL(pi_theta || pi_ref): lp - ref (Schulman,
    "Approximating KL divergence", 2020). Unbiased, can be negative; as a loss term its
    expected gradient is 0, so it belongs in the reward (``kl_reward_to_go``)."""
    return logprobs - ref_logprobs


def k2_kl(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """Per-token k2 estimator: (lp - ref)^2 / 2 (Schulman, 2020). Non-negative; as a loss
    term its gradient (lp - ref) grad lp is that of KL(pi_theta || pi_ref) on-policy."""
    return 0.5 * (logprobs - ref_logprobs) ** 2


def k3_kl(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimator of KL(pi_theta || pi_ref): exp(ref - lp) - (ref - lp) - 1
    (Schulman, "Approximating KL divergence", 2020). Non-negative, no clamping."""
    delta = ref_logprobs - logprobs
    return torch.exp(delta) - delta - 1


KLEstimator = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
KL_ESTIMATORS: Mapping[str, KLEstimator] = {"k1": k1_kl, "k2": k2_kl, "k3": k3_kl}
"""Per-token KL estimators by the name a config's ``kl`` field takes."""


def aggregate(per_token: torch.Tensor, batch: TrainBatch, mode: Aggregation) -> torch.Tensor:
    """Reduce a [B, T] per-token loss to a scalar (docs/algorithms.md):

    - seq_mean:   (1/B) sum_i (1/|o_i|) sum_t l_it
    - token_mean: sum_it l_it / sum_i |o_i|
    - fixed:      sum_it l_it / (B * L_max)

    B and sum_i |o_i| come from ``batch.num_sequences`` / ``batch.num_tokens`` (the whole
    optimizer batch), so micro-batches sum to the full-batch loss. Padding never counts;
    a sequence without response tokens contributes 0.
    """
    masked = per_token * batch.mask
    if mode == "token_mean":
        return masked.sum() / max(batch.num_tokens, 1)
    if mode == "seq_mean":
        lengths = batch.mask.sum(-1).clamp(min=1)
        return (masked.sum(-1) / lengths).sum() / max(batch.num_sequences, 1)
    if mode == "fixed":
        if not batch.max_response_len:
            raise ConfigError("aggregation 'fixed' needs batch.max_response_len (L_max)")
        return masked.sum() / (max(batch.num_sequences, 1) * batch.max_response_len)
    raise ConfigError(f"unknown aggregation {mode!r}; valid: {', '.join(AGGREGATIONS)}")


def dual_clipped_objective(
    surrogate: torch.Tensor, advantages: torch.Tensor, c: float
) -> torch.Tensor:
    """Dual-clip PPO (Ye et al., arXiv 1912.09729): for A < 0 the clipped objective
    is bounded below by c * A, max(min(r A, clip(r) A), c A), so a token whose ratio has
    grown past c (c > 1) gets no gradient; A >= 0 is unchanged. ``surrogate`` is
    ``clipped_objective(...)``."""
    if c <= 1:
        raise ConfigError(f"dual clip c must be > 1 (the paper uses 3), got {c}")
    return torch.where(advantages < 0, torch.maximum(surrogate, c * advantages), surrogate)


def log_ratio(batch: TrainBatch) -> torch.Tensor:
    """Per-token log importance ratio lp - old on response tokens, 0 on padding, so that
    exp() of junk padding values can never overflow into the loss (inf * 0 = nan)."""
    return torch.where(batch.mask > 0, batch.logprobs - batch.old_logprobs, 0.0)


def clipped_objective(
    ratio: torch.Tensor, advantages: torch.Tensor, low: float, high: float
) -> torch.Tensor:
    """PPO's clipped surrogate objective min(r A, clip(r, low, high) A) (Schulman et al.,
    arXiv 1707.06347, eq. 7), elementwise; ``low``/``high`` are ratio bounds, e.g. 1 -+ eps.
    Its gradient is zero where the clipped branch is the minimum."""
    return torch.minimum(ratio * advantages, torch.clamp(ratio, low, high) * advantages)


def kl_penalty(
    batch: TrainBatch, beta: float, estimator: str = "k3"
) -> tuple[torch.Tensor | float, dict[str, float]]:
    """KL in the loss: beta * KL per token (``KL_ESTIMATORS[estimator]`` of lp and ref,
    with its gradient), to add to the per-token loss, and its metric ``{"kl": mean over
    response tokens}``. (0.0, {}) when beta == 0: the reference is then not run and
    ``batch.ref_logprobs`` may be None."""
    kl_of = choose(KL_ESTIMATORS, estimator, "KL estimator")
    if beta == 0:
        return 0.0, {}
    if batch.ref_logprobs is None:
        raise ConfigError(f"beta = {beta} > 0 needs reference log-probs (batch.ref_logprobs)")
    kl = kl_of(batch.logprobs, batch.ref_logprobs)
    return beta * kl, {"kl": masked_mean(kl.detach(), batch.mask)}


KL_REWARD_CREDITS: tuple[str, ...] = ("to_go", "token")
"""How a KL charged in the reward reaches a token's advantage (``kl_reward_to_go``):
"to_go", the KL return summed to the end of the response (gamma = 1: REINFORCE++, verl,
OpenRLHF); "token", the token's own KL only (ReMax's code, ``compute_returns``)."""


def kl_reward_to_go(
    batch: TrainBatch, beta: float, estimator: str = "k1", credit: str = "to_go"
) -> tuple[torch.Tensor | float, dict[str, float]]:
    """KL in the reward: each token is charged -beta * KL_s (of the sampling policy, old,
    against ref; no gradient) as a per-token reward, so with gamma = 1 the return from
    token t is R - beta * sum_{s >= t} KL_s (REINFORCE++, arXiv 2501.03262).
    Returns the [B, T] term ``beta * sum_{s >= t} KL_s`` to subtract from the per-token
    advantage (0 on padding), and ``{"kl": mean KL over response tokens}``; (0.0, {}) when
    beta == 0. With ``credit = "token"`` the term is ``beta * KL_t``, the token's own KL
    (ReMax's authors' code sets each token's return to its own KL plus the reward, not
    the KL summed to the end). Per row, so micro-batches need no global counts."""
    kl_of = choose(KL_ESTIMATORS, estimator, "KL estimator")
    if credit not in KL_REWARD_CREDITS:
        raise ConfigError(f"kl_reward_credit {credit!r}; valid: {', '.join(KL_REWARD_CREDITS)}")
    if beta == 0:
        return 0.0, {}
    if batch.ref_logprobs is None:
        raise ConfigError(f"beta = {beta} > 0 needs reference log-probs (batch.ref_logprobs)")
    on_tokens = batch.mask > 0
    kl = torch.where(on_tokens, kl_of(batch.old_logprobs, batch.ref_logprobs), 0.0).detach()
    # sum over s >= t, or the token's own
    charged = kl.flip(-1).cumsum(-1).flip(-1) if credit == "to_go" else kl
    return beta * charged * batch.mask, {"kl": masked_mean(kl, batch.mask)}


KL_ROLLOUT_MEANS: tuple[str, ...] = ("token_mean", "seq_mean")
"""How the adaptive KL controller averages the per-token KL of a step (``rollout_kl``)."""


def rollout_kl(kl: torch.Tensor, mask: torch.Tensor, mean: str = "token_mean") -> float:
    """The KL the adaptive controller reads, from a [B, T] per-token estimate: "token_mean",
    the mean over the batch's response tokens (each token weighs the same: a long response
    counts more); "seq_mean", each response's mean over its tokens, then the mean over
    the responses that have a token (verl's ``apply_kl_penalty``: each response weighs the
    same). The two differ on a batch of ragged lengths whose KL varies with length."""
    on = torch.where(mask > 0, kl, 0.0)
    if mean == "token_mean":
        return masked_mean(on, mask)
    if mean != "seq_mean":
        raise ConfigError(f"kl_rollout_mean {mean!r}; valid: {', '.join(KL_ROLLOUT_MEANS)}")
    lengths = mask.sum(-1)
    rows = lengths > 0
    if not bool(rows.any()):
        return 0.0
    return float(((on * mask).sum(-1)[rows] / lengths[rows]).mean())


KL_ERROR_CLIP = 0.2
"""The adaptive KL controller's bound on the proportional error (Ziegler et al., 2019)."""


def adaptive_kl_coef(beta: float, kl: float, target: float, horizon: int, n_steps: int) -> float:
    """The adaptive KL controller's next coefficient (Ziegler et al., "Fine-Tuning Language
    Models from Human Preferences", arXiv 1909.08593, Sec. 2.2):

        e_t        = clip((KL_t - KL_target) / KL_target, -0.2, 0.2)
        beta_{t+1} = beta_t (1 + K_beta e_t),    K_beta = n_steps / horizon

    The paper states K_beta = 0.1; its code (openai/lm-human-preferences,
    ``AdaptiveKLController``) and verl, OpenRLHF and TRL after it write K_beta as the
    step's episodes over a horizon (10000 by default), which is this form. ``kl`` is the
    measured KL (same unit as ``target``), ``n_steps`` the responses the step trained on."""
    if target <= 0 or horizon <= 0:
        raise ConfigError(
            f"adaptive KL needs kl_target > 0 and kl_horizon > 0, got {target} and {horizon}"
        )
    error = min(max(kl / target - 1.0, -KL_ERROR_CLIP), KL_ERROR_CLIP)
    return beta * (1.0 + error * n_steps / horizon)


def token_covariance(batch: TrainBatch) -> torch.Tensor:
    """[B, T] per-token covariance term (A_t - mean A)(lp_t - mean lp), means over the
    response tokens of ``batch`` (Cui et al., arXiv 2505.22617, Sec. 4); detached, 0 on
    padding. Shared by Clip-Cov and KL-Cov, which select tokens by it (each plugin imports
    it from here, never from the other)."""
    mask = batch.mask
    count = mask.sum().clamp(min=1)
    adv = batch.token_advantages.detach()
    lp = batch.logprobs.detach()
    adv_mean = (adv * mask).sum() / count
    lp_mean = (lp * mask).sum() / count
    return torch.where(mask > 0, (adv - adv_mean) * (lp - lp_mean), 0.0)


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> float:
    """Mean over response tokens, as a plain float (for metrics)."""
    total = mask.sum()
    return float((values * mask).sum() / total) if total > 0 else 0.0


def clip_flags(
    ratio: torch.Tensor,
    low: float | None,
    high: float | None,
    advantages: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """[B, T] bool flags of PPO's clip min(r A, clip(r, low, high) A), by metric stem:

    - ``clip_low`` / ``clip_high``: the ratio is out of range (r < low / r > high),
      whatever the advantage;
    - ``clip_low_acting`` / ``clip_high_acting`` (only with ``advantages``, the [B, T]
      advantages the loss multiplies r by): the clipped branch is strictly the smaller, so
      the clip replaced r A by a constant and the token's gradient through r is zero where
      it was not: r < low with A < 0, or r > high with A > 0. A = 0 never acts.

    A bound of None gives no flags for that side. Flags are not masked: pass the results
    through ``masked_mean`` or ``sequence_shares``."""
    flags: dict[str, torch.Tensor] = {}
    ratio = ratio.detach()
    adv = None if advantages is None else advantages.detach()
    if low is not None:
        flags["clip_low"] = ratio < low
        if adv is not None:
            flags["clip_low_acting"] = flags["clip_low"] & (adv < 0)
    if high is not None:
        flags["clip_high"] = ratio > high
        if adv is not None:
            flags["clip_high_acting"] = flags["clip_high"] & (adv > 0)
    return flags


def ratio_metrics(
    ratio: torch.Tensor,
    batch: TrainBatch,
    low: float | None,
    high: float | None,
    advantages: torch.Tensor | None = None,
) -> dict[str, float]:
    """Mean and max of the ratio over response tokens, and shares of response tokens for
    PPO's clip at ``low`` / ``high`` (``clip_flags``): ``clip_low_frac`` /
    ``clip_high_frac``, the ratio out of range whatever the advantage, and, given the
    [B, T] ``advantages`` the loss uses, ``clip_low_acting_frac`` /
    ``clip_high_acting_frac``, the tokens whose gradient the clip changed (zeroed)."""
    ratio = ratio.detach()
    on_tokens = torch.where(batch.mask > 0, ratio, 0.0)  # ratios are > 0: padding never wins
    out = {"ratio_mean": masked_mean(ratio, batch.mask), "ratio_max": float(on_tokens.max())}
    for stem, flag in clip_flags(ratio, low, high, advantages).items():
        out[f"{stem}_frac"] = masked_mean(flag.to(ratio.dtype), batch.mask)
    return out


SEQUENCE_SHARE_PREFIX = "seq_"
"""Metrics named with this prefix are shares of sequences (those with response tokens),
not of tokens: the trainer combines them over micro-batches weighted by sequences
(zoo/services/trainer.py, ``Trainer.step``)."""


def sequence_shares(flags: Mapping[str, torch.Tensor], mask: torch.Tensor) -> dict[str, float]:
    """For each [B, T] bool flag, ``seq_<stem>_frac``: the share of the sequences with
    response tokens that have at least one flagged response token (0.0 when there are no
    such sequences)."""
    has_tokens = mask.sum(-1) > 0
    count = int(has_tokens.sum())
    out = {}
    for stem, flag in flags.items():
        hit = ((flag & (mask > 0)).any(-1) & has_tokens).sum()
        out[f"{SEQUENCE_SHARE_PREFIX}{stem}_frac"] = float(hit) / count if count else 0.0
    return out


# --- policy losses by name ------------------------------------------------------------
# The per-token policy objective of the PPO family, written once. A plugin that trains
# through a ratio bounded at [low, high] names one in its ``loss`` field, so
# ``--set loss=cispo`` swaps GRPO's clipped surrogate for CISPO's capped weight with
# everything else (advantages, KL, aggregation) unchanged.


@dataclass(frozen=True)
class PolicyTerm:
    """A policy loss's part of the per-token loss: ``objective`` [B, T] to maximise (with
    grad; the loss adds ``-objective``), and its metrics: the ratio's mean and max and the
    shares of response tokens its bounds changed, under the clip's names for every loss
    (``clip_low_frac``/``clip_high_frac``: out of range; ``clip_*_acting_frac``: the
    token's gradient changed), so a plugin's declared mechanism reads the same whichever
    loss it runs."""

    objective: torch.Tensor
    metrics: dict[str, float]


def ppo_clip_loss(
    ratio: torch.Tensor, advantages: torch.Tensor, batch: TrainBatch, low: float, high: float
) -> PolicyTerm:
    """PPO's clipped surrogate min(r A, clip(r, low, high) A) (Schulman et al., arXiv
    1707.06347, eq. 7); decoupled bounds (``low`` != 2 - ``high``) are DAPO's Clip-Higher
    (arXiv 2503.14476, Sec. 3.1). The clip acts where the clipped branch is the smaller."""
    objective = clipped_objective(ratio, advantages, low, high)
    return PolicyTerm(objective, ratio_metrics(ratio, batch, low, high, advantages))


def capped_weight_loss(
    ratio: torch.Tensor, advantages: torch.Tensor, batch: TrainBatch, low: float, high: float
) -> PolicyTerm:
    """CISPO's capped importance weight (MiniMax-M1, arXiv 2506.13585, Sec. 3.1):
    sg(min(r, high)) A lp, a REINFORCE gradient weighted by the ratio capped at ``high``;
    every token keeps a gradient (no token is dropped as PPO's clip drops them). There is no
    lower bound (``low`` is unused). The cap acts on a token whose weight it lowered and
    whose advantage is nonzero: r > high, A != 0, reported as ``clip_high_acting_frac``."""
    weight = torch.clamp(ratio, max=high).detach()
    metrics = ratio_metrics(ratio, batch, low=None, high=None)
    capped = ratio.detach() > high
    metrics["clip_low_frac"] = metrics["clip_low_acting_frac"] = 0.0
    metrics["clip_high_frac"] = masked_mean(capped.to(ratio.dtype), batch.mask)
    acting = capped & (advantages.detach() != 0)
    metrics["clip_high_acting_frac"] = masked_mean(acting.to(ratio.dtype), batch.mask)
    return PolicyTerm(weight * advantages * batch.logprobs, metrics)


def unclipped_loss(
    ratio: torch.Tensor, advantages: torch.Tensor, batch: TrainBatch, low: float, high: float
) -> PolicyTerm:
    """The plain importance-weighted policy gradient r A, no bound (an ablation: what the
    clip is worth); ``low`` and ``high`` are unused and nothing acts."""
    metrics = ratio_metrics(ratio, batch, low=None, high=None)
    for stem in ("clip_low", "clip_high", "clip_low_acting", "clip_high_acting"):
        metrics[f"{stem}_frac"] = 0.0
    return PolicyTerm(ratio * advantages, metrics)


PolicyLoss = Callable[[torch.Tensor, torch.Tensor, TrainBatch, float, float], PolicyTerm]
POLICY_LOSSES: Mapping[str, PolicyLoss] = {
    "ppo_clip": ppo_clip_loss,
    "cispo": capped_weight_loss,
    "unclipped": unclipped_loss,
}
"""Policy losses by the name a config's ``loss`` field takes: each maps the [B, T] ratio
r = exp(lp - old), the [B, T] advantages, the batch and the plugin's ratio bounds (low,
high) to a ``PolicyTerm``. docs/algorithms.md, "Policy losses"."""


def policy_loss(
    name: str,
    ratio: torch.Tensor,
    advantages: torch.Tensor,
    batch: TrainBatch,
    low: float,
    high: float,
) -> PolicyTerm:
    """The policy term of the loss ``name`` (``POLICY_LOSSES``)."""
    return choose(POLICY_LOSSES, name, "policy loss")(ratio, advantages, batch, low, high)


# --- the critic -------------------------------------------------------------------------
# For algorithms with a learned value model (Algorithm.needs_values): its regression loss
# and how much of the returns' variance its values explain.


def clipped_value_loss(batch: ValueBatch, clip: float) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO's clipped value loss (Schulman et al., arXiv 1707.06347, as in OpenAI's
    baselines; verl's ``compute_value_loss``, OpenRLHF's ``ValueLoss``), a token mean over
    ``batch.num_tokens``, so micro-batches add up:

        V_clip = V_old + clip(V - V_old, -clip, clip)
        l_t    = 0.5 * max((V_t - R_t)^2, (V_clip_t - R_t)^2)

    Where the clipped branch is strictly the larger, V has moved more than ``clip`` from
    where it was at sampling, away from the target, and the token's gradient is zero: the
    share of response tokens where that holds is ``value_clip_acting_frac``. Returns the
    scalar loss and {"value_loss", "value_clip_acting_frac"} (the latter over this
    batch's own tokens; the trainer weighs micro-batches by their tokens)."""
    if clip <= 0:
        raise ConfigError(f"the value clip must be > 0, got {clip}")
    v, old, target = batch.values, batch.old_values, batch.returns
    clipped = old + torch.clamp(v - old, -clip, clip)
    plain_err, clipped_err = (v - target) ** 2, (clipped - target) ** 2
    per_token = 0.5 * torch.maximum(plain_err, clipped_err)
    on_tokens = batch.mask > 0
    loss = torch.where(on_tokens, per_token, 0.0).sum() / max(batch.num_tokens or 0, 1)
    acting = (clipped_err > plain_err).detach().to(v.dtype)
    tokens = float(batch.mask.sum())
    own_mean = float(torch.where(on_tokens, per_token.detach(), 0.0).sum()) / max(tokens, 1.0)
    return loss, {"value_loss": own_mean, "value_clip_acting_frac": masked_mean(acting, batch.mask)}


def explained_variance(values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor) -> float:
    """1 - Var(R - V) / Var(R) over response tokens (population variances): 1 when the
    values predict the returns exactly, 0 when they explain none of their spread (a
    constant V, whatever the constant), below 0 when they add spread. 0.0 when the returns
    do not vary (nothing to explain)."""
    on = mask > 0
    r, v = returns[on].double(), values[on].double()
    if r.numel() == 0:
        return 0.0
    spread = float(r.var(unbiased=False))
    if spread == 0.0:
        return 0.0
    return 1.0 - float((r - v).var(unbiased=False)) / spread


def last_token_rewards(rewards: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """[B, T] per-token rewards of an outcome-rewarded batch: each response's reward
    ([B]) on its last token the mask marks (its last sampled token), 0 elsewhere; a row
    with no marked token gets none."""
    if rewards.dim() != 1:
        raise ValueError(f"one reward per response expected, got shape {tuple(rewards.shape)}")
    on = mask > 0
    last = torch.where(on, torch.arange(mask.shape[1]), -1).max(dim=1).values
    out = torch.zeros(mask.shape, dtype=torch.float32)
    rows = torch.nonzero(last >= 0).flatten()
    out[rows, last[rows]] = rewards[rows].float()
    return out
