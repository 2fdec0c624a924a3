"""Generation: forge-zoo's generator (vLLM, in-process) against transformers' `generate`
(KV cache, batched; zoo/services/generation/hf.py) on the same model and batch, new tokens per
second, at two settings:

- tiny, short answers: the tiny model on 128 arithmetic prompts x 8 samples x <= 6 new
  tokens (where per-call overhead dominates);
- 50m, long answers: a ~50M-parameter Qwen3 shape (random weights, the same in both
  backends) on 256 sequences x 128 new tokens (EOS ignored so both generate every token).

    python -m benchmarks.generation [--quick]
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from benchmarks.common import model_dir, script_main, seconds
from zoo.services.sampling import SamplingConfig


def tokens_per_second(generator, prompts, n: int, sampling: SamplingConfig, repeats: int):
    """(new tokens/s, new tokens per call) of ``generator.generate`` (median call)."""
    seeds = list(range(len(prompts)))
    out = generator.generate(prompts, n=n, sampling=sampling, seeds=seeds)
    tokens = sum(len(c.token_ids) for g in out for c in g)
    wall = seconds(
        lambda: generator.generate(prompts, n=n, sampling=sampling, seeds=seeds), repeats
    )
    return tokens / wall, tokens


def generation_table(root: Path, quick: bool = False) -> list[dict[str, Any]]:
    from zoo.envs import get_env
    from zoo.services.generation.hf import HFGenerator
    from zoo.services.generation.vllm import VLLMGenerator

    settings = [
        ("tiny, 128 prompts x 8, <= 6 new tokens", "tiny", 16 if quick else 128, 8, 6, False),
        (
            "50m, 256 sequences x 128 new tokens",
            "50m",
            8 if quick else 256,
            1,
            8 if quick else 128,
            True,
        ),
    ]
    rows = []
    for label, name, prompts_n, n, max_tokens, ignore_eos in settings:
        path, init = model_dir(name, root)
        torch.manual_seed(0)
        hf = HFGenerator(path, seed=0, init=init)
        vllm = VLLMGenerator(path, seed=0, load_format="dummy" if init == "random" else "auto")
        if init == "random":  # the same random weights in both
            vllm.update_weights(hf.model.state_dict(), version=0)
        if name == "tiny":
            env = get_env("arithmetic")
            prompts = [list(p.text.encode()) for p in env.train_prompts(0, prompts_n, 0)]
        else:
            g = torch.Generator().manual_seed(0)
            prompts = torch.randint(0, 256, (prompts_n, 32), generator=g).tolist()
        sampling = SamplingConfig(max_tokens=max_tokens, ignore_eos=ignore_eos)
        ours, ours_tokens = tokens_per_second(vllm, prompts, n, sampling, repeats=3)
        theirs, their_tokens = tokens_per_second(hf, prompts, n, sampling, repeats=3)
        rows.append(
            {
                "setting": label,
                "forge-zoo (vLLM) tok/s": ours,
                "transformers generate tok/s": theirs,
                "ratio": ours / theirs,
                "new tokens per call (vLLM / HF)": f"{ours_tokens} / {their_tokens}",
            }
        )
        del vllm, hf
    return rows


if __name__ == "__main__":
    script_main(__doc__, generation_table, ".2f")
