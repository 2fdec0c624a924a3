"""The generation service, one file per backend: ``vllm.py`` (vLLM) and ``hf.py``
(transformers' ``generate``: small models on CPU, and where vLLM is not installed).
``make_generator`` picks one for ``--generator``; both take the same calls
(zoo.services.protocols) and sample the same distribution (tests/test_hf_generator.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from zoo.core.config import ConfigError
from zoo.models.presets import ModelShape
from zoo.services.generation.hf import HFGenerator
from zoo.services.generation.vllm import GPU_SHARE_FOR_GENERATION, VLLMGenerator, vllm_import_error
from zoo.services.settings import GENERATOR_BACKENDS

SMALL_MODEL_PARAMS = 10_000_000
"""Below this many weights (zoo.models.presets.ModelShape.params) a CPU generates faster
with transformers than with vLLM, whose per-request Python and scheduling outweigh the
arithmetic: new tokens per second, vLLM over transformers, on 128 prompts x 8 samples
(leaderboards/performance.md, section 2, and leaderboards/performance_notes.md): 0.49-0.57 on the
0.5M tiny model, 0.92 at 10M (6 tokens; 0.99 at 32), 1.23-1.45 at 50M."""


def by_size(params: int, device: str = "cpu", tensor_parallel: int = 1) -> str:
    """What ``--generator by_size`` means for a model of ``params`` weights: "hf" for a
    small model in one CPU process, else "auto" (``doctor`` asks it from the shape alone,
    to check only the backend a run would start)."""
    one_cpu_process = torch.device(device).type == "cpu" and tensor_parallel == 1
    return "hf" if one_cpu_process and params < SMALL_MODEL_PARAMS else "auto"


def resolve_backend(
    backend: str, model_path: Path, device: str = "cpu", tensor_parallel: int = 1
) -> str:
    """The backend ``--generator backend`` generates ``model_path`` with: ``vllm`` or
    ``hf``. ``auto`` falls back to transformers, with a one-line notice, where vLLM
    cannot be imported; ``by_size`` first picks transformers for a small model in one
    CPU process."""
    if backend not in GENERATOR_BACKENDS:
        raise ConfigError(f"unknown generator {backend!r}; valid: {', '.join(GENERATOR_BACKENDS)}")
    if backend == "by_size":
        backend = by_size(ModelShape.from_hf_dir(model_path).params, device, tensor_parallel)
    if backend == "auto":
        error = vllm_import_error()
        if error is None:
            return "vllm"
        print(
            f"notice: vLLM cannot be imported ({error}); generating with transformers "
            "(--generator hf)",
            file=sys.stderr,
        )
        return "hf"
    return backend


def make_generator(
    backend: str,
    model_path: Path,
    *,
    seed: int,
    init: str = "pretrained",
    device: str = "cpu",
    max_model_len: int = 256,
    tensor_parallel: int = 1,
):
    """A generation service for ``model_path``. ``init="random"`` starts without reading
    weights: the caller sends the trainer's by ``update_weights``. ``backend``: one of
    GENERATOR_BACKENDS (resolve_backend). ``tensor_parallel`` > 1: vLLM's tensor
    parallelism, over worker processes the engine starts itself (its multiprocessing
    executor; one GPU each on GPUs)."""
    backend = resolve_backend(backend, model_path, device, tensor_parallel)
    on_gpu = torch.device(device).type == "cuda"
    if tensor_parallel > 1 and backend != "vllm":
        raise ConfigError(
            f"a generator over {tensor_parallel} processes is vLLM tensor parallelism; "
            f"--generator {backend} has none (use --generator vllm, or procs: 1)"
        )
    if backend == "vllm":
        if tensor_parallel > 1:
            parallel = {
                "tensor_parallel_size": tensor_parallel,
                "distributed_executor_backend": "mp",
            }
        else:
            parallel = {}
        return VLLMGenerator(
            model_path,
            seed=seed,
            max_model_len=max_model_len,
            dtype="bfloat16" if on_gpu else "float32",
            load_format="dummy" if init == "random" else "auto",
            # on one GPU the trainer shares the device: leave it most of the memory
            **({"gpu_memory_utilization": GPU_SHARE_FOR_GENERATION} if on_gpu else {}),
            **parallel,
        )
    dtype = torch.bfloat16 if on_gpu else torch.float32
    return HFGenerator(model_path, seed=seed, device=device, dtype=dtype, init=init)
