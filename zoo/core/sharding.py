"""FSDP2 data parallelism for the trainer (torch's own ``fully_shard``; TorchTitan's
ParallelDims assumes CUDA, see shared/stack.md).

Every rank holds 1/world of each parameter, gradient and AdamW moment. The helpers here
are collectives unless said otherwise: every rank must call them, in the same order.
"""

from __future__ import annotations

import copy

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor, distribute_tensor


def world_size() -> int:
    """Ranks of the default process group; 1 when there is none."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size()
    return 1


def shard_model(model: torch.nn.Module, device: torch.device, bf16: bool) -> None:
    """Shard a TorchTitan decoder in place over all ranks of the default process group:
    one FSDP unit per transformer block, and the root unit holding what is left (token
    embedding, final norm, LM head)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard

    mesh = init_device_mesh(device.type, (world_size(),))
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


def sum_over_ranks(values: dict[str, float]) -> dict[str, float]:
    """Each key summed over ranks, in rank order, so every rank gets the same floats. A
    key missing on some rank (one with no rows) counts as 0 there."""
    gathered: list[dict[str, float] | None] = [None] * world_size()
    dist.all_gather_object(gathered, values)
    total: dict[str, float] = {}
    for part in gathered:
        for k, v in (part or {}).items():
            total[k] = total.get(k, 0.0) + v
    return total


def full_tensors(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """DTensors gathered to whole tensors, in ``state``'s order (so every rank must pass
    the same keys in the same order); other values unchanged."""
    return {k: v.full_tensor() if isinstance(v, DTensor) else v for k, v in state.items()}


def full_optimizer_state(optimizer: torch.optim.Optimizer) -> dict:
    """``optimizer.state_dict()`` with every sharded state tensor gathered whole: the same
    layout (parameters by position) as an unsharded optimizer's, so checkpoints do not
    depend on the world size."""
    state = optimizer.state_dict()
    # optimizer.state_dict() hands out the live state tensors; the unsharded ones (AdamW's
    # step counts) are cloned so later steps do not change a checkpoint taken now.
    return {
        "state": {
            i: {
                k: v.clone() if torch.is_tensor(v) and not isinstance(v, DTensor) else v
                for k, v in full_tensors(s).items()
            }
            for i, s in sorted(state["state"].items())
        },
        "param_groups": copy.deepcopy(state["param_groups"]),
    }


def load_full_optimizer_state(optimizer: torch.optim.Optimizer, state: dict) -> None:
    """Inverse of ``full_optimizer_state``: each rank keeps its own shard of each whole
    state tensor, cut like the parameter it belongs to. Every rank must pass the same
    ``state``; no communication (``src_data_rank=None``: each rank slices locally)."""
    params = [p for group in optimizer.param_groups for p in group["params"]]
    sharded: dict[int, dict] = {}
    for i, entry in state["state"].items():
        param = params[i]
        sharded[i] = {}
        for k, v in entry.items():
            if isinstance(param, DTensor) and torch.is_tensor(v) and v.shape == param.shape:
                v = distribute_tensor(
                    v.to(param.device), param.device_mesh, param.placements, src_data_rank=None
                )
            elif torch.is_tensor(v):
                v = v.clone()  # AdamW counts steps in place: leave the caller's copy alone
            sharded[i][k] = v
    optimizer.load_state_dict({"state": sharded, "param_groups": state["param_groups"]})


def load_full_model_state(model: torch.nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Load whole tensors (TorchTitan naming) into a sharded model, strictly: each rank
    keeps its shard. Every rank must pass the same ``state``.

    Not torch.distributed.checkpoint's set_model_state_dict: it matches keys against
    parameter names, while TorchTitan's fused attention saves and loads its ``wqkv``
    weight as separate wq/wk/wv entries through state-dict hooks. Here each whole tensor
    becomes a DTensor laid out like the model's own state-dict entry of that name (what
    the hooks expect), and load_state_dict does the rest."""
    layout = model.state_dict()  # gathers the hook-split entries, so a collective
    local = {}
    for k, v in state.items():
        like = layout.get(k)
        if isinstance(like, DTensor):
            v = distribute_tensor(
                v.to(like.device, like.dtype), like.device_mesh, like.placements,
                src_data_rank=None,
            )  # fmt: skip
        local[k] = v
    model.load_state_dict(local, strict=True)
