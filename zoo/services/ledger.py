"""Compute accounting: model FLOPs, tokens and wall seconds per phase.

FLOPs are counted analytically from the model's shape (the usual 2-FLOPs-per-weight-per-
token rule, with attention). A forward pass over one token at 0-based position p costs

    2 * N_body + 4 * n_layers * n_heads * head_dim * (p + 1)      (+ 2 * N_head if the
                                                                    LM head runs there)

N_body = the transformer blocks' matmul weights, N_head = hidden * vocab (the LM head);
the attention term is QK^T and AV over the p + 1 visible positions. The LM head runs only
where a next token is needed: at each generated token's step in generation, and at the
response positions in the reference and trainer passes (prompt positions skip it). A
backward pass costs twice its forward, so training is 3x its forward.

- generation of R tokens after a P-token prompt: body over positions 0 .. P + R - 2 (the
  last sampled token is never fed back), head R times;
- reference / training forward over P + R tokens: body over all, head R times; the
  old-log-prob pass (the trainer's forward with the weights that sampled the batch, once
  per rollout batch) costs the same as a reference forward, and training is charged once
  per pass over the batch (``epochs``);
- a multi-turn episode (zoo.run.episodes) of T tokens after the prompt (assistant turns
  and the env's observations between them): charged once, when it ends, what the
  generator computed for it (``sample_flops``). Each turn is a generate request whose
  context is the prompt and everything before the turn; the generator reports how many
  of the context's first tokens it took from its prefix cache (``Completion.turn_requests``,
  vLLM's ``num_cached_tokens``: whole KV blocks, never the context's last token; always 0
  for the transformers backend, which recomputes every turn's context). A turn of C
  context tokens, c of them cached, R sampled costs the forward over positions
  c .. C + R - 2 with the LM head R times. With a cache that kept everything the turns
  would add up to generation_flops(P, T, head_tokens=A) (A sampled tokens; the least any
  engine can do); without one, each turn recomputes its whole context. Its tokens
  (observations included) count in ``generate_tokens``. The reference and training
  passes see the trajectory as one response of T tokens;
- the greedy completion (or episode) of each prompt that an algorithm with a greedy
  baseline asks for (ReMax; ``Algorithm.needs_greedy_baseline``): charged as generation,
  to its own optional phase ``baseline``, which only such runs report;
- a critic (an algorithm with ``needs_values``, zoo/services/value.py) is the policy's
  body with a scalar head: its forward over P + R tokens costs the body over all of them
  and 2 * hidden per response token (no LM head), charged to ``critic`` (the values
  before the advantages) and, at 3x per pass (forward and backward), to ``critic_train``.
  These phases appear in a step's record only once charged, so the records of runs
  without a critic keep their keys.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from zoo.models.presets import ModelShape

if TYPE_CHECKING:  # (an annotation only: the ledger imports no torch)
    from zoo.core.types import Completion

PHASES = ("generate", "score", "old_logprobs", "reference", "train", "sync")
"""The phases every run reports (``<phase>_flops``, ``_tokens``, ``_seconds`` per step)."""
CRITIC_PHASES = ("critic", "critic_train")
"""Phases of a learned critic's work (ppo): its values, and its training."""
OPTIONAL_PHASES = ("baseline", *CRITIC_PHASES)
"""Phases only some algorithms spend in, reported only by runs that open them
(``Ledger.open_phase``) or charge them, so that the records of every other run keep
exactly their keys. ``baseline``: the greedy completion of each prompt that ReMax's
baseline is (generated and scored; ``Algorithm.needs_greedy_baseline``), charged as
generation; ``CRITIC_PHASES``: a learned critic's work."""
ALL_PHASES = PHASES + OPTIONAL_PHASES


class Ledger:
    def __init__(self, shape: ModelShape) -> None:
        self.shape = shape
        self.flops: dict[str, float] = defaultdict(float)
        self.tokens: dict[str, int] = defaultdict(int)
        self.seconds: dict[str, float] = defaultdict(float)
        self.phases: tuple[str, ...] = PHASES
        """The phases this run reports: ``PHASES`` and any optional one it opened."""
        self._mark = self._snapshot()

    def open_phase(self, phase: str) -> None:
        """Report the optional ``phase`` (``OPTIONAL_PHASES``) in this run's step deltas
        from now on (the loop opens ``baseline`` for an algorithm that needs it)."""
        if phase not in OPTIONAL_PHASES:
            raise ValueError(f"{phase!r} is not an optional phase; valid: {OPTIONAL_PHASES}")
        if phase not in self.phases:
            self.phases = (*self.phases, phase)
            self._mark = {**self._mark, **self._snapshot((phase,))}

    def forward_flops(self, length: int, head_tokens: int, start: int = 0) -> float:
        """One forward pass over positions ``start`` .. length - 1 (the positions before
        ``start`` already cached: attended to, not computed), LM head on ``head_tokens``."""
        s = self.shape
        # sum over the computed positions of (p + 1)
        visible = length * (length + 1) // 2 - start * (start + 1) // 2
        attention = 4.0 * s.num_layers * s.num_heads * s.head_dim * visible
        computed = length - start
        return 2.0 * s.body_params * computed + attention + 2.0 * s.head_params * head_tokens

    def generation_flops(
        self,
        prompt_len: int,
        response_len: int,
        head_tokens: int | None = None,
        cached_tokens: int = 0,
    ) -> float:
        """Generating ``response_len`` tokens after a ``prompt_len``-token prompt, the LM
        head at ``head_tokens`` of them (default: all; an episode charged as one sequence:
        its assistant tokens, ``response_len`` counting its observations too), the
        prompt's first ``cached_tokens`` taken from a prefix cache (not computed)."""
        if response_len == 0:
            return 0.0
        head = response_len if head_tokens is None else head_tokens
        return self.forward_flops(
            prompt_len + response_len - 1, head_tokens=head, start=cached_tokens
        )

    def sample_flops(self, c: Completion) -> float:
        """What generating the sample ``c`` cost the generator. A multi-turn episode: the
        sum of its turns' requests, each from the end of its cached prefix (module
        docstring). A single-turn completion: ``generation_flops(P, R)``, its whole prompt,
        as before prefix caching (the prompt's blocks that its group's other samples or an
        earlier call left in vLLM's cache are charged again; docs/running.md)."""
        if c.turn_requests is None:
            return self.generation_flops(
                len(c.prompt_ids), len(c.token_ids), head_tokens=c.assistant_tokens
            )
        return sum(
            self.generation_flops(context, sampled, cached_tokens=cached)
            for context, cached, sampled in c.turn_requests
        )

    def scoring_flops(self, prompt_len: int, response_len: int) -> float:
        """A forward pass that scores a response (reference, or training's forward)."""
        return self.forward_flops(prompt_len + response_len, head_tokens=response_len)

    def value_flops(self, prompt_len: int, response_len: int) -> float:
        """A critic's forward over a scored response: the body over every position and
        the scalar value head (hidden x 1) at each response token, no LM head."""
        body = self.forward_flops(prompt_len + response_len, head_tokens=0)
        return body + 2.0 * self.shape.hidden_size * response_len

    def add(self, phase: str, flops: float = 0.0, tokens: int = 0) -> None:
        self.flops[phase] += flops
        self.tokens[phase] += tokens

    @contextmanager
    def timed(self, phase: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[phase] += time.perf_counter() - start

    @property
    def total_flops(self) -> float:
        return sum(self.flops.values())

    def _snapshot(self, phases: tuple[str, ...] | None = None) -> dict[str, float]:
        snap = {}
        if phases is None:  # the opened phases, and any optional one charged so far
            charged = (c for c in OPTIONAL_PHASES if c in self.flops and c not in self.phases)
            phases = (*self.phases, *charged)
        for p in phases:
            snap[f"{p}_seconds"] = self.seconds[p]
            snap[f"{p}_tokens"] = self.tokens[p]
            snap[f"{p}_flops"] = self.flops[p]
        return snap

    def step_delta(self) -> dict[str, float]:
        """Per-phase seconds, tokens and FLOPs since the previous call."""
        now = self._snapshot()
        delta = {k: now[k] - self._mark.get(k, 0) for k in now}
        self._mark = now
        return delta
