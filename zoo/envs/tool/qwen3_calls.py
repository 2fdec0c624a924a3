"""Qwen3's native tool calls, read from (and written into) an assistant turn's text.

Qwen3's chat template, given ``tools=[...]`` (JSON schemas in the OpenAI function format),
tells the model to call a tool by writing

    <tool_call>
    {"name": <function-name>, "arguments": <args-json-object>}
    </tool_call>

in its answer; the result comes back as a ``tool`` message, which the template writes as
``<tool_response>\\n...\\n</tool_response>`` in a user turn (zoo.services.conversation
renders it). This module only reads and writes the call: an env checks the tool's name
and arguments, runs it, and answers with the result or an ``error: <why>`` observation.

A turn's answer is its text after the reasoning (the last ``</think>``), so a tag inside
the reasoning is no call. One call per turn. Parsing is linear in the turn's length:
``str.find`` for the tags, and ``json.loads`` only of a body of at most ``MAX_CALL_CHARS``
characters (which also bounds its nesting).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"
THINK_CLOSE = "</think>"
MAX_CALL_CHARS = 400
"""A ``<tool_call>`` body longer than this is refused unparsed."""


@dataclass(frozen=True)
class ParsedCall:
    """A turn's tool call: the tool's name and arguments, or ``error`` (then both are
    empty) saying why the call cannot be read."""

    name: str = ""
    arguments: dict[str, Any] = field(default_factory=dict)
    error: str = ""


def answer_text(text: str) -> str:
    """A turn without its reasoning: the text after the last ``</think>`` (all of it when
    there is none)."""
    end = text.rfind(THINK_CLOSE)
    return text if end < 0 else text[end + len(THINK_CLOSE) :]


def format_tool_call(name: str, arguments: dict[str, Any]) -> str:
    """A call as Qwen3 writes it."""
    return f"{CALL_OPEN}\n{json.dumps({'name': name, 'arguments': arguments})}\n{CALL_CLOSE}"


def parse_tool_call(text: str) -> ParsedCall | None:
    """The tool call in turn ``text``'s answer; None when there is none (the turn is an
    answer, not a call)."""
    text = answer_text(text)
    start = text.find(CALL_OPEN)
    if start < 0:
        return None
    end = text.find(CALL_CLOSE, start)
    if end < 0:
        return ParsedCall(error=f"error: {CALL_OPEN} is not closed by {CALL_CLOSE}")
    if text.find(CALL_OPEN, end) >= 0:
        return ParsedCall(error="error: one tool call per turn")
    body = text[start + len(CALL_OPEN) : end].strip()
    if len(body) > MAX_CALL_CHARS:
        return ParsedCall(error=f"error: the tool call is over {MAX_CALL_CHARS} characters")
    try:
        call = json.loads(body)
    except (ValueError, RecursionError):
        return ParsedCall(error="error: the tool call is not valid JSON")
    if (
        not isinstance(call, dict)
        or set(call) != {"name", "arguments"}
        or not isinstance(call["name"], str)
        or not isinstance(call["arguments"], dict)
    ):
        return ParsedCall(error='error: a tool call is {"name": "<tool>", "arguments": {...}}')
    return ParsedCall(call["name"], call["arguments"])
