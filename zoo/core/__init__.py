"""The plugin-facing contracts: what an algorithm or env package imports, and nothing that
knows about processes, devices or models (docs/architecture.md's bottom layer).

types.py      Completion, TrainBatch, LossOutput
config.py     dataclass configs, overrides, ConfigError
registry.py   built-ins and entry points
losses.py     aggregation, k3 KL, group advantages, shared estimators
progress.py   progress bars
hub.py        Hugging Face Hub downloads; when not to download

The layers above live in folders of their own: zoo.models, zoo.services, zoo.placement,
zoo.run (tests/test_architecture.py checks that each imports only the layers below).
"""

from zoo.core.types import Completion, LossOutput, TrainBatch

__all__ = ["Completion", "LossOutput", "TrainBatch"]
