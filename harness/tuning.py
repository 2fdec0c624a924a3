"""`harness tune`: the same tuning budget for every algorithm, chosen on a validation split.

A plan (TOML, configs/tune/) names the algorithms, the env and model, the shared run
settings, and a grid per algorithm: the product of its axes (lr, and where an algorithm's
paper constant cannot act at the testbed's scale, that constant too). Every algorithm's
grid must hold the same number of settings, and every setting runs the same seeds at the
same compute budget: a fair tuning budget is enforced here, not promised. The runs
evaluate on the env's validation split (disjoint from the train stream and from the
held-out split the board reports), so the board's numbers are not tuned on.

Selection: per algorithm, the setting with the highest validation headline (the same
mean of the last checkpoints as the board's, over the tuning seeds). ``selection.json``
holds each algorithm's chosen setting and the whole sweep; ``sweep.md`` is the table a
board publishes beside itself, with each setting's acting share and how often the
gradient-norm clip bound. ``harness compare --tuned selection.json`` runs the board at
the chosen settings.
"""

from __future__ import annotations

import itertools
import json
import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from harness.experiment import apply_setting, with_variant
from zoo.core.config import ConfigError
from zoo.files import UnreadableFile, read_json
from zoo.run.run_config import SECTION_OF, RunConfig, run_defaults

SELECTION = "selection.json"
SWEEP = "sweep.md"
PLAN_KEYS = {
    "env",
    "model",
    "algorithms",
    "seeds",
    "seed_start",
    "settings",
    "run",
    "grid",
    "env_config",
    "arms",
    "require_acting",
    "extend",
}
IN_BAND_MOST_STEPS = 0.5
"""A setting's mechanism acts when its acting share lies in the band (1-50% of its units,
``harness.analysis.ACTING_BAND``) on at least this share of its steps."""
NOT_IN_PLAN_RUN = (
    "algorithm",
    "env",
    "model",
    "seed",
    "variant",
    "eval_split",
    "algorithm_config",
    "env_config",
)
"""RunConfig fields a plan's [run] table cannot set: the plan names them itself, and every
tuning run evaluates on the validation split."""


@dataclass
class TunePlan:
    env: str
    model: str
    algorithms: list[str]
    seeds: int
    """Seeds per setting (the same for every setting of every algorithm)."""
    settings: int
    """Settings per algorithm: every algorithm's grid must have exactly this many."""
    seed_start: int = 100
    """The first tuning seed: apart from a board's seeds 0..n, so that a board's rows are
    not selected on the noise of their own seeds."""
    run: dict[str, Any] = field(default_factory=dict)
    env_config: dict[str, Any] = field(default_factory=dict)
    """The env's settings (as --env-set), the same for every run."""
    arms: list[str] = field(default_factory=list)
    """Keys that make separate arms of an ablation (e.g. mini_batches): every value
    combination of them is tuned on its own, with ``settings`` settings, and selected on
    its own (selection key ``<algorithm>@<arm>=<value>``, compare --vary's row name)."""
    require_acting: bool = False
    """Select among the settings whose mechanism acts (``IN_BAND_MOST_STEPS``); an
    algorithm with no such setting, or no mechanism, selects among all, and sweep.md says
    so. A board whose rows must show their mechanisms at work sets it."""
    extend: dict[str, list[float]] = field(default_factory=dict)
    """Axis -> [lowest, highest] value it may reach: where an algorithm's chosen value of
    that axis is the smallest or largest its grid tried, the sweep adds the next value
    outward (the grid's own ratio between neighbours) and runs it, until the choice is
    interior or the next value would pass the bound (``extend_edges``). Only for grids
    given as axes (a product), and the same rule for every algorithm."""
    grids: dict[str, dict[str, list] | list[dict[str, Any]]] = field(default_factory=dict)
    """Algorithm (or "default") -> either axis -> values (the settings are their product)
    or a list of settings (tables of values), for constants that move together."""

    def grid_of(self, algorithm: str) -> list[dict[str, str]]:
        """The settings of ``algorithm``: its own grid, else the default one; each setting
        maps a key to its value written as a --vary value (a run setting such as lr, or
        an algorithm hyperparameter)."""
        grid = self.grids.get(algorithm, self.grids.get("default"))
        if not grid:
            raise ConfigError(f"the plan has no [grid.{algorithm}] and no [grid.default]")
        if isinstance(grid, list):
            return [{k: value_text(v) for k, v in setting.items()} for setting in grid]
        axes = list(grid)
        return [
            {axis: value_text(v) for axis, v in zip(axes, combo, strict=True)}
            for combo in itertools.product(*(grid[a] for a in axes))
        ]

    def arm_of(self, algorithm: str, setting: dict[str, str]) -> str:
        """The selection key of a setting: the algorithm, with its arm values if any."""
        if not self.arms:
            return algorithm
        return f"{algorithm}@" + ",".join(f"{k}={setting[k]}" for k in self.arms)

    def arms_of(self, algorithm: str) -> dict[str, list[dict[str, str]]]:
        """Selection key -> its settings, in grid order."""
        out: dict[str, list[dict[str, str]]] = {}
        for setting in self.grid_of(algorithm):
            out.setdefault(self.arm_of(algorithm, setting), []).append(setting)
        return out


def value_text(value: Any) -> str:
    """A plan value as a --vary value: 5e-05 for 5e-5, 0.28, true."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def load_plan(path: Path) -> TunePlan:
    """Read and check a plan: known keys, known algorithms, the same number of settings
    for every algorithm."""
    from zoo.algorithms import ALGORITHMS

    try:
        raw = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"tuning plan {path} does not exist") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"tuning plan {path} is not valid TOML: {exc}") from None
    unknown = set(raw) - PLAN_KEYS
    missing = {"env", "model", "algorithms", "seeds", "settings", "grid"} - set(raw)
    if unknown or missing:
        raise ConfigError(
            f"tuning plan {path}: unknown keys {sorted(unknown)}, missing {sorted(missing)} "
            f"(valid: {sorted(PLAN_KEYS)})"
        )
    grids = {name: list(g) if isinstance(g, list) else dict(g) for name, g in raw["grid"].items()}
    plan = TunePlan(
        env=raw["env"],
        model=raw["model"],
        algorithms=list(raw["algorithms"]),
        seeds=int(raw["seeds"]),
        settings=int(raw["settings"]),
        seed_start=int(raw.get("seed_start", 100)),
        run=dict(raw.get("run", {})),
        env_config=dict(raw.get("env_config", {})),
        grids=grids,
        arms=list(raw.get("arms", [])),
        require_acting=bool(raw.get("require_acting", False)),
        extend={k: [float(v) for v in b] for k, b in raw.get("extend", {}).items()},
    )
    known = ALGORITHMS.names()
    for name in plan.algorithms:
        if name not in known:
            raise ConfigError(f"tuning plan {path}: unknown algorithm {name!r} (valid: {known})")
    for name in set(grids) - {"default"} - set(plan.algorithms):
        raise ConfigError(f"tuning plan {path}: [grid.{name}] names no algorithm of the plan")
    for name in plan.algorithms:
        lacking = [s for s in plan.grid_of(name) if not set(plan.arms) <= set(s)]
        if lacking:
            raise ConfigError(
                f"tuning plan {path}: a setting of {name} lacks an arm key "
                f"{plan.arms}: {lacking[0]}"
            )
        for arm, settings in plan.arms_of(name).items():
            if len(settings) != plan.settings:
                raise ConfigError(
                    f"tuning plan {path}: {arm} has {len(settings)} settings, the plan gives "
                    f"every algorithm {plan.settings} (the same tuning budget for all)"
                )
    for axis, bounds in plan.extend.items():
        if len(bounds) != 2 or not 0 < bounds[0] < bounds[1]:
            raise ConfigError(
                f"tuning plan {path}: extend.{axis} must be [lowest, highest] with "
                f"0 < lowest < highest, got {bounds}"
            )
        for name in plan.algorithms:
            grid = plan.grids.get(name, plan.grids.get("default"))
            if not isinstance(grid, dict) or len(grid.get(axis, [])) < 2:
                raise ConfigError(
                    f"tuning plan {path}: extend.{axis} needs every algorithm's "
                    f"grid to give {axis} as an axis of two or more values "
                    f"({name}'s does not)"
                )
    bad = set(plan.run) & set(NOT_IN_PLAN_RUN)
    if bad:
        raise ConfigError(f"tuning plan {path}: [run] cannot set {sorted(bad)}")
    if plan.seeds < 1:
        raise ConfigError(f"tuning plan {path}: seeds must be >= 1")
    return plan


def base_config(plan: TunePlan, eval_split: str = "validation") -> RunConfig:
    """The run settings every tuning run shares: the model's defaults, the plan's [run]."""
    names = set(SECTION_OF)
    unknown = set(plan.run) - names
    if unknown:
        raise ConfigError(f"[run] of the tuning plan: {sorted(unknown)} are no run settings")
    settings = {**run_defaults(plan.model), **plan.run}
    return RunConfig.from_flat(
        env=plan.env,
        model=plan.model,
        eval_split=eval_split,
        env_config=dict(plan.env_config),
        **settings,
    )


def tuning_configs(plan: TunePlan) -> list[RunConfig]:
    """Every (algorithm, setting, seed) of the plan, on the validation split; rows are
    named ``<algorithm>@<axis>=<value>,...`` as compare --vary names them."""
    base = base_config(plan)
    return [
        with_variant(base.replace(algorithm=a, seed=s), setting)
        for a in plan.algorithms
        for setting in plan.grid_of(a)
        for s in range(plan.seed_start, plan.seed_start + plan.seeds)
    ]


def select(out: Path, plan: TunePlan) -> dict[str, Any]:
    """The sweep's result from the experiment's tables: per algorithm every setting with
    its validation headline (mean and t-interval over the tuning seeds), acting share and
    gradient-clip share, and the chosen one (highest mean; the first in grid order on a
    tie; with ``require_acting``, among the settings whose mechanism acts where there are
    any). Raises ConfigError when a setting has no finished run."""
    summary = pd.read_csv(out / "tables" / "summary.csv")
    off_policy = pd.read_csv(out / "tables" / "off_policy.csv")
    by_row = summary.set_index("algorithm")
    regime = off_policy.set_index("algorithm")
    chosen: dict[str, Any] = {}
    arms = {arm: settings for a in plan.algorithms for arm, settings in plan.arms_of(a).items()}
    for algorithm, settings in arms.items():
        rows = []
        for setting in settings:
            label = f"{algorithm.split('@')[0]}@" + ",".join(f"{k}={v}" for k, v in setting.items())
            if label not in by_row.index:
                raise ConfigError(f"{out}: no finished run of {label}; resume the sweep")
            s = by_row.loc[label]
            r = regime.loc[label] if label in regime.index else pd.Series(dtype=float)
            rows.append(
                {
                    "setting": setting,
                    "row": label,
                    "validation_headline": float(s.headline_mean),
                    "ci_low": float(s.ci_low),
                    "ci_high": float(s.ci_high),
                    "seeds": int(s.seeds),
                    "per_seed": s.per_seed,
                    "mechanism_acting": _number(r.get("mechanism_acting")),
                    "mechanism_in_band_steps": _number(r.get("mechanism_in_band_steps")),
                    "grad_clip_frac": _number(r.get("grad_clip_frac")),
                }
            )
        for row in rows:
            in_band = row["mechanism_in_band_steps"]
            row["acts"] = in_band is not None and in_band >= IN_BAND_MOST_STEPS
        eligible = [i for i, row in enumerate(rows) if row["acts"] or not plan.require_acting]
        pool = eligible or list(range(len(rows)))
        best = max(pool, key=lambda i: (rows[i]["validation_headline"], -i))
        chosen[algorithm] = {
            "setting": rows[best]["setting"],
            "sweep": rows,
            "acts": rows[best]["acts"],
            "runner_up": runner_up_gap(rows, best),
        }
    return {
        "env": plan.env,
        "model": plan.model,
        "split": "validation",
        "seeds": list(range(plan.seed_start, plan.seed_start + plan.seeds)),
        "settings_per_algorithm": plan.settings,
        "run": plan.run,
        "arms": plan.arms,
        "rule": "highest validation headline (mean of the last checkpoints over the tuning "
        "seeds)"
        + (
            f" among the settings whose mechanism acts in band on >= {IN_BAND_MOST_STEPS:.0%} "
            "of their steps (all settings where none does)"
            if plan.require_acting
            else ""
        )
        + "; the first in grid order on a tie",
        "require_acting": plan.require_acting,
        "algorithms": chosen,
    }


def extend_edges(plan: TunePlan, selection: dict[str, Any]) -> dict[str, list[str]]:
    """Grow ``plan``'s grids where the selection chose an extendable axis's smallest or
    largest value (``TunePlan.extend``): that algorithm's axis gains the next value outward,
    the grid's ratio between its two outermost neighbours away, unless it passes the
    bound. Returns algorithm -> the values added (empty: every choice interior or capped),
    after which the sweep runs the new settings and selects again."""
    added: dict[str, list[str]] = {}
    for algorithm, entry in selection["algorithms"].items():
        grid = plan.grids.get(algorithm, plan.grids.get("default"))
        if "@" in algorithm or not isinstance(grid, dict):
            continue
        for axis, (lowest, highest) in plan.extend.items():
            values = sorted(float(v) for v in grid[axis])
            chosen = float(entry["setting"][axis])
            if chosen == values[0]:
                new = values[0] * values[0] / values[1]
            elif chosen == values[-1]:
                new = values[-1] * values[-1] / values[-2]
            else:
                continue
            if not lowest * (1 - 1e-9) <= new <= highest * (1 + 1e-9):
                continue
            grid = {**grid, axis: sorted([*grid[axis], new])}
            plan.grids[algorithm] = grid
            added.setdefault(algorithm, []).append(f"{axis}={value_text(new)}")
    return added


def runner_up_gap(rows: list[dict[str, Any]], best: int) -> dict[str, Any] | None:
    """The chosen setting against the next best, seed by seed (every setting runs the
    same tuning seeds): the mean difference with its 95% paired t-interval, and whether the
    interval holds 0 ("within noise": these seeds cannot tell the two apart)."""
    from harness.stats import t_interval

    others = [i for i in range(len(rows)) if i != best]
    if not others:
        return None
    second = max(others, key=lambda i: (rows[i]["validation_headline"], -i))
    a = [float(v) for v in str(rows[best]["per_seed"]).split()]
    b = [float(v) for v in str(rows[second]["per_seed"]).split()]
    if len(a) != len(b) or len(a) < 2:
        return None
    mean, low, high = t_interval([x - y for x, y in zip(a, b, strict=True)])
    return {
        "runner_up": rows[second]["setting"],
        "difference": mean,
        "ci_low": low,
        "ci_high": high,
        "within_noise": bool(low <= 0 <= high),
    }


def _number(value: Any) -> float | None:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return float(value)


def sweep_markdown(selection: dict[str, Any]) -> str:
    """The sweep as a markdown table, the chosen setting of each algorithm marked."""
    lines = [
        f"# Tuning sweep: {selection['env']} on {selection['model']}",
        "",
        f"Every algorithm: {selection['settings_per_algorithm']} settings x "
        f"{len(selection['seeds'])} seeds ({', '.join(map(str, selection['seeds']))}) at the "
        f"same budget, scored on the validation split. Rule: {selection['rule']}.",
        "Acting share: the mean share of the mechanism's units whose gradient it changed "
        "(in band: share of steps with 1-50%); grad clip: the share of optimizer steps the "
        "gradient-norm bound rescaled.",
        "",
        "| algorithm | setting | validation headline [95% CI] | acting share | in band "
        "| grad clip | chosen |",
        "|---|---|---|---|---|---|---|",
    ]

    def pct(value: float | None) -> str:
        return "n/a" if value is None else f"{value:.2%}"

    if selection.get("extend"):
        bounds = ", ".join(
            f"{k} within [{lo:g}, {hi:g}]" for k, (lo, hi) in selection["extend"].items()
        )
        added = "; ".join(f"{a}: {', '.join(v)}" for a, v in selection.get("extended", {}).items())
        lines[4:4] = [
            f"A choice on the grid's edge extends it outward ({bounds}); added: {added or 'none'}.",
            "",
        ]
    for algorithm, entry in selection["algorithms"].items():
        edges = grid_edges(entry)
        for row in entry["sweep"]:
            setting = ", ".join(f"{k}={v}" for k, v in row["setting"].items())
            mark = "**yes**" if row["setting"] == entry["setting"] else ""
            if mark and edges:
                mark += f" (at the grid's edge in {', '.join(edges)})"
            # (only where the plan selects on it: otherwise acting is reported, not judged)
            judged = selection.get("require_acting", False)
            if (
                judged
                and row.get("mechanism_in_band_steps") is not None
                and not row.get("acts", True)
            ):
                mark = (mark + " " if mark else "") + "(mechanism not in band)"
            lines.append(
                f"| {algorithm} | {setting} | {row['validation_headline']:.3f} "
                f"[{row['ci_low']:.3f}, {row['ci_high']:.3f}] | {pct(row['mechanism_acting'])} "
                f"| {pct(row['mechanism_in_band_steps'])} | {pct(row['grad_clip_frac'])} "
                f"| {mark} |"
            )
    notes = [
        runner_up_text(a, e["runner_up"])
        for a, e in selection["algorithms"].items()
        if e.get("runner_up")
    ]
    if notes:
        lines += [
            "",
            "Chosen against the runner-up (paired over the tuning seeds, 95% "
            "t-interval of the difference):",
            "",
            *notes,
        ]
    return "\n".join(lines) + "\n"


def runner_up_text(algorithm: str, gap: dict[str, Any]) -> str:
    setting = ", ".join(f"{k}={v}" for k, v in gap["runner_up"].items())
    verdict = (
        "**within noise**: these seeds cannot tell them apart"
        if gap["within_noise"]
        else "separated"
    )
    return (
        f"- {algorithm}: {gap['difference']:+.3f} [{gap['ci_low']:+.3f}, "
        f"{gap['ci_high']:+.3f}] over {setting}; {verdict}"
    )


def grid_edges(entry: dict[str, Any]) -> list[str]:
    """The numeric keys whose chosen value is the smallest or largest of the algorithm's
    grid: its best setting may lie beyond what was tried."""
    edges = []
    for key, chosen in entry["setting"].items():
        try:
            values = {float(row["setting"][key]) for row in entry["sweep"]}
            value = float(chosen)
        except (KeyError, ValueError):
            continue
        if len(values) > 1 and value in (min(values), max(values)):
            edges.append(key)
    return edges


def write_selection(
    out: Path, plan: TunePlan, extended: dict[str, list[str]] | None = None
) -> dict[str, Any]:
    """select(), with the grid extensions made so far (algorithm -> settings added), to
    selection.json and sweep.md."""
    selection = select(out, plan)
    selection["extended"] = extended or {}
    selection["extend"] = plan.extend
    (out / SELECTION).write_text(json.dumps(selection, indent=2) + "\n")
    (out / SWEEP).write_text(sweep_markdown(selection))
    return selection


def read_selection(path: Path) -> dict[str, Any]:
    """A selection.json (``harness tune``), refused in one line when it is missing,
    damaged or not a selection (zoo.files)."""
    if not path.exists():
        raise ConfigError(f"--tuned {path}: no such file (harness tune writes it)")
    try:
        selection = read_json(path)
    except UnreadableFile as exc:
        raise exc.advised("re-write it with `harness tune PLAN --out DIR --resume`") from None
    chosen = selection.get("algorithms")
    if not isinstance(chosen, dict) or not all(
        isinstance(entry, dict) and isinstance(entry.get("setting"), dict)
        for entry in chosen.values()
    ):
        raise ConfigError(f"--tuned {path}: not a selection written by harness tune")
    return selection


def tuned(cfg: RunConfig, selection: dict[str, Any], algorithm: str | None = None) -> RunConfig:
    """``cfg`` at the setting the selection chose for ``algorithm`` (default: the run's
    row, ``grpo@mini_batches=1`` for an arm of an ablation, else its algorithm), the row
    keeping its name: run settings replace the run's, the others are the algorithm's
    hyperparameters."""
    chosen = selection["algorithms"]
    name = algorithm or (cfg.run.variant if cfg.run.variant in chosen else cfg.run.algorithm)
    entry = chosen.get(name)
    if entry is None:
        raise ConfigError(
            f"the tuning selection has no setting for {name!r} (tuned: "
            f"{sorted(selection['algorithms'])}); tune it first"
        )
    return apply_setting(cfg, entry["setting"])
