"""The reference policy: a frozen copy of the initial weights. The loop runs it only for
algorithms whose loss uses it (``algorithm.needs_reference``, i.e. beta > 0)."""

from __future__ import annotations

from pathlib import Path

import torch

from zoo.core.models import build_titan_model
from zoo.core.trainer import RolloutBatch, response_logprobs


class Reference:
    def __init__(self, model_path: Path, micro_batch_size: int = 0) -> None:
        self.model, _ = build_titan_model(model_path)
        self.model.eval().requires_grad_(False)
        self.micro_batch_size = micro_batch_size

    @torch.no_grad()
    def logprobs(self, batch: RolloutBatch) -> torch.Tensor:
        """[B, T] log pi_ref of each response token."""
        width = batch.mask.shape[1]
        micro = self.micro_batch_size or batch.size
        parts = [
            response_logprobs(self.model, mb.tokens, mb.response_start, width)
            for mb in (batch.rows(slice(i, i + micro)) for i in range(0, batch.size, micro))
        ]
        return torch.cat(parts)
