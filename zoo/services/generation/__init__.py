"""The generation service, one file per backend: ``vllm.py`` (vLLM, the default) and
``hf.py`` (transformers' ``generate``, where vLLM is not installed). ``make_generator``
picks one for ``--generator``; both take the same calls (zoo.services.protocols)."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from zoo.core.config import ConfigError
from zoo.services.generation.hf import HFGenerator
from zoo.services.generation.vllm import GPU_SHARE_FOR_GENERATION, VLLMGenerator, vllm_import_error

GENERATOR_BACKENDS = ("auto", "vllm", "hf")
"""``--generator``: vLLM, transformers (zoo.services.generation.hf), or vLLM where it imports."""


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
    weights: the caller sends the trainer's by ``update_weights``. ``auto`` falls back to
    transformers, with a one-line notice, where vLLM cannot be imported.
    ``tensor_parallel`` > 1: vLLM's tensor parallelism, over worker processes the engine
    starts itself (its multiprocessing executor; one GPU each on GPUs)."""
    if backend not in GENERATOR_BACKENDS:
        raise ConfigError(f"unknown generator {backend!r}; valid: {', '.join(GENERATOR_BACKENDS)}")
    if backend == "auto":
        error = vllm_import_error()
        backend = "vllm" if error is None else "hf"
        if error is not None:
            print(f"notice: vLLM cannot be imported ({error}); generating with transformers "
                  "(--generator hf)", file=sys.stderr)  # fmt: skip
    on_gpu = torch.device(device).type == "cuda"
    if tensor_parallel > 1 and backend != "vllm":
        raise ConfigError(
            f"a generator over {tensor_parallel} processes is vLLM tensor parallelism; "
            f"--generator {backend} has none (use --generator vllm, or procs: 1)"
        )
    if backend == "vllm":
        if tensor_parallel > 1:
            parallel = {"tensor_parallel_size": tensor_parallel,
                        "distributed_executor_backend": "mp"}  # fmt: skip
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
