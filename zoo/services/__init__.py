"""The services one RL step calls, each usable in this process or behind a placement's
proxy (zoo.placement): both provide the methods of zoo.services.protocols.

protocols.py    the Generator, Trainer, Reference and Scorer services as typing.Protocols
generation/     sampling completions: vllm.py (vLLM), hf.py (transformers), make_generator
sampling.py     what both backends share: SamplingConfig, the busy-time counter
batch.py        RolloutBatch (a rollout laid out for a decoder), response log-probs
trainer.py      TorchTitan Qwen3, AdamW, mini- and micro-batches, old log-probs
reference.py    the frozen reference model's log-probs
offpolicy.py    the trainer-sampler mismatch and its corrections
ledger.py       FLOPs, tokens and seconds per phase
evaluation.py   held-out evaluation: greedy accuracy, pass@k
"""
