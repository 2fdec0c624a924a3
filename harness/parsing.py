"""The argparse pieces every command's parser is built from: the parser class and its help
formatting, the types of numeric and path flags, and the training flags generated from
RunConfig (shared by `run`, `compare` and `doctor`).

Importing this module must stay cheap: `--help` builds every command's parser, so
nothing here imports torch (zoo.run.run_config's sections import none either).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import textwrap
import typing
from collections.abc import Callable
from pathlib import Path

from harness.run_flags import BUDGET_CHOICE, BUDGET_FLAGS, CLI_OWN_FIELDS, budget_default
from harness.third_party import LOG_NAME
from zoo.core.config import ConfigError, coerce, shown

PROG = "python -m harness"

FLAG_ALIASES = {"budget_flops": ("--budget",)}
"""Shorter names kept for flags used in the README and in recorded commands."""
METAVARS = {"budget_flops": "FLOPS", "budget_seconds": "S", "model_path": "DIR", "model": "MODEL"}
TYPE_METAVARS = {int: "N", float: "X", str: "NAME"}

COMMON_OPTIONS = (
    "model",
    "init",
    "prompts_per_step",
    "group_size",
    "max_response_len",
    "lr",
    "micro_batch_size",
    "steps",
    "budget_flops",
    "device",
    "report_to",
)
"""RunConfig fields whose flags `--help` explains; each section names its others, which
`--help-all` explains (all are accepted either way)."""


class HelpFormatter(argparse.HelpFormatter):
    """argparse's, wrapping lines at spaces only: a flag named in a sentence
    (``--weight-decay``) stays whole."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        return textwrap.fill(
            " ".join(text.split()),
            width,
            initial_indent=indent,
            subsequent_indent=indent,
            break_on_hyphens=False,
        )


class Parser(argparse.ArgumentParser):
    """argparse with its errors on one line (exit status 2): the command, what was wrong
    and where the valid choices are listed."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)  # (the commands' parsers too)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> typing.NoReturn:
        self.exit(2, f"error: {message} (see `{self.prog} --help`)\n")


def number(kind: type) -> Callable[[str], int | float]:
    """argparse type of a numeric flag, read as --set values are (``1e3`` is an int);
    the range is judged later, with the config's bounds."""

    def read(text: str) -> int | float:
        try:
            return coerce(text, kind, "value")
        except ConfigError as exc:
            raise argparse.ArgumentTypeError(str(exc).removeprefix("value: ")) from None

    read.__name__ = kind.__name__  # (argparse names the type in its messages)
    return read


def gpu_count(text: str) -> int:
    """argparse type of --gpus: a whole number >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a whole number of GPUs, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def folder(text: str) -> Path:
    """argparse type of --out: a path, not empty."""
    if not text.strip() or "\0" in text:
        raise argparse.ArgumentTypeError(f"{shown(text)} is not a folder name")
    try:
        os.fsencode(text)
    except UnicodeEncodeError:
        raise argparse.ArgumentTypeError(f"{shown(text)} is not a valid file name") from None
    return Path(text)


AddParser = Callable[[argparse._SubParsersAction, bool], None]
"""A command module's ``add_parser(subparsers, full)``."""


class FullHelp(argparse.Action):
    """``--help-all``: the command's help with every option explained, by section.

    It rebuilds the one command's parser with ``full`` set, under a top parser of the same
    name, so the help reads as `python -m harness CMD` would print it; the command's own
    ``add_parser`` is handed in, which keeps this module free of the command table (the
    table imports the commands, which import this module)."""

    def __init__(self, option_strings: list[str], dest: str, add_parser: AddParser, **kwargs):
        super().__init__(
            option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, nargs=0, **kwargs
        )
        self.add_parser = add_parser

    def __call__(self, parser, namespace, values, option_string=None) -> typing.NoReturn:
        commands = Parser(prog=PROG).add_subparsers(metavar="COMMAND")
        self.add_parser(commands, True)
        (full,) = commands.choices.values()
        full.print_help()
        parser.exit()


def add_training_arguments(
    p: argparse.ArgumentParser, command: str, add_parser: AddParser, full: bool = True
) -> None:
    """Options shared by `run`, `compare` and `doctor`: one flag per RunConfig field (its
    docstring is the help, its type the parser, ``zoo.run.run_config.CHOICES`` its valid
    values), so the command line cannot drift from the config. The budget flags are read
    the same way by every command (``resolve_budget``); only the default differs.
    ``full`` False: `--help` explains COMMON_OPTIONS only, and each section's heading names
    its other flags (~70 lines instead of ~300; every flag parses the same). ``add_parser``:
    the command's, which `--help-all` calls again with ``full`` True."""
    from zoo.run.run_config import (
        CHOICES,
        MODEL_RECIPES,
        REAL_MODELS,
        RECIPE_FIELDS,
        SECTIONS,
        RunConfig,
        run_defaults,
    )

    docs = RunConfig.flat_docs()
    types = RunConfig.flat_types()
    tiny = run_defaults("tiny")
    # --help lists the flags under their RunConfig section's heading
    groups = {cls: p.add_argument_group(title) for title, _, cls in SECTIONS}
    group_of = {f.name: groups[cls] for _, _, cls in SECTIONS for f in dataclasses.fields(cls)}
    if not full:  # each section names its flags that --help leaves unexplained
        for cls, group in groups.items():
            rest = [
                f"--{f.name.replace('_', '-')}"
                for f in dataclasses.fields(cls)
                if f.name not in COMMON_OPTIONS and f.name not in CLI_OWN_FIELDS
            ]
            if rest:
                group.description = f"also {', '.join(rest)} (--help-all explains each)"
    for f in RunConfig.flat_fields():
        if f.name in CLI_OWN_FIELDS:
            continue
        kind = types[f.name]
        help_text = " ".join(docs.get(f.name, "").split()).replace("``", "`").rstrip(".")
        default = f.default
        if f.name in RECIPE_FIELDS:
            # Left unset, these take the model's recipe (run_config fills them in).
            default = None
            own = {
                m: r.settings[f.name]
                for m, r in MODEL_RECIPES.items()
                if f.name in r.settings and m not in ("tiny", REAL_MODELS)
            }
            help_text += (
                f" (default: {tiny[f.name]} for the tiny presets"
                + "".join(f", {v} for {m}" for m, v in own.items())
                + f", {run_defaults(REAL_MODELS)[f.name]} for real models)"
            )
        elif f.name == "model":
            default = None
            help_text += (
                " (default: the placement file's model, else the tiny preset "
                "built for the env: tiny, tiny-code for pyfunc, tiny-tool for "
                "tool_arithmetic, tiny-code-feedback for pyfunc_feedback)"
            )
        elif f.name in BUDGET_FLAGS:
            default = None  # unset: resolve_budget tells a chosen budget from the default
            help_text += (
                f" (one budget per run: {BUDGET_CHOICE}; {budget_default(command)})"
                if f.name == "steps"
                else " (exclusive with --steps, whose help gives the default)"
            )
        else:
            help_text += f" (default: {default})" if default != "" else ""
        flag = "--" + f.name.replace("_", "-")
        shown_here = full or f.name in COMMON_OPTIONS
        group_of[f.name].add_argument(
            flag,
            *FLAG_ALIASES.get(f.name, ()),
            dest=f.name,
            default=default,
            type=number(kind) if kind in (int, float) else kind,
            choices=CHOICES.get(f.name),
            help=help_text.replace("%", "%%") if shown_here else argparse.SUPPRESS,
            metavar=None if f.name in CHOICES else METAVARS.get(f.name, TYPE_METAVARS[kind]),
        )
    p.add_argument(
        "--help-all",
        action=FullHelp,
        add_parser=add_parser,
        help="show every option with its help, by section, and exit",
    )
    p.add_argument(
        "--env-set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="environment config override, e.g. --env-set digits=3 (repeatable)",
    )
    p.add_argument(
        "--config",
        type=Path,
        metavar="FILE",
        help="placement file (YAML, torchforge's shape): processes per service, generator "
        "replicas, FSDP2 degree; implies --placement monarch (see docs/placement.md)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.add_argument(
        "--skip-conformance",
        action="store_true",
        help="train even if the algorithm fails the conformance suite (`check-plugin`), "
        "which every run otherwise passes first",
    )
    p.add_argument(
        "--verbose",
        action="store_true",
        help="show other libraries' warnings and logs (vLLM, torch, ...) here; by default "
        f"they go to {LOG_NAME} in the run or experiment folder",
    )
