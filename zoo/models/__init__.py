"""Models: which there are, how they are built, and how they are split over processes.
Weights and shapes only; no service, process or run (docs/architecture.md's layers).

presets.py      the presets, resolving a name or folder to a Hugging Face checkpoint,
                ``ModelShape`` (sizes read from its config.json)
titan.py        TorchTitan's Qwen3 built from such a checkpoint; Hugging Face <-> TorchTitan
                weight names
parallelism.py  ``parallelize``: FSDP2 and tensor parallelism applied to a built model from
                outside the trainer, and the per-rank row split of a batch
sharded_state.py  whole tensors in and out of a split model and its optimizer
memory.py       memory estimates (will a run fit)
tiny.py         the embedded tiny models, warm-started here
tokenizer.py    their byte-level tokenizer
"""
