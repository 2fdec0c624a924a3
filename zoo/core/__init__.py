"""The shared infra core. Where to look:

types.py      Completion, TrainBatch, LossOutput (the data between services)
losses.py     aggregation modes, k3 KL, group advantages (shared by all plugins)
tokenizer.py  the byte-level tokenizer of the embedded tiny model
models.py     model presets and loading (the tiny model is built in tiny.py)
generator.py  generation: vLLM, and the choice of backend (make_generator)
hf_generator.py  generation with transformers, where vLLM is not available
trainer.py    training: TorchTitan's Qwen3, AdamW, mini- and micro-batches; the loss is
              called here; old log-probs with the weights that sampled a batch
offpolicy.py  the trainer-sampler gap: mismatch metrics, TIS / MIS / bypass corrections
reference.py  the frozen reference model
ledger.py     compute accounting: FLOPs, tokens and seconds per phase
loop.py       one RL step and the training loop
"""

from zoo.core.types import Completion, LossOutput, TrainBatch

__all__ = ["Completion", "LossOutput", "TrainBatch"]
