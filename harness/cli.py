"""``python -m harness``: train one run, list what is registered.

Exit status: 0 on success, 2 for bad input (unknown names or fields, invalid values;
nothing is written for a run that never started), 1 when a run fails.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import textwrap
import time
import typing
from collections.abc import Callable
from pathlib import Path

from harness.third_party import LOG_NAME, routed_to
from zoo.core.config import ConfigError, coerce, field_docs, parse_overrides, shown
from zoo.core.registry import PluginError

RESULTS = Path("results")
DEFAULT_TINY_BUDGET = 2e12
"""FLOPs per run of `compare` on the tiny model: ~44 GRPO steps (rollout batches of 4
mini-batches each), ~1 minute per run on 2 cores."""


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


def build_parser(full: bool = False) -> argparse.ArgumentParser:
    """The command line. ``full``: every run option with its help under ``--help`` (as
    ``--help-all`` shows them); by default the common ones, each section naming the rest."""
    parser = Parser(
        prog="python -m harness",
        description="forge-zoo: RL algorithms for language models on one shared infra core.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser(
        "run",
        help="train one algorithm on one env and model",
        description="Train ALGORITHM with RL. Writes config.json, metrics.jsonl (one JSON "
        "object per step) and resumable checkpoints to results/<run-id>/ or --out.",
    )
    run.add_argument("algorithm", help="algorithm name (see `list algorithms`)")
    run.add_argument("--env", default="arithmetic", help="environment (default: arithmetic)")
    run.add_argument(
        "--seed",
        type=number(int),
        default=0,
        help="seeds the prompts' order, the sampler and the trainer (a whole number >= 0; "
        "default 0)",
    )
    run.add_argument("--out", type=folder, help="run folder (default: results/<run-id>)")
    run.add_argument("--resume", action="store_true",
                     help="continue the run in --out from its last checkpoint")  # fmt: skip
    add_training_arguments(run, "run", full)
    run.add_argument(
        "--set", dest="algo_set", action="append", default=[], metavar="KEY=VALUE",
        help="algorithm hyperparameter override, e.g. --set eps=0.3 (repeatable)",
    )  # fmt: skip
    compare = sub.add_parser(
        "compare",
        help="matched-compute comparison of algorithms: runs, tables, plots, report",
        description="Run every ALGORITHM on every --env for --seeds seeds with the same model, "
        "prompts, sampling settings and compute budget; write runs/, tables/ (CSV + Markdown), "
        "plots/ (PNG) and report.md to --out. Defaults fit a laptop CPU: tiny model, "
        f"arithmetic, 3 seeds, a budget of {DEFAULT_TINY_BUDGET:.0e} FLOPs per run.",
    )
    compare.add_argument("algorithms", nargs="+", metavar="ALGORITHM")
    compare.add_argument("--env", dest="envs", action="append", default=None,
                         help="environment (repeat for several; default: arithmetic)")  # fmt: skip
    compare.add_argument(
        "--seeds",
        type=number(int),
        default=None,
        help="seeds 0..N-1 (default 3, as in the real presets' recipes)",
    )
    compare.add_argument("--out", type=folder, help="experiment folder (default: results/...)")
    compare.add_argument("--resume", action="store_true",
                         help="continue an interrupted comparison in --out")  # fmt: skip
    compare.add_argument(
        "--dry-run",
        action="store_true",
        help="print the plan (the runs, the recipe, the estimated memory and time per GPU "
        "class, whether this machine can run it) and exit 0 without running anything; a real "
        "model prints the same plan before every comparison (docs/gpu.md)",
    )
    add_training_arguments(compare, "compare", full)
    compare.add_argument(
        "--set", dest="algo_set", action="append", default=[], metavar="KEY=VALUE",
        help="algorithm hyperparameter override for every algorithm, e.g. --set beta=0 "
        "(repeatable)",
    )  # fmt: skip
    compare.add_argument(
        "--vary", action="append", default=[], metavar="KEY=V1,V2,...",
        help="an ablation: run each value of KEY as its own row (repeatable; the rows are "
        "the grid of all --vary values). KEY is an algorithm hyperparameter (as in --set; "
        "also aggregation=seq_mean,token_mean,fixed for any algorithm) or a run setting "
        "(lr, epochs, group_size, ...). Rows are named by their overrides, e.g. "
        "grpo@eps=0.28,aggregation=token_mean",
    )  # fmt: skip
    compare.add_argument(
        "--jobs", type=number(int), default=1, metavar="N",
        help="run N runs at once, each in its own process: on the CPU the cores are split "
        "between them, on GPUs each takes one GPU; with a placement file (--config) that "
        "lists hosts, the hosts are split into N equal groups and each run's services go on "
        "one group only (N at most the number of hosts). The numbers equal those of --jobs "
        "1 (default 1: one after another in this process)",
    )  # fmt: skip
    compare.add_argument(
        "--vary-one-at-a-time", action="store_true",
        help="instead of the grid: the first value of every --vary, then each other value "
        "of one KEY at a time with the rest at their first values",
    )  # fmt: skip

    compare.add_argument(
        "--tuned", type=Path, metavar="SELECTION",
        help="run each algorithm at the setting `harness tune` selected for it (its "
        "selection.json); the rows keep the algorithms' plain names",
    )  # fmt: skip
    verdicts = compare.add_argument_group(
        "verdicts (docs/statistics.md): every row against one baseline, paired by seed"
    )
    verdicts.add_argument(
        "--baseline",
        metavar="ROW",
        default=None,
        help="the row every other row is compared with (default: the first ALGORITHM)",
    )
    verdicts.add_argument(
        "--delta",
        type=number(float),
        default=None,
        metavar="D",
        help="the equivalence margin and the resolution the report states power at, in "
        "headline units (held-out reward; default 0.02)",
    )
    verdicts.add_argument(
        "--pairs",
        choices=("baseline", "all"),
        default="baseline",
        help="baseline (default): each row against the baseline, one family of k - 1 "
        "comparisons; all: also every pair, Holm over all of them, with tie groups",
    )
    verdicts.add_argument(
        "--resolve",
        type=number(float),
        default=None,
        metavar="DELTA",
        help="plan the seeds: run --seeds seeds as a pilot, estimate the paired spread, then "
        "run the seeds the family needs to detect or exclude DELTA at 80%% power (sets "
        "--delta), at least --min-seeds and at most --max-seeds",
    )
    verdicts.add_argument(
        "--min-seeds",
        type=number(int),
        default=0,
        metavar="N",
        help="with --resolve: run at least N seeds (default 0)",
    )
    verdicts.add_argument(
        "--max-seeds",
        type=number(int),
        default=60,
        metavar="N",
        help="with --resolve: run at most N seeds (default 60)",
    )
    verdicts.add_argument(
        "--controls",
        action="store_true",
        help="add the board's controls, judged by the same rule: <baseline>@twin (the baseline "
        "at the same seeds with independent sampling noise), which must not separate, and "
        "the baseline at fractions of its learning rate (<baseline>@half_lr, @quarter_lr), "
        "which must come out worse; a board whose controls fail cannot rank",
    )
    verdicts.add_argument(
        "--control-lr-factors",
        default="0.5,0.25",
        metavar="F1,F2",
        help="the positive controls' learning-rate fractions (default 0.5,0.25)",
    )
    verdicts.add_argument(
        "--allow-mixed",
        action="store_true",
        help="let --resume add runs made at another commit or on another CPU model than the "
        "experiment's (refused by default: one commit and one CPU class per experiment)",
    )

    tune = sub.add_parser(
        "tune",
        help="the same tuning budget for every algorithm, selected on a validation split",
        description="Run every setting of a tuning plan (TOML: algorithms, env, model, shared "
        "run settings, a grid per algorithm of the same size for all) for the plan's seeds, "
        "evaluated on the env's validation split; write the experiment to --out, then "
        "selection.json (each algorithm's best setting) and sweep.md. Run a board at the "
        "chosen settings with `harness compare ... --tuned OUT/selection.json`.",
    )
    tune.add_argument("plan", type=Path, help="the tuning plan, e.g. configs/tune/running_sum.toml")
    tune.add_argument("--out", type=folder, required=True, help="experiment folder of the sweep")
    tune.add_argument("--resume", action="store_true", help="continue an interrupted sweep")
    tune.add_argument("--jobs", type=number(int), default=1, metavar="N",
                      help="run N runs at once (as compare --jobs)")  # fmt: skip
    tune.add_argument("--only", action="append", default=None, metavar="ALGORITHM",
                      help="run only these algorithms of the plan (repeatable); the "
                      "selection is written once every algorithm's runs are done")  # fmt: skip
    tune.add_argument("--quiet", action="store_true", help="no progress bars")
    tune.add_argument(
        "--allow-mixed",
        action="store_true",
        help="let --resume add runs made at another commit or on another CPU model than the "
        "sweep's (refused by default; sweep.md then holds settings scored on both)",
    )
    tune.add_argument("--verbose", action="store_true", help="service logs to the terminal")

    analyze = sub.add_parser("analyze", help="re-write an experiment's tables, plots, report")
    analyze.add_argument("experiment", type=Path)

    board = sub.add_parser(
        "leaderboard", help="aggregate experiments under results/ into leaderboards/",
        description="Write leaderboards/<model>__<env>.md, leaderboards/index.html (plots "
        "embedded) and leaderboards/leaderboard.json from every experiment under --results.",
    )  # fmt: skip
    board.add_argument("--results", type=Path, default=RESULTS,
                       help="folder whose experiments (each with experiment.json) are "
                       "aggregated (default: results)")  # fmt: skip
    board.add_argument(
        "--out",
        type=Path,
        default=Path("leaderboards"),
        help="where the boards are written (default: leaderboards)",
    )
    board.add_argument("--allow-dirty", action="store_true",
                       help="also build rows whose runs ran from a modified (dirty) working "
                       "tree or without a recorded git state, marking their commits '+dirty'. "
                       "Refused by default: no commit holds the code behind such numbers "
                       "(the run folder's source.diff does, where recorded)")  # fmt: skip

    repro = sub.add_parser(
        "reproduce", help="re-run a recorded run (or leaderboard row) and check the numbers",
        description="TARGET is a leaderboard row id or a run folder (with config.json and "
        "metrics.jsonl). Where this machine has the run's setup (CPU model and vector "
        "instruction sets, package versions; the recorded thread count is applied), the "
        "re-run must match every non-timing number of every step exactly: MATCH or DIFFERS. "
        "Elsewhere (or with --statistical) float rounding changes the sampled tokens, so the "
        "lowest --seeds seeds of the row (a run folder: itself first, then its siblings: same "
        "config, other seeds, same experiment folder) are re-run and their headlines tested "
        "against the row's per-seed headlines: a Welch two-sample t-test at 5% decides, "
        "a TOST equivalence test within the row's MDD 80% says how close (AGREES: no "
        "difference and equivalent; CONSISTENT: no difference, equivalence not shown; "
        "DIFFERS). Exit 0 when the numbers match or agree, 1 when they do not, 2 for a "
        "target that cannot be checked (docs/provenance.md).",
    )  # fmt: skip
    repro.add_argument("target", help="leaderboard row id, or a run folder")
    repro.add_argument("--leaderboards", type=Path, default=Path("leaderboards"),
                       help="folder of the leaderboard.json that holds the row id "
                       "(default: leaderboards)")  # fmt: skip
    repro.add_argument("--statistical", action="store_true",
                       help="check statistically even where an exact check is "
                       "possible")  # fmt: skip
    repro.add_argument(
        "--seeds", type=int, default=None, metavar="N",
        help="how many seeds to re-run, the lowest of the row (at most the row's number). "
        "Default: a statistical check 3 (the fewest whose own spread the t-test can use "
        "with 2 degrees of freedom); an exact check every run of a row, or the run folder "
        "alone",
    )  # fmt: skip
    repro.add_argument("--verbose", action="store_true",
                       help="show other libraries' warnings and logs (vLLM, torch) while the "
                       "runs re-run; by default they go to a log discarded with the "
                       "re-run")  # fmt: skip
    repro.add_argument(
        "--model-path", type=Path, default=None,
        help="start from the weights in this folder instead of what the recorded model "
        "name resolves to here (their sha256 must equal the recorded one). For runs of a "
        "tiny preset made on another CPU: its warm start follows the CPU's kernels",
    )  # fmt: skip

    bench = sub.add_parser(
        "bench", help="run the performance benchmarks, write performance.md and plots",
        description="Run the benchmarks under benchmarks/ (RL step against TRL and a bare "
        "torch loop, generation against transformers, training utilisation, cost scaling, "
        "sandbox, board runs, evaluation batching and overlap) and write OUT/performance.md, "
        "OUT/perf/*.png and OUT/perf/bench.json. Takes ~40 minutes on 2 cores (board alone "
        "~20, eval_overlap ~5); --quick runs tiny settings.",
    )  # fmt: skip
    bench.add_argument("--only", action="append", metavar="NAME",
                       help="run only these (repeatable): rl_step, generation, utilisation, "
                       "scaling, sandbox, board, evaluation, eval_overlap")  # fmt: skip
    bench.add_argument(
        "--out",
        type=Path,
        default=Path("leaderboards"),
        help="folder whose perf/ gets the reports (default: leaderboards)",
    )
    bench.add_argument("--quick", action="store_true",
                       help="tiny settings: checks that every benchmark runs (figures "
                       "meaningless)")  # fmt: skip

    lst = sub.add_parser("list", help="list registered algorithms, envs or models")
    lst.add_argument("what", choices=["algorithms", "envs", "models"])

    check = sub.add_parser(
        "check-plugin",
        help="run the conformance suite against a registered algorithm",
        description="Check an algorithm against the invariants every loss must satisfy "
        "(on-policy gradient, zero advantages, padding, micro-batching, clipping, "
        "sequence-level ratio) and report the mechanism it declares (Algorithm.mechanism) "
        "and whether it acted on a batch whose ratios moved. Exit 0 if every applicable "
        "property holds.",
    )
    check.add_argument("algorithm", help="algorithm name (see `list algorithms`)")

    doctor = sub.add_parser(
        "doctor",
        help="check this machine before a long run (sandbox, vLLM, disk, memory)",
        description="Check, for the run these flags describe, that the code sandbox "
        "isolates, that vLLM starts (where the run would generate with it: not for the tiny "
        "presets on the CPU, which --generator by_size gives to transformers), that the disk "
        "holds its checkpoints and that the memory holds the model; print PASS/WARN/FAIL and "
        "what to fix. Exit 1 on a FAIL.",
    )
    doctor.add_argument("algorithm", nargs="?", default="grpo",
                        help="algorithm of the run to check for (default grpo)")  # fmt: skip
    doctor.add_argument("--env", default="arithmetic", help="environment (default: arithmetic)")
    doctor.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    doctor.add_argument("--out", type=Path, default=RESULTS,
                        help="where the run would write (default: results/)")  # fmt: skip
    doctor.add_argument("--only", action="append", choices=("sandbox", "vllm", "disk", "memory"),
                        help="run only these checks (repeatable; default: all)")  # fmt: skip
    doctor.add_argument(
        "--plan",
        action="store_true",
        help="instead of the checks, predict memory per GPU and seconds per "
        "step on --gpus GPUs of kind --gpu from the ledger's FLOPs and the "
        "efficiencies measured in leaderboards/gpu_check.md; needs no GPU, "
        "no weights and no data (an env's data that is not here, as gsm8k's "
        "offline, is assumed and the plan says so)",
    )
    doctor.add_argument("--gpus", type=gpu_count, default=None, metavar="N",
                        help="with --plan: GPUs the run gets, the trainer split over them "
                        "by FSDP2 (default 1)")  # fmt: skip
    doctor.add_argument("--gpu", choices=("h200", "h100", "a100"), default=None,
                        help="with --plan: the GPU kind (default h200)")  # fmt: skip
    add_training_arguments(doctor, "doctor", full)

    worker = sub.add_parser(
        "worker",
        help="serve this machine as a host for multi-host runs (a Monarch worker)",
        description="Run a Monarch worker that a run's placement file names under hosts: "
        "the run starts its service processes here. Start one per machine before the run; "
        "it serves runs until killed. Connections are not authenticated (Monarch 0.7 has no "
        "TLS yet): use only on a trusted cluster network.",
    )
    worker.add_argument("--address", default="tcp://0.0.0.0:22222",
                        help="where to listen (default: tcp://0.0.0.0:22222)")  # fmt: skip

    warm = sub.add_parser(
        "warm-start",
        help="rebuild a tiny preset's start weights from its recipe (they ship built)",
        description="Run a tiny preset's warm-start recipe (a short supervised stage, about "
        "a minute on 2 cores) on this machine. The weights ship with forge-zoo "
        "(zoo/models/start_weights, checked by sha256 when a run loads them) because the "
        "bytes depend on the CPU: two CPUs with other vector instructions give different "
        "weights from the same recipe and seed. By default this replaces the shipped folder "
        "and its manifest entry (for a changed recipe: commit both, and re-run or mark the "
        "rows made from the old weights); --check only says whether this CPU reproduces "
        "the shipped bytes.",
    )  # fmt: skip
    warm.add_argument("preset", help="tiny preset (see `list models`)")
    what = warm.add_mutually_exclusive_group()
    what.add_argument("--out", type=Path, default=None,
                      help="write the model to this folder instead of the shipped one")  # fmt: skip
    what.add_argument("--check", action="store_true",
                      help="build into a temporary folder and compare with the shipped bytes; "
                      "exit 1 when they differ")  # fmt: skip
    warm.add_argument("--quiet", action="store_true", help="no progress bar")
    return parser


CLI_OWN_FIELDS = (
    "algorithm", "env", "seed", "distributed", "algorithm_config", "env_config", "variant",
)  # fmt: skip
"""RunConfig fields each command sets its own way (positional algorithms, --env, --seed or
--seeds, --config, --set, --env-set, --vary); every other field is a generated flag."""
FLAG_ALIASES = {"budget_flops": ("--budget",)}
"""Shorter names kept for flags used in the README and in recorded commands."""
METAVARS = {"budget_flops": "FLOPS", "budget_seconds": "S", "model_path": "DIR", "model": "MODEL"}
TYPE_METAVARS = {int: "N", float: "X", str: "NAME"}


BUDGET_FLAGS = {
    "steps": "--steps",
    "budget_flops": "--budget",
    "budget_samples": "--budget-samples",
    "budget_seconds": "--budget-seconds",
}
"""What ends a run, by RunConfig field: the flag that sets each (one per run)."""
BUDGET_CHOICE = "--steps, --budget (FLOPs), --budget-samples or --budget-seconds"
RUN_DEFAULT_STEPS = 150
"""`run` and `doctor` without a budget: this many rollout batches (RunConfig.steps)."""


def budget_default(command: str) -> str:
    """What a command runs for when no budget flag is given, in words (for --help)."""
    if command != "compare":
        return f"default: --steps {RUN_DEFAULT_STEPS}"
    from zoo.run.run_config import TINY_BUDGETS

    own = ", ".join(f"{v:.0e} for {m}" for m, v in TINY_BUDGETS.items())
    from harness.recipes import RECIPES

    real = ", ".join(f"{r.budget_flops:.1e} for {m}" for m, r in RECIPES.items())
    return (
        f"default on the tiny presets: --budget {DEFAULT_TINY_BUDGET:.0e} ({own}), "
        f"so that every algorithm gets the same compute; on the Qwen3 presets their "
        f"recipe's ({real}; docs/gpu.md); other models need one"
    )


def resolve_budget(args: argparse.Namespace, command: str) -> str:
    """Fill in the budget fields of ``args`` the same way for every command: at most one of
    BUDGET_FLAGS may be given (more exit 2), each > 0; with none, `run` and `doctor` train
    RUN_DEFAULT_STEPS steps and `compare` spends its tiny preset's FLOPs budget (a real
    model needs one). Returns the budget in words, printed when the command starts."""
    given = {name: getattr(args, name) for name in BUDGET_FLAGS if getattr(args, name) is not None}
    if len(given) > 1:
        raise ConfigError(f"give one budget, not {' and '.join(BUDGET_FLAGS[n] for n in given)} "
                          f"(choose one of {BUDGET_CHOICE})")  # fmt: skip
    for name, value in given.items():
        if not value > 0:
            raise ConfigError(f"{BUDGET_FLAGS[name]} must be > 0, got {value}")
    how = f"set by {BUDGET_FLAGS[next(iter(given))]}" if given else f"{command}'s default"
    if not given and command == "compare":
        from harness.recipes import RECIPES
        from zoo.models.presets import TINY_MODELS
        from zoo.run.run_config import TINY_BUDGETS

        if args.model not in TINY_MODELS and args.model not in RECIPES:
            raise ConfigError(
                f"give a compute budget for {args.model!r}: {BUDGET_CHOICE}; compare has a "
                f"default budget for the presets only ({', '.join(RECIPES)} and the tiny ones)"
            )
        if args.model in RECIPES:
            given = {"budget_flops": RECIPES[args.model].budget_flops}
            how += f" for {args.model}, its recipe (docs/gpu.md)"
        else:
            given = {"budget_flops": TINY_BUDGETS.get(args.model, DEFAULT_TINY_BUDGET)}
            how += f" for {args.model}"
    for name in BUDGET_FLAGS:
        setattr(args, name, given.get(name, 0))
    if not args.steps:
        args.steps = RUN_DEFAULT_STEPS  # (RunConfig.steps; unused when another budget is set)
    unit = next(iter(given), "steps")
    amount = {"steps": f"{args.steps} steps", "budget_flops": f"{args.budget_flops:.3g} FLOPs",
              "budget_samples": f"{args.budget_samples} samples",
              "budget_seconds": f"{args.budget_seconds:g} seconds of training"}[unit]  # fmt: skip
    return f"budget: {amount} per run ({how}; one of {BUDGET_CHOICE} changes it)"


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


class FullHelp(argparse.Action):
    """``--help-all``: the command's help with every option explained, by section."""

    def __init__(self, option_strings: list[str], dest: str, command: str = "", **kwargs):
        super().__init__(
            option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, nargs=0, **kwargs
        )
        self.command = command

    def __call__(self, parser, namespace, values, option_string=None) -> typing.NoReturn:
        full = build_parser(full=True)
        commands = next(a for a in full._actions if isinstance(a, argparse._SubParsersAction))
        commands.choices[self.command].print_help()
        parser.exit()


def add_training_arguments(p: argparse.ArgumentParser, command: str, full: bool = True) -> None:
    """Options shared by `run`, `compare` and `doctor`: one flag per RunConfig field (its
    docstring is the help, its type the parser, ``zoo.run.run_config.CHOICES`` its valid
    values), so the command line cannot drift from the config. The budget flags are read
    the same way by every command (``resolve_budget``); only the default differs.
    ``full`` False: `--help` explains COMMON_OPTIONS only, and each section's heading names
    its other flags (~70 lines instead of ~300; every flag parses the same)."""
    from zoo.run.run_config import (
        CHOICES,
        REAL_MODEL_DEFAULTS,
        SECTIONS,
        TINY_PRESET_DEFAULTS,
        RunConfig,
        run_defaults,
    )

    docs = field_docs(RunConfig)
    types = typing.get_type_hints(RunConfig)
    tiny = run_defaults("tiny")
    # --help lists the flags under their RunConfig section's heading
    groups = {cls: p.add_argument_group(title) for title, cls in SECTIONS}
    group_of = {f.name: groups[cls] for _, cls in SECTIONS for f in dataclasses.fields(cls)}
    if not full:  # each section names its flags that --help leaves unexplained
        for cls, group in groups.items():
            rest = [
                f"--{f.name.replace('_', '-')}"
                for f in dataclasses.fields(cls)
                if f.name not in COMMON_OPTIONS and f.name not in CLI_OWN_FIELDS
            ]
            if rest:
                group.description = f"also {', '.join(rest)} (--help-all explains each)"
    for f in dataclasses.fields(RunConfig):
        if f.name in CLI_OWN_FIELDS:
            continue
        kind = types[f.name]
        help_text = " ".join(docs.get(f.name, "").split()).replace("``", "`").rstrip(".")
        default = f.default
        if f.name in REAL_MODEL_DEFAULTS:
            # Left unset, these take the model's defaults (run_config fills them in).
            default = None
            help_text += (
                f" (default: {tiny[f.name]} for the tiny presets"
                + "".join(f", {d[f.name]} for {m}" for m, d in TINY_PRESET_DEFAULTS.items()
                          if f.name in d)
                + f", {REAL_MODEL_DEFAULTS[f.name]} for real models)"
            )  # fmt: skip
        elif f.name == "model":
            default = None
            help_text += (" (default: the placement file's model, else the tiny preset "
                          "built for the env: tiny, tiny-code for pyfunc, tiny-tool for "
                          "tool_arithmetic, tiny-code-feedback for pyfunc_feedback)")  # fmt: skip
        elif f.name in BUDGET_FLAGS:
            default = None  # unset: resolve_budget tells a chosen budget from the default
            help_text += (f" (one budget per run: {BUDGET_CHOICE}; {budget_default(command)})"
                          if f.name == "steps" else " (exclusive with --steps, whose help gives "
                          "the default)")  # fmt: skip
        else:
            help_text += f" (default: {default})" if default != "" else ""
        flag = "--" + f.name.replace("_", "-")
        shown_here = full or f.name in COMMON_OPTIONS
        group_of[f.name].add_argument(
            flag, *FLAG_ALIASES.get(f.name, ()), dest=f.name, default=default,
            type=number(kind) if kind in (int, float) else kind, choices=CHOICES.get(f.name),
            help=help_text.replace("%", "%%") if shown_here else argparse.SUPPRESS,
            metavar=None if f.name in CHOICES else METAVARS.get(f.name, TYPE_METAVARS[kind]),
        )  # fmt: skip
    p.add_argument(
        "--help-all",
        action=FullHelp,
        command=command,
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


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command in ("run", "compare", "doctor"):
            args.distributed = apply_placement_file(args)
        if args.command == "run":
            return cmd_run(args)
        if args.command == "doctor":
            from harness.doctor import CHECKS, cmd_doctor, cmd_doctor_plan

            # validated once, where cmd_doctor resolves it into the run's plan
            cfg = run_config(
                args, args.algorithm, args.env, args.seed, validate=False, weights=not args.plan
            )  # (a plan reads the shape only)
            if args.plan:
                if args.only:
                    raise ConfigError("--plan runs no checks: drop --only, or --plan")
                return cmd_doctor_plan(cfg, args.gpus or 1, args.gpu or "h200")
            if args.gpus is not None or args.gpu is not None:
                raise ConfigError("--gpus and --gpu describe a --plan: add --plan")
            return cmd_doctor(cfg, args.out, args.only or CHECKS, args.verbose)
        if args.command == "worker":
            from monarch.actor import run_worker_loop_forever

            print(f"forge-zoo worker listening on {args.address}", flush=True)
            run_worker_loop_forever(address=args.address, ca="trust_all_connections")
            return 0
        if args.command == "check-plugin":
            from harness.listing import cmd_check_plugin

            return cmd_check_plugin(args.algorithm)
        if args.command == "compare":
            return cmd_compare(args)
        if args.command == "tune":
            return cmd_tune(args)
        if args.command == "leaderboard":
            from harness.leaderboard import build_leaderboards

            try:
                paths = build_leaderboards(args.results, args.out, args.allow_dirty)
            except FileNotFoundError as exc:  # no results folder, or no experiment in it
                raise ConfigError(str(exc)) from None
            for path in paths:
                print(f"wrote {path}")
            return 0
        if args.command == "warm-start":
            return cmd_warm_start(args)
        if args.command == "reproduce":
            return cmd_reproduce(args)
        if args.command == "bench":
            from harness.bench import BENCHMARKS, run_all

            report = run_all(args.only or list(BENCHMARKS), args.out, args.quick,
                             command_line())  # fmt: skip
            print(f"wrote {report}")
            return 0
        if args.command == "analyze":
            from harness.analysis import write_analysis

            try:
                write_analysis(args.experiment)
            except FileNotFoundError as exc:  # not an experiment folder, or no run in it
                raise ConfigError(str(exc)) from None
            print(f"wrote {args.experiment}/report.md")
            return 0
        from harness.listing import cmd_list

        return cmd_list(args.what)
    except (ConfigError, PluginError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except RuntimeError as exc:
        # (zoo.placement's, imported lazily; zoo.run.runlog's: a disk that is full)
        if type(exc).__name__ not in ("ServiceFailure", "StorageError"):
            raise
        print(f"error: {exc}", file=sys.stderr)
        return 1


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
        raise ConfigError(f"these envs are built for different tiny models ({pairs}); "
                          "choose one with --model")  # fmt: skip
    return next(iter(wanted.values()))


def run_config(args: argparse.Namespace, algorithm: str, env: str, seed: int,
               validate: bool = True, weights: bool = True):  # fmt: skip
    """The RunConfig the flags give, validated unless ``validate`` is False: for the
    commands that resolve it into a plan (zoo.run.plan) next, which validates it once.
    ``weights``: a run needs the model's weights (``doctor --plan`` does not: the shape)."""
    from zoo.run.run_config import RunConfig, run_defaults

    if getattr(args, "budget_line", None) is None:  # (once per command)
        args.budget_line = resolve_budget(args, args.command)
    defaults = run_defaults(args.model)
    for name, value in defaults.items():  # options left unset take the model's defaults
        if getattr(args, name) is None:
            setattr(args, name, value)

    settings = {
        f.name: getattr(args, f.name)
        for f in dataclasses.fields(RunConfig)
        if f.name not in CLI_OWN_FIELDS
    }
    from zoo.models.presets import check_weights_available

    # Offline with an empty cache, the missing weights come first: no other fix helps
    if weights:
        check_weights_available(args.model, args.model_path, args.init)
    cfg = RunConfig(
        algorithm=algorithm,
        env=env,
        seed=seed,
        distributed=args.distributed,
        algorithm_config=parse_overrides(getattr(args, "algo_set", [])),
        env_config=parse_overrides(args.env_set),
        **settings,
    )
    if validate:
        cfg.validate()
    return cfg


def cmd_run(args: argparse.Namespace) -> int:
    from harness.experiment import preflight
    from harness.runner import check_run_folder

    # validated by the pre-flight checks, which resolve it once into the run's plan
    cfg = run_config(args, args.algorithm, args.env, args.seed, validate=False)
    if args.resume and not args.out:
        raise ConfigError("--resume needs --out DIR, the folder of the run to continue")
    print(args.budget_line, flush=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = args.out or RESULTS / f"{cfg.algorithm}-{cfg.env}-{cfg.model}-seed{cfg.seed}-{stamp}"
    check_run_folder(out, args.resume)
    (plan,) = preflight([cfg], conformance=not args.skip_conformance)

    with routed_to(out / LOG_NAME, args.verbose):
        history = _train(plan, out, args)
    evals = [(r["step"], r["eval_reward"]) for r in history if "eval_reward" in r]
    print(f"run folder: {out}")
    print("held-out reward by step: " + ", ".join(f"{s}: {v:.3f}" for s, v in evals))
    return 0


def _train(plan, out: Path, args: argparse.Namespace) -> list[dict]:
    from harness.runner import execute_run
    from zoo.run.progress import add_run_task, make_progress, run_columns, update_run_task
    from zoo.run.wiring import build_services

    cfg = plan.cfg
    started = time.perf_counter()
    services = build_services(plan, quiet=args.quiet)
    startup = time.perf_counter() - started
    with make_progress(args.quiet, *run_columns()) as progress:
        task = add_run_task(progress, f"{cfg.algorithm} on {cfg.env}", cfg)
        try:
            history = execute_run(
                cfg, out, services, command=command_line(), resume=args.resume,
                on_record=lambda r: update_run_task(progress, task, cfg, r),
                startup_seconds=startup,
            )  # fmt: skip
        finally:
            services.close()
    return history


def cmd_compare(args: argparse.Namespace) -> int:
    from harness.board import new_design
    from harness.experiment import (
        check_experiment_folder,
        check_size,
        count_variants,
        expand,
        parse_vary,
        preflight,
        run_experiment,
        variants,
    )
    from harness.recipes import prepare, print_plan
    from harness.verdicts import DEFAULT_DELTA

    recipe = prepare(args)  # a Qwen3 preset's recipe fills in --env and --seeds
    if args.resume and not args.out:
        raise ConfigError("--resume needs --out DIR, the experiment folder to continue")
    if args.vary_one_at_a_time and not args.vary:
        raise ConfigError("--vary-one-at-a-time needs at least one --vary KEY=V1,V2")
    envs = args.envs or ["arithmetic"]
    if len(set(args.algorithms)) != len(args.algorithms) or args.seeds < 1:
        raise ConfigError("name each algorithm once, and give --seeds >= 1")
    if args.jobs < 1:
        raise ConfigError(f"--jobs must be >= 1, got {args.jobs}")
    delta = args.resolve if args.resolve is not None else (args.delta or DEFAULT_DELTA)
    if not 0 < delta < 1:
        raise ConfigError(f"--delta/--resolve must lie in (0, 1) (headline units), got {delta}")
    if args.resolve is not None and not 2 <= args.seeds <= args.max_seeds:
        raise ConfigError(f"--resolve runs --seeds as its pilot: give 2 <= --seeds <= --max-seeds "
                          f"({args.max_seeds}), got {args.seeds}")  # fmt: skip
    factors = parse_factors(args.control_lr_factors)
    # a real model's weights are checked with the plan printed first (print_plan)
    real = recipe is not None
    base = run_config(args, args.algorithms[0], envs[0], 0, weights=not real)
    print(args.budget_line, flush=True)
    vary = parse_vary(args.vary)
    grid = variants(vary, args.vary_one_at_a_time)
    check_size(len(args.algorithms), len(envs), count_variants(vary, args.vary_one_at_a_time),
               max(args.seeds, args.max_seeds if args.resolve else 0), args.jobs)  # fmt: skip

    def board(seeds: int) -> tuple[list, dict | None]:
        cfgs = expand(base, args.algorithms, envs, seeds, grid)
        if args.tuned:
            from harness.tuning import read_selection, tuned

            selection = read_selection(args.tuned)
            cfgs = [tuned(c, selection) for c in cfgs]
        if not args.controls:
            return cfgs, None
        from harness.controls import control_configs

        control_cfgs, record = control_configs(cfgs, baseline, factors)
        return cfgs + control_cfgs, record

    rows = sorted({c.variant or c.algorithm for c in expand(base, args.algorithms, envs, 1, grid)})
    baseline = args.baseline or (args.algorithms[0] if args.algorithms[0] in rows else rows[0])
    if baseline not in rows:
        raise ConfigError(f"--baseline {baseline}: not a row of this comparison (rows: {rows})")
    design = new_design(baseline, args.pairs, delta)
    cfgs, controls = board(args.seeds)
    if real or args.dry_run:  # the plan, before any work; stops where it cannot run
        micro = print_plan(args, cfgs, recipe)
        if args.dry_run:
            return 0
        if micro is not None and micro != base.micro_batch_size:  # (chosen for this GPU)
            base = dataclasses.replace(base, micro_batch_size=micro)
            cfgs, controls = board(args.seeds)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = args.out or RESULTS / f"compare-{'-'.join(args.algorithms)}-{args.model}-{stamp}"
    check_experiment_folder(out, args.resume)

    def run(cfgs: list, resume: bool, plan: dict | None = None) -> list[dict]:
        plans = preflight(cfgs, conformance=not args.skip_conformance)
        if args.jobs > 1:
            from harness.jobs import worker_slots

            worker_slots(cfgs, args.jobs)  # refuses hosts or GPUs too few for N at once
            plans = []  # (each worker resolves its runs itself: the envs stay here unused)
        with routed_to(out / LOG_NAME, args.verbose):
            return run_experiment(cfgs, out, command_line(), resume, quiet=args.quiet,
                                  jobs=args.jobs, controls=controls, plans=plans,
                                  design=design, power_plan=plan,
                                  allow_mixed=args.allow_mixed)  # fmt: skip

    summary = run(cfgs, args.resume)
    if args.resolve is not None:
        from harness.board import seed_plan

        plan = seed_plan(out, design, controls, args.seeds, args.min_seeds, args.max_seeds)
        print(plan["text"], flush=True)
        cfgs, _ = board(plan["seeds"])
        summary += run(cfgs, True, plan)
    print_summary(out)
    print(f"{len(summary)} runs done this time; experiment folder: {out} (report.md)")
    return 0


def parse_factors(text: str) -> tuple[float, ...]:
    """--control-lr-factors: comma-separated fractions in (0, 1)."""
    try:
        factors = tuple(float(f) for f in text.split(","))
    except ValueError:
        raise ConfigError(f"--control-lr-factors {text!r}: give fractions like 0.5,0.25") from None
    if not factors or any(not 0 < f < 1 for f in factors):
        raise ConfigError(f"--control-lr-factors {text!r}: each must lie in (0, 1)")
    return factors


def cmd_tune(args: argparse.Namespace) -> int:
    from harness.experiment import check_experiment_folder, preflight, run_experiment
    from harness.tuning import SWEEP, extend_edges, load_plan, tuning_configs, write_selection

    plan = load_plan(args.plan)
    if args.only:
        unknown = sorted(set(args.only) - set(plan.algorithms))
        if unknown:
            raise ConfigError(f"--only {unknown[0]}: not in the plan ({plan.algorithms})")
    if args.jobs < 1:
        raise ConfigError(f"--jobs must be >= 1, got {args.jobs}")
    check_experiment_folder(args.out, args.resume)
    resume, extended = args.resume, {}
    while True:  # the grid, then each edge extension (TunePlan.extend) until none is due
        todo = [c for c in tuning_configs(plan) if not args.only or c.algorithm in args.only]
        plans = preflight(todo)
        with routed_to(args.out / LOG_NAME, args.verbose):
            run_experiment(todo, args.out, command_line(), resume, quiet=args.quiet,
                           jobs=args.jobs, plans=plans if args.jobs == 1 else None,
                           allow_mixed=args.allow_mixed)  # fmt: skip
        resume = True  # the runs so far stay; only new settings run
        try:
            selection = write_selection(args.out, plan, extended)
        except ConfigError as exc:
            print(f"no selection yet: {exc}")
            return 0
        added = extend_edges(plan, selection)
        if not added:
            break
        for algorithm, values in added.items():
            extended.setdefault(algorithm, []).extend(values)
            print(f"{algorithm}: chose the grid's edge; adding {', '.join(values)}")
    print(f"wrote {args.out / 'selection.json'} and {args.out / SWEEP}")
    return 0


def cmd_reproduce(args: argparse.Namespace) -> int:
    from harness.reproduce import reproduce

    return reproduce(args.target, args.leaderboards, statistical=args.statistical,
                     seeds=args.seeds, model_path=args.model_path,
                     verbose=args.verbose)  # fmt: skip


def cmd_warm_start(args: argparse.Namespace) -> int:
    import tempfile
    from importlib.metadata import version

    from zoo.models.tiny import SHIPPED, read_manifest
    from zoo.run.runlog import cpu_model, cpu_vector_flags
    from zoo.warm_start import rebuild_start_weights

    shipped = read_manifest().get(args.preset)
    here = {"cpu": cpu_model(), "cpu_vector_flags": cpu_vector_flags(), "torch": version("torch")}
    with tempfile.TemporaryDirectory(prefix="warm-start-") as tmp:
        out = Path(tmp) / args.preset if args.check else args.out
        entry = rebuild_start_weights(args.preset, here, out, quiet=args.quiet)
    print(f"{args.preset}: {entry['steps']} supervised steps, validation accuracy "
          f"{entry['validation_accuracy']:.1%}, sha256 {entry['sha256']}, built on "
          f"{machine_text(entry['built_on'])}")  # fmt: skip
    same = shipped is not None and shipped["sha256"] == entry["sha256"]
    if shipped is not None:
        print(f"the shipped weights (sha256 {shipped['sha256'][:12]}, built on "
              f"{machine_text(shipped['built_on'])}) are "
              f"{'the same bytes' if same else 'different bytes'}")  # fmt: skip
    if args.check:
        return 0 if same else 1
    if out is None:
        print(f"wrote {SHIPPED / args.preset} and {SHIPPED / 'manifest.json'}: commit both; "
              "runs and leaderboard rows made from the previous weights no longer start from "
              "what the preset resolves to (re-run them, or mark them)")  # fmt: skip
    else:
        print(f"wrote {out}")
    return 0


def machine_text(built_on: dict) -> str:
    return (f"{built_on['cpu']} [{built_on['cpu_vector_flags']}], torch {built_on['torch']}, "
            f"{built_on['torch_threads']} threads")  # fmt: skip


def print_summary(out: Path) -> None:
    """The experiment's summary table: a rich table on a terminal; plain, complete lines
    elsewhere (a batch job's log is as wide as its rows, not cut at 80 columns)."""
    import pandas as pd
    from rich.console import Console
    from rich.table import Table

    from harness.scores import experiment_headline

    df = pd.read_csv(out / "tables" / "summary.csv")
    verdicts_csv = out / "tables" / "verdicts.csv"
    if verdicts_csv.exists():  # many-to-one: each row's verdict against the baseline
        v = pd.read_csv(verdicts_csv)[["env", "algorithm", "verdict_text"]]
        df = df.merge(v, on=["env", "algorithm"], how="left")
        group = df.verdict_text.fillna("-").astype(str)
        group_title = "verdict"
    else:  # every pair (--pairs all, or an experiment from before verdicts)
        group = df.tie_group.astype(str) if "tie_group" in df else pd.Series("-", index=df.index)
        group_title = "tie group"
    df = df.assign(group=group).sort_values(["env", "headline_mean"], ascending=[True, False])
    # The caption names the checkpoints this experiment's eval points give; fit A is "-"
    # wherever summary.csv withholds it (harness/fits.py bootstrap_fit says when).
    title = "held-out reward (mean over seeds, 95% t-interval)"
    rows = pd.DataFrame({
        "env": df.env, "algorithm": df.algorithm, group_title: df.group,
        "seeds": df.seeds.astype(str),
        "headline": [f"{m:.3f} [{lo:.3f}, {hi:.3f}]"
                     for m, lo, hi in zip(df.headline_mean, df.ci_low, df.ci_high, strict=True)],
        "pass@1": df.get("pass_at_1", pd.Series(float("nan"), df.index)).map("{:.3f}".format),
        "pass@8": df.get("pass_at_8", pd.Series(float("nan"), df.index)).map("{:.3f}".format),
        "AUC": df.auc_mean.map("{:.3f}".format),
        "fit A": df.fit_A.map(lambda a: "-" if a != a else f"{a:.3f}"),
    })  # fmt: skip
    console = Console()
    if not console.is_terminal:
        print(f"{title}\n{rows.to_string(index=False)}\n{experiment_headline(out)}", flush=True)
        return
    table = Table(title=title, caption=experiment_headline(out))
    for col in rows.columns:
        table.add_column(col)
    for row in rows.itertuples(index=False):
        table.add_row(*row)
    console.print(table)


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
