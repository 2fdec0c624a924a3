"""The trainer on the real TorchTitan model: micro-batching does not change the update,
and torchforge-style dictionary batches train through the same step."""

from __future__ import annotations

import pytest
import torch

from zoo.algorithms import get_algorithm
from zoo.services.batch import RolloutBatch
from zoo.services.trainer import Trainer, TrainerConfig


def random_batch(size: int = 8, prompt: int = 6, response: int = 5) -> RolloutBatch:
    gen = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, 256, (size, prompt + response), generator=gen)
    lengths = torch.randint(1, response + 1, (size,), generator=gen)
    mask = (torch.arange(response)[None, :] < lengths[:, None]).float()
    return RolloutBatch(
        tokens=tokens,
        response_start=torch.full((size,), prompt),
        mask=mask,
        advantages=torch.randn(size, generator=gen),
    )


def gradients_of_step(tiny_path, micro_batch_size: int, batch: RolloutBatch, algo) -> tuple:
    """Metrics and the accumulated gradients (still in .grad after the optimizer step)."""
    trainer = Trainer(tiny_path, TrainerConfig.of(micro_batch_size=micro_batch_size), 5)
    metrics = trainer.step(batch, algo.loss)
    return metrics, {n: p.grad.clone() for n, p in trainer.model.named_parameters()}


def test_micro_batches_give_the_same_gradient_as_the_whole_batch(tiny_path):
    batch = random_batch()
    for name in ("grpo",):
        algo = get_algorithm(name, beta=0.0)
        whole_metrics, whole = gradients_of_step(tiny_path, 0, batch, algo)
        micro_metrics, micro = gradients_of_step(tiny_path, 3, batch, algo)
        assert any(g.abs().max() > 1e-4 for g in whole.values())
        assert abs(whole_metrics["loss"] - micro_metrics["loss"]) < 1e-6
        assert abs(whole_metrics["grad_norm"] - micro_metrics["grad_norm"]) < 1e-5
        for key in whole:
            torch.testing.assert_close(whole[key], micro[key], atol=1e-6, rtol=1e-4)


def test_torchforge_train_step_matches_native_step(tiny_path):
    batch = random_batch(size=6)
    algo = get_algorithm("grpo", beta=0.0)
    native = Trainer(tiny_path, TrainerConfig(), 5)
    expected = native.step(batch, algo.loss)["loss"]

    forge = Trainer(tiny_path, TrainerConfig(), 5)
    forge.loss_fn = algo.loss
    width = batch.mask.shape[1]
    halves = [slice(0, 3), slice(3, 6)]
    inputs = [{"tokens": batch.tokens[h]} for h in halves]
    targets = [
        {
            "response": batch.tokens[h, -width:],
            "ref_logprobs": None,
            "advantages": batch.advantages[h, None],
            "padding_mask": batch.mask[h].bool(),
        }
        for h in halves
    ]
    before = forge.model.tok_embeddings.weight.clone()
    loss = forge.train_step(inputs, targets)
    assert isinstance(loss, float)
    assert abs(loss - expected) < 1e-6
    assert forge.version == 1
    assert not torch.equal(before, forge.model.tok_embeddings.weight)


def test_learning_rate_schedules_by_hand():
    from zoo.services.trainer import lr_at

    cfg = TrainerConfig.of(lr=1.0, warmup_steps=4, lr_schedule="constant")
    assert [lr_at(k, cfg) for k in range(6)] == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]
    linear = TrainerConfig.of(
        lr=2.0, warmup_steps=0, lr_schedule="linear", decay_steps=4, min_lr_ratio=0.25
    )
    # from 2.0 down to 0.5 over 4 steps, then the floor
    assert [lr_at(k, linear) for k in range(6)] == [2.0, 1.625, 1.25, 0.875, 0.5, 0.5]
    cosine = TrainerConfig.of(lr=1.0, warmup_steps=2, lr_schedule="cosine", decay_steps=4)
    values = [lr_at(k, cosine) for k in range(8)]
    assert values[:2] == [0.5, 1.0] and values[2] == 1.0
    assert abs(values[4] - 0.5) < 1e-12 and values[6] == values[7] == 0.0  # cos(pi/2), end


def test_learning_rate_over_the_budget_by_hand():
    from zoo.services.trainer import lr_at_budget

    warm = TrainerConfig.of(lr=1.0, warmup_ratio=0.2, lr_schedule="constant")
    assert [lr_at_budget(f, warm) for f in (0.05, 0.1, 0.2, 0.6, 1.0)] == [0.25, 0.5, 1, 1, 1]
    cosine = TrainerConfig.of(lr=2.0, warmup_ratio=0.2, lr_schedule="cosine", min_lr_ratio=0.5)
    # after the warm-up, from 2.0 down to the floor 1.0 over the remaining 0.8 of the budget
    assert lr_at_budget(0.6, cosine) == pytest.approx(1.5)  # half-way: cos(pi/2)
    assert lr_at_budget(1.0, cosine) == pytest.approx(1.0)


def test_the_schedule_drives_the_optimizer_and_resumes_from_its_state(tiny_path):
    algo = get_algorithm("grpo", beta=0.0)
    cfg = TrainerConfig.of(lr=1e-3, warmup_steps=2, lr_schedule="cosine", decay_steps=2)
    trainer = Trainer(tiny_path, cfg, 5)
    seen = [trainer.step(random_batch(), algo.loss)["lr"] for _ in range(3)]
    assert seen == [5e-4, 1e-3, 1e-3] and trainer.optimizer_steps() == 3
    resumed = Trainer(tiny_path, cfg, 5)
    resumed.optimizer.load_state_dict(trainer.optimizer.state_dict())
    assert resumed.optimizer_steps() == 3
    assert resumed.step(random_batch(), algo.loss)["lr"] == 5e-4  # cos(pi/2): half of lr
    constant = Trainer(tiny_path, TrainerConfig(), 5)
    assert "lr" not in constant.step(random_batch(), algo.loss)  # old records stay comparable
