"""Where the shipped pyfunc start weights begin: greedy reward of ``tiny-code`` and
``tiny-code-feedback`` on each of pyfunc's splits (the 500 held-out functions, the 239 RL
trains on, the 400 of the warm start), with one submission and, on held-out, with up to
three (pyfunc_feedback). A start that scores far higher on the functions it was fine-tuned
on than on the others has memorised them; RL's training functions must not be those.

    .venv/bin/python scripts/pyfunc_starts.py   # ~2 minutes on 1 core; prints and writes JSON

Writes ``results/pyfunc-starts/starts.json`` (docs/envs.md quotes it).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from transformers import Qwen3ForCausalLM

from zoo.envs import get_env
from zoo.models.tiny import TINY_PRESETS, tiny_model_path
from zoo.warm_start.build import WARM_START_EVAL_TOKENS
from zoo.warm_start.greedy import greedy_accuracy, greedy_episodes

OUT = Path("results/pyfunc-starts/starts.json")


def measure(preset: str) -> dict[str, float]:
    model = Qwen3ForCausalLM.from_pretrained(tiny_model_path(TINY_PRESETS[preset])).eval()
    single, feedback = get_env("pyfunc"), get_env("pyfunc_feedback")
    tokens = WARM_START_EVAL_TOKENS["pyfunc"]
    splits = {
        "held_out": single.eval_prompts(),
        "train": single.train_prompts(0, len(single._train), seed=0),
        "warm_start": single.warm_start_prompts(0, len(single._warm), seed=0),
    }
    out = {
        f"{name}_1_submission": greedy_accuracy(model, single, prompts, tokens)
        for name, prompts in splits.items()
    }
    episodes = greedy_episodes(model, feedback, feedback.eval_prompts(), tokens)
    out["held_out_up_to_3_submissions"] = episodes["reward"]
    out["held_out_submissions_per_episode"] = episodes["turns"]
    out["sizes"] = {name: len(prompts) for name, prompts in splits.items()}
    return out


def main() -> None:
    torch.set_num_threads(1)
    result = {preset: measure(preset) for preset in ("tiny-code", "tiny-code-feedback")}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
