"""The value model (critic) of an algorithm with ``needs_values`` (PPO): the policy's
architecture and starting weights with a scalar head in place of the LM head, its own
weights and AdamW optimizer, served like the reference. The loop asks it for V(s_t) at
every response token of a batch (``values``, before the advantages) and trains it on the
algorithm's returns with the algorithm's ``value_loss`` after the policy's updates
(``train``: ``epochs`` x ``mini_batches`` optimizer steps, micro-batched for memory, as the
trainer does). Built only for such an algorithm, so other runs compute what they did.

V(s_t) is read at the position that predicts response token t (the state before the token
is chosen: ``response_hidden``), as verl and OpenRLHF read their critics. The head starts
at zero, so the first values are 0 and the first advantages the plain returns; no random
number is drawn, so both placements build the same critic. One process: the critic is not
split over several (no FSDP2 or tensor parallelism yet).
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import torch

from zoo.core.types import LossOutput, ValueBatch
from zoo.services.batch import RolloutBatch, response_hidden
from zoo.services.trainer import TrainerConfig, combine_updates, mini_batch_slices


class ValueModel(torch.nn.Module):
    """A decoder body (its LM head removed) and a linear head: V(s_t) per response token."""

    def __init__(self, body: torch.nn.Module) -> None:
        super().__init__()
        self.body = body
        self.body.lm_head = None  # never run: a critic reads the final hidden state
        hidden = body.norm.weight.shape[0]
        self.head = torch.nn.Linear(hidden, 1, device=body.norm.weight.device)
        with torch.no_grad():  # V = 0 at the start, no random draw (see the module)
            self.head.weight.zero_()
            self.head.bias.zero_()

    def forward(
        self, tokens: torch.Tensor, response_start: torch.Tensor, width: int
    ) -> torch.Tensor:
        hidden, _ = response_hidden(self.body, tokens, response_start, width)
        return self.head(hidden).squeeze(-1)


class Critic:
    def __init__(self, initial_model: torch.nn.Module, config: TrainerConfig) -> None:
        """``initial_model``: the policy's model before its first step (copied here, as the
        reference copies it). ``config``: the run's optimizer and regime sections, as the
        trainer gets them, with the critic's own learning rate (``critic_config_of``),
        held constant: the schedule fields are not read (verl's critic.optim.lr)."""
        self.config = config
        self.model = ValueModel(copy.deepcopy(initial_model)).train().requires_grad_(True)
        self.device = self.model.head.weight.device
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(),
            lr=config.optimizer.lr,
            betas=(config.optimizer.adam_beta1, config.optimizer.adam_beta2),
            eps=config.optimizer.adam_eps,
            weight_decay=config.optimizer.weight_decay,
        )

    def _values(self, batch: RolloutBatch, width: int) -> torch.Tensor:
        bf16 = self.config.mixed_precision == "bf16"
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=bf16):
            return self.model(batch.tokens, batch.response_start, width).float()

    def _micro_batches(self, batch: RolloutBatch) -> list[RolloutBatch]:
        size = self.config.regime.micro_batch_size or batch.size
        return [batch.rows(slice(i, i + size)).to(self.device) for i in range(0, batch.size, size)]

    @torch.no_grad()
    def values(self, batch: RolloutBatch) -> torch.Tensor:
        """[B, T] V(s_t) of each response token (0 on padding), on the CPU."""
        width = batch.mask.shape[1]
        parts = [self._values(mb, width).cpu() for mb in self._micro_batches(batch)]
        return torch.cat(parts) * batch.mask

    def train(self, batch: RolloutBatch, loss_fn: Callable[[ValueBatch], LossOutput]) -> dict:
        """``epochs`` passes over ``mini_batches`` group-aligned mini-batches of ``batch``
        (whose ``values`` and ``returns`` are set), one optimizer step each, on
        ``loss_fn`` (the algorithm's ``value_loss``). Returns the updates' metrics
        combined (mean; ``*_max``: max) and ``critic_grad_norm``."""
        if batch.values is None or batch.returns is None:
            raise ValueError("the critic trains on batch.values and batch.returns (set both)")
        slices = mini_batch_slices(batch.size, batch.group_size, self.config.regime.mini_batches)
        updates = [
            self.step(batch.rows(rows), loss_fn)
            for _ in range(self.config.regime.epochs)
            for rows in slices
        ]
        return combine_updates(updates)

    def step(self, batch: RolloutBatch, loss_fn: Callable[[ValueBatch], LossOutput]) -> dict:
        """One optimizer step; each micro-batch divides by the whole batch's tokens and
        its metrics weigh by its share of them (as ``Trainer.step`` combines them)."""
        width = batch.mask.shape[1]
        num_tokens = int(batch.mask.sum())
        self.optimizer.zero_grad(set_to_none=True)
        sums: dict[str, float] = {}
        for mb in self._micro_batches(batch):
            out = loss_fn(
                ValueBatch(
                    self._values(mb, width), mb.values, mb.returns, mb.mask, num_tokens=num_tokens
                )
            )
            out.loss.backward()
            weight = float(mb.mask.sum()) / max(num_tokens, 1)
            for k, v in out.metrics.items():
                sums[k] = (
                    max(sums.get(k, v), v) if k.endswith("_max") else sums.get(k, 0.0) + weight * v
                )
        norm = torch.nn.utils.clip_grad_norm_(
            self.model.parameters(), self.config.optimizer.grad_clip
        )
        for group in self.optimizer.param_groups:
            group["lr"] = self.config.optimizer.lr
        self.optimizer.step()
        return {**sums, "critic_grad_norm": float(norm)}

    def state_dict(self) -> dict:
        """The critic's weights and optimizer state (plain tensors: a checkpoint's)."""
        weights = {k: v.detach().cpu() for k, v in self.model.state_dict().items()}
        return {"weights": weights, "optimizer": self.optimizer.state_dict()}

    def load_state(self, state: dict) -> None:
        """Restore what ``state_dict`` gave (a resume)."""
        self.model.load_state_dict(state["weights"], strict=True)
        self.optimizer.load_state_dict(state["optimizer"])
