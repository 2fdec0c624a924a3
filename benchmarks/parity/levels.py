"""Level a (the loss on the same inputs) and level b (one rollout batch's update) of the
parity check against TRL 1.16's GRPOTrainer; see docs/parity.md."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from typing import Any

import torch

from benchmarks.parity import shared
from benchmarks.parity.settings import forge_zoo_algorithm
from benchmarks.parity.shared import SharedBatch

NOISE = 0.15
"""Level a's new and reference log-probs are the old ones plus N(0, NOISE^2) per response
token, so that ratios spread over ~[0.6, 1.6] and every branch of each clip is taken."""


def perturbed(old: torch.Tensor, mask: torch.Tensor, seed: int) -> tuple[torch.Tensor, ...]:
    """(new, ref): ``old`` plus independent noise on response tokens; padding is 0 in all."""
    gen = torch.Generator().manual_seed(seed)
    old = old * mask
    new = old + NOISE * torch.randn(old.shape, generator=gen) * mask
    ref = old + NOISE * torch.randn(old.shape, generator=gen) * mask
    return new, ref


@contextlib.contextmanager
def fed_logprobs(trainer: Any, logprobs: torch.Tensor) -> Iterator[None]:
    """TRL's loss computes its own log-probs from the model; here its per-token log-prob
    method returns ``logprobs`` (a leaf with grad) instead, so that the rest of its
    ``_compute_loss`` (ratio, clip, KL, aggregation) runs on the inputs forge-zoo gets."""
    trainer._get_per_token_logps_and_entropies = lambda *a, **k: (
        logprobs,
        torch.zeros_like(logprobs),
        None,
    )
    try:
        yield
    finally:
        del trainer._get_per_token_logps_and_entropies


def trl_loss_and_grad(
    trainer: Any, inputs: dict[str, Any], new: torch.Tensor
) -> tuple[float, torch.Tensor]:
    """TRL's loss (its ``compute_loss``) on ``inputs`` with ``new`` as the policy's
    log-probs, and d loss / d new."""
    leaf = new.clone().requires_grad_(True)
    trainer.model.train()
    with fed_logprobs(trainer, leaf):
        loss = trainer.compute_loss(trainer.model, inputs)
    loss.backward()
    return float(loss.detach()), leaf.grad.detach().clone()


def forge_zoo_loss_and_grad(
    algorithm: str,
    new: torch.Tensor,
    old: torch.Tensor,
    ref: torch.Tensor | None,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    max_response_len: int,
    num_tokens: int | None = None,
) -> tuple[float, torch.Tensor]:
    """forge-zoo's ``algorithm.loss(TrainBatch)`` and d loss / d new; the batch's counts
    are its own unless ``num_tokens`` says otherwise."""
    from zoo.core.types import TrainBatch

    leaf = new.clone().requires_grad_(True)
    batch = TrainBatch(
        logprobs=leaf,
        old_logprobs=old,
        ref_logprobs=ref,
        advantages=advantages,
        mask=mask,
        max_response_len=max_response_len,
        num_tokens=num_tokens,
    )
    loss = forge_zoo_algorithm(algorithm).loss(batch).loss
    loss.backward()
    return float(loss.detach()), leaf.grad.detach().clone()


def loss_parity(
    algorithm: str, batch: SharedBatch, old: torch.Tensor, seed: int = 0
) -> list[dict[str, Any]]:
    """Level a for one algorithm: the same old / new / ref log-probs and advantages
    (forge-zoo's) into TRL's ``compute_loss`` and forge-zoo's ``loss``, (1) over the
    whole batch as one optimizer step (TRL: per_device_train_batch_size = B,
    steps_per_generation 1), where the two normalisers agree by construction, and (2)
    over TRL's first mini-batch of the run's settings (B / mini_batches rows;
    ``num_items_in_batch`` still the whole batch's tokens), forge-zoo given TRL's
    normaliser explicitly: dapo's token count is then the average mini-batch's,
    num_items_in_batch / steps_per_generation (forge-zoo's own run divides by the
    mini-batch's own tokens: the ratio is reported)."""
    old = old * batch.mask  # padding: 0 on both sides
    new, ref = perturbed(old, batch.mask, seed)
    advantages = shared.forge_zoo_advantages(algorithm, batch)
    beta = forge_zoo_algorithm(algorithm).config.beta
    ref_in = ref if beta else None
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        trainer = shared.trl_trainer(
            algorithm, tmp, per_device_train_batch_size=batch.size, steps_per_generation=1
        )
        inputs = shared.trl_inputs(batch, advantages)
        inputs["old_per_token_logps"] = old
        if beta:
            inputs["ref_per_token_logps"] = ref
        t_loss, t_grad = trl_loss_and_grad(trainer, inputs, new)
        f_loss, f_grad = forge_zoo_loss_and_grad(
            algorithm, new, old, ref_in, advantages, batch.mask, batch.max_response_len
        )
        rows.append(_loss_row(algorithm, "whole batch, one step", f_loss, t_loss, f_grad, t_grad))
        # TRL's first mini-batch at the run's settings: steps_per_generation = mini_batches
        steps = shared.forge_zoo_run_config(algorithm).regime.mini_batches
        trainer.args.steps_per_generation = steps
        part = slice(0, batch.size // steps)
        sub = {
            k: (v[part] if isinstance(v, torch.Tensor) and v.dim() else v)
            for k, v in inputs.items()
        }
        t_loss, t_grad = trl_loss_and_grad(trainer, sub, new[part])
        average = float(batch.mask.sum()) / steps
        own = float(batch.mask[part].sum())
        token_mean = forge_zoo_algorithm(algorithm).aggregation == "token_mean"
        exact = token_mean and average.is_integer()
        f_loss, f_grad = forge_zoo_loss_and_grad(
            algorithm,
            new[part],
            old[part],
            None if ref_in is None else ref_in[part],
            advantages[part],
            batch.mask[part],
            batch.max_response_len,
            num_tokens=round(average) if exact else None,
        )
        if token_mean and not exact:  # forge-zoo's counts are ints: rescale to the average
            f_loss, f_grad = f_loss * own / average, f_grad * own / average
        row = _loss_row(
            algorithm, f"mini-batch 1 of {steps}, TRL's normaliser", f_loss, t_loss, f_grad, t_grad
        )
        row["dapo own / TRL tokens"] = own / average if algorithm == "dapo" else None
        rows.append(row)
    return rows


def _loss_row(
    algorithm: str,
    scope: str,
    f_loss: float,
    t_loss: float,
    f_grad: torch.Tensor,
    t_grad: torch.Tensor,
) -> dict[str, Any]:
    return {
        "level": "a",
        "algorithm": algorithm,
        "scope": scope,
        "forge-zoo loss": f_loss,
        "TRL loss": t_loss,
        "abs loss diff": abs(f_loss - t_loss),
        "max abs grad diff": float((f_grad - t_grad).abs().max()),
        "max abs grad": float(t_grad.abs().max()),
    }


def logprob_parity(batch: SharedBatch) -> dict[str, Any]:
    """Each side's log-probs of the batch's response tokens from the same start weights,
    by its own model code (forge-zoo: TorchTitan's Qwen3, prompt + response right-padded;
    TRL: transformers' Qwen3, left-padded prompt, fused LM head), at the run's
    temperature: the largest difference over response tokens. Returns the figures and
    forge-zoo's log-probs (``old``) for level a."""
    fz = shared.forge_zoo_trainer("grpo")
    mine = shared.forge_zoo_logprobs(fz, batch)
    with tempfile.TemporaryDirectory() as tmp:
        trainer = shared.trl_trainer("dapo", tmp)  # (beta 0: no reference model to build)
        theirs = shared.trl_logprobs(trainer, shared.trl_inputs(batch, torch.zeros(batch.size)))
    on = batch.mask > 0
    diff = (mine - theirs)[on].abs()
    return {
        "level": "a",
        "check": "log-probs, each side's model code",
        "max abs logprob diff": float(diff.max()),
        "mean abs logprob diff": float(diff.mean()),
        "response tokens": int(on.sum()),
        "old": mine,
    }


def advantage_parity(algorithm: str, batch: SharedBatch) -> float:
    """max |A_forge-zoo - A_TRL| when each side computes the advantages from the same
    rewards (std epsilon 1e-6 against 1e-4)."""
    diff = shared.forge_zoo_advantages(algorithm, batch) - shared.trl_advantages(algorithm, batch)
    return float(diff.abs().max())


# --- level b ----------------------------------------------------------------------------


@contextlib.contextmanager
def recorded_shuffle(order: list[torch.Tensor]) -> Iterator[None]:
    """TRL's own shuffle of the generation batch, with the permutation it drew recorded
    (from a row-index column that travels with the batch)."""
    import trl.trainer.grpo_trainer as grpo_module

    original = grpo_module.shuffle_sequence_dict

    def shuffle(batch: dict[str, Any]) -> dict[str, Any]:
        out = original(batch)
        order.append(out.pop("parity_row").clone())
        return out

    grpo_module.shuffle_sequence_dict = shuffle
    try:
        yield
    finally:
        grpo_module.shuffle_sequence_dict = original


def start_weights() -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(shared.model_path() / "model.safetensors"))


def update_parity(algorithm: str, batch: SharedBatch) -> dict[str, Any]:
    """Level b for one algorithm: one rollout batch trained by each side from the same
    weights with the same advantages (forge-zoo's), the run's settings (mini_batches 4:
    four AdamW steps, grad clip, constant lr). TRL runs its own ``train`` loop (its
    generation step replaced by the finished batch, old log-probs its own); its shuffle
    of the rows is recorded and forge-zoo trains the rows in that order, split into the
    same four slices (group_size 1 for the split; advantages are already computed).
    Returns the relative L2 distance ||d_fz - d_TRL|| / ||d_TRL|| of the updates
    (parameters after minus before), over all parameters, and per mini-batch token
    counts (dapo's normalisers)."""
    advantages = shared.forge_zoo_advantages(algorithm, batch)
    algo = forge_zoo_algorithm(algorithm)
    steps = shared.forge_zoo_run_config(algorithm).regime.mini_batches
    order: list[torch.Tensor] = []
    with tempfile.TemporaryDirectory() as tmp:
        trainer = shared.trl_trainer(algorithm, tmp, max_steps=steps)
        prepared = shared.trl_inputs(batch, advantages)
        prepared["old_per_token_logps"] = shared.trl_logprobs(trainer, prepared)
        if algo.config.beta:
            prepared["ref_per_token_logps"] = prepared["old_per_token_logps"].clone()
        prepared["parity_row"] = torch.arange(batch.size)
        calls: list[int] = []

        def finished_batch(_: Any) -> dict[str, Any]:
            calls.append(1)
            return dict(prepared)

        trainer._generate_and_score_completions = finished_batch
        with recorded_shuffle(order):
            trainer.train()
        trl_after = {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}
    if len(calls) != 1 or len(order) != 1:
        raise RuntimeError(f"TRL generated {len(calls)} times, shuffled {len(order)} times")
    perm = order[0]
    before = start_weights()
    record, fz_after = forge_zoo_update(algorithm, batch.rows(perm), advantages[perm])
    num, den, fz_norm = update_distance(before, fz_after, trl_after)
    chunk = batch.size // steps
    tokens = [float(batch.mask[perm][i * chunk : (i + 1) * chunk].sum()) for i in range(steps)]
    row = {
        "level": "b",
        "algorithm": algorithm,
        "optimizer steps": record["updates"],
        "norm of TRL update": den,
        "norm of forge-zoo update": fz_norm,
        "relative L2 distance": num / den if den else float("nan"),
        "mini-batch tokens": tokens,
    }
    if algo.aggregation == "token_mean":  # the one loss difference: the per-step normaliser
        average = float(batch.mask.sum()) / steps
        _, fz_after = forge_zoo_update(algorithm, batch.rows(perm), advantages[perm], average)
        num, _, _ = update_distance(before, fz_after, trl_after)
        row["relative L2 distance, forge-zoo given TRL's normaliser"] = num / den
    return row


def forge_zoo_update(
    algorithm: str,
    rows: SharedBatch,
    advantages: torch.Tensor,
    tokens_per_step: float | None = None,
) -> tuple[dict, dict]:
    """forge-zoo's ``Trainer.train`` on ``rows`` in their order (split into the run's
    mini-batches with group size 1); returns its record and the weights after, in Hugging
    Face naming. ``tokens_per_step``: divide each mini-batch's token-mean loss by this
    (TRL's normaliser) instead of the mini-batch's own tokens."""
    algo = forge_zoo_algorithm(algorithm)
    loss_fn = algo.loss
    if tokens_per_step is not None:

        def loss_fn(train_batch: Any) -> Any:
            out = algo.loss(train_batch)
            out.loss = out.loss * train_batch.num_tokens / tokens_per_step
            return out

    fz = shared.forge_zoo_trainer(algorithm)
    rollout = shared.rollout_batch(rows, advantages, group_size=1)
    rollout.old_logprobs = fz.logprobs(rollout)
    if algo.config.beta:
        rollout.ref_logprobs = rollout.old_logprobs.clone()
    record = fz.train(rollout, loss_fn)
    return record, fz.hf_state_dict()


def update_distance(
    before: dict[str, torch.Tensor],
    fz_after: dict[str, torch.Tensor],
    trl_after: dict[str, torch.Tensor],
) -> tuple[float, float, float]:
    """(||d_fz - d_TRL||, ||d_TRL||, ||d_fz||) over all parameters, d = after - before."""
    num, den, fz_norm = 0.0, 0.0, 0.0
    for name, start in before.items():
        d_fz = fz_after[name].float() - start.float()
        d_trl = trl_after[name].float() - start.float()
        num += float((d_fz - d_trl).pow(2).sum())
        den += float(d_trl.pow(2).sum())
        fz_norm += float(d_fz.pow(2).sum())
    return num**0.5, den**0.5, fz_norm**0.5
