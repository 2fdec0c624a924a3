"""Token ids of what the env says between two assistant turns of an episode.

Plain prompts only here: the observation is the tokenizer's encoding of its text (no
special tokens), appended after the tokens the model sampled (its end-of-text token
included when it stopped). Chat prompts need the chat template's tool-response message.
"""

from __future__ import annotations

from typing import Any

from zoo.core.config import ConfigError
from zoo.envs import Prompt


def observation_ids(
    tokenizer: Any, prompt: Prompt, turns: list[str], observation: str
) -> list[int]:
    """Token ids of ``observation``, placed after the assistant turns ``turns`` (their
    texts so far) of an episode on ``prompt``."""
    if prompt.meta.get("messages") is not None:
        raise ConfigError(
            "chat-formatted multi-turn episodes need the chat renderer (the template's "
            "tool-response messages); use --env-set prompt_format=plain"
        )
    return list(tokenizer.encode(observation, add_special_tokens=False))
