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

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from zoo.core.types import Completion, LossOutput, TrainBatch

__all__ = ["Completion", "LossOutput", "TrainBatch"]


def __getattr__(name: str) -> Any:
    """The types on first use (PEP 562): they import torch, which ``zoo.core.config``,
    and so a command's ``--help`` and its bad-flag errors, do not need."""
    if name in __all__:
        return getattr(importlib.import_module("zoo.core.types"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
