"""The trainer: TorchTitan's Qwen3 model, AdamW, gradient clipping and micro-batching.

This is where an algorithm's loss is called (``Trainer.step``). Sequences are laid out
prompt + response, right-padded, so causal attention never lets a real token see a pad.
Weights come in and go out in Hugging Face naming, the interchange format with the
generator.

Several processes: when the caller has initialised a torch.distributed process group of
more than one rank before building the Trainer, the model is split over them
(zoo/core/sharding.py): FSDP2 data parallelism by default, TorchTitan's Qwen3 tensor
parallelism with ``tensor_parallel`` ranks per group, or both. Every rank gets the same
whole batch in ``step``; each data-parallel rank trains on its own contiguous slice of
rows, which the ranks of its tensor-parallel group share. The update equals the
one-process update, and all public methods are collectives: every rank calls them
together, in the same order.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.distributed.tensor import DTensor

from zoo.core import sharding
from zoo.core.config import ConfigError
from zoo.core.models import build_titan_model
from zoo.core.types import LossOutput, TrainBatch


@dataclass
class RolloutBatch:
    """Sequences ready for training. ``tokens`` holds prompt + response per row (right
    padded); response token t of row i sits at position ``response_start[i] + t``."""

    tokens: torch.Tensor
    """[B, L] token ids."""
    response_start: torch.Tensor
    """[B] index of the first response token (= prompt length)."""
    mask: torch.Tensor
    """[B, T] 1 on response tokens."""
    advantages: torch.Tensor
    """[B] or [B, T]."""
    old_logprobs: torch.Tensor | None = None
    """[B, T] the sampling policy's logprobs; None = on-policy (use the trainer's own)."""
    ref_logprobs: torch.Tensor | None = None

    @property
    def size(self) -> int:
        return self.tokens.shape[0]

    def to(self, device: torch.device) -> RolloutBatch:
        def move(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t.to(device, non_blocking=True)

        return RolloutBatch(*(move(getattr(self, f.name)) for f in dataclasses.fields(self)))

    def rows(self, sl: slice) -> RolloutBatch:
        def cut(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t[sl]

        return RolloutBatch(
            self.tokens[sl],
            self.response_start[sl],
            self.mask[sl],
            self.advantages[sl],
            cut(self.old_logprobs),
            cut(self.ref_logprobs),
        )


def response_logprobs(
    model: torch.nn.Module,
    tokens: torch.Tensor,
    response_start: torch.Tensor,
    width: int,
    split: sharding.Split | None = None,
) -> torch.Tensor:
    """[B, width] log-probability of each response token under ``model`` (a TorchTitan
    decoder; under tensor parallelism, per ``split``, its LM head gives each rank a slice
    of the vocabulary). The LM head runs only where a response token is predicted: on
    prompt positions its output would be thrown away."""
    positions = (response_start[:, None] - 1 + torch.arange(width, device=tokens.device)).clamp(
        max=tokens.shape[1] - 2
    )
    model._skip_lm_head = True  # TorchTitan's Decoder flag: forward returns final hidden states
    try:
        hidden = model(tokens)
    finally:
        model._skip_lm_head = False
    if isinstance(hidden, DTensor):  # tensor parallel: replicated over the group
        hidden = hidden.to_local()  # (lm_head takes it back as a DTensor)
    picked = hidden.gather(1, positions[..., None].expand(-1, -1, hidden.shape[-1]))
    logits = model.lm_head(picked)
    targets = tokens.gather(1, positions + 1)
    if split is not None and split.tensor_parallel > 1:
        return split.vocab_logprobs(logits.to_local().float(), targets)
    logits = logits.float()
    return torch.log_softmax(logits, dim=-1).gather(-1, targets[..., None]).squeeze(-1)


@dataclass
class TrainerConfig:
    lr: float = 2e-4
    """AdamW learning rate (calibration: 2e-4 at 128 prompts x 8)."""
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)
    grad_clip: float = 1.0
    """Max global gradient norm."""
    micro_batch_size: int = 0
    """Sequences per forward/backward; 0 = the whole batch at once."""
    mixed_precision: str = "none"
    """"bf16": compute in bfloat16 under autocast, float32 master weights and optimizer
    state (TorchTitan's FSDP2 mixed-precision policy, on one device). Sharded: FSDP2's
    MixedPrecisionPolicy (bf16 parameters in compute, float32 gradient reduction)."""


class Trainer:
    def __init__(
        self,
        model_path: Path,
        config: TrainerConfig,
        max_response_len: int,
        init: str = "pretrained",
        device: str = "cpu",
        tensor_parallel: int = 1,
    ) -> None:
        if config.mixed_precision not in ("none", "bf16"):
            raise ValueError(
                f"mixed_precision must be none or bf16, not {config.mixed_precision!r}"
            )
        self.config = config
        self.max_response_len = max_response_len
        self.device = torch.device(device)
        self.world = sharding.world_size()
        self.rank = torch.distributed.get_rank() if self.world > 1 else 0
        if tensor_parallel < 1 or self.world % tensor_parallel:
            raise ConfigError(
                f"tensor_parallel {tensor_parallel} must divide the trainer's {self.world} "
                "processes"
            )
        self.model, self.adapter = build_titan_model(
            model_path, init=init, device=self.device, tensor_parallel=tensor_parallel
        )
        self.split: sharding.Split | None = None
        """How the model is split over the ranks; None in one process."""
        if self.world > 1:
            # Each rank splits its own copy: they agree as long as every rank built the
            # same weights (a checkpoint, or the same seed with init="random").
            self.split = sharding.Split(self.model, self.device, tensor_parallel,
                                        bf16=config.mixed_precision == "bf16")  # fmt: skip
        self.model.train()
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(),
            lr=config.lr,
            betas=config.betas,
            weight_decay=config.weight_decay,
        )
        self.version = 0
        self.loss_fn: Callable[[TrainBatch], LossOutput] | None = None

    @property
    def sharded(self) -> bool:
        """FSDP2 data parallelism: each data-parallel rank trains on its own rows."""
        return self.split is not None and self.split.fsdp

    def step(self, batch: RolloutBatch, loss_fn: Callable[[TrainBatch], LossOutput]) -> dict:
        """One optimizer step on ``batch``; returns the loss metrics (token-weighted over
        micro-batches) and the gradient norm. Sharded: every rank passes the same whole
        batch, trains on its own rows, and gets the whole batch's metrics."""
        width = batch.mask.shape[1]
        # Counts over the whole batch, on every rank: each micro-batch's loss divides by
        # them, so the losses of all micro-batches of all ranks add up to the batch loss.
        num_sequences = int((batch.mask.sum(-1) > 0).sum())
        num_tokens = int(batch.mask.sum())
        if self.sharded:
            dp, dp_rank = self.split.data_parallel, self.split.dp_rank
            local = batch.rows(sharding.row_slice(batch.size, dp_rank, dp))
            most_rows = -(-batch.size // dp)  # data-parallel rank 0's slice is the largest
            micro = self.config.micro_batch_size or max(most_rows, 1)
            # FSDP2 gathers and reduces weights in every forward and backward, so all
            # ranks run the same number of passes: those of the largest slice.
            passes = -(-most_rows // micro)
        else:
            local = batch
            micro = self.config.micro_batch_size or batch.size
            passes = -(-batch.size // micro)
        self.optimizer.zero_grad(set_to_none=True)
        sums: dict[str, float] = {}
        loss_total = 0.0  # micro-batch losses add up: each divides by whole-batch counts
        # Sharded bf16 computes in bf16 through FSDP2's policy instead of autocast.
        autocast = torch.autocast(
            self.device.type,
            dtype=torch.bfloat16,
            enabled=self.config.mixed_precision == "bf16" and not self.sharded,
        )
        for start in range(0, passes * micro, micro):
            if start >= local.size:
                self._padding_pass(batch, width, autocast)
                continue
            mb = local.rows(slice(start, start + micro)).to(self.device)
            with autocast:
                logprobs = response_logprobs(
                    self.model, mb.tokens, mb.response_start, width, self.split
                )
            old = mb.old_logprobs if mb.old_logprobs is not None else logprobs.detach()
            train_batch = TrainBatch(
                logprobs=logprobs,
                old_logprobs=old,
                ref_logprobs=mb.ref_logprobs,
                advantages=mb.advantages,
                mask=mb.mask,
                num_sequences=num_sequences,
                num_tokens=num_tokens,
                max_response_len=self.max_response_len,
            )
            out = loss_fn(train_batch)
            out.loss.backward()
            loss_total += float(out.loss.detach())
            weight = float(mb.mask.sum()) / max(num_tokens, 1)
            metrics = {**out.metrics, "entropy_sampled": -_masked_mean(logprobs, mb.mask)}
            for k, v in metrics.items():
                if k != "loss":
                    sums[k] = sums.get(k, 0.0) + weight * v
        if self.sharded:  # every rank reports the whole batch
            sums = sharding.sum_over_ranks({**sums, "loss": loss_total}, self.split.dp_group)
            loss_total = sums.pop("loss")
        # Over split gradients (DTensors) torch computes the global norm (the per-shard
        # norms are combined across ranks) and returns it as a DTensor.
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.config.grad_clip)
        if isinstance(grad_norm, DTensor):
            grad_norm = grad_norm.full_tensor()
        self.optimizer.step()
        self.version += 1
        return {
            "loss": loss_total,
            **sums,
            "grad_norm": float(grad_norm),
            "response_tokens": num_tokens,
        }

    def _padding_pass(self, batch: RolloutBatch, width: int, autocast) -> None:
        """A forward and backward that changes no gradient, for a rank with fewer rows
        than the others (FSDP2's collectives need the same passes on every rank). Any
        real row serves as input; its loss is zero times its log-probabilities, which
        leaves the algorithm's loss (and its handling of empty masks) out of it."""
        row = batch.rows(slice(0, 1)).to(self.device)
        with autocast:
            logprobs = response_logprobs(
                self.model, row.tokens, row.response_start, width, self.split
            )
        (logprobs.sum() * 0.0).backward()

    def train_step(self, inputs: list[dict], targets: list[dict]) -> float:
        """torchforge-compatible step: ``inputs = [{"tokens": [B, L]}]``, ``targets =
        [{"response": [B, T], "ref_logprobs", "advantages", "padding_mask"}]``, one entry
        per micro-batch, responses occupying the last T positions of ``tokens``. Uses the
        loss function set in ``self.loss_fn``; returns the loss as a float."""
        if self.loss_fn is None:
            raise RuntimeError("set trainer.loss_fn (e.g. algorithm.loss) before train_step")
        tokens = torch.cat([i["tokens"] for i in inputs])
        width = targets[0]["response"].shape[1]
        batch = RolloutBatch(
            tokens=tokens,
            response_start=torch.full((tokens.shape[0],), tokens.shape[1] - width),
            mask=torch.cat([t["padding_mask"] for t in targets]).float(),
            advantages=torch.cat([t["advantages"].reshape(-1) for t in targets]),
            ref_logprobs=torch.cat([t["ref_logprobs"] for t in targets])
            if targets[0].get("ref_logprobs") is not None
            else None,
        )
        saved = self.config.micro_batch_size
        self.config.micro_batch_size = inputs[0]["tokens"].shape[0]
        try:
            return float(self.step(batch, self.loss_fn)["loss"])
        finally:
            self.config.micro_batch_size = saved

    def hf_state_dict(self) -> dict[str, torch.Tensor]:
        """Current weights in Hugging Face naming (detached, contiguous); whole tensors on
        every rank when split."""
        state = {k: v.detach() for k, v in self.model.state_dict().items()}
        if self.split is not None:
            if self.model.enable_weight_tying:
                # the embedding's twin, which the export leaves out: not worth a gather
                del state["lm_head.weight"]
            state = sharding.full_tensors(state)
        return {k: v.contiguous() for k, v in self.adapter.to_hf(state).items()}

    def optimizer_state_dict(self) -> dict:
        """``torch.optim`` layout (parameters by position) with whole tensors, sharded or
        not: a checkpoint resumes at any world size."""
        if self.split is not None:
            return sharding.full_optimizer_state(self.optimizer)
        return self.optimizer.state_dict()

    def load_state(self, hf_state_dict: dict[str, torch.Tensor], optimizer_state: dict,
                   version: int) -> None:  # fmt: skip
        """Restore weights (Hugging Face naming), optimizer state and policy version.
        Split: every rank passes the same whole state and keeps its own part."""
        if self.split is not None:
            sharding.load_full_model_state(self.model, self.adapter.from_hf(hf_state_dict))
            sharding.load_full_optimizer_state(self.optimizer, optimizer_state)
        else:
            self.model.load_state_dict(self.adapter.from_hf(hf_state_dict), strict=True)
            self.optimizer.load_state_dict(optimizer_state)
        self.version = version

    def save_hf(self, directory: Path, source: Path) -> None:
        """Write the current weights as a Hugging Face checkpoint (config and tokenizer
        copied from ``source``)."""
        import shutil

        from safetensors.torch import save_file

        directory.mkdir(parents=True, exist_ok=True)
        for f in Path(source).iterdir():
            if f.is_file() and f.suffix != ".safetensors":
                shutil.copy2(f, directory / f.name)
        save_file(
            self.hf_state_dict(), str(directory / "model.safetensors"), metadata={"format": "pt"}
        )


def _masked_mean(values: torch.Tensor, mask: torch.Tensor) -> float:
    return float((values.detach() * mask).sum() / mask.sum().clamp(min=1))
