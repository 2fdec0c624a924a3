"""Parallelism applied to the trainer's model from outside it, as TorchTitan applies it
outside its train step: ``parallelize(model, ...)`` returns how the model and each batch
are split over the ranks of the default process group, and the trainer's step stays the
one-process loop (micro-batches, loss, backward, optimizer step).

``OneProcess`` is the plain case: every row here, nothing to combine. ``Split`` adds FSDP2
data parallelism (torch's own ``fully_shard``), tensor parallelism (TorchTitan's own
sharding plan for Qwen3), or both (2-D). FSDP2: each data-parallel rank holds 1/dp of each
parameter, gradient and AdamW moment, and trains on its own rows of the batch. Tensor
parallelism: the ranks of a group run the same rows, each holding 1/tp of each weight
matrix (attention heads, MLP columns, vocabulary). The helpers here are collectives unless
said otherwise: every rank must call them, in the same order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Protocol, Self

import torch
import torch.distributed as dist

from zoo.core.config import ConfigError
from zoo.models.sharded_state import (
    full_optimizer_state,
    full_tensors,
    load_full_model_state,
    load_full_optimizer_state,
)

if TYPE_CHECKING:
    from zoo.models.presets import ModelShape


def world_size() -> int:
    """Ranks of the default process group; 1 when there is none."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size()
    return 1


def shard_model(model: torch.nn.Module, mesh, bf16: bool) -> None:
    """Shard a TorchTitan decoder in place over the ranks of ``mesh`` (a 1-D DeviceMesh):
    one FSDP unit per transformer block, and the root unit holding what is left (token
    embedding, final norm, LM head). Tensor-parallel parameters (DTensors on another mesh)
    are sharded again along it: 2-D."""
    from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard

    # bf16 compute with float32 master weights and optimizer state, gradients reduced
    # over ranks in float32 (without sharding the trainer uses autocast instead).
    mp_policy = (
        MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        if bf16
        else MixedPrecisionPolicy()
    )
    tied = getattr(model, "enable_weight_tying", False)
    for block in model.layers.values():
        fully_shard(block, mesh=mesh, mp_policy=mp_policy)
    # The embedding, norm and LM head stay in the root unit. Two reasons:
    # - with tied embeddings tok_embeddings.weight and lm_head.weight are one Parameter,
    #   and FSDP2 keeps a shared Parameter shared only within one unit;
    # - response_logprobs calls model.lm_head itself after the root forward (which skips
    #   the head). reshard_after_forward=False keeps the root's gathered weights in place
    #   until backward, so that call sees whole weights, and its gradient lands in the
    #   gathered parameter that the root reduce-scatters at the end of backward.
    fully_shard(model, mesh=mesh, mp_policy=mp_policy, reshard_after_forward=False)
    if tied and model.tok_embeddings.weight is not model.lm_head.weight:
        raise RuntimeError("FSDP2 sharding untied the embedding and LM head weights")
    # Each rank's loss divides by whole-batch counts, so the per-rank gradients must be
    # summed, not averaged (FSDP2's default divides the reduce-scatter by world size).
    # Divide factor 1 alone would reduce with PREMUL_SUM(1), which gloo lacks; forcing
    # sum-only reductions makes it a plain SUM (a division by 1 is skipped) everywhere.
    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.set_gradient_divide_factor(1.0)
            module.set_force_sum_reduction_for_comms(True)


def row_slice(size: int, rank: int, world: int) -> slice:
    """This rank's contiguous rows of a ``size``-row batch (torch.tensor_split's
    partition: the first ``size % world`` ranks get one row more). Not a collective."""
    base, extra = divmod(size, world)
    start = rank * base + min(rank, extra)
    return slice(start, start + base + (rank < extra))


def sum_over_ranks(values: dict[str, float], group=None) -> dict[str, float]:
    """Each key summed over the ranks of ``group`` (default: all), in rank order, so every
    rank gets the same floats; ``*_max`` keys take the maximum instead. A key missing on
    some rank (one with no rows) is left out there."""
    gathered: list[dict[str, float] | None] = [None] * dist.get_world_size(group)
    dist.all_gather_object(gathered, values, group=group)
    total: dict[str, float] = {}
    for part in gathered:
        for k, v in (part or {}).items():
            if k not in total:
                total[k] = v
            else:
                total[k] = max(total[k], v) if k.endswith("_max") else total[k] + v
    return total


# --- Tensor parallelism, and FSDP2 over tensor-parallel groups -----------------------


def check_tensor_parallel(
    shape: ModelShape, degree: int, setting: str = "tensor_parallel_degree"
) -> None:
    """Refuse a degree that does not divide what it splits (a ConfigError naming the
    ``setting`` that asked for it and the model's sizes). Not a collective."""
    if degree < 1:
        raise ConfigError(f"{setting} must be >= 1, got {degree}")
    splits = {
        "num_attention_heads": shape.num_heads,
        "num_key_value_heads": shape.num_kv_heads,
        "intermediate_size": shape.intermediate_size,
        "vocab_size": shape.vocab_size,
    }
    for field, size in splits.items():
        if size % degree:
            raise ConfigError(
                f"{setting} {degree} does not divide the model's {field} "
                f"({size}); valid degrees divide all of "
                + ", ".join(f"{k}={v}" for k, v in splits.items())
            )


def tensor_parallel_plan(model_config, degree: int) -> None:
    """Give a TorchTitan Qwen3Model.Config TorchTitan's own Qwen3 sharding plan (before the
    model is built): column-parallel QKV, w1, w3 and LM head, row-parallel wo and w2,
    vocabulary-parallel embedding, replicated norms; no sequence parallelism."""
    from types import SimpleNamespace

    from torchtitan.config import ParallelismConfig

    # Sequence parallelism would split activations along the sequence, which must then
    # divide by the degree; RL batches have whatever length the longest response gives.
    parallelism = ParallelismConfig(tensor_parallel_degree=degree, enable_sequence_parallel=False)
    runtime = SimpleNamespace(parallelism=parallelism)
    model_config.update_from_config(config=runtime)


class Rows(Protocol):
    """A batch of rows (the trainer's RolloutBatch): its size, and a part of it."""

    @property
    def size(self) -> int: ...

    def rows(self, rows: slice) -> Self: ...


class OneProcess:
    """No parallelism: this process computes every row and holds whole tensors. The
    methods are what the trainer's step calls; ``Split`` gives them their multi-process
    meaning."""

    tensor_parallel = 1
    data_parallel = 1
    dp_rank = 0
    fsdp = False
    """Data parallel: each rank computes its own rows of every batch."""

    def __init__(self, empty_pass: Callable[[Rows], None] | None = None) -> None:
        self.empty_pass = empty_pass
        """A forward of one row (and, when gradients are on, a backward) that changes
        nothing: what a rank whose rows ran out runs while the others still compute, so
        that every rank makes the same collectives. Unused in one process."""

    def autocast(self, device: torch.device, bf16: bool):
        """The context that computes in bf16 when asked (sharded bf16 computes through
        FSDP2's mixed-precision policy instead)."""
        return torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16 and not self.fsdp)

    def local_rows(self, size: int) -> slice:
        """This rank's contiguous rows of a ``size``-row batch. Not a collective."""
        return slice(0, size)

    def micro_batches(self, batch: Rows, micro_batch_size: int) -> Iterator[tuple[int, Rows]]:
        """(index of the first row, micro-batch) over this rank's rows of ``batch``,
        ``micro_batch_size`` rows each (0: all of them at once). Every rank makes as many
        passes as the one with the most rows (the first: ``row_slice``); a rank with fewer
        runs ``empty_pass`` for the rest."""
        rows = self.local_rows(batch.size)
        most = -(-batch.size // self.data_parallel)
        micro = micro_batch_size or max(most, 1)
        for start in range(0, -(-most // micro) * micro, micro):
            first = rows.start + start
            if first >= rows.stop:
                self.empty_pass(batch.rows(slice(0, 1)))
                continue
            yield first, batch.rows(slice(first, min(first + micro, rows.stop)))

    def gather_rows(self, values: torch.Tensor) -> torch.Tensor:
        """Per-row results (zero on the rows of other ranks) made whole on every rank."""
        return values

    def sum_metrics(self, values: dict[str, float]) -> dict[str, float]:
        """Metrics summed over the data-parallel ranks (``*_max`` keys: the maximum)."""
        return values

    def reshard(self) -> None:
        """Drop gathered weights that a forward kept, so that the next forward sees the
        parameters as they are now."""

    def whole_state(self, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The model's state dict with whole tensors, the same on every rank."""
        return state

    def load_whole_state(self, model: torch.nn.Module, state: dict[str, torch.Tensor]) -> None:
        model.load_state_dict(state, strict=True)

    def optimizer_state(self, optimizer: torch.optim.Optimizer) -> dict:
        """The optimizer's state dict with whole tensors (``full_optimizer_state``)."""
        return optimizer.state_dict()

    def load_optimizer_state(self, optimizer: torch.optim.Optimizer, state: dict) -> None:
        optimizer.load_state_dict(state)


def parallelize(
    model: torch.nn.Module,
    device: torch.device,
    tensor_parallel: int = 1,
    bf16: bool = False,
    empty_pass: Callable[[Rows], None] | None = None,
) -> OneProcess:
    """Split ``model`` in place over the ranks of the default process group (FSDP2 over
    ``world / tensor_parallel`` data-parallel ranks, tensor parallelism within groups of
    ``tensor_parallel``) and return how batches are split with it; ``OneProcess`` when
    there is no group of more than one rank. Each rank splits its own copy: they agree as
    long as every rank built the same weights (a checkpoint, or the same seed)."""
    if world_size() == 1:
        return OneProcess(empty_pass)
    return Split(model, device, tensor_parallel, bf16, empty_pass)


class _SumOverGroup(torch.autograd.Function):
    """All-reduce (sum) forward, identity backward: every rank computes the same loss from
    the sum, so the gradient of its own term is the gradient of the sum (Megatron-LM's
    reduce-from-tensor-parallel region, Shoeybi et al. 2019)."""

    @staticmethod
    def forward(ctx, tensor: torch.Tensor, group) -> torch.Tensor:
        out = tensor.clone()
        dist.all_reduce(out, group=group)
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return grad, None


class Split(OneProcess):
    """How the trainer's model is split over all ranks of the default process group:
    ``tensor_parallel`` ranks per tensor-parallel group (TorchTitan's Qwen3 plan, applied
    by its ``Module.parallelize``), and FSDP2 over the groups (world / tensor_parallel
    data-parallel ranks, each training on its own rows). Either can be 1.

    Parameters end up DTensors (on the tensor-parallel mesh, the FSDP2 mesh, or both), so
    whole tensors come back with ``full_tensor`` and go in with ``distribute_tensor``
    (the helpers above), and torch's gradient clipping sees the global norm. TorchTitan's
    DTensor backend ("partial_dtensor") is used rather than its default spmd_types one:
    with the latter, fully_shard refuses the plain local tensors it leaves
    ("all parameters must be DTensors on the full SPMD mesh"), so FSDP2 could not go on
    top."""

    def __init__(
        self,
        model: torch.nn.Module,
        device: torch.device,
        tensor_parallel: int,
        bf16: bool,
        empty_pass: Callable[[Rows], None] | None = None,
    ) -> None:
        from torch.distributed.device_mesh import init_device_mesh

        super().__init__(empty_pass)
        self.model = model
        world = world_size()
        self.tensor_parallel = tensor_parallel
        self.data_parallel = world // tensor_parallel
        self.tp_group = None
        self.tp_rank = 0
        if tensor_parallel > 1:
            dims = _parallel_dims(device, self.data_parallel, tensor_parallel)
            tied = getattr(model, "enable_weight_tying", False)
            model.parallelize(dims)
            if tied:  # parallelize registers a new Parameter per module: tie them again
                model.lm_head.weight = model.tok_embeddings.weight
            tp_mesh = dims.get_mesh("tp")
            self.tp_group, self.tp_rank = tp_mesh.get_group(), tp_mesh.get_local_rank()
            dp_mesh = dims.get_mesh("fsdp") if self.data_parallel > 1 else None
        else:
            dp_mesh = init_device_mesh(device.type, (world,)) if world > 1 else None
        self.dp_group = dp_mesh.get_group() if dp_mesh is not None else None
        self.dp_rank = dp_mesh.get_local_rank() if dp_mesh is not None else 0
        if dp_mesh is not None:
            shard_model(model, dp_mesh, bf16)

    @property
    def fsdp(self) -> bool:
        """Data parallel: each rank trains on its own rows of every batch."""
        return self.data_parallel > 1

    def local_rows(self, size: int) -> slice:
        if self.fsdp:
            return row_slice(size, self.dp_rank, self.data_parallel)
        return slice(0, size)

    def gather_rows(self, values: torch.Tensor) -> torch.Tensor:
        if self.fsdp:  # each data-parallel rank filled its own rows
            dist.all_reduce(values, group=self.dp_group)
        return values

    def sum_metrics(self, values: dict[str, float]) -> dict[str, float]:
        return sum_over_ranks(values, self.dp_group) if self.fsdp else values

    def reshard(self) -> None:
        # FSDP2 keeps the root's gathered weights after a forward (``shard_model``).
        if self.fsdp:
            from torch.distributed.fsdp import FSDPModule

            for module in self.model.modules():
                if isinstance(module, FSDPModule):
                    module.reshard()

    def whole_state(self, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        if getattr(self.model, "enable_weight_tying", False):
            # the embedding's twin, which the Hugging Face export leaves out: not worth
            # a gather
            state = {k: v for k, v in state.items() if k != "lm_head.weight"}
        return full_tensors(state)

    def load_whole_state(self, model: torch.nn.Module, state: dict[str, torch.Tensor]) -> None:
        load_full_model_state(model, state)

    def optimizer_state(self, optimizer: torch.optim.Optimizer) -> dict:
        return full_optimizer_state(optimizer)

    def load_optimizer_state(self, optimizer: torch.optim.Optimizer, state: dict) -> None:
        load_full_optimizer_state(optimizer, state)

    def vocab_logprobs(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """log softmax(logits)[target] over the whole vocabulary, given this rank's
        contiguous slice of it (the column-parallel LM head's output, [..., V / tp]): one
        all-reduce for the max (no gradient), two differentiable sums. The whole logits
        are never gathered."""
        shard = logits.shape[-1]
        low = self.tp_rank * shard
        with torch.no_grad():
            top = logits.max(dim=-1).values
            dist.all_reduce(top, op=dist.ReduceOp.MAX, group=self.tp_group)
        shifted = logits - top[..., None]
        sum_exp = _SumOverGroup.apply(shifted.exp().sum(dim=-1), self.tp_group)
        here = (targets >= low) & (targets < low + shard)
        local = (targets - low).clamp(0, shard - 1)
        target_logit = shifted.gather(-1, local[..., None]).squeeze(-1) * here
        return _SumOverGroup.apply(target_logit, self.tp_group) - sum_exp.log()


def _parallel_dims(device: torch.device, data_parallel: int, tensor_parallel: int):
    """TorchTitan's ParallelDims for (FSDP2 data shards) x (tensor parallel), its meshes
    built, on TorchTitan's DTensor backend."""
    import torchtitan.distributed.parallel_dims as parallel_dims_module
    from torchtitan.distributed import ParallelDims
    from torchtitan.distributed import utils as titan_dist

    # ParallelDims builds its mesh on torchtitan.tools.utils.device_type, which is
    # "cuda" on a machine without an accelerator (docs/stack.md): use ours.
    parallel_dims_module.device_type = device.type
    titan_dist.set_spmd_backend("partial_dtensor")  # (a process-wide TorchTitan setting)
    dims = ParallelDims(
        dp_replicate=1,
        dp_shard=data_parallel,
        cp=1,
        tp=tensor_parallel,
        pp=1,
        ep=1,
        world_size=data_parallel * tensor_parallel,
        spmd_backend="partial_dtensor",
    )
    dims.build_mesh()
    return dims
