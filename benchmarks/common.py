"""What the benchmarks share: Qwen3 shapes at benchmark sizes (random weights, the
byte-level tokenizer), the machine's measured float32 matmul peak, and a description of
the machine to print beside every figure."""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

from zoo.models.tokenizer import EOS_ID, save_tokenizer

# Qwen3 architecture (head_dim 64, grouped-query attention, SwiGLU MLP at 3x hidden) at
# ~10M and ~50M parameters, with the byte-level vocabulary (320 after padding): there are
# no Qwen3 releases this small, and these are the sizes where a 2-core CPU shows how cost
# grows. Parameter counts exclude the 320 x hidden embedding and LM head.
BENCH_SHAPES = {
    "10m": {
        "hidden_size": 384,
        "num_hidden_layers": 6,
        "num_attention_heads": 6,
        "num_key_value_heads": 2,
        "intermediate_size": 1152,
    },
    "50m": {
        "hidden_size": 768,
        "num_hidden_layers": 8,
        "num_attention_heads": 12,
        "num_key_value_heads": 4,
        "intermediate_size": 2048,
    },
}


def random_model_dir(name: str, root: Path) -> Path:
    """A Hugging Face config + tokenizer (no weights) for a BENCH_SHAPES entry: load it
    with ``init="random"``."""
    directory = Path(root) / f"bench-{name}"
    directory.mkdir(parents=True, exist_ok=True)
    config = {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "vocab_size": 320,
        "head_dim": 64,
        "max_position_embeddings": 1024,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1_000_000.0,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "eos_token_id": EOS_ID,
        "pad_token_id": EOS_ID,
        "torch_dtype": "float32",
        **BENCH_SHAPES[name],
    }
    (directory / "config.json").write_text(json.dumps(config, indent=2))
    save_tokenizer(directory)
    return directory


def model_dir(name: str, root: Path) -> tuple[Path, str]:
    """(directory, init) of a benchmark model: "tiny" is the warm-started preset, the
    BENCH_SHAPES names are random-weight models."""
    if name == "tiny":
        from zoo.models.tiny import tiny_model_path

        return tiny_model_path(), "pretrained"
    return random_model_dir(name, root), "random"


REPO = Path(__file__).resolve().parents[1]


def timed_harness(*args: str) -> float:
    """Wall seconds of one ``python -m harness ARGS`` subprocess (no progress bars); its
    stderr's tail in the error if it fails."""
    command = [sys.executable, "-m", "harness", *args]
    start = time.perf_counter()
    done = subprocess.run(
        command,
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "TQDM_DISABLE": "1"},
    )
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{done.stderr[-3000:]}")
    return elapsed


def seconds(fn: Callable[[], object], repeats: int, warmup: int = 1) -> float:
    """Median wall seconds of ``fn`` over ``repeats`` calls after ``warmup`` calls."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def matmul_peak(n: int = 2048, repeats: int = 5) -> float:
    """FLOP/s of an n x n x n float32 matmul on this machine (median), the peak that
    utilisation is measured against, taken in the same process as the step it judges."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    return 2 * n**3 / seconds(lambda: a @ b, repeats)


def machine_line() -> str:
    from zoo.run.runlog import cpu_model

    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return (
        f"{cpu_model()}, {len(os.sched_getaffinity(0))} cores, torch "
        f"{torch.__version__} with {torch.get_num_threads()} threads, load average {load}, "
        f"{platform.platform()}"
    )


def script_main(doc: str, table: Callable[[Path, bool], list[dict]], floatfmt: str) -> None:
    """``python -m benchmarks.<name> [--quick]``: print the benchmark's table."""
    import argparse
    import tempfile

    import pandas as pd

    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny settings (a smoke test)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        rows = table(Path(tmp), args.quick)
    print(pd.DataFrame(rows).to_markdown(index=False, floatfmt=floatfmt))
