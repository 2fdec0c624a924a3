"""Held-out evaluation: greedy accuracy, and sampled pass@k and mean@k.

Greedy reward is the mean env reward of one argmax completion per held-out prompt. The
sampled metrics draw ``n`` completions per prompt at the run's temperature, with sampler
seeds fixed per (run seed, prompt), so every checkpoint of a run, and every algorithm at
the same seed, is scored on the same random numbers:

    pass@k = mean over prompts of 1 - C(n - c, k) / C(n, k)      (c: correct of n)
    mean@n = mean over prompts and samples of the reward

pass@k is the unbiased estimator of Chen et al., "Evaluating Large Language Models
Trained on Code", arXiv 2107.03374, eq. 1; a completion is correct when it earns the
env's full reward (1). mean@n estimates the expected reward of one sample, so it is the
same quantity for every k (it is "mean@k" for all k <= n).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

EVAL_K = (1, 4, 8)
"""The k of pass@k reported by default (those <= the run's eval_samples)."""

FULL_REWARD = 1.0
"""A completion with at least this reward counts as correct for pass@k."""


def pass_at_k(n: int, c: int, k: int) -> float:
    """Probability that at least one of k completions drawn without replacement from n,
    c of them correct, is correct: 1 - C(n-c, k) / C(n, k), computed as a product
    (1 - C(n-c,k)/C(n,k) = 1 - prod_{i=n-c+1..n} (1 - k/i)) so large n does not overflow."""
    if min(n, c, k) < 0 or k > n or c > n or k == 0:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def sampled_metrics(rewards: Sequence[Sequence[float]], ks: Sequence[int] = EVAL_K) -> dict:
    """``eval_pass_at_k`` for each k <= n and ``eval_mean_at_n`` from the rewards of n
    sampled completions per prompt (one inner sequence per prompt)."""
    n = len(rewards[0])
    if n == 0 or any(len(r) != n for r in rewards):
        raise ValueError("need the same number (>= 1) of sampled completions for every prompt")
    correct = [sum(x >= FULL_REWARD - 1e-9 for x in r) for r in rewards]
    out = {
        f"eval_pass_at_{k}": math.fsum(pass_at_k(n, c, k) for c in correct) / len(rewards)
        for k in ks
        if k <= n
    }
    out[f"eval_mean_at_{n}"] = math.fsum(math.fsum(r) for r in rewards) / (n * len(rewards))
    return out
