"""What both generation backends share: the sampling settings, the busy-time counter and
the text of a completion.

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


def completion_text(tokenizer: Any, prompt: list[int], ids: list[int]) -> str:
    """The text of the completion ``ids`` (the stop token left out) as vLLM writes it:
    decoded token by token after the prompt, bytes that do not yet make a character held
    back, and those still held at the end left out (a plain ``decode`` writes U+FFFD for
    them: "5" and a stray byte is "5" here, "5\ufffd" there). A slow tokenizer (no
    ``tokenizers`` backend) decodes plainly."""
    backend = getattr(tokenizer, "_tokenizer", None)
    if backend is None:
        return tokenizer.decode(ids, skip_special_tokens=True)
    from tokenizers.decoders import DecodeStream

    stream = DecodeStream(ids=list(prompt), skip_special_tokens=True)
    return "".join(stream.step(backend, token) or "" for token in ids)
