"""Typed configuration: dataclasses built from keyword overrides, with errors that name the
valid choices. Used by algorithms, environments and the run config alike."""

from __future__ import annotations

import ast
import dataclasses
import decimal
import functools
import itertools
import math
import os
import types
import typing
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


class ConfigError(ValueError):
    """A configuration value or name that is not valid; the message says what is."""


INT_LIMIT = 2**63 - 1
"""The largest integer any setting takes: int64, what torch, numpy and vLLM hold. Larger
ones are typos, and ``int(float(...))`` of them is not exact."""


def machine_memory_mb() -> int:
    """This machine's physical memory in MiB."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20


@dataclasses.dataclass(frozen=True)
class Limit:
    """The largest value a numeric config field takes, and why."""

    most: float | Callable[[], float]
    """The bound, or a function that measures it on this machine."""
    why: str

    def bound(self) -> float:
        return self.most() if callable(self.most) else self.most


LIMIT_KEY = "limit"
"""A config field may declare its own bound: ``field(default=..., metadata={LIMIT_KEY:
Limit(...)})``; it takes precedence over FIELD_LIMITS."""

FIELD_LIMITS: dict[str, Limit] = {
    "eval_size": Limit(
        100_000,
        "held-out problems: every evaluation generates a completion "
        "for each, eval_samples more when sampled, and the split is built in "
        "memory",
    ),
    "max_turns": Limit(
        1_000,
        "assistant turns per episode: each adds a response and an "
        "observation to every episode of a step, all held in memory",
    ),
    "memory_mb": Limit(
        machine_memory_mb, "this machine's memory in MiB: a process limit above it limits nothing"
    ),
    "sandbox_workers": Limit(64, "processes at a time, each up to memory_mb"),
    "grading_workers": Limit(64, "grading processes at a time, each up to 2 GiB"),
    "timeout_s": Limit(
        86_400,
        "seconds, a day: no single execution needs more, and "
        "Python's waits refuse timeouts past ~9.2e9 s",
    ),
    "grading_timeout_s": Limit(
        86_400,
        "seconds, a day: no single grading needs more, and "
        "Python's waits refuse timeouts past ~9.2e9 s",
    ),
}
"""Upper bounds shared by every env and algorithm config field of that name (make_config
checks them): values past them exhaust the machine or stall a run rather than set it."""


def config_fields(config_class: type) -> list[str]:
    return [f.name for f in dataclasses.fields(config_class)]


def make_config(config_class: type[T], overrides: dict[str, Any], owner: str) -> T:
    """Build ``config_class`` with ``overrides``; an unknown field is a ConfigError naming
    the valid fields. String values (from the command line) are parsed to the field type."""
    valid = config_fields(config_class)
    unknown = sorted(set(overrides) - set(valid))
    if unknown:
        raise ConfigError(
            f"unknown config field(s) {', '.join(unknown)} for {owner}; "
            f"valid fields: {', '.join(valid) or '(none)'}"
        )
    hints = typing.get_type_hints(config_class)
    values = {k: coerce(v, hints[k], f"{owner}.{k}") for k, v in overrides.items()}
    for f in dataclasses.fields(config_class):
        if f.name in values:
            check_number(
                values[f.name],
                f"{owner}.{f.name}",
                f.metadata.get(LIMIT_KEY) or FIELD_LIMITS.get(f.name),
            )
    return config_class(**values)


def check_number(value: Any, where: str, limit: Limit | None = None) -> None:
    """Refuse a number out of range: above ``limit``, an integer past INT_LIMIT either way,
    a float that is nan or infinite. Other values pass."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{where} must be a finite number, got {value}")
    if limit is not None and value > limit.bound():
        raise ConfigError(f"{where} must be <= {limit.bound()} ({limit.why}), got {shown(value)}")
    if isinstance(value, int) and abs(value) > INT_LIMIT:
        raise ConfigError(
            f"{where}: {shown(value)} is out of range (integers go up to {INT_LIMIT}, int64)"
        )


def shown(value: Any, chars: int = 40) -> str:
    """``value`` for an error message: its repr, cut to ``chars`` characters (a value may
    be a megabyte of junk; Python refuses to print integers of over 4,300 digits)."""
    if isinstance(value, int) and value.bit_length() > 256:
        sign = "a negative" if value < 0 else "an"
        return f"{sign} integer of ~{int(value.bit_length() * math.log10(2)) + 1} digits"
    text = repr(value)
    return text if len(text) <= chars else f"{text[:chars]}... ({len(text)} characters)"


def coerce(value: Any, hint: Any, where: str) -> Any:
    """Turn a command-line string into a value of type ``hint`` (bool, int, float, str,
    Optional[...]); non-strings pass through."""
    if not isinstance(value, str):
        return value
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if value.lower() in ("none", "null"):
            return None
        hint = args[0] if len(args) == 1 else str
    name = getattr(hint, "__name__", str(hint))
    try:
        if hint is bool:
            if value.lower() in ("1", "true", "yes", "on"):
                return True
            if value.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError(value)
        if hint is int:
            return read_int(value, where)
        if hint is float:
            return float(value)
        if hint is str:
            return value
        return ast.literal_eval(value)
    except ConfigError:
        raise
    except (ValueError, SyntaxError, RecursionError, MemoryError) as exc:
        raise ConfigError(f"{where}: cannot read {shown(value)} as {name}") from exc


def read_int(text: str, where: str) -> int:
    """An integer written plainly (``1000``) or in scientific notation (``1e3``), read
    exactly (check_number judges its range); one with a fractional part is a ConfigError."""
    try:
        return int(text)
    except ValueError:  # (also over 4,300 digits: those are read as a Decimal)
        try:
            number = decimal.Decimal(text.strip())
        except decimal.InvalidOperation:
            raise ConfigError(f"{where}: cannot read {shown(text)} as int") from None
    if not number.is_finite() or number != number.to_integral_value():
        raise ConfigError(f"{where}: {shown(text)} is not an integer")
    if number.adjusted() >= MAX_DIGITS:  # (1e999999999 is not worth building)
        raise ConfigError(
            f"{where}: {shown(text)} is out of range (integers go up to {INT_LIMIT}, int64)"
        )
    return int(number)


MAX_DIGITS = 4300
"""Python's own bound on the digits of an integer read from text."""


def parse_overrides(pairs: list[str]) -> dict[str, str]:
    """``["eps=0.3", "beta=0"]`` -> ``{"eps": "0.3", "beta": "0"}``."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"override {pair!r} is not of the form key=value")
        out[key.strip()] = value.strip()
    return out


def field_docs(config_class: type) -> dict[str, str]:
    """The attribute docstrings of a config dataclass (the string literal under each field),
    its bases' included: a field redeclared without one keeps its base's."""
    docs: dict[str, str] = {}
    for cls in reversed(config_class.__mro__):
        if cls is not object:
            docs.update(_field_docs(cls))
    return docs


@functools.cache
def _field_docs(config_class: type) -> dict[str, str]:
    """(Read once per class: parsing the source is most of the command line's start-up.)"""
    import inspect

    try:
        tree = ast.parse(inspect.getsource(config_class))
    except (OSError, TypeError):
        return {}
    docs: dict[str, str] = {}
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
    for node, nxt in itertools.pairwise(body):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(nxt, ast.Expr)
            and isinstance(nxt.value, ast.Constant)
            and isinstance(nxt.value.value, str)
        ):
            docs[node.target.id] = " ".join(nxt.value.value.split())
    return docs
