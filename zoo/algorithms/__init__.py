"""Algorithms: ``get_algorithm(name, **overrides)``. Built-ins are listed here by name;
third parties register through the ``zoo.algorithms`` entry-point group."""

from __future__ import annotations

from typing import Any

from zoo.algorithms.base import Algorithm
from zoo.core.registry import Registry
from zoo.core.types import ADVANTAGE_INPUTS, AdvantageInputs, Card

ALGORITHMS = Registry(
    "algorithm",
    "zoo.algorithms",
    builtins={
        "grpo": "zoo.algorithms.grpo:GRPO",
        "dr_grpo": "zoo.algorithms.dr_grpo:DrGRPO",
        "dapo": "zoo.algorithms.dapo:DAPO",
        "cispo": "zoo.algorithms.cispo:CISPO",
        "gspo": "zoo.algorithms.gspo:GSPO",
        "sapo": "zoo.algorithms.sapo:SAPO",
        "rloo": "zoo.algorithms.rloo:RLOO",
        "reinforce_pp": "zoo.algorithms.reinforce_pp:ReinforcePP",
        "opo": "zoo.algorithms.opo:OPO",
        "custom": "zoo.algorithms.custom:Custom",
        "gpg": "zoo.algorithms.gpg:GPG",
        "gmpo": "zoo.algorithms.gmpo:GMPO",
        "clip_cov": "zoo.algorithms.clip_cov:ClipCov",
        "kl_cov": "zoo.algorithms.kl_cov:KLCov",
        "remax": "zoo.algorithms.remax:ReMax",
        "gigpo": "zoo.algorithms.gigpo:GiGPO",
        "ppo": "zoo.algorithms.ppo:PPO",
        "grpo_twin": "zoo.algorithms.controls:GRPOTwin",
    },
)


def get_algorithm(name: str, **overrides: Any) -> Algorithm:
    return ALGORITHMS.load(name)(**overrides)


def list_algorithms() -> list[str]:
    return ALGORITHMS.names()


__all__ = [
    "ADVANTAGE_INPUTS",
    "ALGORITHMS",
    "AdvantageInputs",
    "Algorithm",
    "Card",
    "get_algorithm",
    "list_algorithms",
]
