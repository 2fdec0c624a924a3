"""The embedded tiny models: Qwen3-architecture causal LMs of ~476k parameters, their
recipes and their shipped start weights.

Recipe (``TinyRecipe``; docs/training.md): 2 layers, hidden 128, 4 query heads of size 32
(vLLM's CPU attention needs head size >= 32), 2 KV heads, MLP 384, untied embeddings, a
vocabulary of 257 byte-level tokens padded to 320. Each preset (``TINY_PRESETS``) is this
architecture warm-started by a short supervised stage on one env's format, which stops on
a validation split of its own (zoo.warm_start, where each preset's data and stopping rule
are described).

Same recipe, thread count and CPU give a bit-identical checkpoint; another CPU (other
vector instructions, so other kernels and rounding) gives other bytes. So the presets'
start weights ship with the project (``SHIPPED``, checked against the sha256 in its
manifest when loaded) and runs never build them: this module only finds and checks them.
``python -m harness warm-start PRESET`` reruns a preset's recipe (zoo.warm_start), on
purpose, when the recipe changes. Fields added after the first models were built
(``LATER_FIELDS``) leave a recipe's key at their original values, so older presets' keys do
not move.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from zoo.models.tokenizer import EOS_ID

RECIPE_VERSION = 2
"""2: the warm start stops on a validation split of its own (1 stopped on the held-out
split the runs are evaluated on)."""


@dataclass(frozen=True)
class TinyRecipe:
    hidden_size: int = 128
    intermediate_size: int = 384
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 2
    head_dim: int = 32
    vocab_size: int = 320
    rope_theta: float = 1_000_000.0
    seed: int = 0
    batch_size: int = 128
    lr: float = 1e-3
    warmup_steps: int = 50
    eval_every: int = 10
    max_steps: int = 1500
    target_accuracy: float = 0.25
    """Stop at the first evaluation at or above this greedy validation accuracy."""
    validation_size: int = 500
    """Validation problems (drawn from the train stream, never trained on)."""
    threads: int = 2
    """Torch threads during the warm start: fixed, so the checkpoint is reproducible."""
    task: str = "arithmetic"
    """Warm-start task: "arithmetic" (the ``tiny`` preset), "pyfunc" (``tiny-code``: the
    pyfunc env's format with its reference answers, held-out reward scored in the sandbox)
    "tool_arithmetic" (``tiny-tool``: direct answers and calculator episodes) or
    "pyfunc_feedback" (``tiny-code-feedback``: direct answers and revisions)."""
    tool_fraction: float = 0.0
    """Multi-turn tasks: the fraction of train problems shown as the env's demonstration
    (``warm_start_trace``: a tool episode, a revision after feedback) rather than as a
    direct answer."""
    max_tool_rate: float = 1.0
    """Multi-turn tasks: the stop also needs the fraction of validation episodes that call
    the tool at or below this, so that RL starts from a model that uses the tool only
    sometimes (early on the warm start calls it on nearly every problem)."""
    data: str = "train"
    """Where the supervised data and the validation problems come from: "train", the env's
    train stream (RL later trains on the same problems; harmless where the problem space
    is vast, as arithmetic's), or "warm_start", the env's warm-start split
    (``Env.warm_start_prompts``), disjoint from what RL trains and is evaluated on
    (pyfunc's 1,139 functions are few enough to memorise)."""
    merge_fraction: float = 0.0
    """running_sum: the chance that a step of a demonstrated chain adds two terms at once
    (``zoo.envs.math.running_sum.demonstration``), so the model sees chains of every
    granularity and RL can move the answer's length either way."""

    def key(self) -> str:
        fields = dataclasses.asdict(self)
        # Fields that came later leave the key when at their original value, so the
        # ``tiny`` and ``tiny-code`` keys (and cached checkpoints) do not move.
        for name, original in LATER_FIELDS.items():
            if fields[name] == original:
                del fields[name]
        payload = json.dumps({"v": RECIPE_VERSION, **fields}, sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()[:12]


LATER_FIELDS = {
    "task": "arithmetic",
    "tool_fraction": 0.0,
    "max_tool_rate": 1.0,
    "merge_fraction": 0.0,
    "data": "train",
}
"""Recipe fields added after the first models were built, with the value they stand for."""


TINY_PRESETS = {
    "tiny": TinyRecipe(),
    # One torch thread: as fast as two at this size, and unharmed by a busy machine.
    # Warm-starts on pyfunc's warm-start split alone (400 functions: 100 to stop on, 300
    # to train on), so RL's 239 train functions are new to it. On 300 functions it
    # memorises (loss 0.004 by step 400) and its validation reward plateaus at 0.16-0.19
    # from step 120 on, so it stops at 15%, not 25%.
    "tiny-code": TinyRecipe(
        task="pyfunc", threads=1, validation_size=100, data="warm_start", target_accuracy=0.15
    ),
    # Stops at validation reward >= 20% with the tool called in <= 40% of episodes: the
    # direct answers are nearly all wrong (~1%) and the calls mostly right, so RL can gain
    # by calling more often and more accurately.
    "tiny-tool": TinyRecipe(
        task="tool_arithmetic",
        threads=1,
        validation_size=300,
        tool_fraction=0.3,
        target_accuracy=0.2,
        max_tool_rate=0.4,
        eval_every=20,
        max_steps=400,
    ),
    # pyfunc and revisions after pyfunc_feedback's feedback: half of the train functions
    # are shown as a near miss (context, not learned), its feedback and the right answer.
    "tiny-code-feedback": TinyRecipe(
        task="pyfunc_feedback",
        threads=1,
        validation_size=100,
        tool_fraction=0.5,
        data="warm_start",
        target_accuracy=0.15,
    ),
    # The reasoning testbed (zoo/envs/math/running_sum.py): chains of partial sums, 30% of
    # their steps shown merged with the next; stops at >= 25% greedy validation accuracy
    # (reached near step 400 of 1,500: docs/envs.md has the curve).
    "tiny-sum": TinyRecipe(
        task="running_sum", threads=1, validation_size=300, merge_fraction=0.3, eval_every=10
    ),
}
"""Model presets by name (zoo.models.presets resolves them), each with shipped weights (SHIPPED)."""


def cache_dir() -> Path:
    """$FORGE_ZOO_CACHE, else ~/.cache/forge-zoo."""
    root = os.environ.get("FORGE_ZOO_CACHE") or Path.home() / ".cache" / "forge-zoo"
    return Path(root)


def hf_config(recipe: TinyRecipe):
    from transformers import Qwen3Config

    return Qwen3Config(
        vocab_size=recipe.vocab_size,
        hidden_size=recipe.hidden_size,
        intermediate_size=recipe.intermediate_size,
        num_hidden_layers=recipe.num_layers,
        num_attention_heads=recipe.num_heads,
        num_key_value_heads=recipe.num_kv_heads,
        head_dim=recipe.head_dim,
        max_position_embeddings=256,
        rope_parameters={"rope_type": "default", "rope_theta": recipe.rope_theta},
        tie_word_embeddings=False,
        eos_token_id=EOS_ID,
        pad_token_id=EOS_ID,
        bos_token_id=None,
        dtype="float32",
        architectures=["Qwen3ForCausalLM"],
    )


SHIPPED = Path(__file__).resolve().parent / "start_weights"
"""The presets' start weights as they ship with the project: one Hugging Face folder per
preset (config.json, model.safetensors, tokenizer files, forge_zoo_recipe.json) and
``manifest.json``: for each preset, the recipe key and sha256 of its model.safetensors and
the machine that built it. The warm start's bytes depend on the CPU's math kernels (two
CPUs give different weights from one recipe and seed), so runs start from these files,
never from a local build, and every machine starts from the same weights."""

MANIFEST = SHIPPED / "manifest.json"
WEIGHTS_FILE = "model.safetensors"


def read_manifest() -> dict[str, dict]:
    """``{preset: {"recipe_key", "sha256", "built_on", ...}}`` of the shipped weights."""
    return json.loads(MANIFEST.read_text()) if MANIFEST.is_file() else {}


def preset_of(recipe: TinyRecipe) -> str | None:
    """The preset name whose recipe this is, or None."""
    return next((name for name, r in TINY_PRESETS.items() if r == recipe), None)


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def tiny_model_path(recipe: TinyRecipe | None = None) -> Path:
    """The folder of a preset's shipped start weights, after checking its
    model.safetensors against the sha256 in the manifest. Never builds: a recipe without
    shipped weights (a new or changed preset) is an error saying how to build them
    (``python -m harness warm-start PRESET``)."""
    from zoo.core.config import ConfigError

    recipe = recipe or TinyRecipe()
    name = preset_of(recipe)
    rebuild = f"`python -m harness warm-start {name or 'PRESET'}`"
    if name is None:
        raise ConfigError(
            f"recipe {recipe.key()} is none of the presets ({', '.join(TINY_PRESETS)}); only "
            "presets ship start weights. Build a custom recipe with "
            "zoo.warm_start.build_tiny_model(recipe, folder) and pass --model-path folder"
        )
    entry = read_manifest().get(name)
    if entry is None or entry["recipe_key"] != recipe.key():
        shipped = f"weights of recipe {entry['recipe_key']}" if entry else "no weights"
        raise ConfigError(
            f"preset {name!r} (recipe {recipe.key()}) has {shipped} in {SHIPPED}: its recipe "
            f"changed since they were built. Rebuild them with {rebuild} (the bytes depend "
            "on this machine's CPU) and commit the folder and manifest.json"
        )
    path = SHIPPED / name
    weights = path / WEIGHTS_FILE
    found = file_sha256(weights) if weights.is_file() else "no file"
    if found != entry["sha256"]:
        raise ConfigError(
            f"the shipped start weights of {name!r} ({weights}) have sha256 {found[:12]}, "
            f"not {entry['sha256'][:12]} as manifest.json records: the file was modified or "
            f"not fully checked out (git LFS?). Restore it with `git checkout -- {weights}`, "
            f"or rebuild them with {rebuild}"
        )
    return path
