"""Name -> plugin class registries: built-ins by name, third parties through entry points.

Nothing is imported until a name is asked for, so a broken third-party plugin only fails
the run that uses it, with a message naming the plugin and the distribution it came from.
A third party cannot shadow a built-in name: the built-in wins and the clash is reported.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any

from zoo.core.config import ConfigError


class PluginError(RuntimeError):
    """A registered plugin that could not be loaded; the message names it and its source."""


@dataclass(frozen=True)
class PluginSpec:
    name: str
    target: str
    """"module:attribute" to import."""
    source: str
    """"built-in", or the name of the distribution that registered it."""


class Registry:
    def __init__(self, kind: str, group: str, builtins: dict[str, str]) -> None:
        self.kind = kind  # "algorithm" / "environment", for messages
        self.group = group  # entry-point group, e.g. "zoo.algorithms"
        self._builtins = {n: PluginSpec(n, t, "built-in") for n, t in builtins.items()}
        self._loaded: dict[str, Any] = {}

    def specs(self) -> dict[str, PluginSpec]:
        specs = dict(self._builtins)
        for spec in self._entry_point_specs():
            specs.setdefault(spec.name, spec)  # built-ins, then the first registration, win
        return specs

    def shadowed(self) -> list[PluginSpec]:
        """Entry points ignored because their name is already taken (reported, not used)."""
        seen = set(self._builtins)
        ignored = []
        for spec in self._entry_point_specs():
            if spec.name in seen:
                ignored.append(spec)
            seen.add(spec.name)
        return ignored

    def _entry_point_specs(self) -> list[PluginSpec]:
        out = []
        for ep in entry_points(group=self.group):
            dist = ep.dist.name if ep.dist is not None else "unknown distribution"
            out.append(PluginSpec(ep.name, ep.value, dist))
        return out

    def names(self) -> list[str]:
        return sorted(self.specs())

    def load(self, name: str) -> Any:
        if name in self._loaded:
            return self._loaded[name]
        specs = self.specs()
        if name not in specs:
            raise ConfigError(
                f"unknown {self.kind} {name!r}; valid {self.kind}s: {', '.join(sorted(specs))}"
            )
        spec = specs[name]
        module_name, _, attr = spec.target.partition(":")
        try:
            obj = importlib.import_module(module_name)
            for part in attr.split(".") if attr else []:
                obj = getattr(obj, part)
        except Exception as exc:
            raise PluginError(
                f"{self.kind} plugin {name!r} ({spec.target}, from {spec.source}) "
                f"failed to load: {type(exc).__name__}: {exc}"
            ) from exc
        self._loaded[name] = obj
        return obj
