"""Whole tensors in and out of a split model and its optimizer: what checkpoints and
weight sync need so that they do not depend on how many processes trained (a checkpoint
written by 4 FSDP2 ranks resumes in one process, and back). Each function is a collective
on the ranks that hold the DTensors: every rank calls it, with the same arguments."""

from __future__ import annotations

import copy

import torch
from torch.distributed.tensor import DTensor, distribute_tensor


def full_tensors(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """DTensors gathered to whole tensors, in ``state``'s order (so every rank must pass
    the same keys in the same order); other values unchanged. Always new memory: a
    snapshot does not change with later steps."""
    return {k: _whole(v) if isinstance(v, DTensor) else v for k, v in state.items()}


def _whole(tensor: DTensor) -> torch.Tensor:
    whole = tensor.full_tensor()
    # A DTensor replicated on every mesh axis (a norm's weight under tensor parallelism)
    # hands out its local tensor itself.
    return whole.clone() if whole.data_ptr() == tensor.to_local().data_ptr() else whole


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
            # AdamW updates its state in place: leave the caller's copy alone (a replicated
            # DTensor would otherwise hold the caller's tensor itself).
            if torch.is_tensor(v):
                v = v.to(param.device, copy=True)
            if isinstance(param, DTensor) and torch.is_tensor(v) and v.shape == param.shape:
                v = distribute_tensor(v, param.device_mesh, param.placements, src_data_rank=None)
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
                v.to(like.device, like.dtype),
                like.device_mesh,
                like.placements,
                src_data_rank=None,
            )
        local[k] = v
    model.load_state_dict(local, strict=True)
