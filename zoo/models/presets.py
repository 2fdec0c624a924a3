"""Model presets and resolution: which models there are and their shapes.

A model is a directory in Hugging Face format (config.json, model.safetensors,
tokenizer.json). ``resolve_model`` turns a preset name or a path into such a directory;
``ModelShape`` reads the sizes the ledger, the memory estimates and the parallelism
checks need from its config.json. zoo.models.titan builds the trainable model from it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from zoo.core.config import ConfigError

TINY_MODELS = {
    "tiny": "embedded ~476k-parameter Qwen3, warm-started on arithmetic (shipped weights)",
    "tiny-code": "the tiny model warm-started on the pyfunc code env instead (shipped weights; "
    "use --env pyfunc --max-response-len 12)",
    "tiny-tool": "the tiny model warm-started on tool_arithmetic, answering directly or "
    "through the calculator tool (shipped weights; use --env tool_arithmetic "
    "--max-response-len 16)",
    "tiny-code-feedback": "the tiny model warm-started on pyfunc and on revisions after "
    "pyfunc_feedback's feedback (shipped weights; use --env pyfunc_feedback --max-response-len 12)",
    "tiny-sum": "the tiny model warm-started on running_sum's chains of partial sums, the "
    "reasoning testbed (shipped weights; use --env running_sum --max-response-len 64)",
}
"""Presets warm-started by forge-zoo, each a recipe in zoo.models.tiny.TINY_PRESETS whose
weights ship in zoo/models/start_weights."""

QWEN3_HF_IDS = {
    "qwen3-0.6b": "Qwen/Qwen3-0.6B",
    "qwen3-1.7b": "Qwen/Qwen3-1.7B",
    "qwen3-4b": "Qwen/Qwen3-4B",
    "qwen3-8b": "Qwen/Qwen3-8B",
}
"""Released Qwen3 dense models: downloaded from the Hub by these ids on first use into the
Hugging Face cache (zoo.hub), read from the cache or ``--model-path`` offline."""

MODEL_PRESETS = {
    **TINY_MODELS,
    **{
        name: f"{hf_id} from the Hugging Face Hub (downloaded on first use; offline: the "
        "cache or --model-path)"
        for name, hf_id in QWEN3_HF_IDS.items()
    },
}
"""Every preset name with a one-line description."""

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
    "qwen3-0.6b": {
        "hidden_size": 1024,
        "num_hidden_layers": 28,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "intermediate_size": 3072,
        "tie_word_embeddings": True,
    },
    "qwen3-1.7b": {
        "hidden_size": 2048,
        "num_hidden_layers": 28,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "intermediate_size": 6144,
        "tie_word_embeddings": True,
    },
    "qwen3-4b": {
        "hidden_size": 2560,
        "num_hidden_layers": 36,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "intermediate_size": 9728,
        "tie_word_embeddings": True,
    },
    "qwen3-8b": {
        "hidden_size": 4096,
        "num_hidden_layers": 36,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "intermediate_size": 12288,
        "tie_word_embeddings": False,
    },
}


# Qwen's chat format (ChatML), for the byte-level tokenizer that stands in for Qwen's own
# in --init random directories and in tests (Qwen3's released template adds tool calls
# and <think> handling on top of this).
CHATML_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

INITS = ("pretrained", "random")


def qwen3_config_dir(name: str, root: Path) -> Path:
    """A directory with a Qwen3 preset's config.json and a tokenizer but no weights: enough
    for ``--init random`` (throughput at real sizes where the weights are not at hand) and
    the FLOPs model. The tokenizer is the byte-level one (ids 0..256 of the 151,936-token
    vocabulary) with the ChatML template, standing in for Qwen's, which is not at hand."""
    from zoo.models.tokenizer import save_tokenizer

    if name not in QWEN3_SHAPES:
        raise ConfigError(f"unknown Qwen3 shape {name!r}; valid: {', '.join(QWEN3_SHAPES)}")
    directory = Path(root) / name
    directory.mkdir(parents=True, exist_ok=True)
    config = {**QWEN3_COMMON, **QWEN3_SHAPES[name], "eos_token_id": 256, "pad_token_id": 256}
    (directory / "config.json").write_text(json.dumps(config, indent=2))
    save_tokenizer(directory, chat_template=CHATML_TEMPLATE)
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


def check_checkpoint(path: Path, init: str = "pretrained") -> None:
    """Raise ConfigError unless ``path`` holds a Qwen3 checkpoint in Hugging Face format
    (weights only needed with ``init="pretrained"``)."""
    from zoo.files import check_safetensors, read_json

    config_file = path / "config.json"
    if not config_file.exists():
        raise ConfigError(f"{path}: no config.json; expected a Hugging Face checkpoint folder")
    # Every JSON file of the folder (model config, tokenizer, generation config) and every
    # weights file's header, read now: a damaged one is named here, in one line, rather
    # than by whichever library trips on it later (several, in other processes).
    for file in sorted(path.glob("*.json")):
        read_json(file)
    model_type = read_json(config_file).get("model_type")
    if model_type != "qwen3":
        raise ConfigError(
            f"{path}: model_type {model_type!r}; the trainer builds Qwen3 models "
            "(model_type 'qwen3') only"
        )
    if not (path / "tokenizer.json").exists():
        raise ConfigError(f"{path}: no tokenizer.json next to config.json")
    if init == "pretrained" and not any(path.glob("*.safetensors")):
        raise ConfigError(
            f"{path}: config.json but no *.safetensors weights; add them, or pass --init "
            "random to build the architecture with random weights"
        )
    if init == "pretrained":
        for weights in sorted(path.glob("*.safetensors")):
            check_safetensors(weights)


def hf_cache_snapshot(hf_id: str) -> Path | None:
    """The cached snapshot folder of Hugging Face repo ``hf_id``, offline (no request is
    made); None when it is not in the cache ($HF_HUB_CACHE, else $HF_HOME/hub)."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        return Path(snapshot_download(hf_id, local_files_only=True))
    except LocalEntryNotFoundError:
        return None


def missing_weights_message(name: str, hf_id: str, unreachable: str = "") -> str:
    """Why a preset's weights are not at hand offline, where we looked, and what to do.
    ``unreachable``: the error that stopped a download (the Hub could not be reached)."""
    from huggingface_hub.constants import HF_HUB_CACHE

    from zoo.hub import offline_reason

    folder = Path(HF_HUB_CACHE) / f"models--{hf_id.replace('/', '--')}"
    return (
        f"no weights for {name} ({hf_id}) found offline: looked in the Hugging Face cache at "
        f"{folder} (set HF_HUB_CACHE or HF_HOME to look elsewhere); nothing was downloaded: "
        f"{offline_reason(unreachable)}. "
        f"Provide them: run where the Hub can be reached with HF_HUB_OFFLINE unset (they are "
        f"downloaded on first use), or `hf download {hf_id}` on a machine with network (then "
        "copy the cache here), or --model-path DIR (config.json, *.safetensors, "
        "tokenizer.json), or use --init random to measure throughput without weights."
    )


def check_weights_available(name: str, model_path: str = "", init: str = "pretrained") -> None:
    """Without downloading anything: raise the missing-weights message when a Qwen3
    preset's weights can be neither downloaded (offline, or the Hub unreachable) nor read
    from the cache. A run checks this first, so that an offline user with an empty cache
    learns that before any check of the batch or the memory."""
    if model_path or init != "pretrained" or name not in QWEN3_HF_IDS:
        return
    from zoo import hub

    allowed, _ = hub.download_allowed()
    snapshot = hf_cache_snapshot(QWEN3_HF_IDS[name])
    if not allowed and (snapshot is None or not any(snapshot.glob("*.safetensors"))):
        unreachable = "" if hub.offline_requested() else hub.unreachable()
        raise ConfigError(missing_weights_message(name, QWEN3_HF_IDS[name], unreachable))


def resolve_model(name: str, model_path: str = "", init: str = "pretrained") -> ModelSpec:
    """The Hugging Face-format directory of a model: ``model_path`` when given; a tiny
    preset (its shipped start weights); a Qwen3 preset, downloaded from the Hub into its
    cache when online and missing (zoo.hub), else read from the cache (or, with
    ``init="random"`` and no cached weights, its config only; nothing is downloaded for
    ``init="random"``); or a local directory."""
    check_model_name(name)
    if init not in INITS:
        raise ConfigError(f"unknown init {init!r}; valid: {', '.join(INITS)}")
    if model_path:
        path = Path(model_path).expanduser().resolve()
        check_checkpoint(path, init)
        return ModelSpec(name, path)
    if name in TINY_MODELS:
        from zoo.models.tiny import TINY_PRESETS, tiny_model_path

        return ModelSpec(name, tiny_model_path(TINY_PRESETS[name]))
    if name in QWEN3_HF_IDS:
        from zoo import hub

        hf_id, unreachable = QWEN3_HF_IDS[name], ""
        snapshot = None
        if init == "pretrained" and not hub.offline_requested():
            unreachable = hub.unreachable()
            try:
                snapshot = None if unreachable else hub.download_model(hf_id)
            except hub.HubUnreachable as exc:
                unreachable = str(exc)
        if snapshot is None:
            snapshot = hf_cache_snapshot(hf_id)
        if snapshot is not None and any(snapshot.glob("*.safetensors")):
            check_checkpoint(snapshot, init)
            return ModelSpec(name, snapshot)
        if init == "random":
            from zoo.models.tiny import cache_dir

            return ModelSpec(name, qwen3_config_dir(name, cache_dir() / "configs"))
        raise ConfigError(missing_weights_message(name, hf_id, unreachable))
    path = Path(name).expanduser().resolve()
    check_checkpoint(path, init)
    return ModelSpec(path.name, path)


def prefetch_model_config(name: str, model_path: str = "", init: str = "pretrained") -> None:
    """Online, fetch a Qwen3 preset's config.json (not its weights) into the cache when it
    is not there, so that ``model_shape`` (the pre-flight memory check) reads the shape of
    what will be downloaded. Does nothing offline, for other models, or with --init random."""
    if name in QWEN3_HF_IDS and not model_path and init == "pretrained":
        from zoo import hub

        if hub.cached_model_config(QWEN3_HF_IDS[name]) is None:
            hub.download_model_config(QWEN3_HF_IDS[name])


def model_shape(name: str, model_path: str = "") -> ModelShape:
    """The shape of a model by name (or ``model_path``), without building or loading it."""
    check_model_name(name)
    if model_path:
        if not (Path(model_path).expanduser() / "config.json").is_file():
            raise ConfigError(
                f"--model-path {model_path} holds no config.json: give a folder with a "
                "Hugging Face Qwen3 checkpoint (config.json, *.safetensors)"
            )
        return ModelShape.from_hf_dir(Path(model_path).expanduser())
    if name in TINY_MODELS:
        from zoo.models.tiny import TINY_PRESETS, hf_config

        return ModelShape.from_config(hf_config(TINY_PRESETS[name]).to_dict())
    if name in QWEN3_SHAPES:
        from zoo.hub import cached_model_config

        config = cached_model_config(QWEN3_HF_IDS[name])  # the config of what will load
        if config is not None:
            return ModelShape.from_config(json.loads(config.read_text()))
        return ModelShape.from_config({**QWEN3_COMMON, **QWEN3_SHAPES[name]})
    return ModelShape.from_hf_dir(Path(name).expanduser())


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
    tied_embeddings: bool = False
    """The LM head shares the embedding matrix (small Qwen3 releases)."""

    @classmethod
    def from_hf_dir(cls, path: Path) -> ModelShape:
        from zoo.files import read_json

        return cls.from_config(read_json(Path(path) / "config.json"))

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
            tied_embeddings=bool(c.get("tie_word_embeddings", False)),
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

    @property
    def params(self) -> int:
        """All weights but the norms: blocks, embedding and (unless tied) the LM head."""
        embedding = self.hidden_size * self.vocab_size
        return self.body_params + embedding + (0 if self.tied_embeddings else self.head_params)
