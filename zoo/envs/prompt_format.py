"""Prompt formats shared by the math environments: ``"plain"`` and ``"chat"``.

The env does not hold a tokenizer, so in both formats ``Prompt.text`` is the plain-text
task (question plus answer instruction). With ``prompt_format="chat"`` the prompt also
carries ``meta["messages"] = [{"role": "user", "content": text}]`` and
``meta["prompt_format"] = "chat"``: the caller that turns prompts into token ids must then
use ``tokenizer.apply_chat_template(meta["messages"], add_generation_prompt=True)``
instead of encoding ``text``. A plain prompt has ``meta["prompt_format"] = "plain"`` and
no messages.
"""

from __future__ import annotations

from typing import Any

from zoo.core.config import ConfigError
from zoo.envs.base import Prompt

PROMPT_FORMATS = ("plain", "chat")


def check_prompt_format(env: str, value: str) -> None:
    if value not in PROMPT_FORMATS:
        raise ConfigError(
            f"{env}: prompt_format must be one of {', '.join(PROMPT_FORMATS)}, got {value!r}"
        )


def build_prompt(
    question: str,
    instruction: str,
    prompt_format: str,
    *,
    answer: Any,
    index: int,
    split: str,
    meta: dict[str, Any] | None = None,
) -> Prompt:
    """The prompt for ``question`` followed by ``instruction`` (after a blank line, when the
    instruction is not empty), in ``prompt_format``."""
    text = f"{question.rstrip()}\n\n{instruction}" if instruction else question
    meta = dict(meta or {})
    meta["prompt_format"] = prompt_format
    if prompt_format == "chat":
        meta["messages"] = [{"role": "user", "content": text}]
    return Prompt(text=text, answer=answer, index=index, split=split, meta=meta)
