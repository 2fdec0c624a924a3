"""The trainer on the real TorchTitan model: micro-batching does not change the update,
and torchforge-style dictionary batches train through the same step."""

from __future__ import annotations

import torch

from zoo.algorithms import get_algorithm
from zoo.core.trainer import RolloutBatch, Trainer, TrainerConfig


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
    trainer = Trainer(tiny_path, TrainerConfig(micro_batch_size=micro_batch_size), 5)
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
