"""Building a tiny preset's start weights: the supervised stage of its recipe, run on this
machine (``python -m harness warm-start PRESET``), saved in Hugging Face format
(config.json, model.safetensors, tokenizer.json, forge_zoo_recipe.json with the stopping
history). Runs never come here: they start from the shipped weights (zoo.models.tiny)."""

from __future__ import annotations

import dataclasses
import json
import random
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch

from zoo.core.config import ConfigError
from zoo.envs import Env, get_env, is_multi_turn
from zoo.models import tiny
from zoo.models.tiny import TINY_PRESETS, WEIGHTS_FILE, TinyRecipe, file_sha256, hf_config
from zoo.models.tokenizer import save_tokenizer
from zoo.run.progress import make_progress
from zoo.warm_start.greedy import greedy_accuracy, greedy_episodes
from zoo.warm_start.supervised import demonstration_mix, episode_sft_loss, sft_loss

VALIDATION_SEED = 1_000_003
"""Train-stream seed of the warm start's validation problems (runs use seeds 0, 1, ...)."""

WARM_START_EVAL_TOKENS = {
    "arithmetic": 6,
    "pyfunc": 9,
    "tool_arithmetic": 16,
    "pyfunc_feedback": 9,
    "running_sum": 48,
}
"""Max new tokens of the warm start's greedy evaluation, per task (its longest answer; per
turn for a multi-turn task, as the run's --max-response-len advised for it)."""


def warm_start_task(recipe: TinyRecipe) -> tuple[Env, Callable, int]:
    """(env, reference answer of a prompt, max new tokens of the greedy evaluation). The
    env comes from the registry by name, as a run's does (pyfunc's validation functions
    are scored in the sandbox)."""
    if recipe.task not in WARM_START_EVAL_TOKENS:
        raise ValueError(
            f"unknown warm-start task {recipe.task!r}; valid: {', '.join(WARM_START_EVAL_TOKENS)}"
        )
    env = get_env(recipe.task)
    return env, env.reference_answer, WARM_START_EVAL_TOKENS[recipe.task]


def rebuild_start_weights(
    name: str, built_on: dict, out: Path | None = None, quiet: bool = False
) -> dict:
    """Run preset ``name``'s warm-start recipe on this machine (described by ``built_on``:
    CPU, vector instruction sets, torch version, threads) into ``out``, or, when ``out`` is
    None, over its shipped folder, updating manifest.json. Returns the manifest entry of the
    new weights."""
    if name not in TINY_PRESETS:
        raise ConfigError(f"unknown tiny preset {name!r}; valid: {', '.join(TINY_PRESETS)}")
    recipe = TINY_PRESETS[name]
    path = out if out is not None else tiny.SHIPPED / name
    last = build_tiny_model(recipe, path, quiet=quiet)["history"][-1]  # the stopping point
    entry = {
        "recipe_key": recipe.key(),
        "sha256": file_sha256(path / WEIGHTS_FILE),
        "built_on": {**built_on, "torch_threads": recipe.threads},
        "validation_accuracy": round(last["accuracy"], 4),
        "steps": last["step"],
    }
    if out is None:
        manifest = tiny.read_manifest()
        manifest[name] = entry
        tiny.MANIFEST.write_text(json.dumps(dict(sorted(manifest.items())), indent=1) + "\n")
    return entry


def build_tiny_model(recipe: TinyRecipe, path: Path, quiet: bool = False) -> dict:
    """Warm-start the tiny model and save it (atomically) to ``path``."""
    from transformers import Qwen3ForCausalLM

    env, reference, max_new_tokens = warm_start_task(recipe)
    multi_turn = is_multi_turn(env)
    draw = env.warm_start_prompts if recipe.data == "warm_start" else env.train_prompts
    validation = draw(0, recipe.validation_size, seed=VALIDATION_SEED)
    set_aside = {p.text for p in validation}
    threads = torch.get_num_threads()
    torch.set_num_threads(recipe.threads)
    try:
        torch.manual_seed(recipe.seed)
        model = Qwen3ForCausalLM(hf_config(recipe))
        opt = torch.optim.AdamW(model.parameters(), lr=recipe.lr)
        sched = torch.optim.lr_scheduler.LambdaLR(
            opt, lambda s: min(1.0, (s + 1) / recipe.warmup_steps)
        )
        history = []
        with make_progress(quiet) as progress:
            label = f"warm-starting tiny model on {recipe.task}"
            task = progress.add_task(label, total=recipe.max_steps)
            for step in range(1, recipe.max_steps + 1):
                prompts = draw((step - 1) * recipe.batch_size, recipe.batch_size, seed=recipe.seed)
                kept = [p for p in prompts if p.text not in set_aside]
                if multi_turn:
                    loss = episode_sft_loss(model, demonstration_mix(env, kept, recipe, step))
                elif recipe.merge_fraction > 0:
                    rng = random.Random(f"merge:{recipe.seed}:{step}")
                    pairs = [
                        (p.text, env.demonstration(p, rng, recipe.merge_fraction)) for p in kept
                    ]
                    loss = sft_loss(model, pairs)
                else:
                    loss = sft_loss(model, [(p.text, reference(p)) for p in kept])
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                sched.step()
                progress.update(task, advance=1)
                if step % recipe.eval_every == 0:
                    record = {"step": step, "loss": float(loss.detach())}
                    if multi_turn:
                        record.update(greedy_episodes(model, env, validation, max_new_tokens))
                        acc = record["accuracy"] = record["reward"]
                        shown = f"reward {acc:.1%}, tool calls {record['tool_rate']:.1%}"
                    else:
                        acc = record["accuracy"] = greedy_accuracy(
                            model, env, validation, max_new_tokens
                        )
                        shown = f"acc {acc:.1%}"
                    history.append(record)
                    progress.update(task, description=f"{label}: {shown}")
                    if acc >= recipe.target_accuracy and (
                        not multi_turn or record["tool_rate"] <= recipe.max_tool_rate
                    ):
                        break
    finally:
        torch.set_num_threads(threads)

    info = {"recipe": dataclasses.asdict(recipe), "key": recipe.key(), "history": history}
    if multi_turn and history:  # the figures of the model as saved (its last evaluation)
        info["validation_reward"] = history[-1]["reward"]
        info["validation_tool_rate"] = history[-1]["tool_rate"]
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=".building-"))
    # transformers draws a tqdm bar per save ("Writing model shards", one shard here):
    # noise next to this command's own bar, and not routed anywhere under --quiet
    from transformers.utils import logging as hf_logging

    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        model.save_pretrained(tmp, safe_serialization=True)
    finally:
        if bars:
            hf_logging.enable_progress_bar()
    save_tokenizer(tmp)
    (tmp / "forge_zoo_recipe.json").write_text(json.dumps(info, indent=2))
    if path.exists():
        shutil.rmtree(path)
    tmp.rename(path)
    return info
