"""The conformance suite (zoo/algorithms/conformance.py): every registered algorithm x every
invariant of shared/algorithms.md, and deliberately broken plugins, one per check, to show
that each check catches the fault it exists for."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

from zoo.algorithms import ALGORITHMS, Algorithm, list_algorithms
from zoo.algorithms.conformance import CHECKS, run_conformance
from zoo.algorithms.gspo import GSPO
from zoo.core.losses import aggregate, clipped_objective, log_ratio
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


class Raises(PPOClip):
    def loss(self, batch: TrainBatch) -> LossOutput:
        raise RuntimeError("boom")


def test_the_correct_test_plugin_passes():
    failed = [f"{r.name}: {r.detail}" for r in run_conformance(PPOClip) if r.passed is False]
    assert not failed, failed


@pytest.mark.parametrize(
    ("plugin", "caught_by"),
    [
        (DeclaresSeqMeanUsesTokenMean, "reinforce_on_policy"),
        (EntropyBonusWithoutAdvantage, "zero_advantages"),
        (CountsPadding, "padding"),
        (MicroBatchLocalCounts, "micro_batching"),
        (ClaimsClipButDoesNot, "clipping"),
        (ClaimsSequenceLevel, "sequence_level"),
    ],
)
def test_suite_catches_a_plugin_broken_in_one_way(plugin, caught_by):
    results = {r.name: r for r in run_conformance(plugin)}
    assert results[caught_by].passed is False, results[caught_by].detail


def test_a_plugin_that_raises_is_reported_failed_with_the_exception():
    results = run_conformance(Raises)
    assert [r.name for r in results] == list(CHECKS)
    assert all(r.passed is not True for r in results)
    assert "RuntimeError: boom" in results[0].detail
