"""From a command's parsed flags to the run it describes: the budget (one flag of four, or
the command's default), the model (the placement file's, else the tiny preset built for
the envs), the RunConfig, and the command line a run records.

The parsers themselves are built in harness/parsing.py and harness/commands/; this module
holds what `run`, `compare` and `doctor` share once the flags are read, so the three
commands cannot drift in how a flag becomes a setting.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from zoo.core.config import ConfigError, parse_overrides

RESULTS = Path("results")

CLI_OWN_FIELDS = (
    "algorithm",
    "env",
    "seed",
    "distributed",
    "algorithm_config",
    "env_config",
    "variant",
)
"""RunConfig fields each command sets its own way (positional algorithms, --env, --seed or
--seeds, --config, --set, --env-set, --vary); every other field is a generated flag."""

BUDGET_FLAGS = {
    "steps": "--steps",
    "budget_flops": "--budget",
    "budget_samples": "--budget-samples",
    "budget_seconds": "--budget-seconds",
}
"""What ends a run, by RunConfig field: the flag that sets each (one per run)."""
BUDGET_CHOICE = "--steps, --budget (FLOPs), --budget-samples or --budget-seconds"


def budget_default(command: str) -> str:
    """What a command runs for when no budget flag is given, in words (for --help)."""
    from zoo.run.run_config import DEFAULT_STEPS, MODEL_RECIPES, TINY_COMPARE_BUDGET

    if command != "compare":
        return f"default: --steps {DEFAULT_STEPS}"
    own = ", ".join(
        f"{r.compare_budget:.0e} for {m}"
        for m, r in MODEL_RECIPES.items()
        if r.compare_budget and r.compare_budget != TINY_COMPARE_BUDGET
    )
    from harness.recipes import RECIPES

    real = ", ".join(f"{r.budget_flops:.1e} for {m}" for m, r in RECIPES.items())
    return (
        f"default on the tiny presets: --budget {TINY_COMPARE_BUDGET:.0e} ({own}), "
        f"so that every algorithm gets the same compute; on the Qwen3 presets their "
        f"recipe's ({real}; docs/gpu.md); other models need one"
    )


def resolve_budget(args: argparse.Namespace, command: str) -> str:
    """Fill in the budget fields of ``args`` the same way for every command: at most one of
    BUDGET_FLAGS may be given (more exit 2), each > 0; with none, `run` and `doctor` train
    DEFAULT_STEPS steps and `compare` spends its tiny preset's FLOPs budget (a real
    model needs one). Returns the budget in words, printed when the command starts."""
    given = {name: getattr(args, name) for name in BUDGET_FLAGS if getattr(args, name) is not None}
    if len(given) > 1:
        raise ConfigError(
            f"give one budget, not {' and '.join(BUDGET_FLAGS[n] for n in given)} "
            f"(choose one of {BUDGET_CHOICE})"
        )
    for name, value in given.items():
        if not value > 0:
            raise ConfigError(f"{BUDGET_FLAGS[name]} must be > 0, got {value}")
    how = f"set by {BUDGET_FLAGS[next(iter(given))]}" if given else f"{command}'s default"
    if not given and command == "compare":
        from harness.recipes import RECIPES
        from zoo.models.presets import TINY_MODELS
        from zoo.run.run_config import recipe_of

        if args.model not in TINY_MODELS and args.model not in RECIPES:
            raise ConfigError(
                f"give a compute budget for {args.model!r}: {BUDGET_CHOICE}; compare has a "
                f"default budget for the presets only ({', '.join(RECIPES)} and the tiny ones)"
            )
        if args.model in RECIPES:
            given = {"budget_flops": RECIPES[args.model].budget_flops}
            how += f" for {args.model}, its recipe (docs/gpu.md)"
        else:
            given = {"budget_flops": recipe_of(args.model).compare_budget}
            how += f" for {args.model}"
    for name in BUDGET_FLAGS:
        setattr(args, name, given.get(name, 0))
    if not args.steps:  # (unused when another budget is set)
        from zoo.run.run_config import DEFAULT_STEPS

        args.steps = DEFAULT_STEPS
    unit = next(iter(given), "steps")
    amount = {
        "steps": f"{args.steps} steps",
        "budget_flops": f"{args.budget_flops:.3g} FLOPs",
        "budget_samples": f"{args.budget_samples} samples",
        "budget_seconds": f"{args.budget_seconds:g} seconds of training",
    }[unit]
    return f"budget: {amount} per run ({how}; one of {BUDGET_CHOICE} changes it)"


def apply_placement_file(args: argparse.Namespace) -> dict:
    """Read --config (a placement file): it sets --placement monarch and, unless --model is
    given, the model. Returns the placement to record in the run config ({} without one)."""
    from zoo.placement.config import PlacementConfig

    distributed = {}
    if args.config:
        layout = PlacementConfig.from_yaml(args.config)
        distributed = layout.to_dict()
        args.placement = "monarch"
        args.model = args.model or layout.model or None
    envs = getattr(args, "envs", None) or [getattr(args, "env", None) or "arithmetic"]
    args.model = args.model or default_model(envs)
    return distributed


def default_model(envs: list[str]) -> str:
    """The model a command runs without --model: the tiny preset warm-started for its envs
    (``Env.tiny_model``: tiny for arithmetic, tiny-code for pyfunc, tiny-tool for
    tool_arithmetic, tiny-code-feedback for pyfunc_feedback)."""
    from zoo.envs import ENVS

    wanted = {env: ENVS.load(env).tiny_model for env in envs}
    if len(set(wanted.values())) > 1:
        pairs = ", ".join(f"{env}: {model}" for env, model in wanted.items())
        raise ConfigError(
            f"these envs are built for different tiny models ({pairs}); choose one with --model"
        )
    return next(iter(wanted.values()))


def run_config(
    args: argparse.Namespace,
    algorithm: str,
    env: str,
    seed: int,
    weights: bool = True,
):
    """The RunConfig the flags give (``RunConfig.from_flat``), not yet checked: every
    command resolves it into a plan next (``RunPlan.resolve``, the one place a config is
    checked). ``weights``: a run needs the model's weights (``doctor --plan`` does not:
    the shape)."""
    from zoo.run.run_config import RunConfig, run_defaults

    if getattr(args, "budget_line", None) is None:  # (once per command)
        args.budget_line = resolve_budget(args, args.command)
    defaults = run_defaults(args.model)
    for name, value in defaults.items():  # options left unset take the model's defaults
        if getattr(args, name) is None:
            setattr(args, name, value)

    settings = {
        f.name: getattr(args, f.name)
        for f in RunConfig.flat_fields()
        if f.name not in CLI_OWN_FIELDS
    }
    from zoo.models.presets import check_weights_available

    # Offline with an empty cache, the missing weights come first: no other fix helps
    if weights:
        check_weights_available(args.model, args.model_path, args.init)
    cfg = RunConfig.from_flat(
        algorithm=algorithm,
        env=env,
        seed=seed,
        distributed=args.distributed,
        algorithm_config=parse_overrides(getattr(args, "algo_set", [])),
        env_config=parse_overrides(args.env_set),
        **settings,
    )
    return cfg


REPO_ROOT = Path(__file__).resolve().parents[1]
"""The checkout this harness runs from (its pyproject.toml beside harness/)."""


def command_line(argv: list[str] | None = None, root: Path = REPO_ROOT) -> str:
    """The command as runs and experiments record it (config.json, experiment.json, the
    boards): ``python -m harness`` and its arguments, the ``--out`` folder relative to the
    repository root where it lies inside it (an absolute path names one machine's layout,
    and a committed board's command should re-run from any checkout's root), else as
    given. Committed results keep the commands they recorded."""
    words = list(sys.argv[1:] if argv is None else argv)
    for i, word in enumerate(words):
        if word == "--out" and i + 1 < len(words):
            words[i + 1] = repo_relative(words[i + 1], root)
        elif word.startswith("--out="):
            words[i] = "--out=" + repo_relative(word.removeprefix("--out="), root)
    return "python -m harness " + " ".join(words)


def repo_relative(path: str, root: Path = REPO_ROOT) -> str:
    """``path`` relative to ``root`` when it lies inside it (as given from this folder),
    else ``path`` unchanged; unchanged too where ``root`` is not a checkout (an installed
    harness)."""
    if not (root / "pyproject.toml").is_file():
        return path
    where = Path(os.path.abspath(path))
    for base in {root, root.resolve()}:  # (the checkout's path as named and as resolved)
        if where == base or base in where.parents:
            return where.relative_to(base).as_posix()
    return path
