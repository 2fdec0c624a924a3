"""What both generation backends share: the sampling settings and the busy-time counter.

The backends of zoo.services.generation (``vllm.py``, ``hf.py``) both import from here,
so neither imports the other.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass
class SamplingConfig:
    temperature: float = 1.0
    """Sampling temperature T: tokens are drawn from softmax(logits / T), and the logprobs
    reported are of that distribution (the trainer scores tokens at the same T)."""
    top_p: float = 1.0
    max_tokens: int = 6
    """Generation budget L_max: new tokens per response."""
    ignore_eos: bool = False
    """Always generate max_tokens (benchmarks: fixed lengths from random-weight models)."""


def counts_busy(generate: Callable) -> Callable:
    """Adds each call's wall seconds to ``self.busy_seconds`` (the loop's generator
    idle-time metric)."""

    @functools.wraps(generate)
    def timed(self: Any, *args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return generate(self, *args, **kwargs)
        finally:
            self.busy_seconds += time.perf_counter() - start

    return timed
