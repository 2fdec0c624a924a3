"""How much memory a run needs, estimated from the model's shape before anything is built:
weights, gradients, AdamW state, the generator's copy and KV cache, the reference model,
activations (``list models`` prints it; the pre-flight check refuses a run that does not
fit)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from zoo.models.presets import ModelShape


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes one run needs in one process, by part: a rough upper estimate that the
    pre-flight check compares with the machine's memory."""

    weights: float
    """Trainer weights, float32 masters (also under bf16 compute: TorchTitan's policy)."""
    gradients: float
    optimizer: float
    """AdamW's two moments."""
    generator: float
    """The generator's copy of the weights, in the compute dtype."""
    reference: float
    """The frozen reference copy, when the algorithm uses one."""
    kv_cache: float
    """K and V of every sequence of one step at once, all layers, in the compute dtype.
    With less memory free the generator runs fewer sequences at a time (slower)."""
    kv_cache_minimum: float
    """K and V of one micro-batch of sequences: below this generation cannot batch."""
    activations: float
    """Kept for backward over one micro-batch (~16 hidden + 6 intermediate values per token
    per layer), plus its float32 logits and their gradient."""
    kept_weights: float = 0.0
    """Async mode: the trainer's copies of its weights of earlier policy versions (float32,
    one per version of max_policy_age), to score batches those versions sampled."""

    @property
    def total(self) -> float:
        """Everything, with the whole step's sequences generated at once."""
        return sum(dataclasses.astuple(self)) - self.kv_cache_minimum

    @property
    def minimum(self) -> float:
        """Everything, with the smallest useful KV cache: what the pre-flight check asks."""
        return self.total - self.kv_cache + self.kv_cache_minimum

    def trainer_split(self, procs: int) -> MemoryEstimate:
        """What the first GPU holds when the trainer is split over ``procs`` processes, one
        GPU each (FSDP2 or tensor parallelism): 1/procs of the trainer's weights,
        gradients and optimizer state; its activations, the generator, its KV cache and
        the reference unsplit (they share that GPU; an upper estimate)."""
        return dataclasses.replace(
            self,
            weights=self.weights / procs,
            gradients=self.gradients / procs,
            optimizer=self.optimizer / procs,
            kept_weights=self.kept_weights / procs,
        )


def memory_estimate(
    shape: ModelShape,
    *,
    sequences: int,
    seq_len: int,
    micro_batch: int,
    reference: bool,
    compute_bytes: int = 4,
    kept_versions: int = 0,
) -> MemoryEstimate:
    """Memory of a run with ``sequences`` per step of up to ``seq_len`` tokens, trained
    ``micro_batch`` sequences at a time; ``compute_bytes`` 4 (float32, CPU) or 2 (bf16);
    ``kept_versions``: earlier weights the trainer keeps (async mode's max_policy_age)."""
    params = shape.params
    per_token = shape.num_layers * (16 * shape.hidden_size + 6 * shape.intermediate_size)
    kv_per_token = shape.num_layers * 2 * shape.num_kv_heads * shape.head_dim
    return MemoryEstimate(
        weights=4 * params,
        gradients=4 * params,
        optimizer=8 * params,
        generator=compute_bytes * params,
        reference=compute_bytes * params if reference else 0.0,
        kv_cache=compute_bytes * kv_per_token * sequences * seq_len,
        kv_cache_minimum=compute_bytes * kv_per_token * min(micro_batch, sequences) * seq_len,
        activations=micro_batch * seq_len * (compute_bytes * per_token + 8 * shape.vocab_size),
        kept_weights=4 * params * kept_versions,
    )
