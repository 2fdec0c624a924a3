"""How the trainer's model is split over processes: FSDP2 data parallelism (torch's own
``fully_shard``) or tensor parallelism (TorchTitan's own sharding plan for Qwen3).

FSDP2: every rank holds 1/world of each parameter, gradient and AdamW moment, and trains
on its own rows of the batch. Tensor parallelism (``TensorParallel``): every rank runs
every row, holding 1/world of each weight matrix (attention heads, MLP columns,
vocabulary). The helpers here are collectives unless said otherwise: every rank must
call them, in the same order.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor, distribute_tensor

from zoo.core.config import ConfigError


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


# --- Tensor parallelism ---------------------------------------------------------------


def check_tensor_parallel(shape, degree: int) -> None:
    """Refuse a degree that does not divide what it splits (a ConfigError naming both).
    ``shape`` is a zoo.core.models.ModelShape. Not a collective."""
    if degree < 1:
        raise ConfigError(f"tensor_parallel_degree must be >= 1, got {degree}")
    splits = {
        "num_attention_heads": shape.num_heads,
        "num_key_value_heads": shape.num_kv_heads,
        "intermediate_size": shape.intermediate_size,
        "vocab_size": shape.vocab_size,
    }
    for field, size in splits.items():
        if size % degree:
            raise ConfigError(
                f"tensor_parallel_degree {degree} does not divide the model's {field} "
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


class TensorParallel:
    """A TorchTitan Qwen3 decoder split over all ranks of the default process group by
    ``Module.parallelize``, the plan set by ``tensor_parallel_plan`` before building it.

    Every rank builds the whole model with the same weights first; parallelising keeps
    each rank's slice. TorchTitan's spmd_types backend leaves parameters as plain local
    tensors, so this class reads from the plan what is needed to put whole tensors back
    together (the dimension each parameter is split on) and to finish the gradients:
    TorchTitan leaves the sum of some partial gradients (q_norm, k_norm) to FSDP, and
    ``reduce_grads`` does it here. Checked against one process in tests/test_fsdp.py."""

    def __init__(self, model: torch.nn.Module, device: torch.device) -> None:
        import spmd_types as spmd
        import torchtitan.distributed.parallel_dims as parallel_dims_module
        from torchtitan.distributed import ParallelDims
        from torchtitan.distributed import utils as titan_dist

        self.degree = world_size()
        self.rank = dist.get_rank()
        tied = getattr(model, "enable_weight_tying", False)
        # ParallelDims builds its mesh on torchtitan.tools.utils.device_type, which is
        # "cuda" on a machine without an accelerator (shared/stack.md): use ours.
        parallel_dims_module.device_type = device.type
        self.dims = ParallelDims(
            dp_replicate=1, dp_shard=1, cp=1, tp=self.degree, pp=1, ep=1,
            world_size=self.degree,
        )  # fmt: skip
        self.dims.build_mesh()
        self.group = self.dims.get_mesh("tp").get_group()
        model.parallelize(self.dims)
        if tied:  # parallelize registers a new Parameter per module: tie them again
            model.lm_head.weight = model.tok_embeddings.weight
        self.split_dim: dict[str, int | None] = {}
        """Each parameter's split dimension; None: every rank holds all of it."""
        self.partial_grad: list[torch.nn.Parameter] = []
        """Unsplit parameters whose gradients backward leaves as per-rank partial sums."""
        layouts = self._tp_layouts(model)
        for name, param in model.named_parameters():
            kind = layouts[name]
            self.split_dim[name] = kind.dim if isinstance(kind, spmd.Shard) else None
            if kind == spmd.R:  # replicated, gradient pending a sum ("I": complete)
                self.partial_grad.append(param)
        self.split_params = [
            p for n, p in model.named_parameters() if self.split_dim[n] is not None
        ]
        self.whole_params = [p for n, p in model.named_parameters() if self.split_dim[n] is None]
        self._context = titan_dist.get_spmd_context(parallel_dims=self.dims)

    @staticmethod
    def _tp_layouts(model: torch.nn.Module) -> dict:
        """Each parameter's spmd type on the tensor-parallel axis, from the sharding plan:
        Shard(d): split on dim d; I: unsplit, complete gradient; R: unsplit, partial
        gradient (TorchTitan leaves the sum to FSDP; there is none here)."""
        from torchtitan.distributed.parallel_dims import MeshAxisName

        kinds = {}
        for module_name, module in model.named_modules():
            plan = getattr(module, "_sharding_config", None)
            for pname, layout in (plan.state_shardings if plan else {}).items():
                if pname in module._parameters:
                    prefix = f"{module_name}." if module_name else ""
                    kinds[prefix + pname] = layout.per_axis_spmd_types()[MeshAxisName.TP]
        missing = [n for n, _ in model.named_parameters() if n not in kinds]
        if missing:
            raise RuntimeError(f"TorchTitan's tensor-parallel plan does not place {missing}")
        return kinds

    def context(self) -> AbstractContextManager:
        """Forward and backward run inside this (TorchTitan's spmd mesh context)."""
        return self._context()

    def vocab_logprobs(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """log softmax(logits)[target] over the whole vocabulary, given this rank's
        contiguous slice of it (the LM head is column-parallel): one all-reduce for the
        max (no gradient), two differentiable sums."""
        shard = logits.shape[-1]
        low = self.rank * shard
        with torch.no_grad():
            top = logits.max(dim=-1).values
            dist.all_reduce(top, op=dist.ReduceOp.MAX, group=self.group)
        shifted = logits - top[..., None]
        sum_exp = _SumOverGroup.apply(shifted.exp().sum(dim=-1), self.group)
        here = (targets >= low) & (targets < low + shard)
        local = (targets - low).clamp(0, shard - 1)
        target_logit = shifted.gather(-1, local[..., None]).squeeze(-1) * here
        return _SumOverGroup.apply(target_logit, self.group) - sum_exp.log()

    def reduce_grads(self) -> None:
        """Sum the partial gradients over ranks."""
        for p in self.partial_grad:
            if p.grad is not None:
                dist.all_reduce(p.grad, group=self.group)

    def clip_grad_norm(self, max_norm: float) -> torch.Tensor:
        """Global gradient norm (each element counted once) and clipping by it, as
        torch.nn.utils.clip_grad_norm_ does on one process."""
        split = sum((p.grad.float().pow(2).sum() for p in self._with_grad(self.split_params)),
                    torch.zeros(()))  # fmt: skip
        dist.all_reduce(split, group=self.group)
        whole = sum((p.grad.float().pow(2).sum() for p in self._with_grad(self.whole_params)),
                    torch.zeros(()))  # fmt: skip
        total = (split + whole).sqrt()
        torch.nn.utils.clip_grads_with_norm_(
            list(self._with_grad(self.split_params + self.whole_params)), max_norm, total
        )
        return total

    @staticmethod
    def _with_grad(params: list[torch.Tensor]) -> Iterator[torch.Tensor]:
        return (p for p in params if p.grad is not None)

    def whole(self, name: str, local: torch.Tensor) -> torch.Tensor:
        """The whole tensor of parameter ``name`` (or of a tensor shaped like it: its
        gradient, its AdamW moments) from every rank's slice."""
        dim = self.split_dim[name]
        if dim is None:
            return local.detach().clone()
        parts = [torch.empty_like(local) for _ in range(self.degree)]
        dist.all_gather(parts, local.detach().contiguous(), group=self.group)
        return torch.cat(parts, dim=dim)

    def local(self, name: str, whole: torch.Tensor) -> torch.Tensor:
        """This rank's slice of a whole tensor of parameter ``name``'s shape (the Shard
        placement's even split). Not a collective."""
        dim = self.split_dim[name]
        if dim is None:
            return whole.clone()
        return whole.chunk(self.degree, dim=dim)[self.rank].clone()

    def named_whole_parameters(self, model: torch.nn.Module) -> dict[str, torch.Tensor]:
        return {n: self.whole(n, p) for n, p in model.named_parameters()}

    def load_whole_parameters(self, model: torch.nn.Module, state: dict[str, torch.Tensor]) -> None:
        """Copy whole tensors (TorchTitan parameter names, fused QKV) into the local slices,
        strictly: every parameter must be given. Not a collective."""
        params = dict(model.named_parameters())
        missing = sorted(set(params) - set(state))
        if missing:
            raise KeyError(f"no weights for {missing}")
        with torch.no_grad():
            for name, p in params.items():
                p.copy_(self.local(name, state[name]))

    def whole_optimizer_state(
        self, model: torch.nn.Module, optimizer: torch.optim.Optimizer
    ) -> dict:
        """``optimizer.state_dict()`` with whole state tensors (see full_optimizer_state)."""
        return _map_optimizer_state(model, optimizer.state_dict(), self.whole)

    def load_whole_optimizer_state(
        self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, state: dict
    ) -> None:
        optimizer.load_state_dict(_map_optimizer_state(model, state, self.local))


def _map_optimizer_state(
    model: torch.nn.Module,
    state: dict,
    convert: Callable[[str, torch.Tensor], torch.Tensor],
) -> dict:
    """``state`` (torch.optim layout) with ``convert(name, tensor)`` applied to each
    non-scalar state tensor (AdamW's moments, shaped like their parameter); scalars (step
    counts) cloned. Parameters are matched by position to ``model.named_parameters()``,
    the order the optimizer was given them in."""
    names = [n for n, _ in model.named_parameters()]
    out = {}
    for i, entry in sorted(state["state"].items()):
        out[i] = {}
        for k, v in entry.items():
            if torch.is_tensor(v) and v.dim() > 0:
                v = convert(names[i], v)
            elif torch.is_tensor(v):
                v = v.clone()
            out[i][k] = v
    return {"state": out, "param_groups": copy.deepcopy(state["param_groups"])}


def fused_to_stock_qkv(model: torch.nn.Module, state: dict[str, torch.Tensor]) -> dict:
    """Whole parameters with each fused ``wqkv`` split into the ``wq``/``wk``/``wv``
    entries that model.state_dict() gives (TorchTitan's own save hook does the split)."""
    return _apply_qkv_hook(model, state, "_split_qkv_on_save")


def stock_to_fused_qkv(model: torch.nn.Module, state: dict[str, torch.Tensor]) -> dict:
    """The inverse: ``wq``/``wk``/``wv`` merged back into ``wqkv`` (TorchTitan's load hook)."""
    return _apply_qkv_hook(model, state, "_merge_qkv_on_load")


def _apply_qkv_hook(model: torch.nn.Module, state: dict, hook: str) -> dict:
    from torchtitan.models.common.attention import FusedQKVLinear

    state = dict(state)
    for name, module in model.named_modules():
        if isinstance(module, FusedQKVLinear):
            getattr(FusedQKVLinear, hook)(module, state, f"{name}.", None)
    return state
