"""The conformance suite (zoo/algorithms/conformance.py): every registered algorithm x every
invariant of docs/algorithms.md, and deliberately broken plugins, one per check, to show
that each check catches the fault it exists for: a loss, advantages ranked the wrong way
(through every path the loop takes: lengths, a greedy baseline, a critic), a clip found
by the mechanism the plugin declares whatever its config field is called."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import pytest
import torch

from zoo.algorithms import ALGORITHMS, Algorithm, list_algorithms
from zoo.algorithms.conformance import CHECKS, failure_report, run_conformance
from zoo.algorithms.grpo import GRPO
from zoo.algorithms.gspo import GSPO
from zoo.algorithms.ppo import PPO
from zoo.algorithms.remax import ReMax
from zoo.core.losses import aggregate, clipped_objective, group_norm, log_ratio, ratio_metrics
from zoo.core.types import LossOutput, TrainBatch


@pytest.mark.parametrize("prop", list(CHECKS))
@pytest.mark.parametrize("name", list_algorithms())
def test_registered_algorithm_satisfies_invariant(name, prop):
    result = CHECKS[prop](ALGORITHMS.load(name))
    assert result.name == prop
    if result.passed is None:
        pytest.skip(f"{name}: {prop} does not apply: {result.detail}")
    assert result.passed, f"{name} violates {prop}: {result.detail}"


def test_gspo_token_level_passes_the_whole_suite():
    results = run_conformance(GSPO, {"token_level": True})
    assert [r.name for r in results] == list(CHECKS)
    failed = [f"{r.name}: {r.detail}" for r in results if r.passed is False]
    assert not failed, failed
    assert next(r for r in results if r.name == "sequence_level").passed is True


def test_which_properties_apply_to_which_builtin():
    applies = {
        name: {r.name for r in run_conformance(ALGORITHMS.load(name)) if r.passed is not None}
        for name in ("grpo", "cispo", "gspo", "sapo")
    }
    assert "clipping" in applies["grpo"] and "sequence_level" not in applies["grpo"]
    assert "clipping" in applies["cispo"]  # checked as "capped, not zeroed"
    assert "sequence_level" in applies["gspo"]
    assert "clipping" not in applies["sapo"]  # soft gate, no hard clip
    cispo = {r.name: r for r in run_conformance(ALGORITHMS.load("cispo"))}
    assert "capped, not zeroed" in cispo["clipping"].detail


# --- broken plugins: each must fail (at least) the check named next to it ------------------


@dataclass
class EpsConfig:
    eps: float = 0.2
    """Symmetric clip range (test plugin)."""


class PPOClip(Algorithm):
    """A correct PPO-clip plugin; the broken ones below change one thing each."""

    name = "test-ppo"
    config_class = EpsConfig

    def per_token(self, batch: TrainBatch) -> torch.Tensor:
        ratio = torch.exp(log_ratio(batch))
        eps = self.config.eps
        return -clipped_objective(ratio, batch.token_advantages, 1 - eps, 1 + eps)

    def loss(self, batch: TrainBatch) -> LossOutput:
        return LossOutput(aggregate(self.per_token(batch), batch, self.aggregation))


class DeclaresSeqMeanUsesTokenMean(PPOClip):
    def loss(self, batch: TrainBatch) -> LossOutput:
        return LossOutput(aggregate(self.per_token(batch), batch, "token_mean"))


class EntropyBonusWithoutAdvantage(PPOClip):
    def loss(self, batch: TrainBatch) -> LossOutput:
        per_token = self.per_token(batch) + 0.01 * batch.logprobs
        return LossOutput(aggregate(per_token, batch, self.aggregation))


class CountsPadding(PPOClip):
    def loss(self, batch: TrainBatch) -> LossOutput:
        return LossOutput((self.per_token(batch) * batch.mask).sum() / batch.mask.numel())


class MicroBatchLocalCounts(PPOClip):
    def loss(self, batch: TrainBatch) -> LossOutput:
        lengths = batch.mask.sum(-1)
        per_seq = (self.per_token(batch) * batch.mask).sum(-1) / lengths.clamp(min=1)
        return LossOutput(per_seq.sum() / (lengths > 0).sum())


class ClaimsClipButDoesNot(PPOClip):
    def per_token(self, batch: TrainBatch) -> torch.Tensor:
        return -torch.exp(log_ratio(batch)) * batch.token_advantages


class ClaimsSequenceLevel(PPOClip):
    sequence_level = True


class DeclaresOutOfRangeShares(PPOClip):
    """Declares, as its mechanism, shares of tokens merely out of range: with every
    advantage 0 they are above 0, though no gradient changed."""

    mechanism = {"clip_low_frac": 0.0, "clip_high_frac": 0.0}  # noqa: RUF012

    def loss(self, batch: TrainBatch) -> LossOutput:
        eps = self.config.eps
        metrics = ratio_metrics(torch.exp(log_ratio(batch)), batch, 1 - eps, 1 + eps)
        return LossOutput(aggregate(self.per_token(batch), batch, self.aggregation), metrics)


class DeclaresActingShares(DeclaresOutOfRangeShares):
    """The same clip, declaring the shares whose gradient it changed: passes."""

    mechanism = {"clip_low_acting_frac": 0.0, "clip_high_acting_frac": 0.0}  # noqa: RUF012

    def loss(self, batch: TrainBatch) -> LossOutput:
        eps, adv = self.config.eps, batch.token_advantages
        metrics = ratio_metrics(torch.exp(log_ratio(batch)), batch, 1 - eps, 1 + eps, adv)
        return LossOutput(aggregate(self.per_token(batch), batch, self.aggregation), metrics)


class DeclaresAnIdleValueOfOne(DeclaresActingShares):
    mechanism = {"clip_low_acting_frac": 0.0, "clip_high_acting_frac": 1.0}  # noqa: RUF012


class Raises(PPOClip):
    def loss(self, batch: TrainBatch) -> LossOutput:
        raise RuntimeError("boom")


def test_the_correct_test_plugin_passes():
    failed = [f"{r.name}: {r.detail}" for r in run_conformance(PPOClip) if r.passed is False]
    assert not failed, failed


def test_a_plugin_declaring_its_acting_shares_passes_the_off_policy_check():
    result = CHECKS["off_policy"](DeclaresActingShares)
    assert result.passed is True, result.detail
    assert "with every advantage 0" in CHECKS["off_policy"](DeclaresOutOfRangeShares).detail


@pytest.mark.parametrize(
    ("plugin", "caught_by"),
    [
        (DeclaresSeqMeanUsesTokenMean, "reinforce_on_policy"),
        (EntropyBonusWithoutAdvantage, "zero_advantages"),
        (CountsPadding, "padding"),
        (MicroBatchLocalCounts, "micro_batching"),
        (ClaimsClipButDoesNot, "clipping"),
        (ClaimsSequenceLevel, "sequence_level"),
        (DeclaresOutOfRangeShares, "off_policy"),
        (DeclaresAnIdleValueOfOne, "off_policy"),
    ],
)
def test_suite_catches_a_plugin_broken_in_one_way(plugin, caught_by):
    results = {r.name: r for r in run_conformance(plugin)}
    assert results[caught_by].passed is False, results[caught_by].detail


def test_a_plugin_that_raises_is_reported_failed_with_the_exception():
    results = run_conformance(Raises)
    assert [r.name for r in results] == list(CHECKS)
    # every check of the loss fails; the advantages (never the loss) rank as they should
    assert all(r.passed is not True for r in results if r.name != "advantages")
    assert results[-1].name == "advantages" and results[-1].passed is True
    assert "RuntimeError: boom" in results[0].detail


# --- the advantages: the better answer must rank higher, whatever path computes them -------


class FlippedSign(DeclaresActingShares):
    """A correct loss fed advantages of the wrong sign: trains toward the wrong answers."""

    def advantages(self, rewards: torch.Tensor, lengths: torch.Tensor | None = None):
        return -group_norm(rewards)


class IgnoresTheReward(DeclaresActingShares):
    inputs = frozenset()

    def advantages(self, rewards: torch.Tensor) -> torch.Tensor:
        return rewards - rewards  # the response's own reward as its baseline


class FlippedGreedyBaseline(ReMax):
    def advantages(self, rewards: torch.Tensor, greedy_rewards: torch.Tensor) -> torch.Tensor:
        return greedy_rewards[:, None] - rewards


class FlippedCritic(PPO):
    def token_advantages(self, rewards, values, mask):
        advantages, returns = super().token_advantages(rewards, values, mask)
        return -advantages, returns


def test_a_flipped_advantage_sign_fails_only_the_advantages_check_with_its_fix():
    results = run_conformance(FlippedSign)
    assert [r.name for r in results if r.passed is False] == ["advantages"]
    detail = results[-1].detail
    assert "a flipped sign?" in detail and "got advantage" in detail, detail
    (report,) = failure_report(results)
    assert report.startswith("  advantages: ") and "\n    fix: " in report
    assert "flipped sign" in report.split("fix: ")[1]
    # the same loss with the right sign passes everything
    assert not [r for r in run_conformance(DeclaresActingShares) if r.passed is False]


@pytest.mark.parametrize(
    ("plugin", "says"),
    [
        (IgnoresTheReward, "no better answer got a higher advantage"),
        (FlippedGreedyBaseline, "a flipped sign?"),  # through greedy_rewards
        (FlippedCritic, "mean token advantage (values 0)"),  # through token_advantages
    ],
)
def test_advantages_that_do_not_rank_the_better_answer_higher_are_refused(plugin, says):
    result = CHECKS["advantages"](plugin)
    assert result.passed is False and says in result.detail, result.detail


def test_the_advantages_check_uses_the_runs_group_size():
    """pass@k's k is bounded by the group size: with pass_k = 12, groups of 8 cannot
    compute it, groups of 16 rank as they should; pass_k = the group size gives 0 to
    every response (a group's pass@G is certain once it holds a correct answer)."""
    overrides = {"advantage": "pass_at_k", "pass_k": 12}
    at_eight = run_conformance(GRPO, overrides)[-1]
    assert at_eight.passed is False and "pass_k = 12 with groups of 8" in at_eight.detail
    assert not [r for r in run_conformance(GRPO, overrides, 16) if r.passed is False]
    degenerate = run_conformance(GRPO, {"advantage": "pass_at_k", "pass_k": 4}, 4)[-1]
    assert degenerate.passed is False and "values [0.0]" in degenerate.detail


# --- the clip, found by the declared mechanism ---------------------------------------------


@dataclass
class CeilingConfig:
    eps: float = 1e-6
    """Added to a std (test plugin): not a clip, though the name is a clip's elsewhere."""
    ceiling: float = 0.25
    """Upper clip: ratio bound 1 + ceiling (test plugin; a name no convention knows)."""


class CeilingClip(Algorithm):
    name = "test-ceiling"
    config_class = CeilingConfig
    mechanism = {"clip_low_acting_frac": 0.0, "clip_high_acting_frac": 0.0}  # noqa: RUF012

    def per_token(self, ratio: torch.Tensor, batch: TrainBatch) -> torch.Tensor:
        return -clipped_objective(ratio, batch.token_advantages, 0.8, 1 + self.config.ceiling)

    def loss(self, batch: TrainBatch) -> LossOutput:
        ratio, adv = torch.exp(log_ratio(batch)), batch.token_advantages
        metrics = ratio_metrics(ratio, batch, 0.8, 1 + self.config.ceiling, adv)
        loss = aggregate(self.per_token(ratio, batch), batch, self.aggregation)
        return LossOutput(loss, metrics)


class CeilingCapsButDeclaresZero(CeilingClip):
    """Keeps a capped weight's gradient above the bound, while clip_style says "zero"."""

    def per_token(self, ratio: torch.Tensor, batch: TrainBatch) -> torch.Tensor:
        weight = torch.clamp(ratio, max=1 + self.config.ceiling).detach()
        return -weight * batch.token_advantages * batch.logprobs


def test_a_clip_under_an_unusual_field_name_is_checked_at_the_bound_its_mechanism_shows():
    result = CHECKS["clipping"](CeilingClip)
    assert result.passed is True, result.detail
    # located at 1 + ceiling by the acting shares, not at 1 + eps by the field's name
    assert "r = 1.5 x 1.25 (where its mechanism" in result.detail, result.detail
    broken = CHECKS["clipping"](CeilingCapsButDeclaresZero)
    assert broken.passed is False and "1.5 x 1.25" in broken.detail
    assert "declare clip_style = 'cap'" in broken.detail


def test_a_declared_mechanism_that_never_clips_above_fails_naming_clip_style():
    class LowerOnly(CeilingClip):
        def per_token(self, ratio: torch.Tensor, batch: TrainBatch) -> torch.Tensor:
            return -clipped_objective(ratio, batch.token_advantages, 0.8, float("inf"))

        def loss(self, batch: TrainBatch) -> LossOutput:
            ratio, adv = torch.exp(log_ratio(batch)), batch.token_advantages
            metrics = ratio_metrics(ratio, batch, 0.8, float("inf"), adv)
            loss = aggregate(self.per_token(ratio, batch), batch, self.aggregation)
            return LossOutput(loss, metrics)

    result = CHECKS["clipping"](LowerOnly)
    assert result.passed is False and "clip_style = 'none'" in result.detail, result.detail


# --- off-policy: the built-ins differ, each exactly where its mechanism acts ------------

BUILTINS = ["cispo", "custom", "dapo", "dr_grpo", "grpo", "gspo", "sapo"]


def off_policy_grads(names: list[str], case) -> dict[str, torch.Tensor]:
    from zoo.algorithms.conformance import build, loss_and_grad

    return {n: loss_and_grad(build(ALGORITHMS.load(n), {}, beta_zero=True), case)[1] for n in names}


def test_off_policy_every_builtin_gives_its_own_gradient():
    """On a batch whose ratios moved (after the first mini-batch), no two built-ins make
    the same update, not even grpo, gspo and sapo, which share their aggregation and are
    one update on-policy (below). (custom is GRPO written as a template: without its KL
    term it is GRPO, so it is left out.)"""
    from zoo.algorithms.conformance import off_policy_case

    names = [n for n in BUILTINS if n != "custom"]
    grads = off_policy_grads(names, off_policy_case())
    for a, b in itertools.combinations(names, 2):
        scale = float(grads[a].abs().max())
        assert float((grads[a] - grads[b]).abs().max()) > 1e-3 * scale, (a, b)


def test_on_policy_grpo_gspo_sapo_and_custom_are_one_update():
    from zoo.algorithms.conformance import random_case

    grads = off_policy_grads(["grpo", "gspo", "sapo", "custom"], random_case(0, on_policy=True))
    for name in ("gspo", "sapo", "custom"):
        torch.testing.assert_close(grads[name], grads["grpo"], atol=1e-12, rtol=1e-9)


def unclipped_grad(case, aggregation: str, sequence_ratio: bool = False) -> torch.Tensor:
    """Gradient of the plain importance-weighted surrogate -r*A (GSPO: -s_i*A_i)."""
    lp = case.lp.clone().requires_grad_(True)
    batch = TrainBatch(lp, case.old, None, case.adv, case.mask, max_response_len=8)
    log_r = log_ratio(batch)
    if sequence_ratio:
        log_r = ((log_r * case.mask).sum(-1) / case.mask.sum(-1))[:, None].expand_as(lp)
    aggregate(-torch.exp(log_r) * batch.token_advantages, batch, aggregation).backward()
    return lp.grad


@pytest.mark.parametrize(
    ("name", "low", "high"),
    [
        ("grpo", 0.8, 1.2),
        ("custom", 0.8, 1.2),
        ("dr_grpo", 0.8, 1.2),
        ("dapo", 0.8, 1.28),
        ("gspo", 1 - 3e-4, 1 + 4e-4),
    ],
)
def test_a_clip_changes_the_update_exactly_where_it_binds(name, low, high):
    """PPO's clip: the gradient leaves the unclipped one exactly on the tokens (GSPO: the
    sequences) with A > 0 and ratio > high, or A < 0 and ratio < low, where it is 0."""
    from zoo.algorithms.conformance import off_policy_case

    case = off_policy_case()
    got = off_policy_grads([name], case)[name]
    cls = ALGORITHMS.load(name)
    plain = unclipped_grad(case, cls.aggregation, sequence_ratio=cls.sequence_level)
    log_r = (case.lp - case.old) * case.mask
    if cls.sequence_level:
        log_r = (log_r.sum(-1) / case.mask.sum(-1))[:, None].expand_as(log_r)
    ratio, adv = torch.exp(log_r), case.adv[:, None].expand_as(log_r)
    binds = ((adv > 0) & (ratio > high)) | ((adv < 0) & (ratio < low))
    real = case.mask > 0
    assert (binds & real).any() and (~binds & real).any()
    assert torch.all(got[binds & real] == 0)
    torch.testing.assert_close(got[~binds & real], plain[~binds & real], atol=1e-12, rtol=1e-9)


def test_cispo_departs_from_the_unclipped_update_exactly_where_its_cap_binds():
    """CISPO keeps every token's gradient; where r > 5 its weight stays at 5."""
    from zoo.algorithms.conformance import off_policy_case

    case = off_policy_case()
    got = off_policy_grads(["cispo"], case)["cispo"]
    plain = unclipped_grad(case, "token_mean")
    ratio, real = torch.exp(case.lp - case.old), case.mask > 0
    capped = (ratio > 5.0) & real
    assert capped.any() and torch.all(got[capped] != 0)
    torch.testing.assert_close(got[capped], plain[capped] * 5.0 / ratio[capped])
    torch.testing.assert_close(got[~capped & real], plain[~capped & real], atol=1e-12, rtol=1e-9)


def test_sapos_gate_scales_the_unclipped_update_by_4p_1_minus_p_everywhere():
    from zoo.algorithms.conformance import off_policy_case

    case = off_policy_case()
    got = off_policy_grads(["sapo"], case)["sapo"]
    plain = unclipped_grad(case, "seq_mean")
    ratio, real = torch.exp(case.lp - case.old), case.mask > 0
    tau_pos, tau_neg = (torch.tensor(t, dtype=torch.float64) for t in (1.0, 1.05))
    tau = torch.where(case.adv[:, None] > 0, tau_pos, tau_neg).expand_as(ratio)
    p = torch.sigmoid(tau * (ratio - 1))
    torch.testing.assert_close(got[real], (plain * 4 * p * (1 - p))[real], atol=1e-12, rtol=1e-9)
    assert float((4 * p * (1 - p))[real].min()) < 0.9  # the gate did attenuate somewhere
