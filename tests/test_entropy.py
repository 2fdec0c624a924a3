"""The policy's per-token entropy (zoo/core/entropy.py) and the two options of the shared
clipped surrogate that read it: the entropy bonus (``entropy_coef``) and the top-share
selection of Wang et al., arXiv 2506.01939 (``entropy_top_share``). References are
computed independently: torch.distributions.Categorical over the tiny model's full logits,
gradients derived by hand, the selection in plain Python."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
import torch

from zoo.algorithms import ALGORITHMS, get_algorithm
from zoo.algorithms.conformance import CHECKS, run_conformance
from zoo.algorithms.grpo import GRPO
from zoo.core.config import ConfigError
from zoo.core.entropy import entropy_terms, token_entropy, top_share_mask
from zoo.core.losses import aggregate, clipped_objective, kl_penalty, log_ratio, ratio_metrics
from zoo.core.types import LossOutput, TrainBatch
from zoo.run.run_config import RunConfig
from zoo.run.runlog import RunWriter
from zoo.services.batch import RolloutBatch, response_logprobs, response_logprobs_and_entropy
from zoo.services.trainer import Trainer, TrainerConfig, wants_entropy

SURROGATE_FAMILY = ["grpo", "dr_grpo", "dapo", "rloo", "opo", "remax", "gigpo"]
"""Built-ins with the two options whose KL is a penalty in the loss (the PPO-clip family)."""
ENTROPY_FAMILY = [*SURROGATE_FAMILY, "reinforce_pp"]
"""Every built-in with the two options (EntropyFields); reinforce_pp charges its KL in the
reward by default."""


@pytest.fixture(scope="module")
def tiny_model(tiny_path):
    from zoo.models.titan import build_titan_model

    model, _ = build_titan_model(tiny_path, init="pretrained", device="cpu")
    return model


def tiny_inputs() -> tuple[torch.Tensor, torch.Tensor, int]:
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, 320, (3, 12), generator=g)
    return tokens, torch.tensor([4, 6, 5]), 6


# --- the entropy itself ---------------------------------------------------------------------


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_entropy_is_that_of_a_categorical_over_the_full_logits(tiny_model, temperature):
    tokens, start, width = tiny_inputs()
    _, entropy = response_logprobs_and_entropy(
        tiny_model, tokens, start, width, temperature=temperature
    )
    with torch.no_grad():  # the model's own full forward: logits at every position
        logits = tiny_model(tokens).float()
    positions = (start[:, None] - 1 + torch.arange(width)).clamp(max=tokens.shape[1] - 2)
    picked = logits.gather(1, positions[..., None].expand(-1, -1, logits.shape[-1]))
    want = torch.distributions.Categorical(logits=picked / temperature).entropy()
    assert entropy.shape == (3, width) and entropy.requires_grad
    torch.testing.assert_close(entropy.detach(), want, atol=1e-6, rtol=0)


def test_logprobs_with_entropy_are_bitwise_those_without(tiny_model):
    tokens, start, width = tiny_inputs()
    for temperature in (1.0, 0.7):
        alone = response_logprobs(tiny_model, tokens, start, width, temperature=temperature)
        with_entropy, _ = response_logprobs_and_entropy(
            tiny_model, tokens, start, width, temperature=temperature
        )
        assert torch.equal(alone, with_entropy)


def test_chunked_equals_unchunked_in_value_and_gradient():
    g = torch.Generator().manual_seed(1)
    logits = 3 * torch.randn(3, 5, 40, generator=g, dtype=torch.float64)
    results = []
    for chunk in (None, 1, 4, 15, 1000):
        z = logits.clone().requires_grad_(True)
        h = token_entropy(torch.log_softmax(z, -1), chunk)
        (h * torch.arange(15.0, dtype=torch.float64).reshape(3, 5)).sum().backward()
        results.append((h.detach(), z.grad))
    for h, grad in results[1:]:
        assert torch.equal(h, results[0][0]) and torch.equal(grad, results[0][1])
    # and both are Categorical's entropy and its autograd gradient
    z = logits.clone().requires_grad_(True)
    want = torch.distributions.Categorical(logits=z).entropy()
    (want * torch.arange(15.0, dtype=torch.float64).reshape(3, 5)).sum().backward()
    torch.testing.assert_close(results[0][0], want.detach(), atol=1e-12, rtol=0)
    torch.testing.assert_close(results[0][1], z.grad, atol=1e-12, rtol=0)


def test_entropy_keeps_no_vocabulary_sized_tensor_but_the_log_softmax(tiny_model):
    """Memory stays bounded: what autograd keeps of shape [B, T, V] (or [B*T, V]) is the
    log-softmax the log-probs keep anyway; the entropy adds no such tensor."""
    tokens, start, width = tiny_inputs()
    rows = tokens.shape[0] * width

    def vocabulary_sized_storages(fn) -> int:
        seen = set()

        def pack(t: torch.Tensor) -> torch.Tensor:
            if t.dim() >= 2 and t.shape[-1] == 320 and t.numel() == rows * 320:
                seen.add(t.untyped_storage().data_ptr())
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            fn()
        return len(seen)

    plain = vocabulary_sized_storages(lambda: response_logprobs(tiny_model, tokens, start, width))
    both = vocabulary_sized_storages(
        lambda: response_logprobs_and_entropy(tiny_model, tokens, start, width, chunk=2)
    )
    assert plain >= 1 and both == plain


def test_a_ruled_out_token_gives_no_nan():
    z = torch.tensor([[0.0, 1.0, -math.inf]], requires_grad=True)
    h = token_entropy(torch.log_softmax(z, -1))
    h.sum().backward()
    p = torch.softmax(torch.tensor([0.0, 1.0]), -1)
    torch.testing.assert_close(h.detach(), -(p * p.log()).sum()[None])
    assert torch.isfinite(z.grad).all()


# --- the bonus ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "mode"), [("grpo", "seq_mean"), ("dapo", "token_mean"), ("dr_grpo", "fixed")]
)
def test_the_bonus_gradient_is_the_hand_derived_one(name, mode):
    """On-policy, beta 0: d loss / d z_itj = w_it [-A_i (1[j = y_it] - p_j)
    + c p_j (log p_j + H_it)], w_it the aggregation's weight of token t of response i."""
    c, lmax = 0.05, 6
    g = torch.Generator().manual_seed(2)
    z = torch.randn(3, 4, 5, generator=g, dtype=torch.float64).requires_grad_(True)
    targets = torch.randint(0, 5, (3, 4), generator=g)
    mask = torch.tensor([[1.0, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0]], dtype=torch.float64)
    adv = torch.tensor([0.7, -1.2, 0.4], dtype=torch.float64)
    log_probs = torch.log_softmax(z, -1)
    lp = log_probs.gather(-1, targets[..., None]).squeeze(-1)
    batch = TrainBatch(
        lp, lp.detach(), None, adv, mask, max_response_len=lmax, entropy=token_entropy(log_probs)
    )
    algo = get_algorithm(name, entropy_coef=c, beta=0.0)
    assert algo.aggregation == mode
    algo.loss(batch).loss.backward()

    p = torch.softmax(z.detach(), -1)
    h = -(p * p.log()).sum(-1, keepdim=True)
    lengths = mask.sum(-1, keepdim=True)
    weight = {
        "seq_mean": mask / lengths / 3,
        "token_mean": mask / mask.sum(),
        "fixed": mask / (3 * lmax),
    }[mode][..., None]
    onehot = torch.nn.functional.one_hot(targets, 5).to(torch.float64)
    want = weight * (-adv[:, None, None] * (onehot - p) + c * p * (p.log() + h))
    torch.testing.assert_close(z.grad, want, atol=1e-12, rtol=0)


def test_the_bonus_lowers_the_loss_by_c_times_the_aggregated_entropy():
    g = torch.Generator().manual_seed(3)
    lp = -torch.rand(4, 5, generator=g, dtype=torch.float64)
    entropy = torch.rand(4, 5, generator=g, dtype=torch.float64)
    mask = torch.tensor([[1.0] * 5, [1, 1, 1, 0, 0], [1, 0, 0, 0, 0], [0.0] * 5])
    batch = TrainBatch(
        lp,
        lp - 0.1,
        None,
        torch.randn(4, generator=g, dtype=torch.float64),
        mask,
        max_response_len=5,
        entropy=entropy,
    )
    for name in ENTROPY_FAMILY:
        plain = get_algorithm(name, beta=0.0).loss(batch).loss
        bonus = get_algorithm(name, beta=0.0, entropy_coef=0.3).loss(batch).loss
        algo = get_algorithm(name)
        want = 0.3 * aggregate(entropy, batch, algo.aggregation)
        torch.testing.assert_close(plain - bonus, want, atol=1e-12, rtol=0)


# --- the top-share selection ----------------------------------------------------------------


def test_the_selection_keeps_the_top_share_ties_by_position_never_padding():
    entropy = torch.tensor([[1.0, 3.0, 3.0, 9.0], [3.0, 2.0, 5.0, 9.0]])
    mask = torch.tensor([[1.0, 1, 1, 0], [1, 1, 1, 0]])
    keep = top_share_mask(entropy, mask, 0.5)  # 3 of 6: the 5, then the first two 3s
    assert keep.tolist() == [[0.0, 1, 1, 0], [0, 0, 1, 0]]
    assert top_share_mask(entropy, mask, 1.0).tolist() == mask.tolist()
    assert top_share_mask(entropy, torch.zeros_like(mask), 0.2).sum() == 0


@pytest.mark.parametrize("share", [0.2, 0.05, 1 / 3, 0.5, 0.99])
def test_the_selection_keeps_exactly_ceil_share_n_of_the_highest(share):
    g = torch.Generator().manual_seed(4)
    entropy = torch.randint(0, 4, (5, 7), generator=g).double()  # many ties
    lengths = [7, 3, 0, 5, 1]
    mask = torch.tensor([[1.0] * n + [0.0] * (7 - n) for n in lengths])
    keep = top_share_mask(entropy, mask, share)
    tokens = [(i, t) for i in range(5) for t in range(lengths[i])]  # row-major positions
    want = sorted(tokens, key=lambda it: -float(entropy[it]))[: math.ceil(share * 16 - 1e-9)]
    assert {tuple(x) for x in torch.nonzero(keep).tolist()} == set(want)
    assert torch.equal(keep, top_share_mask(entropy, mask, share))  # deterministic


def test_a_fifth_of_fifteen_tokens_is_three():
    mask = torch.ones(3, 5)
    assert int(top_share_mask(torch.rand(3, 5), mask, 0.2).sum()) == 3  # not ceil(3.0000...4)


@pytest.mark.parametrize("name", ENTROPY_FAMILY)
def test_the_selection_trains_only_the_kept_tokens_and_reports_their_share(name):
    """On-policy the gradient is REINFORCE's on the kept tokens and 0 elsewhere; the KL
    penalty (beta > 0) still reaches every token."""
    g = torch.Generator().manual_seed(5)
    lp = -0.1 - torch.rand(4, 5, generator=g, dtype=torch.float64)
    ref = lp.detach() + 0.2 * torch.randn(4, 5, generator=g, dtype=torch.float64)
    entropy = torch.rand(4, 5, generator=g, dtype=torch.float64)
    mask = torch.tensor([[1.0] * 5, [1, 1, 1, 0, 0], [1, 1, 0, 0, 0], [1, 1, 1, 1, 0]])
    adv = torch.tensor([0.5, -1.0, 0.8, -0.3], dtype=torch.float64)
    algo = get_algorithm(name, entropy_top_share=0.2, beta=0.0)
    leaf = lp.clone().requires_grad_(True)
    batch = TrainBatch(leaf, lp, None, adv, mask, max_response_len=5, entropy=entropy)
    out = algo.loss(batch)
    out.loss.backward()
    keep = top_share_mask(entropy, mask, 0.2)
    assert int(keep.sum()) == 3  # ceil(0.2 * 14)
    plain = lp.clone().requires_grad_(True)
    pb = dataclasses.replace(batch, logprobs=plain)
    aggregate(-pb.token_advantages * plain, pb, algo.aggregation).backward()
    torch.testing.assert_close(leaf.grad, plain.grad * keep, atol=1e-15, rtol=0)
    assert out.metrics["entropy_kept_frac"] == pytest.approx(3 / 14)
    assert out.metrics["entropy_masked_frac"] == pytest.approx(11 / 14)

    in_loss = {"kl_in_reward": False} if name == "reinforce_pp" else {}
    with_kl = get_algorithm(name, entropy_top_share=0.2, beta=0.1, **in_loss)
    leaf = lp.clone().requires_grad_(True)
    with_kl.loss(dataclasses.replace(batch, logprobs=leaf, ref_logprobs=ref)).loss.backward()
    assert bool((leaf.grad[(keep == 0) & (mask > 0)] != 0).all())


# --- configuration, conformance -------------------------------------------------------------


@pytest.mark.parametrize("name", ENTROPY_FAMILY)
def test_the_options_are_off_by_default_and_checked(name):
    algo = get_algorithm(name)
    assert algo.entropy_options == (0.0, 1.0) and not algo.needs_entropy
    assert not wants_entropy(algo.loss) and algo.token_selection == ""
    assert get_algorithm(name, entropy_coef=0.01).needs_entropy
    selecting = get_algorithm(name, entropy_top_share=0.2)
    assert selecting.needs_entropy and wants_entropy(selecting.loss)
    assert selecting.token_selection == "entropy_masked_frac"
    assert ALGORITHMS.load(name).token_selection == ""  # the class is untouched
    for bad in (
        {"entropy_top_share": 0.0},
        {"entropy_top_share": 1.5},
        {"entropy_coef": float("nan")},
    ):
        with pytest.raises(ConfigError, match="entropy_"):
            get_algorithm(name, **bad)


def test_a_loss_asked_for_entropy_without_it_says_why():
    batch = TrainBatch(torch.zeros(1, 2), torch.zeros(1, 2), None, torch.ones(1), torch.ones(1, 2))
    with pytest.raises(ConfigError, match="needs_entropy"):
        entropy_terms(batch, 0.01, 1.0)


OPTIONS = [
    {"entropy_coef": 0.01},
    {"entropy_top_share": 0.2},
    {"entropy_coef": 0.003, "entropy_top_share": 0.2},
    {"entropy_top_share": 0.05},
]


def options_id(options: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in options.items())


@pytest.mark.parametrize("options", OPTIONS, ids=options_id)
@pytest.mark.parametrize("name", ENTROPY_FAMILY)
def test_the_options_pass_the_whole_conformance_suite(name, options):
    results = {r.name: r for r in run_conformance(ALGORITHMS.load(name), options)}
    assert list(results) == list(CHECKS)
    failed = [f"{r.name}: {r.detail}" for r in results.values() if r.passed is False]
    assert not failed, failed
    assert results["entropy"].passed is True, results["entropy"].detail


def test_the_entropy_check_does_not_apply_to_an_algorithm_that_does_not_read_it():
    result = CHECKS["entropy"](GRPO)
    assert result.passed is None and "needs_entropy" in result.detail


class BonusWithTheWrongSign(GRPO):
    def loss(self, batch: TrainBatch) -> LossOutput:
        out = super().loss(batch)
        coef = self.config.entropy_coef
        extra = (
            2
            * coef
            * aggregate(torch.where(batch.mask > 0, batch.entropy, 0.0), batch, self.aggregation)
        )
        return LossOutput(out.loss + extra, out.metrics)


class KeepsTheLowestEntropy(GRPO):
    def loss(self, batch: TrainBatch) -> LossOutput:
        flipped = dataclasses.replace(batch, entropy=-batch.entropy)
        return super().loss(flipped)


class BonusOnPadding(GRPO):
    def loss(self, batch: TrainBatch) -> LossOutput:
        eps = self.config.eps
        ratio = torch.exp(log_ratio(batch))
        surrogate = clipped_objective(ratio, batch.token_advantages, 1 - eps, 1 + eps)
        penalty, _ = kl_penalty(batch, self.config.beta)
        per_token = -surrogate + penalty
        loss = aggregate(per_token, batch, self.aggregation)
        loss = loss - self.config.entropy_coef * batch.entropy.mean()  # padding counts
        metrics = ratio_metrics(ratio, batch, 1 - eps, 1 + eps, batch.token_advantages)
        return LossOutput(loss, metrics)


@pytest.mark.parametrize(
    ("plugin", "options", "caught_by"),
    [
        (BonusWithTheWrongSign, {"entropy_coef": 0.01}, "entropy"),
        (KeepsTheLowestEntropy, {"entropy_top_share": 0.2}, "entropy"),
        (BonusOnPadding, {"entropy_coef": 0.01}, "padding"),
    ],
)
def test_the_suite_catches_an_entropy_option_done_wrong(plugin, options, caught_by):
    results = {r.name: r for r in run_conformance(plugin, options)}
    assert results[caught_by].passed is False, results[caught_by].detail


# --- nothing changes for algorithms that do not ask ------------------------------------------


BOUNDS = {
    "grpo": (0.8, 1.2),
    "dr_grpo": (0.8, 1.2),
    "dapo": (0.8, 1.28),
    "rloo": (0.8, 1.2),
    "opo": (0.8, 1.2),
    "remax": (0.8, 1.2),
    "gigpo": (0.8, 1.2),
}


@pytest.mark.parametrize("name", SURROGATE_FAMILY)
def test_with_the_options_off_the_loss_is_bitwise_the_code_before_them(name):
    """The surrogate as it was written before the options (clipped objective + KL penalty,
    aggregated): the same loss, gradient and metrics, bit for bit, in float32 too."""
    from zoo.algorithms.conformance import off_policy_case

    case = off_policy_case()
    algo = get_algorithm(name, beta=0.05)
    low, high = BOUNDS[name]
    for dtype in (torch.float64, torch.float32):
        got_lp = case.lp.to(dtype).clone().requires_grad_(True)
        old_lp = case.lp.to(dtype).clone().requires_grad_(True)
        args = (
            case.old.to(dtype),
            case.ref.to(dtype) - 0.1,
            case.adv.to(dtype),
            case.mask.to(dtype),
        )
        out = algo.loss(TrainBatch(got_lp, *args, max_response_len=8))
        out.loss.backward()
        batch = TrainBatch(old_lp, *args, max_response_len=8)
        ratio = torch.exp(log_ratio(batch))
        surrogate = clipped_objective(ratio, batch.token_advantages, low, high)
        penalty, kl_metrics = kl_penalty(batch, 0.05, "k3")
        loss = aggregate(-surrogate + penalty, batch, algo.aggregation)
        loss.backward()
        metrics = ratio_metrics(ratio, batch, low, high, batch.token_advantages)
        assert torch.equal(out.loss.detach(), loss.detach())
        assert torch.equal(got_lp.grad, old_lp.grad)
        assert out.metrics == {"loss": float(loss.detach()), **metrics, **kl_metrics}


# --- the trainer ----------------------------------------------------------------------------


def rollout(tiny_path) -> RolloutBatch:
    g = torch.Generator().manual_seed(6)
    tokens = torch.randint(0, 320, (4, 10), generator=g)
    mask = torch.tensor([[1.0] * 5, [1, 1, 1, 0, 0], [1, 1, 1, 1, 0], [1, 1, 0, 0, 0]])
    return RolloutBatch(
        tokens=tokens,
        response_start=torch.full((4,), 5),
        mask=mask,
        advantages=torch.tensor([1.0, -1.0, 0.5, -0.5]),
        group_size=2,
    )


class Recording:
    """An algorithm's loss, recording the batches the trainer gives it."""

    def __init__(self, algorithm) -> None:
        self.algorithm, self.batches = algorithm, []
        self.needs_entropy = algorithm.needs_entropy

    def loss(self, batch: TrainBatch) -> LossOutput:
        self.batches.append(batch)
        return self.algorithm.loss(batch)


def test_the_trainer_computes_no_entropy_for_a_loss_that_does_not_ask(tiny_path, monkeypatch):
    trainer = Trainer(tiny_path, TrainerConfig.of(micro_batch_size=2), max_response_len=5)

    def refuse(*args, **kwargs):
        raise AssertionError("entropy computed for an algorithm that did not ask")

    monkeypatch.setattr(trainer, "_logprobs_and_entropy", refuse)
    recording = Recording(get_algorithm("grpo", beta=0.0))
    record = trainer.step(rollout(tiny_path), recording.loss)
    assert "policy_entropy" not in record and "entropy_kept_frac" not in record
    assert all(b.entropy is None for b in recording.batches)


def test_the_trainer_hands_the_entropy_with_its_gradient_and_logs_its_mean(tiny_path):
    trainer = Trainer(tiny_path, TrainerConfig.of(micro_batch_size=2), max_response_len=5)
    batch = rollout(tiny_path)
    with torch.no_grad():
        _, want = response_logprobs_and_entropy(
            trainer.model, batch.tokens, batch.response_start, 5
        )
    recording = Recording(get_algorithm("grpo", beta=0.0, entropy_coef=0.01))
    record = trainer.step(batch, recording.loss)
    assert len(recording.batches) == 2  # micro-batches of 2 rows
    assert all(b.entropy is not None and b.entropy.requires_grad for b in recording.batches)
    mean = float((want * batch.mask).sum() / batch.mask.sum())
    assert record["policy_entropy"] == pytest.approx(mean, abs=1e-6)
    assert math.isfinite(record["grad_norm"]) and record["grad_norm"] > 0


def test_the_bonus_alone_moves_the_weights_toward_higher_entropy(tiny_path):
    """With every advantage 0 the only gradient is the bonus's: one step raises the
    entropy (the gradient flows through H into the weights)."""
    trainer = Trainer(tiny_path, TrainerConfig.of(lr=1e-3), max_response_len=5)
    batch = dataclasses.replace(rollout(tiny_path), advantages=torch.zeros(4))
    algo = get_algorithm("dapo", entropy_coef=1.0)
    before = trainer.step(batch, algo.loss)["policy_entropy"]
    after = trainer.step(batch, algo.loss)["policy_entropy"]
    assert after > before


# --- tiny runs ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "options"),
    [("grpo", {"entropy_coef": 0.01}), ("dapo", {"entropy_top_share": 0.2})],
)
def test_a_two_step_tiny_run_with_each_option_logs_its_metrics(name, options, loop_for, tmp_path):
    cfg = RunConfig.from_flat(
        algorithm=name, algorithm_config=options, steps=2, prompts_per_step=16, eval_every=2, seed=3
    )
    loop = loop_for(cfg)
    writer = RunWriter(tmp_path)
    loop.run(writer.log)
    writer.close()
    records = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [0, 1, 2]
    for r in records[1:]:
        assert all(math.isfinite(v) for v in r.values() if isinstance(v, float))
        assert 0 < r["policy_entropy"] < math.log(320)
        assert "entropy_sampled" in r  # the sampled estimate, still beside it
        if "entropy_top_share" in options:
            # ceil per mini-batch: a little above the share, never below
            assert 0.2 <= r["entropy_kept_frac"] < 0.25
            assert r["entropy_masked_frac"] == pytest.approx(1 - r["entropy_kept_frac"])
