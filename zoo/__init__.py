"""forge-zoo: a PyTorch-native algorithm zoo and benchmark harness for RL on language models.

Where things live, bottom layer first (each imports only the layers above it here):
    zoo.core        the plugin-facing contracts: types, configs, registries, shared losses
    zoo.algorithms  one file per algorithm plugin, plus the base class and conformance suite
    zoo.envs        one file per environment, plus the base class, sandbox and verdicts
    zoo.models      presets, TorchTitan's Qwen3, parallelism, the tiny models
    zoo.services    generation (vLLM, transformers), trainer, reference, ledger, evaluation
    zoo.placement   where the services run: this process, or Monarch actors
    zoo.run         RunConfig, wiring, the RL loop (zoo/run/loop.py), checkpoints, run logs
"""

__version__ = "0.1.0"
