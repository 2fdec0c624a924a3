"""The step-1 training reward of forge-zoo and of TRL's GRPOTrainer from the same start
weights and the same prompts (issue 59, item 3; docs/parity.md, "Step-1 training reward").

Before any update, a run's training reward is the mean task reward of what its sampler
draws from the start weights. Each side is run as its training step runs it, on the same
running_sum training prompts (the train stream of run seed ``--seed``, ``--batches``
batches of ``--prompts`` prompts x G completions):

- ``forge-zoo``: the run's generator (``make_generator("by_size")``: transformers'
  ``generate`` with the per-row seeded Gumbel-max sampler, eager attention, float32), the
  run's prompt encoder (``zoo.run.wiring.prompt_encoder``), per-prompt seeds
  (``sampling_seed``), ``Completion.text`` (end-of-text cut, held-back bytes dropped) scored
  by ``env.score_batch``;
- ``TRL``: ``GRPOTrainer._generate_and_score_completions`` on the batch as its
  ``RepeatSampler`` lays it out (each prompt G times in a row): its prompt tokenisation, its
  ``GenerationConfig`` (do_sample, temperature, top-p 1, top-k 0), torch's global generator
  (seeded per batch), its cut after the first EOS, its ``batch_decode(...,
  skip_special_tokens=True)`` and its reward call (``_calculate_rewards``) into a reward
  function that calls the env's ``score``;
- ``forge-zoo model, global RNG`` (``--arms`` with ``fz-multinomial``): forge-zoo's generator
  model and batching with transformers' own sampling (``do_sample``, torch's global
  generator) instead of the seeded Gumbel-max processor: the RNG scheme swapped alone.

Then the factors that can be swapped on the same samples, with no sampling noise: the
prompt ids each side feeds the model, each side's cut-and-decode applied to the other's
token ids, and the reward call (TRL's reward function inputs re-scored by the env).

Intervals: the unit is a batch (its prompts are the same on every arm, so arm differences
are paired by batch); mean +/- t(0.975, N - 1) x sd / sqrt(N) over N batches.

    python -m benchmarks.parity.step1 [--batches 32] [--prompts 64] [--seed 0]
        [--arms fz,trl,fz-multinomial] [--out results/parity]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from benchmarks.parity.settings import forge_zoo_run_config, trl_config
from benchmarks.parity.shared import model_path, trl_without_vllm

ARMS = {
    "fz": "forge-zoo",
    "trl": "TRL",
    "fz-multinomial": "forge-zoo model, global RNG",
}
TRL_SEED_BASE = 1_000
"""TRL's global generator is seeded with TRL_SEED_BASE + batch before each batch (and
forge-zoo's global-RNG arm with 2 x TRL_SEED_BASE + batch): the per-prompt seeds of
forge-zoo's sampler are the run's own (``sampling_seed(seed, index)``)."""


@dataclass
class Arm:
    """One side's samples over the batches: per-row rewards and what they were made of."""

    name: str
    rewards: list[list[float]] = field(default_factory=list)
    """Per batch, per row (prompt-major, G rows per prompt)."""
    token_ids: list[list[list[int]]] = field(default_factory=list)
    """Per batch, per row: the completion's ids up to and including its first EOS."""
    texts: list[list[str]] = field(default_factory=list)
    """Per batch, per row: the text the side's reward call got."""
    prompt_ids: list[list[list[int]]] = field(default_factory=list)
    """Per batch, per prompt: the ids the side fed the model."""
    prompt_indices: list[list[int]] = field(default_factory=list)
    """Per batch: the train-stream indices of the prompts the side's reward call scored."""
    row_seeds: list[list[int]] = field(default_factory=list)
    """forge-zoo's sampler, per batch, per row: the seed of the row's noise stream."""
    seconds: float = 0.0

    @property
    def batch_means(self) -> list[float]:
        return [statistics.fmean(r) for r in self.rewards]


def t_quantile(df: int) -> float:
    try:
        from scipy.stats import t

        return float(t.ppf(0.975, df))
    except ImportError:  # (scipy comes with the bench extra's dependencies)
        return 1.96


def interval(values: list[float]) -> dict[str, float]:
    """Mean, standard error and 95% t-interval of per-batch values."""
    n = len(values)
    mean = statistics.fmean(values)
    se = statistics.stdev(values) / math.sqrt(n) if n > 1 else float("nan")
    half = t_quantile(n - 1) * se if n > 1 else float("nan")
    return {"mean": mean, "se": se, "low": mean - half, "high": mean + half, "batches": n}


def train_prompts(batches: int, prompts: int, seed: int) -> list[list[Any]]:
    """The first ``batches`` training batches of run seed ``seed`` (env.train_prompts)."""
    from zoo.envs import get_env

    env = get_env("running_sum")
    return [env.train_prompts(b * prompts, prompts, seed) for b in range(batches)]


def tokenizer() -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_path())


def trl_cut_and_decode(tok: Any, ids: list[int]) -> str:
    """TRL's completion text from sampled ids: the ids up to and including the first EOS
    (its completion mask), ``batch_decode(..., skip_special_tokens=True)``."""
    eos = tok.eos_token_id
    cut = ids[: ids.index(eos) + 1] if eos in ids else ids
    return tok.batch_decode([cut], skip_special_tokens=True)[0]


def fz_cut_and_decode(tok: Any, prompt: list[int], ids: list[int]) -> str:
    """forge-zoo's ``Completion.text``: the ids before the first EOS, decoded after the
    prompt as vLLM does (``completion_text``)."""
    from zoo.services.sampling import completion_text

    eos = tok.eos_token_id
    return completion_text(tok, prompt, ids[: ids.index(eos)] if eos in ids else ids)


# --- the arms ---------------------------------------------------------------------------


def run_forge_zoo(batches: list[list[Any]], seed: int, global_rng: bool = False) -> Arm:
    """forge-zoo's step: the run's generator, encoder, per-prompt seeds and scoring.
    ``global_rng``: the same generator model and batch with transformers' own sampling
    (torch's global generator) in place of the seeded Gumbel-max processor."""
    from zoo.envs import get_env
    from zoo.run.rollout import sampling_seed
    from zoo.run.wiring import prompt_encoder
    from zoo.services.generation import make_generator
    from zoo.services.sampling import SamplingConfig

    cfg = forge_zoo_run_config("grpo")
    env = get_env("running_sum")
    tok = tokenizer()
    encode = prompt_encoder(tok)
    generator = make_generator(cfg.placement.generator, model_path(), seed=0)
    sampling = SamplingConfig(
        temperature=cfg.sampling.temperature, max_tokens=cfg.sampling.max_response_len
    )
    arm = Arm("fz-multinomial" if global_rng else "fz")
    start = time.perf_counter()
    for b, prompts in enumerate(batches):
        encoded = [encode(p) for p in prompts]
        if global_rng:
            torch.manual_seed(2 * TRL_SEED_BASE + b)
            rows = sample_global_rng(generator, encoded, cfg.sampling.group_size, sampling)
            texts = [
                fz_cut_and_decode(tok, encoded[i // cfg.sampling.group_size], ids)
                for i, ids in enumerate(rows)
            ]
        else:
            noise, streams = cfg.sampling.noise_seed, cfg.sampling.sample_streams  # as a run's
            n = cfg.sampling.group_size
            seeds = [sampling_seed(seed, p.index, noise, streams, samples=n) for p in prompts]
            groups = generator.generate(
                encoded, n=cfg.sampling.group_size, sampling=sampling, seeds=seeds
            )
            rows = [c.token_ids for g in groups for c in g]
            # as HFGenerator seeds its rows (and vLLM the n samples of a seeded request)
            arm.row_seeds.append([s + j for s in seeds for j in range(cfg.sampling.group_size)])
            texts = [c.text for g in groups for c in g]
        repeated = [p for p in prompts for _ in range(cfg.sampling.group_size)]
        arm.rewards.append(env.score_batch(repeated, texts))
        arm.token_ids.append(rows)
        arm.texts.append(texts)
        arm.prompt_ids.append(encoded)
        arm.prompt_indices.append([p.index for p in prompts])
    arm.seconds = time.perf_counter() - start
    return arm


@torch.no_grad()
def sample_global_rng(
    generator: Any, encoded: list[list[int]], n: int, sampling: Any
) -> list[list[int]]:
    """forge-zoo's generator model and left-padded batch, sampled by transformers'
    ``do_sample`` (temperature, no top-k / top-p): ids up to and including the first EOS."""
    width = max(map(len, encoded))
    rows = [p for p in encoded for _ in range(n)]
    ids = torch.tensor([[generator.pad_id] * (width - len(p)) + p for p in rows])
    attention = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in rows])
    out = generator.model.generate(
        input_ids=ids,
        attention_mask=attention,
        do_sample=True,
        temperature=sampling.temperature,
        top_k=0,
        top_p=1.0,
        max_new_tokens=sampling.max_tokens,
        eos_token_id=generator.eos_id,
        pad_token_id=generator.pad_id,
    )
    result = []
    for row in out[:, width:].tolist():
        result.append(row[: row.index(generator.eos_id) + 1] if generator.eos_id in row else row)
    return result


def run_trl(batches: list[list[Any]], seed: int) -> tuple[Arm, dict[str, Any]]:
    """TRL's step: ``_generate_and_score_completions`` on each batch (RepeatSampler's
    layout), its reward function the env's ``score``. Also returns what its generation
    used: the logits processors transformers built and the model's dtype and attention."""
    with trl_without_vllm():
        from datasets import Dataset
        from transformers import AutoModelForCausalLM
        from trl import GRPOTrainer

    from zoo.envs import get_env

    cfg = forge_zoo_run_config("grpo")
    g = cfg.sampling.group_size
    env = get_env("running_sum")
    by_index = {p.index: p for prompts in batches for p in prompts}
    calls: list[dict[str, list]] = []

    def reward(prompts: list[str], completions: list[str], index: list[int], **_: Any):
        problems = [by_index[i] for i in index]
        if [p.text for p in problems] != list(prompts):
            raise RuntimeError("TRL's reward call got prompts out of line with their rows")
        out = [env.score(p, c) for p, c in zip(problems, completions, strict=True)]
        calls.append({"completions": list(completions), "rewards": out, "index": list(index)})
        return out

    tok = tokenizer()
    model = AutoModelForCausalLM.from_pretrained(model_path(), dtype=torch.float32)
    flat = [p for prompts in batches for p in prompts]
    arm = Arm("trl")
    processors: list[list[str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        # beta 0: no reference model (its log-probs are computed after the rewards, and
        # do not touch generation); everything else is the grpo run's config
        trainer = GRPOTrainer(
            model=model,
            reward_funcs=reward,
            args=trl_config("grpo", tmp, beta=0.0, seed=seed),
            train_dataset=Dataset.from_dict(
                {"prompt": [p.text for p in flat], "index": [p.index for p in flat]}
            ),
            processing_class=tok,
        )
        unwrapped = trainer.accelerator.unwrap_model(trainer.model)
        built = unwrapped._get_logits_processor

        def record(*a: Any, **k: Any) -> Any:
            out = built(*a, **k)
            processors.append([type(p).__name__ for p in out])
            return out

        unwrapped._get_logits_processor = record
        trainer.model.train()  # as in train(): the "train" mode of its generation step
        info = {
            "dtype": str(next(unwrapped.parameters()).dtype),
            "attention": unwrapped.config._attn_implementation,
            "generation config": {
                k: getattr(trainer.generation_config, k)
                for k in ("do_sample", "temperature", "top_p", "top_k", "min_p")
            }
            | {"repetition_penalty": trainer.generation_config.repetition_penalty},
        }
        start = time.perf_counter()
        for b, prompts in enumerate(batches):
            torch.manual_seed(TRL_SEED_BASE + b)
            inputs = [{"prompt": p.text, "index": p.index} for p in prompts for _ in range(g)]
            out = trainer._generate_and_score_completions(inputs)
            call = calls[-1]
            if call["index"] != [x["index"] for x in inputs]:
                raise RuntimeError("TRL's reward call saw other rows than the batch's")
            ids = [
                row[mask.bool()].tolist()
                for row, mask in zip(out["completion_ids"], out["completion_mask"], strict=True)
            ]
            arm.rewards.append(call["rewards"])
            arm.texts.append(call["completions"])
            arm.token_ids.append(ids)
            prompt_ids, _, _ = trainer._tokenize_prompts([p.text for p in prompts])
            arm.prompt_ids.append([list(x) for x in prompt_ids])
            arm.prompt_indices.append(call["index"][::g])
        arm.seconds = time.perf_counter() - start
    info["logits processors"] = sorted({name for names in processors for name in names})
    return arm, info


# --- the comparison ---------------------------------------------------------------------


def cross_factors(arms: dict[str, Arm], batches: list[list[Any]]) -> dict[str, Any]:
    """The factors swapped on the same samples: prompt ids, cut-and-decode, reward call."""
    from zoo.envs import get_env

    env = get_env("running_sum")
    tok = tokenizer()
    out: dict[str, Any] = {}
    fz, trl = arms.get("fz"), arms.get("trl")
    if fz and trl:
        pairs = [
            (a, b)
            for fb, tb in zip(fz.prompt_ids, trl.prompt_ids, strict=True)
            for a, b in zip(fb, tb, strict=True)
        ]
        out["prompt ids"] = {
            "prompts": len(pairs),
            "differing": sum(a != b for a, b in pairs),
            "special tokens in prompts": sum(
                any(t >= 256 for t in ids) for pair in pairs for ids in pair
            ),
        }
    for name, arm in arms.items():
        own, swapped, changed = [], [], 0
        for prompts, prompt_ids, rows, texts, rewards in zip(
            batches, arm.prompt_ids, arm.token_ids, arm.texts, arm.rewards, strict=True
        ):
            g = len(rows) // len(prompts)
            if name == "trl":  # forge-zoo's cut and decode on TRL's ids
                other = [fz_cut_and_decode(tok, prompt_ids[i // g], r) for i, r in enumerate(rows)]
            else:  # TRL's on forge-zoo's
                other = [trl_cut_and_decode(tok, r) for r in rows]
            repeated = [p for p in prompts for _ in range(g)]
            rescored = env.score_batch(repeated, other)
            own.append(statistics.fmean(rewards))
            swapped.append(statistics.fmean(rescored))
            changed += sum(a != b for a, b in zip(texts, other, strict=True))
        out[f"{name}: other side's cut and decode"] = {
            "texts changed": changed,
            "mean reward, own": statistics.fmean(own),
            "mean reward, other's": statistics.fmean(swapped),
            "difference (other's - own)": statistics.fmean(swapped) - statistics.fmean(own),
        }
        out[f"{name}: neighbouring prompts"] = neighbour_correlations(arm)
        rows = [r for b in arm.token_ids for r in b]
        out[f"{name}: samples"] = {
            "completions": len(rows),
            "ending in EOS": sum(bool(r) and r[-1] == tok.eos_token_id for r in rows),
            "with ids >= 257 (no byte)": sum(any(t > 256 for t in r) for r in rows),
            "with bytes >= 128": sum(any(128 <= t < 256 for t in r) for r in rows),
            "mean length (tokens, EOS included)": statistics.fmean(len(r) for r in rows),
        }
    if trl:  # the reward call: what TRL's reward function got, re-scored by the env
        rescored = [
            env.score_batch([p for p in prompts for _ in range(len(t) // len(prompts))], t)
            for prompts, t in zip(batches, trl.texts, strict=True)
        ]
        out["trl: reward call re-scored by env.score_batch"] = {
            "rewards differing": sum(
                a != b
                for x, y in zip(rescored, trl.rewards, strict=True)
                for a, b in zip(x, y, strict=True)
            )
        }
    return out


def pearson(x: list[float], y: list[float]) -> float:
    mx, my = statistics.fmean(x), statistics.fmean(y)
    sx = math.sqrt(sum((a - mx) ** 2 for a in x))
    sy = math.sqrt(sum((b - my) ** 2 for b in y))
    cov = sum((a - mx) * (b - my) for a, b in zip(x, y, strict=True))
    return cov / (sx * sy) if sx and sy else float("nan")


def neighbour_correlations(arm: Arm) -> dict[str, Any]:
    """Reward correlation of sample j of prompt i with sample j - 1 of prompt i + 1 (the
    same row seed, so the same noise stream, in forge-zoo's sampler: row seed = prompt
    seed + j, prompt seeds consecutive) and with sample j of prompt i + 1 (no shared
    stream), within each batch. Any arm: the pairs are positions, the sharing forge-zoo's;
    for the global-RNG arms both are controls. Also, for forge-zoo, how many distinct row
    seeds drew the completions that hold a non-byte id (ids 257-319)."""
    shared: tuple[list[float], list[float]] = ([], [])
    control: tuple[list[float], list[float]] = ([], [])
    for rewards, indices in zip(arm.rewards, arm.prompt_indices, strict=True):
        g = len(rewards) // len(indices)
        for i in range(len(indices) - 1):
            if indices[i + 1] != indices[i] + 1:
                continue
            for j in range(g):
                if j:
                    shared[0].append(rewards[i * g + j])
                    shared[1].append(rewards[(i + 1) * g + j - 1])
                control[0].append(rewards[i * g + j])
                control[1].append(rewards[(i + 1) * g + j])
    out: dict[str, Any] = {
        "pairs": len(shared[0]),
        "reward correlation, (i, j) ~ (i+1, j-1)": pearson(*shared),
        "reward correlation, (i, j) ~ (i+1, j)": pearson(*control),
    }
    if arm.row_seeds:
        seeds = {
            seed
            for rows, row_seeds in zip(arm.token_ids, arm.row_seeds, strict=True)
            for r, seed in zip(rows, row_seeds, strict=True)
            if any(t > 256 for t in r)
        }
        out["distinct row seeds of the non-byte-id completions"] = len(seeds)
    return out


def measure(
    batches: int = 32, prompts: int = 64, seed: int = 0, arms: tuple[str, ...] = ("fz", "trl")
) -> dict[str, Any]:
    """Every arm on the same ``batches`` x ``prompts`` training prompts; the figures."""
    unknown = set(arms) - set(ARMS)
    if unknown:
        raise ValueError(f"unknown arm(s) {sorted(unknown)}; valid: {', '.join(ARMS)}")
    torch.set_num_threads(1)  # (the per-row sampler's reproducibility; both sides alike)
    data = train_prompts(batches, prompts, seed)
    results: dict[str, Arm] = {}
    trl_info: dict[str, Any] = {}
    for name in arms:
        if name == "trl":
            results[name], trl_info = run_trl(data, seed)
        else:
            results[name] = run_forge_zoo(data, seed, global_rng=name == "fz-multinomial")
    out: dict[str, Any] = {
        "batches": batches,
        "prompts per batch": prompts,
        "group size": forge_zoo_run_config("grpo").sampling.group_size,
        "seed": seed,
        "prompt index range": [data[0][0].index, data[-1][-1].index],
        "temperature": forge_zoo_run_config("grpo").sampling.temperature,
        "max new tokens": forge_zoo_run_config("grpo").sampling.max_response_len,
        "trl seeds": [TRL_SEED_BASE + b for b in range(batches)] if "trl" in arms else [],
        "arms": {
            name: {
                "label": ARMS[name],
                **interval(arm.batch_means),
                "seconds": arm.seconds,
                "batch means": arm.batch_means,
                "reward min": min(min(r) for r in arm.rewards),
                "reward max": max(max(r) for r in arm.rewards),
                "prompt indices": arm.prompt_indices,
            }
            for name, arm in results.items()
        },
        "trl generation": trl_info,
    }
    base = results.get("fz")
    out["differences"] = {}
    if base:
        for name, arm in results.items():
            if name != "fz":
                diffs = [a - b for a, b in zip(base.batch_means, arm.batch_means, strict=True)]
                out["differences"][f"forge-zoo - {ARMS[name]}"] = interval(diffs)
    if "trl" in results and "fz-multinomial" in results:
        diffs = [
            a - b
            for a, b in zip(
                results["fz-multinomial"].batch_means, results["trl"].batch_means, strict=True
            )
        ]
        out["differences"][f"{ARMS['fz-multinomial']} - TRL"] = interval(diffs)
    out["factors on the same samples"] = cross_factors(results, data)
    return out


def _ci(x: dict[str, float]) -> str:
    return f"{x['mean']:+.4f} [{x['low']:+.4f}, {x['high']:+.4f}] (se {x['se']:.4f})"


def report(result: dict[str, Any], command: str, machine: str, commit: str) -> str:
    r = result
    lines = [
        "# Step-1 training reward: forge-zoo against TRL 1.16's GRPOTrainer",
        "",
        f"Measured by `{command}` at commit {commit} on "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; machine: {machine}.",
        "",
        f"Same start weights (tiny-sum), same prompts: the first {r['batches']} training "
        f"batches of run seed {r['seed']} ({r['prompts per batch']} running_sum prompts x "
        f"{r['group size']}, prompt indices {r['prompt index range'][0]}.."
        f"{r['prompt index range'][1]}), temperature {r['temperature']}, "
        f"{r['max new tokens']} new tokens, float32 on CPU. forge-zoo's sampler seeds: "
        f"sampling_seed({r['seed']}, prompt index); TRL's global generator: "
        f"torch.manual_seed({TRL_SEED_BASE} + batch). Intervals: 95% t over batches.",
        "",
        "| arm | mean training reward [95% CI] | batches | seconds |",
        "|---|---|---|---|",
    ]
    for arm in r["arms"].values():
        lines.append(f"| {arm['label']} | {_ci(arm)} | {arm['batches']} | {arm['seconds']:.0f} |")
    lines += ["", "| difference (paired by batch) | mean [95% CI] |", "|---|---|"]
    for name, d in r["differences"].items():
        lines.append(f"| {name} | {_ci(d)} |")
    lines += ["", "Factors swapped on the same samples (no sampling noise):", ""]
    for name, figures in r["factors on the same samples"].items():
        shown = ", ".join(
            f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in figures.items()
        )
        lines.append(f"- {name}: {shown}")
    if r["trl generation"]:
        g = r["trl generation"]
        lines += [
            "",
            f"TRL's generation: model {g['dtype']}, attention {g['attention']}, "
            f"GenerationConfig {g['generation config']}, logits processors built by "
            f"transformers: {', '.join(g['logits processors']) or '(none)'}. forge-zoo's: "
            "float32, eager attention, its seeded Gumbel-max processor on logits / T "
            "(transformers' generate run greedily, so it builds no warper).",
        ]
    return "\n".join(lines) + "\n"


def commit_of() -> str:
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(["git", "diff", "--quiet", "HEAD"], check=False).returncode
        return sha + ("+uncommitted" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=32)
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--arms", default="fz,trl", help=f"comma-separated, from {list(ARMS)}")
    parser.add_argument("--out", type=Path, default=Path("results/parity"))
    args = parser.parse_args(argv)
    arms = tuple(a.strip() for a in args.arms.split(",") if a.strip())
    if not arms or set(arms) - set(ARMS):
        parser.error(f"--arms {args.arms!r}: valid arms are {', '.join(ARMS)}")
    from benchmarks.common import machine_line

    result = measure(args.batches, args.prompts, args.seed, arms)
    given = argv if argv is not None else sys.argv[1:]
    command = " ".join(["python -m benchmarks.parity.step1", *given])
    machine, commit = machine_line(), commit_of()
    text = report(result, command, machine, commit)
    args.out.mkdir(parents=True, exist_ok=True)
    payload = {"command": command, "commit": commit, "machine": machine, **result}
    (args.out / "step1_gap.json").write_text(json.dumps(payload, indent=1))
    (args.out / "step1_gap.md").write_text(text)
    print(text)
    print(f"wrote {args.out / 'step1_gap.md'}")
    return payload


if __name__ == "__main__":
    main()
