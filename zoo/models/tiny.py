"""The embedded ``tiny`` model: a Qwen3-architecture causal LM built and warm-started here.

Recipe (see docs/training.md): 2 layers, hidden 128, 4 query heads of size 32 (vLLM's
CPU attention needs head size >= 32), 2 KV heads, MLP 384, untied embeddings, vocabulary
of 257 byte-level tokens padded to 320 (~476k parameters). A short supervised stage on the
arithmetic env's format ("37+45=82<|endoftext|>") stops at the first evaluation whose
greedy accuracy on a validation split of its own reaches ``target_accuracy``, so RL
starts with room to improve and signal to learn from. The validation problems are drawn
from the env's train stream with a seed of their own (``VALIDATION_SEED``) and never
trained on; the held-out split, on which runs are evaluated and compared, plays no part in
building the model (choosing the starting weights on it would select on the test set).
The result is saved in Hugging Face format (config.json, model.safetensors,
tokenizer.json). Same recipe, thread count and CPU give a bit-identical checkpoint; another
CPU (other vector instructions, so other kernels and rounding) gives other bytes. So the
presets' start weights ship with the project (``SHIPPED``, checked against the sha256 in
its manifest when loaded) and runs never build them: ``python -m harness warm-start
PRESET`` reruns a preset's recipe, on purpose, when the recipe changes.

The ``tiny-code`` preset (``TINY_PRESETS``) is the same recipe with ``task="pyfunc"``:
the supervised stage uses the pyfunc env's format ("f(0..4)=1,3,5,7,9 f(x)=2*x+1<|endoftext|>",
its reference answers) and stops at the first evaluation whose validation reward (100
functions set aside, greedy, scored by running the model's expressions in the sandbox)
reaches ``target_accuracy``. Both come from pyfunc's warm-start split (``data``), 400
functions that RL never trains or is evaluated on. Only non-default fields enter the
cache key, so the ``tiny`` model's key and checkpoint are unchanged.

The ``tiny-tool`` preset warm-starts on the multi-turn ``tool_arithmetic`` env: a fraction
``tool_fraction`` of its train problems are shown as calculator episodes (the env's
``tool_trace``: prompt, call, EOS, observation, answer, EOS; loss on the assistant's tokens
and EOS only), the rest as direct answers. It stops at the first evaluation of greedy
episodes (``greedy_episodes``) on its validation split whose mean reward reaches
``target_accuracy`` with the tool called in at most ``max_tool_rate`` of them; the
recipe file records both figures (``validation_reward``, ``validation_tool_rate``). Fields
added after the first models were built (``LATER_FIELDS``) leave the key at their
original values, so the other presets' keys do not move.

The ``tiny-code-feedback`` preset warm-starts on the multi-turn ``pyfunc_feedback`` env
the same way: half of its train functions are shown as a revision (the env's
``warm_start_trace``: a near miss taken from another function of the batch, the feedback
the env gives it, the right answer; the near miss is context, not learned), the rest as
direct answers. It stops when greedy episodes on its validation split reach
``target_accuracy``, like ``tiny-code``; every submission counts as a tool call there, so
``max_tool_rate`` stays at 1.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import random
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

from zoo.models.tokenizer import EOS_ID, save_tokenizer

RECIPE_VERSION = 2
"""2: the warm start stops on a validation split of its own (1 stopped on the held-out
split the runs are evaluated on)."""

VALIDATION_SEED = 1_000_003
"""Train-stream seed of the warm start's validation problems (runs use seeds 0, 1, ...)."""


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


WARM_START_EVAL_TOKENS = {
    "arithmetic": 6,
    "pyfunc": 9,
    "tool_arithmetic": 16,
    "pyfunc_feedback": 9,
    "running_sum": 48,
}
"""Max new tokens of the warm start's greedy evaluation, per task (its longest answer; per
turn for a multi-turn task, as the run's --max-response-len advised for it)."""


def warm_start_task(recipe: TinyRecipe):
    """(env, reference answer of a prompt, max new tokens of the greedy evaluation). The
    env comes from the registry by name, as a run's does (pyfunc's validation functions
    are scored in the sandbox)."""
    from zoo.envs import get_env

    if recipe.task not in WARM_START_EVAL_TOKENS:
        raise ValueError(
            f"unknown warm-start task {recipe.task!r}; valid: {', '.join(WARM_START_EVAL_TOKENS)}"
        )
    env = get_env(recipe.task)
    return env, env.reference_answer, WARM_START_EVAL_TOKENS[recipe.task]


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
            "zoo.models.tiny.build_tiny_model(recipe, folder) and pass --model-path folder"
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


def rebuild_start_weights(
    name: str, built_on: dict, out: Path | None = None, quiet: bool = False
) -> dict:
    """Run preset ``name``'s warm-start recipe on this machine (described by ``built_on``:
    CPU, vector instruction sets, torch version, threads) into ``out``, or, when ``out`` is
    None, over its shipped folder, updating manifest.json. Returns the manifest entry of the
    new weights."""
    from zoo.core.config import ConfigError

    if name not in TINY_PRESETS:
        raise ConfigError(f"unknown tiny preset {name!r}; valid: {', '.join(TINY_PRESETS)}")
    recipe = TINY_PRESETS[name]
    path = out if out is not None else SHIPPED / name
    last = build_tiny_model(recipe, path, quiet=quiet)["history"][-1]  # the stopping point
    entry = {
        "recipe_key": recipe.key(),
        "sha256": file_sha256(path / WEIGHTS_FILE),
        "built_on": {**built_on, "torch_threads": recipe.threads},
        "validation_accuracy": round(last["accuracy"], 4),
        "steps": last["step"],
    }
    if out is None:
        manifest = read_manifest()
        manifest[name] = entry
        MANIFEST.write_text(json.dumps(dict(sorted(manifest.items())), indent=1) + "\n")
    return entry


def build_tiny_model(recipe: TinyRecipe, path: Path, quiet: bool = False) -> dict:
    """Warm-start the tiny model and save it (atomically) to ``path``."""
    from transformers import Qwen3ForCausalLM

    from zoo.core.progress import make_progress
    from zoo.envs import is_multi_turn

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
                    pairs = [(p.text, env.demonstration(p, rng, recipe.merge_fraction))
                             for p in kept]  # fmt: skip
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


def encode(text: str) -> list[int]:
    """Byte-level encoding: token id = byte value (see zoo/models/tokenizer.py)."""
    return list(text.encode())


def sft_loss(model: torch.nn.Module, pairs: list[tuple[str, str]]) -> torch.Tensor:
    """Cross-entropy on the answer tokens and the end-of-text token only."""
    seqs, masks = [], []
    for prompt, answer in pairs:
        p, a = encode(prompt), [*encode(answer), EOS_ID]
        seqs.append(p + a)
        masks.append([0] * len(p) + [1] * len(a))
    return masked_nll(model, seqs, masks)


def demonstration_mix(env, prompts: list, recipe: TinyRecipe, step: int) -> list:
    """The warm start's episodes for ``prompts``: each one, with probability
    ``recipe.tool_fraction`` (a seeded draw per step), the env's demonstration
    (``env.warm_start_trace``: a tool episode, or a revision after feedback), else the
    direct answer; as (prompt text, [(assistant turn, observation, learn), ...])."""
    # The seed string predates revisions; it stays, so tiny-tool's data (and key) are as built.
    rng = random.Random(f"tool-mix:{recipe.seed}:{step}")
    return [
        (p.text, env.warm_start_trace(p, prompts, rng) if rng.random() < recipe.tool_fraction
         else [(env.reference_answer(p), "", True)])
        for p in prompts
    ]  # fmt: skip


def episode_sft_loss(model: torch.nn.Module, episodes: list) -> torch.Tensor:
    """Cross-entropy on the learned assistant turns' tokens and their end-of-text tokens
    only: the prompt, the observations and turns shown as context (a demonstration's
    mistake) are masked out, as the RL loop masks environment tokens. The tokens are laid
    out as the loop lays them out: prompt, turn, EOS, observation, turn, EOS, ... (the
    observation's bytes exactly)."""
    seqs, masks = zip(*(episode_tokens(prompt, turns) for prompt, turns in episodes), strict=True)
    return masked_nll(model, list(seqs), list(masks))


def episode_tokens(prompt: str, turns: list[tuple]) -> tuple[list[int], list[int]]:
    """(token ids, loss mask) of one episode, from its turns as (assistant turn,
    observation) or (assistant turn, observation, learn): 1 on each learned turn's bytes
    and its EOS, 0 on the prompt, the observations and turns with ``learn`` False."""
    seq = encode(prompt)
    mask = [0] * len(seq)
    for turn, observation, *flag in turns:
        learn = flag[0] if flag else True
        t, o = [*encode(turn), EOS_ID], encode(observation)
        seq += t + o
        mask += [int(learn)] * len(t) + [0] * len(o)
    return seq, mask


def masked_nll(model: torch.nn.Module, seqs: list[list[int]], masks: list[list[int]]):
    """Mean next-token cross-entropy over the positions whose mask is 1."""
    width = max(map(len, seqs))
    ids = torch.tensor([s + [EOS_ID] * (width - len(s)) for s in seqs])
    mask = torch.tensor([m + [0] * (width - len(m)) for m in masks], dtype=torch.float32)
    logits = model(input_ids=ids).logits[:, :-1]
    nll = torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1), reduction="none"
    ).view_as(mask[:, 1:])
    return (nll * mask[:, 1:]).sum() / mask[:, 1:].sum()


def greedy_continuations(
    model: torch.nn.Module, contexts: list[list[int]], max_new_tokens: int
) -> list[list[int]]:
    """The greedy continuation of each context (all of one length: no padding), up to
    ``max_new_tokens`` tokens; a row that stopped early is padded with end-of-text."""
    ids = torch.tensor(contexts)
    out = model.generate(
        input_ids=ids,
        attention_mask=torch.ones_like(ids),
        max_new_tokens=max_new_tokens,
        do_sample=False,
        eos_token_id=EOS_ID,
        pad_token_id=EOS_ID,
    )
    return out[:, ids.shape[1] :].tolist()


@torch.no_grad()
def greedy_accuracy(model: torch.nn.Module, env, prompts: list, max_new_tokens: int = 6) -> float:
    """Accuracy (mean reward) of greedy decoding on ``prompts`` (a plain loop; prompts
    grouped by length), scored with one ``env.score_batch`` call."""
    by_len: dict[int, list] = {}
    for p in prompts:
        by_len.setdefault(len(encode(p.text)), []).append(p)
    scored, texts = [], []
    for group in by_len.values():
        out = greedy_continuations(model, [encode(p.text) for p in group], max_new_tokens)
        for p, row in zip(group, out, strict=True):
            text = (
                bytes(t for t in row if t < 256)
                if EOS_ID not in row
                else bytes(row[: row.index(EOS_ID)])
            )
            scored.append(p)
            texts.append(text.decode(errors="replace"))
    return sum(env.score_batch(scored, texts)) / len(prompts)


@torch.no_grad()
def greedy_episodes(model: torch.nn.Module, env, prompts: list, max_new_tokens: int) -> dict:
    """Greedy multi-turn episodes of a ``MultiTurnEnv`` with plain ``generate`` calls, laid
    out as the RL loop lays them out: each turn ends at the end-of-text token (kept in the
    context) or after ``max_new_tokens``; the observation's bytes follow it exactly; until
    the env says done or ``env.turn_limit()`` turns. Contexts are grouped by length, so
    there is no padding. Returns the mean ``reward``, ``tool_rate`` (the fraction of
    episodes with a tool call), ``direct_reward`` (mean reward of the others) and
    ``turns`` (mean assistant turns per episode)."""
    episodes = [env.start(p) for p in prompts]
    contexts = [encode(p.text) for p in prompts]
    rewards: list[float | None] = [None] * len(prompts)
    called = [False] * len(prompts)
    turns = [0] * len(prompts)
    active = list(range(len(prompts)))
    for _ in range(env.turn_limit()):
        if not active:
            break
        by_len: dict[int, list[int]] = {}
        for i in active:
            by_len.setdefault(len(contexts[i]), []).append(i)
        texts: dict[int, str] = {}
        for group in by_len.values():
            out = greedy_continuations(model, [contexts[i] for i in group], max_new_tokens)
            for i, row in zip(group, out, strict=True):
                turn = row[: row.index(EOS_ID) + 1] if EOS_ID in row else row
                contexts[i] = contexts[i] + turn
                texts[i] = bytes(t for t in turn if t < 256).decode(errors="replace")
        replies = env.step_batch([episodes[i] for i in active], [texts[i] for i in active])
        still = []
        for i, reply in zip(active, replies, strict=True):
            called[i] = called[i] or reply.tool_call
            turns[i] += 1
            if reply.done:
                rewards[i] = reply.reward
            else:
                contexts[i] = contexts[i] + encode(reply.observation)
                still.append(i)
        active = still
    final = [episodes[i].final_reward() if r is None else r for i, r in enumerate(rewards)]
    direct = [r for r, c in zip(final, called, strict=True) if not c]
    return {
        "reward": sum(final) / len(final),
        "tool_rate": sum(called) / len(called),
        "direct_reward": sum(direct) / len(direct) if direct else 0.0,
        "turns": sum(turns) / len(turns),
    }
