"""The shared infra core, by layer (docs/architecture.md; tests/test_architecture.py
checks that each module imports only its own layer and those listed before it).

contracts    types.py (Completion, TrainBatch, LossOutput), config.py (dataclass configs,
             overrides), registry.py (built-ins and entry points), losses.py (aggregation,
             k3 KL, group advantages), progress.py (progress bars), hub.py (Hugging Face
             Hub downloads; when not to download)
models       models.py (presets, loading, Hugging Face <-> TorchTitan), memory.py (memory
             estimates), tiny.py (the embedded tiny models), tokenizer.py (their byte-level
             tokenizer), sharding.py (FSDP2, tensor parallelism)
services     sampling.py, generator.py (vLLM; make_generator), hf_generator.py
             (transformers), trainer.py (TorchTitan Qwen3, AdamW, mini- and micro-batches,
             old log-probs), reference.py, offpolicy.py (trainer-sampler mismatch and its
             corrections), ledger.py (FLOPs, tokens, seconds), evaluation.py (pass@k)
placement    placement/ (Monarch actors, proxies, replicas, weight sync, spawning),
             placement_config.py (placement files)
the loop     run_config.py (RunConfig), wiring.py (build_services), rollout.py (seeds,
             packing), loop.py (RLLoop: one step, the run), checkpoint.py, runlog.py
             (provenance, metrics, samples), trackers.py (TensorBoard, W&B, MLflow)
"""

from zoo.core.types import Completion, LossOutput, TrainBatch

__all__ = ["Completion", "LossOutput", "TrainBatch"]
