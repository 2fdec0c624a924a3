"""`compare`: every algorithm on every env for N seeds at one compute budget, then the
verdicts, tables, plots and report of the experiment."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from harness.parsing import add_training_arguments, folder, number
from harness.run_flags import (
    RESULTS,
    apply_placement_file,
    command_line,
    run_config,
)
from harness.third_party import LOG_NAME, routed_to
from zoo.core.config import ConfigError


def add_parser(sub: argparse._SubParsersAction, full: bool = False) -> None:
    from zoo.run.run_config import TINY_COMPARE_BUDGET

    p = sub.add_parser(
        "compare",
        help="matched-compute comparison of algorithms: runs, tables, plots, report",
        description="Run every ALGORITHM on every --env for --seeds seeds with the same model, "
        "prompts, sampling settings and compute budget; write runs/, tables/ (CSV + Markdown), "
        "plots/ (PNG) and report.md to --out. Defaults fit a laptop CPU: tiny model, "
        f"arithmetic, 3 seeds, a budget of {TINY_COMPARE_BUDGET:.0e} FLOPs per run.",
    )
    p.add_argument("algorithms", nargs="+", metavar="ALGORITHM")
    p.add_argument(
        "--env",
        dest="envs",
        action="append",
        default=None,
        help="environment (repeat for several; default: arithmetic)",
    )
    p.add_argument(
        "--seeds",
        type=number(int),
        default=None,
        help="seeds 0..N-1 (default 3, as in the real presets' recipes)",
    )
    p.add_argument("--out", type=folder, help="experiment folder (default: results/...)")
    p.add_argument(
        "--resume", action="store_true", help="continue an interrupted comparison in --out"
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="print the plan (the runs, the recipe, the estimated memory and time per GPU "
        "class, whether this machine can run it) and exit 0 without running anything; a real "
        "model prints the same plan before every comparison (docs/gpu.md)",
    )
    add_training_arguments(p, "compare", add_parser, full)
    p.add_argument(
        "--set",
        dest="algo_set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="algorithm hyperparameter override for every algorithm, e.g. --set beta=0 "
        "(repeatable)",
    )
    p.add_argument(
        "--vary",
        action="append",
        default=[],
        metavar="KEY=V1,V2,...",
        help="an ablation: run each value of KEY as its own row (repeatable; the rows are "
        "the grid of all --vary values). KEY is an algorithm hyperparameter (as in --set; "
        "also aggregation=seq_mean,token_mean,fixed for any algorithm) or a run setting "
        "(lr, epochs, group_size, ...). Rows are named by their overrides, e.g. "
        "grpo@eps=0.28,aggregation=token_mean",
    )
    p.add_argument(
        "--jobs",
        type=number(int),
        default=1,
        metavar="N",
        help="run N runs at once, each in its own process: on the CPU the cores are split "
        "between them, on GPUs each takes one GPU; with a placement file (--config) that "
        "lists hosts, the hosts are split into N equal groups and each run's services go on "
        "one group only (N at most the number of hosts). The numbers equal those of --jobs "
        "1 (default 1: one after another in this process)",
    )
    p.add_argument(
        "--vary-one-at-a-time",
        action="store_true",
        help="instead of the grid: the first value of every --vary, then each other value "
        "of one KEY at a time with the rest at their first values",
    )
    p.add_argument(
        "--tuned",
        type=Path,
        metavar="SELECTION",
        help="run each algorithm at the setting `harness tune` selected for it (its "
        "selection.json); the rows keep the algorithms' plain names",
    )
    add_verdict_arguments(p)


def add_verdict_arguments(p: argparse.ArgumentParser) -> None:
    """How the rows are judged against each other (docs/statistics.md)."""
    verdicts = p.add_argument_group(
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


def run(args: argparse.Namespace) -> int:
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

    args.distributed = apply_placement_file(args)
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
        raise ConfigError(
            f"--resolve runs --seeds as its pilot: give 2 <= --seeds <= --max-seeds "
            f"({args.max_seeds}), got {args.seeds}"
        )
    factors = parse_factors(args.control_lr_factors)
    # a real model's weights are checked with the plan printed first (print_plan)
    real = recipe is not None
    base = run_config(args, args.algorithms[0], envs[0], 0, weights=not real)
    print(args.budget_line, flush=True)
    vary = parse_vary(args.vary)
    grid = variants(vary, args.vary_one_at_a_time)
    check_size(
        len(args.algorithms),
        len(envs),
        count_variants(vary, args.vary_one_at_a_time),
        max(args.seeds, args.max_seeds if args.resolve else 0),
        args.jobs,
    )

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

    rows = sorted(
        {c.run.variant or c.run.algorithm for c in expand(base, args.algorithms, envs, 1, grid)}
    )
    baseline = args.baseline or (args.algorithms[0] if args.algorithms[0] in rows else rows[0])
    if baseline not in rows:
        raise ConfigError(f"--baseline {baseline}: not a row of this comparison (rows: {rows})")
    design = new_design(baseline, args.pairs, delta)
    cfgs, controls = board(args.seeds)
    if real or args.dry_run:  # the plan, before any work; stops where it cannot run
        micro = print_plan(args, cfgs, recipe)
        if args.dry_run:
            return 0
        if micro is not None and micro != base.regime.micro_batch_size:  # (chosen for this GPU)
            base = base.replace(micro_batch_size=micro)
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
            return run_experiment(
                cfgs,
                out,
                command_line(),
                resume,
                quiet=args.quiet,
                jobs=args.jobs,
                controls=controls,
                plans=plans,
                design=design,
                power_plan=plan,
                allow_mixed=args.allow_mixed,
            )

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
    headline = [
        f"{m:.3f} [{lo:.3f}, {hi:.3f}]"
        for m, lo, hi in zip(df.headline_mean, df.ci_low, df.ci_high, strict=True)
    ]
    missing = pd.Series(float("nan"), df.index)
    rows = pd.DataFrame(
        {
            "env": df.env,
            "algorithm": df.algorithm,
            group_title: df.group,
            "seeds": df.seeds.astype(str),
            "headline": headline,
            "pass@1": df.get("pass_at_1", missing).map("{:.3f}".format),
            "pass@8": df.get("pass_at_8", missing).map("{:.3f}".format),
            "AUC": df.auc_mean.map("{:.3f}".format),
            "fit A": df.fit_A.map(lambda a: "-" if a != a else f"{a:.3f}"),
        }
    )
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
