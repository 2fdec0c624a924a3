"""The Hugging Face <-> TorchTitan bridge: TorchTitan's Qwen3 model built from a Hugging
Face checkpoint directory, and the adapter that renames weights between the two (the
generators speak Hugging Face naming, the trainer TorchTitan's)."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from zoo.core.config import ConfigError
from zoo.models import parallelism
from zoo.models.presets import ModelShape


def titan_qwen3_config(path: Path):
    """TorchTitan's Qwen3Model.Config for an HF Qwen3 checkpoint, with plain causal SDPA as
    the inner attention (TorchTitan's flex attention has no CPU backward and its varlen
    attention needs CUDA; docs/stack.md). Uses the layer builders of torchtitan 0.3.0's
    qwen3 package (pinned)."""
    from torchtitan.models.common import CosSinRoPE, Embedding, Linear
    from torchtitan.models.common.attention import ScaledDotProductAttention
    from torchtitan.models.qwen3 import (
        _EMBEDDING_INIT,
        _LINEAR_INIT,
        Qwen3Model,
        _build_qwen3_layers,
        _qwen3_norm,
    )

    c = json.loads((Path(path) / "config.json").read_text())
    shape = ModelShape.from_hf_dir(path)
    rope = c.get("rope_parameters") or {}
    theta = float(rope.get("rope_theta", c.get("rope_theta", 1_000_000.0)))
    if abs(float(c.get("rms_norm_eps", 1e-6)) - 1e-6) > 1e-12:
        raise ConfigError(f"{path}: only rms_norm_eps=1e-6 (Qwen3's) is supported")
    layers = _build_qwen3_layers(
        n_layers=shape.num_layers,
        dim=shape.hidden_size,
        n_heads=shape.num_heads,
        n_kv_heads=shape.num_kv_heads,
        head_dim=shape.head_dim,
        hidden_dim=shape.intermediate_size,
        fuse_qkv=True,
        attn_backend="flex",  # replaced just below
        rope=CosSinRoPE.Config(
            dim=shape.head_dim, max_seq_len=c.get("max_position_embeddings", 4096), theta=theta
        ),
    )
    for layer in layers:
        layer.attention.inner_attention = ScaledDotProductAttention.Config()
    return Qwen3Model.Config(
        vocab_size=shape.vocab_size,
        dim=shape.hidden_size,
        norm=_qwen3_norm(shape.hidden_size),
        enable_weight_tying=bool(c.get("tie_word_embeddings", False)),
        tok_embeddings=Embedding.Config(
            num_embeddings=shape.vocab_size,
            embedding_dim=shape.hidden_size,
            param_init=_EMBEDDING_INIT,
        ),
        lm_head=Linear.Config(
            in_features=shape.hidden_size, out_features=shape.vocab_size, param_init=_LINEAR_INIT
        ),
        layers=layers,
    )


def load_hf_state_dict(path: Path) -> dict[str, torch.Tensor]:
    """All tensors of the checkpoint's safetensors files, in Hugging Face naming (a file
    cut short or not safetensors is an UnreadableFile naming it)."""
    from zoo.files import load_safetensors

    files = sorted(Path(path).glob("*.safetensors"))
    if not files:
        raise ConfigError(f"{path}: no *.safetensors weights found")
    state: dict[str, torch.Tensor] = {}
    for f in files:
        state.update(load_safetensors(f))
    return state


def build_titan_model(
    path: Path,
    init: str = "pretrained",
    device: str | torch.device = "cpu",
    tensor_parallel: int = 1,
) -> tuple[torch.nn.Module, object]:
    """TorchTitan Qwen3 model and its state-dict adapter (HF <-> TorchTitan naming).

    ``init="pretrained"`` loads the checkpoint's weights; ``init="random"`` uses TorchTitan's
    own initialisation (for throughput at real sizes when weights are not at hand).
    ``tensor_parallel`` > 1 gives the model TorchTitan's Qwen3 sharding plan; it is still
    whole until zoo.models.parallelism.parallelize splits it."""
    from torchtitan.models.qwen3 import Qwen3StateDictAdapter

    if init not in ("pretrained", "random"):
        raise ConfigError(f"unknown init {init!r}; valid: pretrained, random")
    config = titan_qwen3_config(path)
    if tensor_parallel > 1:
        parallelism.check_tensor_parallel(ModelShape.from_hf_dir(path), tensor_parallel)
        parallelism.tensor_parallel_plan(config, tensor_parallel)
    with torch.device("meta"):
        model = config.build()
    model.to_empty(device=device)
    # No assets path: TorchTitan reads it only for model.safetensors.index.json, to shard its
    # own HF saves (we save ourselves), and warns on every build when a checkpoint has one file.
    adapter = Qwen3StateDictAdapter(config, None)
    with torch.no_grad():
        model.init_weights()  # also fills non-persistent buffers (RoPE tables)
    if init == "pretrained":
        model.load_state_dict(adapter.from_hf(load_hf_state_dict(path)), strict=True)
    return model, adapter
