"""Answer checks shared by env families: the exact-integer reward of ``arithmetic``,
``running_sum`` (math) and ``tool_arithmetic`` (tool)."""

from __future__ import annotations

import re

INTEGER = re.compile(r"-?[0-9]+")


def exact_integer_reward(completion: str, answer: int, max_chars: int) -> float:
    """1.0 when ``completion`` is exactly the integer ``answer`` (surrounding whitespace
    ignored), else 0.0; anything over ``max_chars`` is 0 unparsed (int() refuses over 4,300
    digits, and no answer is that long)."""
    text = completion.strip()
    if len(text) > max_chars or not INTEGER.fullmatch(text):
        return 0.0
    return 1.0 if int(text) == answer else 0.0
