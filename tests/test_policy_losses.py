"""The policy losses by name (zoo.core.losses.POLICY_LOSSES) and the config fields the
built-ins share (zoo/algorithms/base.py): each loss's gradient against its formula written
out here, ``--set loss=...`` swapping only the surrogate, and the shared fields declared
once."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest
import torch

from zoo.algorithms import get_algorithm
from zoo.algorithms.base import EntropyFields, EstimatorFields, PolicyLossFields
from zoo.core.config import ConfigError, field_docs
from zoo.core.losses import POLICY_LOSSES, log_ratio, policy_loss
from zoo.core.types import TrainBatch

PLUGINS = Path(__file__).resolve().parents[1] / "zoo" / "algorithms"
RATIO_BOUNDED = ["grpo", "dr_grpo", "dapo", "rloo", "reinforce_pp", "opo", "remax", "gigpo"]


def make_batch(
    seed: int = 0, spread: float = 0.5, sequences: int = 6, tokens: int = 5
) -> TrainBatch:
    """A batch whose ratios spread well beyond [0.8, 1.2], with padding and both signs of
    advantage, so that every bound has tokens to act on."""
    gen = torch.Generator().manual_seed(seed)
    old = -torch.rand(sequences, tokens, generator=gen) * 2 - 0.1
    logprobs = (old + torch.randn(sequences, tokens, generator=gen) * spread).requires_grad_()
    mask = torch.ones(sequences, tokens)
    mask[0, 3:] = 0.0
    mask[4, 1:] = 0.0
    advantages = torch.tensor([1.0, -1.0, 0.5, -0.5, 2.0, 0.0])[:sequences]
    ref = old + torch.randn(sequences, tokens, generator=gen) * 0.1
    return TrainBatch(
        logprobs=logprobs,
        old_logprobs=old,
        ref_logprobs=ref,
        advantages=advantages,
        mask=mask,
        max_response_len=tokens,
    )


def gradient(objective: torch.Tensor, batch: TrainBatch) -> torch.Tensor:
    """d(sum of the objective over response tokens)/d lp."""
    (grad,) = torch.autograd.grad((objective * batch.mask).sum(), batch.logprobs, retain_graph=True)
    return grad


@pytest.mark.parametrize("low, high", [(0.8, 1.2), (0.8, 1.28), (0.5, 3.0)])
def test_each_loss_has_its_formulas_gradient_and_reports_what_acted(low, high):
    batch = make_batch()
    ratio = torch.exp(log_ratio(batch))
    adv = batch.token_advantages
    r, a, on = ratio.detach(), adv, batch.mask > 0

    # ppo_clip: the gradient r A dlp where the clip did not act, 0 where it did
    clipped = ((r < low) & (a < 0)) | ((r > high) & (a > 0))
    term = policy_loss("ppo_clip", ratio, adv, batch, low, high)
    expected = torch.where(clipped, 0.0, r * a) * batch.mask
    torch.testing.assert_close(gradient(term.objective, batch), expected)
    assert term.metrics["clip_high_acting_frac"] == pytest.approx(
        float(((r > high) & (a > 0) & on).sum() / on.sum())
    )

    # cispo: min(r, high) A dlp on every token, the cap acting where r > high and A != 0
    term = policy_loss("cispo", ratio, adv, batch, low, high)
    expected = torch.clamp(r, max=high) * a * batch.mask
    torch.testing.assert_close(gradient(term.objective, batch), expected)
    assert term.metrics["clip_low_acting_frac"] == 0.0
    assert term.metrics["clip_high_acting_frac"] == pytest.approx(
        float(((r > high) & (a != 0) & on).sum() / on.sum())
    )

    # unclipped: r A dlp everywhere, nothing acts
    term = policy_loss("unclipped", ratio, adv, batch, low, high)
    torch.testing.assert_close(gradient(term.objective, batch), r * a * batch.mask)
    assert term.metrics["clip_low_acting_frac"] == term.metrics["clip_high_acting_frac"] == 0.0


def test_the_test_batch_gives_every_bound_something_to_act_on():
    """Without tokens beyond both bounds the comparisons above would prove nothing."""
    batch = make_batch()
    term = policy_loss(
        "ppo_clip", torch.exp(log_ratio(batch)), batch.token_advantages, batch, 0.8, 1.2
    )
    assert term.metrics["clip_low_acting_frac"] > 0
    assert term.metrics["clip_high_acting_frac"] > 0


# bounds beyond every ratio of ``make_batch`` (all < 2, checked below): the clip never acts
NEVER_ACTS = {
    "grpo": {"eps": 1 - 1e-9},
    "rloo": {"eps": 1 - 1e-9},
    "reinforce_pp": {"eps": 1 - 1e-9},
    "opo": {"eps": 1 - 1e-9},
    "dr_grpo": {"clip_low": 1e-9, "clip_high": 1e9},
    "dapo": {"eps_low": 1 - 1e-9, "eps_high": 1e9},
    "remax": {"eps": 1 - 1e-9},
    "gigpo": {"eps": 1 - 1e-9},
}


@pytest.mark.parametrize("name", RATIO_BOUNDED)
def test_set_loss_swaps_only_the_surrogate(name):
    """``loss=unclipped`` equals the default loss at bounds that never act, and differs
    from it at the default bounds, where the clip acts on this batch."""
    batch = make_batch(seed=1, spread=0.2)
    assert float(torch.exp(log_ratio(batch)).detach().max()) < 2
    default = get_algorithm(name)
    assert default.config.loss == "ppo_clip"
    wide = NEVER_ACTS[name]
    clip_wide = get_algorithm(name, **wide).loss(batch)
    plain = get_algorithm(name, loss="unclipped", **wide).loss(batch)
    torch.testing.assert_close(plain.loss, clip_wide.loss)

    acted = default.loss(batch)
    assert acted.metrics["clip_low_acting_frac"] + acted.metrics["clip_high_acting_frac"] > 0
    unclipped = get_algorithm(name, loss="unclipped").loss(batch)
    assert float(unclipped.loss.detach()) != pytest.approx(float(acted.loss.detach()))
    assert unclipped.metrics["clip_low_acting_frac"] == 0.0


def test_grpo_with_the_cispo_loss_is_cispo_with_grpos_advantages_and_aggregation():
    """Same cap, no KL, token_mean: grpo with loss=cispo computes CISPO's loss."""
    batch = make_batch(seed=2)
    grpo = get_algorithm("grpo", loss="cispo", eps=0.3, beta=0.0)
    grpo.aggregation = "token_mean"
    cispo = get_algorithm("cispo", eps_high=0.3)
    ours, theirs = grpo.loss(batch), cispo.loss(batch)
    torch.testing.assert_close(ours.loss, theirs.loss)
    assert ours.metrics["clip_high_acting_frac"] == theirs.metrics["capped_acting_frac"] > 0


def test_an_unknown_loss_name_fails_when_the_algorithm_is_built_naming_the_valid_ones():
    with pytest.raises(ConfigError) as err:
        get_algorithm("grpo", loss="ppo_clipp")
    message = str(err.value)
    assert "ppo_clipp" in message
    assert all(name in message for name in POLICY_LOSSES)


def test_the_shared_fields_are_declared_once_with_one_docstring():
    """No built-in's config declares a shared field's docstring again: every config that
    has the field reads its documentation from the group that declares it."""
    groups = [EstimatorFields, PolicyLossFields, EntropyFields]
    shared = {f.name: field_docs(g)[f.name] for g in groups for f in dataclasses.fields(g)}
    seen = 0
    declared_in = {PLUGINS / "base.py", PLUGINS / "options.py"}  # the groups themselves
    for path in sorted(set(PLUGINS.glob("*.py")) - declared_in):
        tree = ast.parse(path.read_text())
        for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
            body = cls.body
            for node, nxt in zip(body, [*body[1:], None], strict=True):
                if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                    documented = isinstance(nxt, ast.Expr) and isinstance(
                        getattr(nxt, "value", None), ast.Constant
                    )
                    assert not (node.target.id in shared and documented), (
                        f"{path.name}: {cls.name}.{node.target.id} is a shared field; "
                        "declare only a new default, without a docstring"
                    )
    for name in [*RATIO_BOUNDED, "cispo", "gspo", "sapo", "custom"]:
        cls = get_algorithm(name).config_class
        docs = field_docs(cls)
        for field in dataclasses.fields(cls):
            if field.name in shared:
                assert docs[field.name] == shared[field.name], (name, field.name)
                seen += 1
    assert seen >= 2 * 10 + 6 + 2 * 3  # advantage, kl x10; loss x6; entropy x3


def test_no_plugin_writes_the_ppo_clip_body_again():
    """The clipped surrogate min(r A, clip(r) A) lives in zoo/core/losses.py; the
    ratio-bounded built-ins (and ppo) reach it only through ``Algorithm.ratio_surrogate``,
    which assembles it with the KL, the entropy options and the aggregation once."""
    for path in sorted(PLUGINS.glob("*.py")):
        text = path.read_text()
        assert "torch.minimum(ratio" not in text and "torch.min(ratio" not in text, path.name
    shared = (PLUGINS / "base.py").read_text()  # Algorithm.ratio_surrogate
    assert "policy_loss(self.config.loss" in shared
    for name in [*RATIO_BOUNDED, "ppo"]:
        text = (PLUGINS / f"{name}.py").read_text()
        assert "self.ratio_surrogate(" in text and "policy_loss(" not in text, name
