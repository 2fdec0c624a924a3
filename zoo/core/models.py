"""Model resolution and the Hugging Face <-> TorchTitan bridge.

A model is a directory in Hugging Face format (config.json, model.safetensors,
tokenizer.json). ``resolve_model`` turns a preset name or a path into such a directory;
``titan_qwen3_config`` turns its config.json into TorchTitan's Qwen3 model config.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch

from zoo.core.config import ConfigError

MODEL_PRESETS = {
    "tiny": "embedded ~476k-parameter Qwen3, warm-started on arithmetic (built here)",
    "tiny-code": "the tiny model warm-started on the pyfunc code env instead (built here; "
    "use --env pyfunc --max-response-len 9)",
}
"""Preset names; each one is a recipe in zoo.core.tiny.TINY_PRESETS."""


# Architecture of the Qwen3 dense family, as data (Hugging Face config.json fields; Qwen3
# technical report, arXiv 2505.09388, Table 1). Used to build random-init models for
# throughput measurements where the weights are not at hand.
QWEN3_COMMON = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "vocab_size": 151936,
    "head_dim": 128,
    "max_position_embeddings": 40960,
    "rms_norm_eps": 1e-6,
    "rope_theta": 1_000_000.0,
    "hidden_act": "silu",
    "torch_dtype": "bfloat16",
}
QWEN3_SHAPES = {
    "qwen3-0.6b": {"hidden_size": 1024, "num_hidden_layers": 28, "num_attention_heads": 16,
                   "num_key_value_heads": 8, "intermediate_size": 3072,
                   "tie_word_embeddings": True},
    "qwen3-1.7b": {"hidden_size": 2048, "num_hidden_layers": 28, "num_attention_heads": 16,
                   "num_key_value_heads": 8, "intermediate_size": 6144,
                   "tie_word_embeddings": True},
    "qwen3-4b": {"hidden_size": 2560, "num_hidden_layers": 36, "num_attention_heads": 32,
                 "num_key_value_heads": 8, "intermediate_size": 9728,
                 "tie_word_embeddings": True},
    "qwen3-8b": {"hidden_size": 4096, "num_hidden_layers": 36, "num_attention_heads": 32,
                 "num_key_value_heads": 8, "intermediate_size": 12288,
                 "tie_word_embeddings": False},
}  # fmt: skip


def qwen3_config_dir(name: str, root: Path) -> Path:
    """A directory holding only the config.json of a Qwen3 preset (no weights): enough for
    ``build_titan_model(..., init="random")`` and the FLOPs model."""
    if name not in QWEN3_SHAPES:
        raise ConfigError(f"unknown Qwen3 shape {name!r}; valid: {', '.join(QWEN3_SHAPES)}")
    directory = Path(root) / name
    directory.mkdir(parents=True, exist_ok=True)
    config = {**QWEN3_COMMON, **QWEN3_SHAPES[name]}
    (directory / "config.json").write_text(json.dumps(config, indent=2))
    return directory


@dataclass(frozen=True)
class ModelSpec:
    name: str
    path: Path
    """A directory in Hugging Face format."""


def check_model_name(name: str) -> None:
    """Raise ConfigError unless ``name`` is a preset or a local checkpoint directory.
    Cheap: builds nothing, so it can run before any work starts."""
    if name in MODEL_PRESETS or (Path(name).expanduser() / "config.json").exists():
        return
    raise ConfigError(
        f"unknown model {name!r}; valid models: {', '.join(MODEL_PRESETS)}, "
        "or a local directory with a Hugging Face Qwen3 checkpoint (config.json, *.safetensors)"
    )


def model_shape(name: str) -> ModelShape:
    """The shape of a model by name, without building or loading it."""
    check_model_name(name)
    if name in MODEL_PRESETS:
        from zoo.core.tiny import TINY_PRESETS, hf_config

        return ModelShape.from_config(hf_config(TINY_PRESETS[name]).to_dict())
    return ModelShape.from_hf_dir(Path(name).expanduser())


def training_memory_bytes(shape: ModelShape, sequences: int, seq_len: int, reference: bool,
                          kv_cache_gib: float = 1.0) -> float:  # fmt: skip
    """A rough upper estimate of host memory for a float32 run in one process: trainer
    weights, gradients and AdamW moments (16 bytes/param), the generator's and (if used)
    the reference's copies (4 bytes/param each), the KV cache, and activations kept for
    backward (~(16 hidden + 6 intermediate) floats per token per layer)."""
    params = shape.body_params + shape.head_params + shape.hidden_size * shape.vocab_size
    weights = params * (16 + 4 + (4 if reference else 0))
    per_token = shape.num_layers * (16 * shape.hidden_size + 6 * shape.intermediate_size) * 4
    logits = shape.vocab_size * 4 * 2
    return weights + sequences * seq_len * (per_token + logits) + kv_cache_gib * 2**30


def resolve_model(name: str, quiet: bool = False) -> ModelSpec:
    """A preset name ("tiny", "tiny-code") or a local directory holding a Qwen3 checkpoint."""
    check_model_name(name)
    if name in MODEL_PRESETS:
        from zoo.core.tiny import TINY_PRESETS, tiny_model_path

        return ModelSpec(name, tiny_model_path(TINY_PRESETS[name], quiet=quiet))
    path = Path(name).expanduser().resolve()
    return ModelSpec(path.name, path)


@dataclass(frozen=True)
class ModelShape:
    """What the compute ledger needs to count FLOPs."""

    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int

    @classmethod
    def from_hf_dir(cls, path: Path) -> ModelShape:
        return cls.from_config(json.loads((Path(path) / "config.json").read_text()))

    @classmethod
    def from_config(cls, c: dict) -> ModelShape:
        """From the fields of a Hugging Face Qwen3 config.json."""
        return cls(
            num_layers=c["num_hidden_layers"],
            hidden_size=c["hidden_size"],
            num_heads=c["num_attention_heads"],
            num_kv_heads=c.get("num_key_value_heads", c["num_attention_heads"]),
            head_dim=c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"],
            intermediate_size=c["intermediate_size"],
            vocab_size=c["vocab_size"],
        )

    @property
    def body_params(self) -> int:
        """Weights of the transformer blocks that multiply activations (norms excluded)."""
        d, hd = self.hidden_size, self.head_dim
        attention = d * hd * 2 * (self.num_heads + self.num_kv_heads)  # q, o; k, v
        mlp = 3 * d * self.intermediate_size  # gate, up, down
        return self.num_layers * (attention + mlp)

    @property
    def head_params(self) -> int:
        """The LM head (hidden x vocab). The embedding lookup does no matmul."""
        return self.hidden_size * self.vocab_size


def titan_qwen3_config(path: Path):
    """TorchTitan's Qwen3Model.Config for an HF Qwen3 checkpoint, with plain causal SDPA as
    the inner attention (TorchTitan's flex attention has no CPU backward and its varlen
    attention needs CUDA; shared/stack.md). Uses the layer builders of torchtitan 0.3.0's
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
    """All tensors of the checkpoint's safetensors files, in Hugging Face naming."""
    from safetensors.torch import load_file

    files = sorted(Path(path).glob("*.safetensors"))
    if not files:
        raise ConfigError(f"{path}: no *.safetensors weights found")
    state: dict[str, torch.Tensor] = {}
    for f in files:
        state.update(load_file(str(f)))
    return state


def build_titan_model(
    path: Path, init: str = "pretrained", device: str | torch.device = "cpu"
) -> tuple[torch.nn.Module, object]:
    """TorchTitan Qwen3 model and its state-dict adapter (HF <-> TorchTitan naming).

    ``init="pretrained"`` loads the checkpoint's weights; ``init="random"`` uses TorchTitan's
    own initialisation (for throughput at real sizes when weights are not at hand)."""
    from torchtitan.models.qwen3 import Qwen3StateDictAdapter

    if init not in ("pretrained", "random"):
        raise ConfigError(f"unknown init {init!r}; valid: pretrained, random")
    config = titan_qwen3_config(path)
    with torch.device("meta"):
        model = config.build()
    model.to_empty(device=device)
    adapter = Qwen3StateDictAdapter(config, str(path))
    with torch.no_grad():
        model.init_weights()  # also fills non-persistent buffers (RoPE tables)
    if init == "pretrained":
        model.load_state_dict(adapter.from_hf(load_hf_state_dict(path)), strict=True)
    return model, adapter
