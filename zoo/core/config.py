"""Typed configuration: dataclasses built from keyword overrides, with errors that name the
valid choices. Used by algorithms, environments and the run config alike."""

from __future__ import annotations

import ast
import dataclasses
import functools
import itertools
import types
import typing
from typing import Any, TypeVar

T = TypeVar("T")


class ConfigError(ValueError):
    """A configuration value or name that is not valid; the message says what is."""


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
    return config_class(**values)


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
    try:
        if hint is bool:
            if value.lower() in ("1", "true", "yes", "on"):
                return True
            if value.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError(value)
        if hint is int:
            return int(float(value)) if "e" in value.lower() else int(value)
        if hint is float:
            return float(value)
        if hint is str:
            return value
        return ast.literal_eval(value)
    except (ValueError, SyntaxError) as exc:
        name = getattr(hint, "__name__", str(hint))
        raise ConfigError(f"{where}: cannot read {value!r} as {name}") from exc


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
    """The attribute docstrings of a config dataclass (the string literal under each field)."""
    return dict(_field_docs(config_class))


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
