"""The reference policy: a frozen copy of the initial weights. The loop runs it only for
algorithms whose loss uses it (``algorithm.needs_reference``, i.e. beta > 0)."""

from __future__ import annotations

import copy

import torch

from zoo.services.batch import RolloutBatch, response_logprobs


class Reference:
    def __init__(
        self, initial_model: torch.nn.Module, micro_batch_size: int = 0, temperature: float = 1.0
    ) -> None:
        """``initial_model``: the trainer's model before its first step (copied here, so
        pretrained and random initialisations are handled alike). ``temperature``: the
        run's sampling temperature, at which the trainer scores tokens too."""
        self.model = copy.deepcopy(initial_model).eval().requires_grad_(False)
        self.device = next(self.model.parameters()).device
        self.micro_batch_size = micro_batch_size
        self.temperature = temperature

    @torch.no_grad()
    def logprobs(self, batch: RolloutBatch) -> torch.Tensor:
        """[B, T] log pi_ref of each response token (on the CPU, like the batch)."""
        width = batch.mask.shape[1]
        micro = self.micro_batch_size or batch.size
        parts = [
            response_logprobs(
                self.model, mb.tokens, mb.response_start, width, temperature=self.temperature
            ).cpu()
            for mb in (
                batch.rows(slice(i, i + micro)).to(self.device) for i in range(0, batch.size, micro)
            )
        ]
        return torch.cat(parts)
