"""Training utilisation: achieved FLOP/s of the trainer step (the ledger's model FLOPs,
3 x forward, over step seconds) against this machine's float32 matmul peak measured in
the same run, for the tiny model and a ~50M-parameter Qwen3 shape.

    python -m benchmarks.utilisation [--quick]
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from benchmarks.common import matmul_peak, model_dir, script_main, seconds
from zoo.models.presets import ModelShape
from zoo.services.batch import RolloutBatch
from zoo.services.ledger import Ledger
from zoo.services.trainer import Trainer, TrainerConfig

# (model, sequences, prompt tokens, response tokens): the tiny model at its RL batch;
# the 50m shape at a batch long enough to keep the matmuls large.
SETTINGS = [("tiny", 1024, 16, 6), ("50m", 16, 64, 192)]


def random_batch(sequences: int, prompt: int, response: int, vocab: int) -> RolloutBatch:
    g = torch.Generator().manual_seed(0)
    return RolloutBatch(
        tokens=torch.randint(0, min(vocab, 256), (sequences, prompt + response), generator=g),
        response_start=torch.full((sequences,), prompt),
        mask=torch.ones(sequences, response),
        advantages=torch.randn(sequences, generator=g),
    )


def utilisation_table(root: Path, quick: bool = False) -> list[dict[str, Any]]:
    from zoo.algorithms import get_algorithm

    loss = get_algorithm("grpo", beta=0.0).loss
    peak = matmul_peak(1024 if quick else 2048)
    rows = []
    for name, sequences, prompt, response in SETTINGS:
        if quick:
            sequences, response = 4, 8
        path, init = model_dir(name, root)
        torch.manual_seed(0)
        trainer = Trainer(path, TrainerConfig(), max_response_len=response, init=init)
        batch = random_batch(sequences, prompt, response, ModelShape.from_hf_dir(path).vocab_size)
        step = seconds(lambda t=trainer, b=batch: t.step(b, loss), repeats=2 if quick else 3)
        shape = ModelShape.from_hf_dir(path)
        flops = 3 * Ledger(shape).scoring_flops(prompt, response) * sequences
        rows.append(
            {
                "model": name,
                "params (M)": shape.params / 1e6,
                "batch": f"{sequences} x ({prompt} + {response}) tokens",
                "s/step": step,
                "achieved GFLOP/s": flops / step / 1e9,
                "peak GFLOP/s (fp32 matmul)": peak / 1e9,
                "% of peak": 100 * flops / step / peak,
            }
        )
    return rows


if __name__ == "__main__":
    script_main(__doc__, utilisation_table, ".2f")
