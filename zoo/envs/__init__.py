"""Environments: ``get_env(name, **config)``; third parties register through the
``zoo.envs`` entry-point group."""

from __future__ import annotations

from typing import Any

from zoo.core.registry import Registry
from zoo.envs.base import Env, Prompt
from zoo.envs.episode import Episode, MultiTurnEnv, Reply, is_multi_turn

ENVS = Registry(
    "environment",
    "zoo.envs",
    builtins={
        "arithmetic": "zoo.envs.math.arithmetic:Arithmetic",
        "running_sum": "zoo.envs.math.running_sum:RunningSum",
        "countdown": "zoo.envs.math.reasoning_gym_envs:Countdown",
        "basic_arithmetic": "zoo.envs.math.reasoning_gym_envs:BasicArithmetic",
        "chain_sum": "zoo.envs.math.reasoning_gym_envs:ChainSum",
        "gsm_symbolic": "zoo.envs.math.reasoning_gym_envs:GSMSymbolic",
        "gsm8k": "zoo.envs.math.math_datasets:GSM8K",
        "math": "zoo.envs.math.math_datasets:MATH",
        "humaneval": "zoo.envs.code.humaneval:HumanEval",
        "mbpp": "zoo.envs.code.mbpp:MBPP",
        "pyfunc": "zoo.envs.code.pyfunc:PyFunc",
        "pyfunc_feedback": "zoo.envs.code.code_feedback:PyFuncFeedback",
        "humaneval_feedback": "zoo.envs.code.code_feedback:HumanEvalFeedback",
        "mbpp_feedback": "zoo.envs.code.code_feedback:MBPPFeedback",
        "tool_arithmetic": "zoo.envs.tool.tool_arithmetic:ToolArithmetic",
        "openenv": "zoo.envs.tool.openenv_env:OpenEnvEnv",
    },
)


def get_env(name: str, **config: Any) -> Env:
    return ENVS.load(name)(**config)


def list_envs() -> list[str]:
    return ENVS.names()


__all__ = [
    "ENVS",
    "Env",
    "Episode",
    "MultiTurnEnv",
    "Prompt",
    "Reply",
    "get_env",
    "is_multi_turn",
    "list_envs",
]
