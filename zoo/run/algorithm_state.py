"""What a checkpoint keeps of an algorithm's own state (``Algorithm.state_dict``: a
plugin's running baseline, say), checked when saved and restored on resume; the
checkpoint's ``loop_state`` and ``restore_loop_state`` call these."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from zoo.core.config import ConfigError

if TYPE_CHECKING:  # (the run reaches plugins only through their registries)
    from zoo.algorithms.base import Algorithm


PLAIN_STATE = (str, int, float, bool, type(None), torch.Tensor)
"""What an algorithm's ``state_dict`` may hold besides dicts, lists and tuples: what a
checkpoint read with ``weights_only=True`` gives back."""


def algorithm_state(algorithm: Algorithm) -> dict[str, Any]:
    """``algorithm.state_dict()``, checked to hold only what a checkpoint restores
    (``PLAIN_STATE`` in dicts with str keys, lists and tuples): an object the resume could
    not read back fails the save that would write it, naming where it sits."""
    state = algorithm.state_dict()

    def check(value: Any, where: str) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(key, str):
                    raise ConfigError(
                        f"algorithm {algorithm.name!r}: state_dict(){where} has the key "
                        f"{key!r}; a checkpoint keeps str keys only"
                    )
                check(item, f"{where}[{key!r}]")
        elif isinstance(value, list | tuple):
            for i, item in enumerate(value):
                check(item, f"{where}[{i}]")
        elif not isinstance(value, PLAIN_STATE):
            raise ConfigError(
                f"algorithm {algorithm.name!r}: state_dict(){where} holds a "
                f"{type(value).__name__}; a checkpoint keeps tensors, str, int, float, bool "
                "and None in dicts, lists and tuples"
            )

    check(state, "")
    return state


def restore_algorithm_state(algo: Algorithm, kept: dict[str, Any] | None) -> None:
    """Hand ``algo`` the state a checkpoint kept of it (``kept``: None where the checkpoint
    has none). Refuses a checkpoint without state for an algorithm that keeps some: resuming
    would silently restart it from scratch."""
    if kept is not None:
        algo.load_state_dict(kept)
    elif algo.state_dict():  # it keeps state, and this checkpoint has none of it
        raise ConfigError(
            f"the checkpoint holds no state of algorithm {algo.name!r}, which keeps some "
            f"({', '.join(sorted(map(str, algo.state_dict())))}; written by a version "
            "that kept none?): resuming would restart it from scratch; start the run "
            "afresh in another --out"
        )
