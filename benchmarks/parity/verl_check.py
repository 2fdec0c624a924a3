"""Batch-level parity with verl 0.9.1's ``core_algos`` (issue 59, item 5; docs/parity.md,
"verl"): for every built-in forge-zoo shares with verl, the same synthetic batch goes
through forge-zoo's advantages and loss and through verl's registered advantage estimator
and policy loss, and the differences are reported, never forced to zero.

verl is not in the project's environment (docs/stack.md); ``scripts/verl-env.sh``
installs it into ``.verl/`` at the repository root, which this module puts on
``sys.path`` (or ``--verl-path DIR``).

    scripts/verl-env.sh
    python -m benchmarks.parity.verl_check      # writes results/parity/verl_batch.{md,json}

Each row compares, on response tokens only:

- advantages: forge-zoo's ``group_advantages`` (``token_advantages`` for ppo's GAE; the
  token advantage its loss uses, A - K, for reinforce_pp's KL in the reward) against
  verl's estimator on the same rewards: max |difference|;
- the loss and its gradient with respect to the new log-probs: both sides get forge-zoo's
  advantages, so the row measures the policy loss alone; verl's side is its registered
  loss at forge-zoo's paper constants and the matching ``loss_agg_mode`` (``AGG_MODES``),
  plus, where forge-zoo's loss carries a KL weight, verl's ``use_kl_loss`` term as its
  actor adds it. |loss difference| and max |gradient difference|.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import torch

from zoo.algorithms import get_algorithm
from zoo.algorithms.base import Algorithm
from zoo.core.losses import kl_reward_to_go, last_token_rewards, log_ratio, token_covariance
from zoo.core.types import TrainBatch

ROOT = Path(__file__).resolve().parents[2]
VERL_DIR = ROOT / ".verl"
RESULTS = ROOT / "results" / "parity"
VERL_VERSION = "0.9.1"

ADV_TOL = 1e-5
"""A row's advantages match when the max |difference| over response tokens is at most
this (float32 arithmetic; advantages are O(1))."""
LOSS_TOL = 1e-6
"""The losses match when |difference| is at most this (losses are O(0.1-1))."""
GRAD_TOL = 1e-8
"""The gradients match when the max |difference| is at most this: a token's gradient is
O(1 / tokens) ~ 1e-4 here, so this is a relative 1e-4 at worst, far above float32 rounding
and far below any difference of convention."""

AGG_MODES: dict[str, str] = {
    "seq_mean": "seq-mean-token-mean",
    "token_mean": "token-mean",
    "fixed": "seq-mean-token-sum-norm",
}
"""forge-zoo's aggregation -> verl's ``loss_agg_mode``. "fixed" (Dr. GRPO, sum / (B L_max))
is verl's seq-mean-token-sum-norm with ``loss_scale_factor = L_max`` passed through
``global_batch_info`` (verl's default divides by the tensor's width instead)."""


def load_verl(path: Path | str | None = None) -> ModuleType | None:
    """verl's ``core_algos`` with ``path`` (default ``.verl/``) first on ``sys.path``, or
    None when verl cannot be imported from there or from the environment."""
    where = Path(path) if path is not None else VERL_DIR
    if where.is_dir() and str(where) not in sys.path:
        sys.path.insert(0, str(where))
    try:
        return importlib.import_module("verl.trainer.ppo.core_algos")
    except ImportError:
        return None


def verl_installed(path: Path | str | None = None) -> bool:
    """Whether ``path`` (default ``.verl/``) holds verl's core_algos, checked without
    importing anything (the tests run the check in a subprocess, so that .verl/'s
    antlr4 4.9.3 and dill, which omegaconf and verl need, never shadow the project's
    own in the test session)."""
    where = Path(path) if path is not None else VERL_DIR
    return (where / "verl" / "trainer" / "ppo" / "core_algos.py").is_file()


def verl_missing_reason(path: Path | str | None = None) -> str:
    """Why ``load_verl`` found nothing, in words for a skip message."""
    where = Path(path) if path is not None else VERL_DIR
    return (
        f"verl is not importable (looked in {where} and the environment): run "
        "scripts/verl-env.sh to install verl 0.9.1 into .verl/ (docs/parity.md, 'verl')"
    )


# --- the batch ----------------------------------------------------------------------------


@dataclass
class Batch:
    """One synthetic rollout batch, float32 like a run's: [groups, G] rewards and lengths,
    [B, T] log-probs (new, old, reference), mask and critic values, [groups] greedy
    rewards (ReMax's baseline). B = groups * G, rows in group order; T = L_max."""

    rewards: torch.Tensor
    lengths: torch.Tensor
    mask: torch.Tensor
    logprobs: torch.Tensor
    old_logprobs: torch.Tensor
    ref_logprobs: torch.Tensor
    values: torch.Tensor
    greedy_rewards: torch.Tensor
    seed: int = 0

    @property
    def groups(self) -> int:
        return int(self.rewards.shape[0])

    @property
    def group_size(self) -> int:
        return int(self.rewards.shape[1])

    @property
    def max_len(self) -> int:
        return int(self.mask.shape[1])

    @property
    def index(self) -> list[int]:
        """verl's grouping: the prompt index of each row."""
        return [g for g in range(self.groups) for _ in range(self.group_size)]

    def describe(self) -> dict[str, Any]:
        rewards = self.rewards
        equal = (rewards == rewards[:, :1]).all(dim=1)
        ratio = torch.exp(self.logprobs - self.old_logprobs)[self.mask > 0]
        return {
            "seed": self.seed,
            "groups": self.groups,
            "group_size": self.group_size,
            "max_response_len": self.max_len,
            "response_tokens": int(self.mask.sum()),
            "length_min_max": [int(self.lengths.min()), int(self.lengths.max())],
            "reward_mean": round(float(rewards.mean()), 4),
            "all_equal_groups": int(equal.sum()),
            "ratio_min_max": [round(float(ratio.min()), 4), round(float(ratio.max()), 4)],
        }


def make_batch(seed: int = 0, groups: int = 16, group_size: int = 8, max_len: int = 48) -> Batch:
    """A realistic batch: ragged lengths in [4, L_max] (some at L_max), rewards in {0, 1}
    drawn per group at a group-specific success rate, groups 0 and 1 all wrong and all
    right; old log-probs in [-3, -0.05]; the new ones old + N(0, 0.1) (ratios ~0.7-1.4,
    so the clips act), the reference old + N(0, 0.05); values ~ U(0, 1); padding holds 0."""
    gen = torch.Generator().manual_seed(seed)
    b = groups * group_size
    rate = torch.rand(groups, 1, generator=gen)
    rewards = (torch.rand(groups, group_size, generator=gen) < rate).float()
    rewards[0], rewards[1] = 0.0, 1.0
    lengths = torch.randint(4, max_len + 1, (groups, group_size), generator=gen)
    lengths[2:5, 0] = max_len
    mask = (torch.arange(max_len)[None, :] < lengths.reshape(b, 1)).float()
    old = -(0.05 + 2.95 * torch.rand(b, max_len, generator=gen))
    new = old + 0.1 * torch.randn(b, max_len, generator=gen)
    ref = old + 0.05 * torch.randn(b, max_len, generator=gen)
    values = torch.rand(b, max_len, generator=gen)
    greedy = (torch.rand(groups, generator=gen) < rate[:, 0]).float()
    return Batch(
        rewards=rewards,
        lengths=lengths,
        mask=mask,
        logprobs=new * mask,
        old_logprobs=old * mask,
        ref_logprobs=ref * mask,
        values=values * mask,
        greedy_rewards=greedy,
        seed=seed,
    )


# --- the two sides ------------------------------------------------------------------------


@dataclass
class Case:
    """One comparison: a forge-zoo algorithm (with overrides) against verl's estimator
    ``verl_adv`` and policy loss ``verl_loss`` at ``verl_options`` (ActorConfig fields;
    ``policy_loss`` holds PolicyLossConfig fields; ``kl`` = (verl kl_loss_type,
    kl_loss_coef), verl's ``use_kl_loss`` term). The explanation of a row is ``WHY[row]``."""

    row: str
    algorithm: str
    overrides: dict[str, Any]
    verl_adv: str
    verl_loss: str
    verl_options: dict[str, Any]
    seed_draw: bool = False
    """The verl loss draws tokens with torch's global generator (clip_cov): seeded."""


CASES: tuple[Case, ...] = (
    Case("grpo", "grpo", {}, "grpo", "vanilla", {"clip_ratio": 0.2, "kl": ("low_var_kl", 0.04)}),
    Case("dr_grpo", "dr_grpo", {}, "grpo_no_std", "vanilla", {"clip_ratio": 0.2}),
    Case("dapo", "dapo", {}, "grpo", "vanilla", {"clip_ratio_low": 0.2, "clip_ratio_high": 0.28}),
    Case("gspo", "gspo", {}, "grpo", "gspo", {"clip_ratio_low": 3e-4, "clip_ratio_high": 4e-4}),
    Case("cispo", "cispo", {}, "grpo", "cispo", {"clip_ratio_low": 1.0, "clip_ratio_high": 4.0}),
    Case("sapo", "sapo", {}, "grpo", "sapo", {"tau_pos": 1.0, "tau_neg": 1.05}),
    Case("gpg", "gpg", {}, "gpg", "gpg", {}),
    Case(
        "clip_cov",
        "clip_cov",
        {},
        "grpo",
        "clip_cov",
        {
            "clip_ratio": 1.0,
            "policy_loss": {"clip_cov_ratio": 2e-4, "clip_cov_lb": 1.0, "clip_cov_ub": 5.0},
        },
        seed_draw=True,
    ),
    Case(
        "clip_cov (all candidates)",
        "clip_cov",
        {"cov_clip_ratio": 1.0},
        "grpo",
        "clip_cov",
        {
            "clip_ratio": 1.0,
            "policy_loss": {"clip_cov_ratio": 1.0, "clip_cov_lb": 1.0, "clip_cov_ub": 5.0},
        },
        seed_draw=True,
    ),
    Case(
        "kl_cov",
        "kl_cov",
        {},
        "grpo",
        "kl_cov",
        {"policy_loss": {"kl_cov_ratio": 2e-3, "ppo_kl_coef": 1.0}},
    ),
    Case("gmpo", "gmpo", {}, "grpo", "geo_mean", {"clip_ratio_low": 0.4, "clip_ratio_high": 0.4}),
    Case("rloo", "rloo", {}, "rloo", "vanilla", {"clip_ratio": 0.2}),
    Case("opo", "opo", {}, "opo", "vanilla", {"clip_ratio": 0.2}),
    Case("remax", "remax", {}, "remax", "vanilla", {"clip_ratio": 0.2}),
    Case(
        "reinforce_pp",
        "reinforce_pp",
        {},
        "reinforce_plus_plus_kl",
        "vanilla",
        {"clip_ratio": 0.2},
    ),
    Case(
        "reinforce_pp (whiten=token)",
        "reinforce_pp",
        {"whiten": "token"},
        "reinforce_plus_plus_kl",
        "vanilla",
        {"clip_ratio": 0.2},
    ),
    Case(
        "reinforce_pp (whiten=token, beta=0)",
        "reinforce_pp",
        {"whiten": "token", "beta": 0.0},
        "reinforce_plus_plus_kl",
        "vanilla",
        {"clip_ratio": 0.2},
    ),
    Case(
        "reinforce_pp_baseline (whiten=token, beta=0)",
        "reinforce_pp",
        {"advantage": "reinforce_pp_baseline", "whiten": "token", "beta": 0.0},
        "reinforce_plus_plus_baseline",
        "vanilla",
        {"clip_ratio": 0.2},
    ),
    Case("ppo (gae)", "ppo", {}, "gae", "vanilla", {"clip_ratio": 0.2}),
)
"""The rows: each forge-zoo built-in verl also has, at forge-zoo's paper defaults, with
verl's config set to the same constants (verl's own defaults differ: clip_ratio 0.2
everywhere, kl_cov_ratio 2e-4, ppo_kl_coef 0.1)."""


def _flat(per_group: torch.Tensor) -> torch.Tensor:
    return per_group.reshape(-1)


def forge_advantages(algo: Algorithm, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
    """(what the loss gets as ``TrainBatch.advantages``, the [B, T] token advantages the
    loss applies), as the run computes them: [B] per response, [B, T] for ppo (GAE,
    whitened); with a KL charged in the reward (reinforce_pp) the loss gets A and applies
    A - K itself (K = beta * KL-to-go of old against ref)."""
    if algo.needs_values:
        rewards = last_token_rewards(_flat(batch.rewards), batch.mask)
        adv, _ = algo.token_advantages(rewards, batch.values, batch.mask)
        return adv, adv * batch.mask
    adv = _flat(
        algo.group_advantages(
            batch.rewards, batch.lengths, greedy_rewards=batch.greedy_rewards
        ).float()
    )
    tokens = adv[:, None] * batch.mask
    if algo.kl_in_reward_by_loop or getattr(algo.config, "kl_in_reward", False):
        train = _train_batch(batch, adv, requires_grad=False)
        kl_return, _ = kl_reward_to_go(train, algo.kl_coef, algo.config.kl)
        tokens = tokens - kl_return
    return adv, tokens


def _train_batch(batch: Batch, adv: torch.Tensor, requires_grad: bool = True) -> TrainBatch:
    lp = batch.logprobs.clone().requires_grad_(requires_grad)
    return TrainBatch(
        logprobs=lp,
        old_logprobs=batch.old_logprobs,
        ref_logprobs=batch.ref_logprobs,
        advantages=adv,
        mask=batch.mask,
        max_response_len=batch.max_len,
    )


def verl_advantages(core: ModuleType, name: str, batch: Batch, algo: Algorithm) -> torch.Tensor:
    """[B, T] advantages from verl's registered estimator ``name`` (with outcome rewards on
    each response's last token, as verl's reward manager places them)."""
    mask = batch.mask
    scores = last_token_rewards(_flat(batch.rewards), mask)
    index = batch.index
    if name in ("grpo", "grpo_no_std"):
        fn = core.get_adv_estimator_fn("grpo")
        adv, _ = fn(scores, mask, index, epsilon=1e-6, norm_adv_by_std_in_grpo=name == "grpo")
    elif name in ("rloo", "opo", "gpg", "reinforce_plus_plus_baseline"):
        adv, _ = core.get_adv_estimator_fn(name)(scores, mask, index, epsilon=1e-6)
    elif name == "remax":
        baselines = batch.greedy_rewards.repeat_interleave(batch.group_size)
        adv, _ = core.get_adv_estimator_fn("remax")(scores, baselines, mask)
    elif name == "reinforce_plus_plus_kl":
        # verl's apply_kl_penalty: token rewards = scores - beta * KL(old, ref), k1 ("kl")
        beta, estimator = algo.kl_coef, algo.config.kl
        kind = {"k1": "kl", "k2": "mse", "k3": "low_var_kl"}[estimator]
        kld = core.kl_penalty(batch.old_logprobs, batch.ref_logprobs, kind) * mask
        rewards = scores - beta * kld
        adv, _ = core.get_adv_estimator_fn("reinforce_plus_plus")(
            rewards, mask, config=SimpleNamespace(gamma=1.0)
        )
    elif name == "gae":
        adv, _ = core.get_adv_estimator_fn("gae")(scores, batch.values, mask, gamma=1.0, lam=1.0)
    else:
        raise ValueError(f"no verl estimator mapped for {name!r}")
    return adv * mask


def verl_actor_config(case: Case, agg: str, batch: Batch) -> Any:
    """verl's ActorConfig at the case's constants and aggregation ``agg`` (a verl
    ``loss_agg_mode``)."""
    from verl.workers.config.actor import ActorConfig, PolicyLossConfig

    options = {k: v for k, v in case.verl_options.items() if k not in ("kl", "policy_loss")}
    if "clip_ratio" in options:
        options.setdefault("clip_ratio_low", options["clip_ratio"])
        options.setdefault("clip_ratio_high", options["clip_ratio"])
    info = {"loss_scale_factor": batch.max_len} if agg == "seq-mean-token-sum-norm" else {}
    return ActorConfig(
        strategy="fsdp",
        rollout_n=batch.group_size,
        ppo_micro_batch_size_per_gpu=batch.groups * batch.group_size,
        loss_agg_mode=agg,
        policy_loss=PolicyLossConfig(
            loss_mode=case.verl_loss, **case.verl_options.get("policy_loss", {})
        ),
        global_batch_info=info,
        **options,
    )


def verl_loss(
    core: ModuleType, case: Case, batch: Batch, adv_tokens: torch.Tensor, agg: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """verl's loss on ``adv_tokens`` ([B, T]) and its gradient w.r.t. the new log-probs:
    the registered policy loss, plus ``kl_loss_coef * agg_loss(kl_penalty(...))`` when the
    case carries a KL (verl's actor loss with ``use_kl_loss``)."""
    config = verl_actor_config(case, agg, batch)
    lp = batch.logprobs.clone().requires_grad_(True)
    mask = batch.mask.bool()
    if case.seed_draw:
        torch.manual_seed(batch.seed)
    loss, _ = core.get_policy_loss_fn(case.verl_loss)(
        old_log_prob=batch.old_logprobs,
        log_prob=lp,
        advantages=adv_tokens,
        response_mask=mask,
        loss_agg_mode=agg,
        config=config,
    )
    if "kl" in case.verl_options:
        kind, coef = case.verl_options["kl"]
        kld = core.kl_penalty(lp, batch.ref_logprobs, kind)
        loss = loss + coef * core.agg_loss(kld, mask, agg, **config.global_batch_info)
    loss.backward()
    return loss.detach(), lp.grad.detach()


@dataclass
class Row:
    row: str
    algorithm: str
    verl_estimator: str
    verl_loss: str
    aggregation: str
    verl_agg: str
    adv_diff: float
    loss_forge: float
    loss_verl: float
    loss_diff: float
    grad_diff: float
    adv_match: bool
    loss_match: bool
    why: str

    @property
    def match(self) -> bool:
        return self.adv_match and self.loss_match


def _masked_max(diff: torch.Tensor, mask: torch.Tensor) -> float:
    return float((diff.abs() * mask).max())


def compare(core: ModuleType, case: Case, batch: Batch, agg: str | None = None) -> Row:
    """One row: ``case`` on ``batch``; ``agg`` overrides verl's loss_agg_mode (to show a
    wrong mapping is caught)."""
    algo = get_algorithm(case.algorithm, **case.overrides)
    adv, adv_tokens = forge_advantages(algo, batch)
    verl_adv = verl_advantages(core, case.verl_adv, batch, algo)
    adv_diff = _masked_max(adv_tokens - verl_adv, batch.mask)

    train = _train_batch(batch, adv)
    out = algo.loss(train)
    out.loss.backward()
    grad_forge = train.logprobs.grad.detach()
    verl_agg = agg or AGG_MODES[algo.aggregation]
    loss_v, grad_v = verl_loss(core, case, batch, adv_tokens, verl_agg)
    loss_f = float(out.loss.detach())
    loss_diff = abs(loss_f - float(loss_v))
    grad_diff = _masked_max(grad_forge - grad_v, batch.mask)
    return Row(
        row=case.row,
        algorithm=case.algorithm,
        verl_estimator=case.verl_adv,
        verl_loss=case.verl_loss,
        aggregation=algo.aggregation,
        verl_agg=verl_agg,
        adv_diff=adv_diff,
        loss_forge=loss_f,
        loss_verl=float(loss_v),
        loss_diff=loss_diff,
        grad_diff=grad_diff,
        adv_match=adv_diff <= ADV_TOL,
        loss_match=loss_diff <= LOSS_TOL and grad_diff <= GRAD_TOL,
        why=" ".join(
            filter(None, (_sentence(WHY.get(case.row, "")), _measured(case, algo, batch)))
        ),
    )


def _sentence(text: str) -> str:
    return text if not text or text.endswith(".") else text + "."


def _measured(case: Case, algo: Algorithm, batch: Batch) -> str:
    """Figures of this batch that explain a row: GPG's two alphas, Clip-Cov's draw."""
    rewards = batch.rewards
    if case.algorithm == "gpg":
        mixed = int((~(rewards == rewards[:, :1]).all(dim=1)).sum()) * batch.group_size
        nonzero = int((rewards != 0).sum())
        b = rewards.numel()
        return (
            f"Here: forge-zoo alpha = {b}/{mixed} = {b / mixed:.3f}, verl alpha = "
            f"{b}/{nonzero} = {b / nonzero:.3f}."
        )
    if case.algorithm == "clip_cov":
        adv, tokens = forge_advantages(algo, batch)
        train = _train_batch(batch, adv, requires_grad=False)
        ratio = torch.exp(log_ratio(train))
        cfg = algo.config
        low, high = 1 - cfg.eps_low, 1 + cfg.eps_high
        clipped = torch.clamp(ratio, low, high) * tokens < ratio * tokens
        cov = token_covariance(train)
        cand = (batch.mask > 0) & ~clipped & (cov > cfg.cov_low) & (cov < cfg.cov_high)
        count = max(int(cfg.cov_clip_ratio * float(batch.mask.sum())), 1)
        return f"Here: {int(cand.sum())} candidates, {min(count, int(cand.sum()))} detached."
    return ""


WHY: dict[str, str] = {
    "grpo": "verl's KL term is its use_kl_loss (low_var_kl = k3, clamped to [-10, 10], "
    "which never binds here) aggregated like the policy loss; its vanilla loss also has "
    "dual-clip at clip_ratio_c = 3, which needs a ratio above 3 and never acts here",
    "dapo": "the clip-higher loss only: DAPO's overlong punishment, dynamic sampling and "
    "overlong filtering act on rewards and groups before the loss, in verl's reward "
    "manager and trainer, outside core_algos",
    "dr_grpo": "fixed = seq-mean-token-sum-norm with loss_scale_factor = L_max",
    "gspo": "verl writes GSPO-token (sg(s_i) exp(lp - sg lp)); with one advantage per "
    "response its value and gradient equal GSPO's sequence form",
    "cispo": "verl clamps the weight on both sides: clip_ratio_low = 1 puts the lower "
    "bound at 0, i.e. none, as forge-zoo's",
    "sapo": "verl fixes seq-mean-token-mean for SAPO, forge-zoo's seq_mean",
    "gpg": "advantages: verl's alpha = B / (responses with a nonzero reward); forge-zoo's "
    "alpha = B / (responses in groups whose rewards are not all equal), the paper's "
    "B / B_valid. They differ whenever a group is all right (nonzero rewards, no signal) "
    "or a mixed group holds zero rewards; the loss with the same advantages matches",
    "clip_cov": "the token to detach is drawn at random among the candidates (cov in "
    "(1, 5), not PPO-clipped): forge-zoo with a generator seeded from the batch, verl with "
    "torch's global generator; the draws differ, so loss and gradient differ by the one "
    "token each side detached. Not matchable at the paper's ratio without sharing the "
    "draw; see the all-candidates row",
    "clip_cov (all candidates)": "clip ratio 1.0 on both sides: every candidate is "
    "detached, so no draw is left and the selection is deterministic",
    "kl_cov": "top-k by covariance is deterministic on both sides (verl ranks all response "
    "tokens, forge-zoo those with cov > 0: the same tokens when k <= the positive ones)",
    "gmpo": "geo_mean clamps the log-ratio at (-clip_ratio_low, clip_ratio_high) = "
    "(-0.4, 0.4), forge-zoo's (e^-0.4, e^0.4) on the ratio; verl means over the B rows "
    "(torch.mean), forge-zoo over the rows with tokens: the same here (none empty)",
    "rloo": "r n/(n-1) - mean n/(n-1) and r - (sum - r)/(n-1) are equal; float rounding",
    "reinforce_pp": "forge-zoo's default whiten = response normalises each response once "
    "(mean and std over B responses); verl's masked_whiten weighs each response by its "
    "length (over tokens) and divides by sqrt(var + 1e-8). Also the KL order: forge-zoo "
    "subtracts beta * KL-to-go after normalising, verl puts -beta * KL in the token "
    "rewards before whitening, so verl's KL term is rescaled by 1 / std",
    "reinforce_pp (whiten=token)": "the whitening now matches; what is left is the KL "
    "order (forge-zoo: whiten(R) - beta K; verl: whiten(R - beta K)) and verl's "
    "sqrt(var + 1e-8) for std + 1e-6",
    "reinforce_pp (whiten=token, beta=0)": "without the KL only the epsilon convention is "
    "left: verl's 1 / sqrt(var + 1e-8) against forge-zoo's 1 / (std + 1e-6), a relative "
    "~1e-6",
    "reinforce_pp_baseline (whiten=token, beta=0)": "token whitening of group-centred "
    "rewards; verl's 1 / sqrt(var + 1e-8) against forge-zoo's 1 / (std + 1e-6): a "
    "relative ~1e-6",
    "ppo (gae)": "GAE (gamma = lam = 1) then whitening over tokens; verl "
    "1 / sqrt(var + 1e-8), forge-zoo 1 / (std + 1e-6): a relative ~1e-6",
}


def run(verl_path: Path | str | None = None, seed: int = 0) -> tuple[list[Row], dict[str, Any]]:
    """Every case on one batch: the rows and the run's description."""
    core = load_verl(verl_path)
    if core is None:
        raise RuntimeError(verl_missing_reason(verl_path))
    batch = make_batch(seed)
    rows = [compare(core, case, batch) for case in CASES]
    # a control: grpo's seq_mean against verl's token-mean must be seen as a difference
    control = compare(core, CASES[0], batch, agg="token-mean")
    import verl

    meta = {
        "verl_version": getattr(verl, "__version__", VERL_VERSION),
        "torch_version": torch.__version__,
        "batch": batch.describe(),
        "tolerances": {"advantages": ADV_TOL, "loss": LOSS_TOL, "grad": GRAD_TOL},
        "aggregation_map": AGG_MODES,
        "control_grpo_token_mean": {
            "loss_diff": control.loss_diff,
            "grad_diff": control.grad_diff,
            "loss_match": control.loss_match,
        },
    }
    return rows, meta


def _fmt(x: float) -> str:
    return "0" if x == 0 else f"{x:.1e}"


def markdown(rows: list[Row], meta: dict[str, Any]) -> str:
    """The result table and the explanations."""
    b = meta["batch"]
    lines = [
        f"# forge-zoo vs verl {meta['verl_version']} core_algos: one batch",
        "",
        f"torch {meta['torch_version']}; batch: {b['groups']} groups x {b['group_size']}, "
        f"L_max {b['max_response_len']}, {b['response_tokens']} response tokens (lengths "
        f"{b['length_min_max'][0]}-{b['length_min_max'][1]}), mean reward "
        f"{b['reward_mean']}, {b['all_equal_groups']} all-equal groups, ratios "
        f"{b['ratio_min_max'][0]}-{b['ratio_min_max'][1]}, seed {b['seed']}, float32. "
        f"Match: advantages <= {ADV_TOL:g}, loss <= {LOSS_TOL:g}, gradient <= {GRAD_TOL:g} "
        "(max |difference| over response tokens). The loss gets forge-zoo's advantages on "
        "both sides.",
        "",
        "| row | verl estimator / loss | aggregation (verl) | max abs adv diff | "
        "abs loss diff | max abs grad diff | advantages | loss |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r.row} | {r.verl_estimator} / {r.verl_loss} | {r.aggregation} "
            f"({r.verl_agg}) | {_fmt(r.adv_diff)} | {_fmt(r.loss_diff)} | "
            f"{_fmt(r.grad_diff)} | {'match' if r.adv_match else 'differs'} | "
            f"{'match' if r.loss_match else 'differs'} |"
        )
    c = meta["control_grpo_token_mean"]
    lines += [
        "",
        f"Control: grpo against verl's token-mean (the wrong mapping) gives |loss diff| "
        f"{_fmt(c['loss_diff'])}, max |grad diff| {_fmt(c['grad_diff'])}: "
        f"{'match (the check is blind!)' if c['loss_match'] else 'differs, as it must'}.",
    ]
    lines += ["", "## Why", ""]
    lines += [f"- **{r.row}**: {r.why}" for r in rows if r.why]
    return "\n".join(lines) + "\n"


def write(rows: list[Row], meta: dict[str, Any], out: Path = RESULTS) -> list[Path]:
    """results/parity/verl_batch.{md,json}."""
    out.mkdir(parents=True, exist_ok=True)
    md, js = out / "verl_batch.md", out / "verl_batch.json"
    md.write_text(markdown(rows, meta))
    payload = {"meta": meta, "rows": [asdict(r) for r in rows]}
    js.write_text(json.dumps(payload, indent=1) + "\n")
    return [md, js]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--verl-path", default=None, help="folder holding verl (default .verl/)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=str(RESULTS), help="where verl_batch.{md,json} go")
    args = parser.parse_args(argv)
    try:
        rows, meta = run(args.verl_path, args.seed)
    except RuntimeError as err:
        print(err, file=sys.stderr)
        return 2
    print(markdown(rows, meta))
    for path in write(rows, meta, Path(args.out)):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
