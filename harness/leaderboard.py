"""`harness leaderboard`: every experiment under results/ aggregated into
leaderboards/<model>__<env>.md, a static leaderboards/index.html (plots embedded, readable
offline; one compact table per experiment, the details one click away, every seed's curve),
leaderboards/samples/<experiment>.html (each row's last samples, or why there are none) and
leaderboards/leaderboard.json. Each row carries what made it: the exact
command, a hash of the run config, package versions, every git commit its runs (and their
resumes) ran, how many of them ran from a modified tree, the hash of the starting weights
and the dates from the first start to the last finish. Rows from a modified (dirty) tree
are refused unless ``allow_dirty``: their code is not a commit anyone can check out."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import re
import sys
from html import escape
from pathlib import Path
from typing import Any

import pandas as pd

from harness.analysis import plot_seed_curves, write_analysis
from harness.controls import legacy_verdicts
from harness.fits import MIN_IDENTIFIED_SHARE, share_shortfall
from harness.runner import read_metrics, row_of
from harness.samples import STYLE as SAMPLES_STYLE
from harness.samples import last_eval_samples, samples_table, write_samples_pages
from harness.scores import HEADLINE, experiment_headline
from harness.stats import min_detectable_difference
from zoo.core.config import ConfigError
from zoo.files import UnreadableFile, jsonl_exists, jsonl_shown, read_json, read_table
from zoo.run.diffs import kept_diffs
from zoo.run.runlog import SAMPLES, read_sessions


def config_hash(run_config: dict) -> str:
    """Hash of everything that defines a run except its seed (and the fields that change
    nothing it computes, such as its trackers)."""
    from zoo.run.run_config import NOT_DEFINING

    payload = {k: v for k, v in run_config.items() if k != "seed" and k not in NOT_DEFINING}
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:12]


def run_provenance(run_dir: Path) -> dict:
    """What a run folder says about the code and weights behind it. Runs recorded before a
    field existed read as unknown (None): no sessions.jsonl, no start-weights hash, no
    finish time."""
    config = read_json(run_dir / "config.json")
    git = config.get("git") or {}
    states = [(git.get("commit"), git.get("dirty"))]
    states += [(s.get("commit"), s.get("dirty")) for s in read_sessions(run_dir)]
    complete = run_dir / "complete.json"
    finished = read_json(complete).get("finished") if complete.exists() else None
    return {
        "run": run_dir.name,
        "states": states,
        "dirty": any(d is True for _, d in states),
        "diff_kept": bool(kept_diffs(run_dir)),
        "unknown": any(c is None or d is None for c, d in states),
        "start_weights_sha256": config.get("start_weights_sha256"),
        "start_weights": config.get("start_weights"),
        "created": config.get("created"),
        "finished": finished,
    }


def unfinished_runs(experiment: Path) -> list[str]:
    """The runs ``experiment.json`` lists whose folder holds no ``complete.json``: a board
    still running (or stopped) between sittings. Its rows would rank part of its seeds."""
    runs = read_json(experiment / "experiment.json").get("runs", {})
    return [name for name in runs if not (experiment / "runs" / name / "complete.json").exists()]


def unclean_runs(experiment: Path) -> list[str]:
    """The runs of ``experiment`` whose code (at the start or a resume) came from a
    modified tree, or whose git state was not recorded."""
    found = []
    for run_dir in sorted((experiment / "runs").glob("*/config.json")):
        p = run_provenance(run_dir.parent)
        if p["dirty"] or p["unknown"]:
            commits = sorted({(c or "unknown")[:10] for c, _ in p["states"]})
            what = "modified tree" if p["dirty"] else "git state unknown"
            found.append(f"{run_dir.parent}: {what}, commit {', '.join(commits)}")
    return found


def row_provenance(run_dirs: list[Path]) -> dict:
    runs = [run_provenance(d) for d in run_dirs]
    states = [s for r in runs for s in r["states"]]
    commits = sorted({c for c, _ in states if c})
    dirty_commits = sorted({c for c, d in states if c and d is True})
    hashes = sorted({r["start_weights_sha256"] for r in runs if r["start_weights_sha256"]})
    notes = []
    if len(hashes) > 1:
        notes.append(f"runs started from {len(hashes)} different weights")
    missing = [r["run"] for r in runs if not r["start_weights_sha256"]]
    if missing:
        how = sorted(
            {r["start_weights"] or "not recorded" for r in runs if not r["start_weights_sha256"]}
        )
        notes.append(f"start weights of {len(missing)} of {len(runs)} runs: {'; '.join(how)}")
    dirty = sum(r["dirty"] for r in runs)
    if dirty:
        kept = sum(r["dirty"] and r["diff_kept"] for r in runs)
        notes.append(
            f"{dirty} of {len(runs)} runs from a modified tree; the diff is kept "
            "(source.diff in the run folder, or its pointer source.diff.sha256 into "
            f"diffs/) for {kept} of them"
        )
    unknown = sum(r["unknown"] for r in runs)
    if unknown:
        notes.append(f"git state of {unknown} of {len(runs)} runs unknown")
    if len(commits) > 1:
        notes.append(f"runs span {len(commits)} commits")
    created = [r["created"] for r in runs]
    finished = [r["finished"] for r in runs]
    started = min(created) if all(created) else None
    ended = max(finished) if all(finished) else None
    return {
        "git_commits": commits,
        "git_commit": runs[0]["states"][0][0],  # the first run's, as before git_commits
        "dirty_commits": dirty_commits,
        "dirty_runs": dirty,
        "unknown_git_runs": unknown,
        "start_weights_sha256": hashes,
        "started": started,
        "finished": ended,
        "date": f"{_minute(started)} .. {_minute(ended)} UTC",
        "provenance_notes": notes,
    }


def _minute(iso: str | None) -> str:
    return iso[:16].replace("T", " ") if iso else "?"  # (recorded in UTC)


STAT_FIELDS = (
    "per_seed",
    "seed_sd",
    "tie_group",
    "iqm",
    "iqm_ci_low",
    "iqm_ci_high",
    "auc_mean",
    "pass_at_1",
    "pass_at_4",
    "pass_at_8",
    "mean_at_8",
    "fit_A",
    "fit_A_low",
    "fit_A_high",
    "fit_B",
    "fit_B_low",
    "fit_B_high",
    "fit_C_mid",
    "fit_C_mid_low",
    "fit_C_mid_high",
    "max_flops",
    "fit_identified",
    "fit_identified_share",
    "fit_note",
    "half_budget_error",
)
"""Columns of an experiment's tables/summary.csv (harness/analysis.py) a row carries."""


def _row_mdd(row: Any) -> float | None:
    """One pair's MDD at 5% of a summary row (what ``reproduce`` judges a re-run against):
    its ``mdd_80``, or, in a many-to-one summary, which leaves that column out, the same
    formula on the row's seed spread (``seed_sd``, at full precision: ``per_seed`` is
    rounded to 3 decimals for reading, which moved this by ~2% with 2 seeds)."""
    if hasattr(row, "mdd_80"):
        return _plain(row.mdd_80)
    seeds = int(row.seeds)
    return _plain(min_detectable_difference(float(row.seed_sd), seeds, seeds))


def experiment_rows(experiment: Path) -> list[dict]:
    summary_csv = experiment / "tables" / "summary.csv"
    if not summary_csv.exists() or "headline_mean" not in read_table(summary_csv):
        write_analysis(experiment)  # none yet, or written by an older version
    manifest = read_json(experiment / "experiment.json")
    summary = read_table(summary_csv, ("env", "algorithm", "seeds", "headline_mean"))
    check_summary(summary_csv, summary, manifest)
    throughput_csv = experiment / "tables" / "throughput.csv"
    throughput = read_table(
        throughput_csv, ("env", "algorithm", "generate_tokens_per_s", "train_tokens_per_s")
    )
    mechanisms = mechanism_cells(experiment / "tables" / "off_policy.csv")
    verdicts = verdict_cells(experiment, manifest)
    rows = []
    for r in summary.itertuples():
        run_dirs = sorted((experiment / "runs").glob(f"{r.algorithm}__{r.env}__seed*"))
        config = read_json(run_dirs[0] / "config.json")
        t = throughput[(throughput.algorithm == r.algorithm) & (throughput.env == r.env)]
        if t.empty:
            raise UnreadableFile(
                throughput_csv,
                f"has no row for {r.algorithm} on {r.env}",
                REANALYSE.format(experiment=experiment),
            )
        rows.append(
            {
                "id": f"{config['run']['model']}__{r.env}__{r.algorithm}__{experiment.name}",
                "model": config["run"]["model"],
                "env": r.env,
                "algorithm": r.algorithm,
                "reward": r.headline_mean,
                "ci_low": r.ci_low,
                "ci_high": r.ci_high,
                **{k: _plain(getattr(r, k, None)) for k in STAT_FIELDS},
                "seeds": int(r.seeds),
                "mdd_80": _row_mdd(r),
                "generate_tokens_per_s": float(t.generate_tokens_per_s.iloc[0]),
                "train_tokens_per_s": float(t.train_tokens_per_s.iloc[0]),
                "budget": _budget(config["run"]),
                "command": manifest["command"],
                "config_hash": config_hash(config["run"]),
                "versions": manifest["versions"],
                **row_provenance(run_dirs),
                "experiment": str(experiment),
                "runs": [str(d) for d in run_dirs],
                "mechanism": mechanisms.get((r.env, r.algorithm), "not recorded"),
                "design": "many_to_one" if manifest.get("design") else "legacy",
                **verdicts.get(
                    (r.env, r.algorithm),
                    {"verdict": None, "vs_baseline": None, "family_mdd": None},
                ),
            }
        )
    return rows


def verdict_cells(experiment: Path, manifest: dict) -> dict[tuple[str, str], dict]:
    """(env, row) -> its verdict against the baseline, its difference with the 95%
    interval, and the MDD at 80% power at the level its family decides at (the one a
    board states: not one pair's at 5%), from tables/verdicts.csv (many-to-one experiments
    only: harness/board.py)."""
    path = experiment / "tables" / "verdicts.csv"
    if not manifest.get("design") or not path.exists():
        return {}
    table = read_table(path, ("env", "algorithm", "verdict_text", "difference", "mdd"))
    return {
        (r.env, r.algorithm): {
            "verdict": r.verdict_text,
            "vs_baseline": ""
            if r.verdict_text == "baseline"
            else _interval(r.difference, r.ci_low, r.ci_high, "+.3f"),
            "family_mdd": _plain(r.mdd),
        }
        for r in table.itertuples()
    }


REANALYSE = "re-write the tables from the runs with `python -m harness analyze {experiment}`"


def check_summary(path: Path, summary: pd.DataFrame, manifest: dict) -> None:
    """The cached summary.csv must rank every row of the experiment on every seed
    experiment.json lists for it, with a headline that is a number: a board built from a
    summary cut short, or from one an older analysis wrote over a missing seed, would
    publish it. A ConfigError naming the row otherwise (harness/analysis.py's
    check_headlines refuses such a summary when the tables are re-written)."""
    advice = REANALYSE.format(experiment=path.parents[1])
    expected: dict[tuple[str, str], int] = {}
    for name in manifest.get("runs") or {}:
        key = row_of(name)
        if key is not None:
            expected[key] = expected.get(key, 0) + 1
    found = {(r.env, r.algorithm): r for r in summary.itertuples()}
    for (env, row), seeds in expected.items():
        if (env, row) not in found:
            raise UnreadableFile(path, f"has no row for {row} on {env}", advice)
        r = found[(env, row)]
        if r.seeds != seeds:
            raise UnreadableFile(
                path,
                f"ranks {row} on {env} on {r.seeds} of the {seeds} seeds experiment.json lists",
                advice,
            )
    for r in summary.itertuples():
        if not isinstance(r.headline_mean, float) or r.headline_mean != r.headline_mean:
            raise UnreadableFile(
                path, f"gives {r.algorithm} on {r.env} no headline ({r.headline_mean})", advice
            )


def mechanism_cells(off_policy_csv: Path) -> dict[tuple[str, str], str]:
    """Per (env, algorithm), what its mechanism did (harness/analysis.py off_policy_table):
    the mean share of tokens or sequences whose gradient it changed, beside the share
    merely out of range, and the share of steps on which it acted. Experiments whose runs
    logged no acting shares (made before they existed) get none."""
    if not off_policy_csv.exists():
        return {}
    table = read_table(off_policy_csv)
    if "mechanism_acting" not in table:
        return {}
    cells = {}
    for r in table.itertuples():
        if r.mechanism_unit == "none declared":
            cells[(r.env, r.algorithm)] = "none declared"
        if pd.isna(r.mechanism_acting):
            continue
        text = f"acts on {r.mechanism_acting:.2%} of {r.mechanism_unit}"
        if not pd.isna(getattr(r, "mechanism_out_of_range", float("nan"))):
            text += f" ({r.mechanism_out_of_range:.2%} out of range)"
        text += f", {r.mechanism_acted_steps:.0%} of steps"
        in_band = getattr(r, "mechanism_in_band_steps", float("nan"))
        if not pd.isna(in_band):
            text += f" ({in_band:.0%} on 1-50%)"
        cells[(r.env, r.algorithm)] = text
    return cells


def _plain(value):
    """A CSV cell as JSON: numpy scalars to Python, NaN to None."""
    if value is None or (isinstance(value, float) and value != value):
        return None
    return value.item() if hasattr(value, "item") else value


def _num(value, fmt: str = ".3f") -> str:
    return "-" if value is None or value != value else format(value, fmt)


def _interval(mid, low, high, fmt: str = ".3f") -> str:
    if mid is None or mid != mid:
        return "-"
    if low is None or low != low:
        return format(mid, fmt)
    return f"{format(mid, fmt)} [{format(low, fmt)}, {format(high, fmt)}]"


def fit_parts(r) -> tuple[str, str, str]:
    """The compute fit of a board row in three parts: A with its interval ("withheld" when
    the data do not identify it), why it is withheld ("" when shown), and C_mid with its
    interval against the largest compute observed."""
    c_mid = _interval(r.fit_C_mid, r.fit_C_mid_low, r.fit_C_mid_high, ".2g")
    where = f"C_mid {c_mid} (max observed {_num(r.max_flops, '.2g')})"
    if r.fit_A is None or r.fit_A != r.fit_A:
        return "withheld", (r.fit_note or "no fit").removeprefix("A withheld: "), where
    # A summary.csv written before the identified-share rule (harness/fits.py) may still
    # carry A at a low share; experiment_rows reuses such files, so the rule is applied here
    # too. (The rule's bound test needs A's range, which those files do not hold.)
    share = r.fit_identified_share
    if share is not None and (shortfall := share_shortfall(share)):
        return "withheld", shortfall, where
    return _interval(r.fit_A, r.fit_A_low, r.fit_A_high), "", where


def fit_cell(r) -> str:
    """A with its interval, or why it is withheld; C_mid with its interval against the
    largest compute observed."""
    a, why, where = fit_parts(r)
    return f"A withheld ({why}); {where}" if why else f"A {a}; {where}"


def pairs_frame(experiment: Path, env: str) -> pd.DataFrame | None:
    """The probability-of-improvement table of one env (tables/pairs.csv), as the boards
    show it; None when the experiment has no pair."""
    path = experiment / "tables" / "pairs.csv"
    if not path.exists():
        return None
    p = read_table(path)
    if p.empty:  # (no pair: one row, or a table written before pairs existed)
        return None
    p = p[p.env == env]
    if p.empty:
        return None
    return pd.DataFrame(
        {
            "a": p.a,
            "b": p.b,
            "mean a - b": p.mean_a_minus_b.map(lambda v: f"{v:+.3f}"),
            "P(a > b)": [
                _interval(r.p_a_better, r.p_a_better_low, r.p_a_better_high, ".2f")
                for r in p.itertuples()
            ],
            "paired": p.paired,
            "p": p.p_value.map(lambda v: _num(v, ".3g")),
            "p (Holm)": p.p_holm.map(lambda v: _num(v, ".3g")),
            "MDD 80%": p.mdd_80.map(_num),
        }
    )


def pairs_markdown(experiment: Path, env: str) -> str:
    """The probability-of-improvement table of one env (tables/pairs.csv)."""
    frame = pairs_frame(experiment, env)
    return "" if frame is None else frame.to_markdown(index=False)


def commits_cell(row) -> str:
    """All commits behind a row, short; ``+dirty`` on those some run ran modified."""
    cells = [c[:10] + ("+dirty" if c in row.dirty_commits else "") for c in row.git_commits]
    return ", ".join(cells + ["unknown"] * bool(row.unknown_git_runs))


def weights_cell(hashes: list[str], shipped: str | None = None) -> str:
    """The start weights' hashes, short; with ``shipped`` (a tiny preset's shipped start),
    marked as that start or not."""
    cell = " / ".join(h[:12] for h in hashes) if hashes else "?"
    if shipped is None:
        return cell
    return cell + (" (shipped)" if hashes == [shipped] else " (not shipped)")


def shipped_start_weights(model: str) -> str | None:
    """The hash runs record (zoo/run/runlog.py ``weights_sha256``) of a tiny preset's
    shipped start weights; None for other models."""
    from zoo.models.presets import TINY_MODELS

    if model not in TINY_MODELS:
        return None
    from zoo.models.tiny import TINY_PRESETS, tiny_model_path
    from zoo.run.runlog import weights_sha256

    return weights_sha256(tiny_model_path(TINY_PRESETS[model]))


def start_weights_lines(g: pd.DataFrame, model: str, shipped: str | None) -> list[str]:
    """Markdown saying which start the rows of a board (``g``) had: the shipped weights of
    a tiny preset, or others (made before the weights shipped), which no row may pass for."""
    if shipped is None:
        return []
    text = (
        f"Start weights: the `{model}` preset's ship with forge-zoo "
        f"(zoo/models/start_weights/{model}; runs record them as {shipped[:12]})."
    )
    others = sorted({h for hashes in g.start_weights_sha256 if hashes != [shipped] for h in hashes})
    if others:
        text += (
            f" Rows marked *not shipped* ({sum(h != [shipped] for h in g.start_weights_sha256)}"
            f" of {len(g)}) started from other weights ({', '.join(h[:12] for h in others)}): "
            "a warm start built on first use, before the weights shipped, whose bytes "
            "followed the CPU that built it. `reproduce` cannot re-make those rows from the "
            "shipped start, and their numbers do not compare with rows from it."
        )
    return [text, ""]


def _budget(run: dict) -> str:
    for key, unit in (
        ("budget_flops", "FLOPs"),
        ("budget_samples", "samples"),
        ("budget_seconds", "s"),
    ):
        if run.get(key):
            return f"{run[key]:.3g} {unit}"
    return f"{run['steps']} steps"


LEGEND = (
    "Headline ({headline}) with a 95% Student t interval over seeds; `per seed`: each "
    "seed's value. Each experiment is one matched-compute comparison; rows of different "
    "experiments are not compared. Verdict (experiments since 2026-12-06): each row against "
    "the experiment's baseline, paired by seed, better / worse / equivalent within ±delta / "
    "unresolved, all of an experiment's verdicts one family at 5% (docs/statistics.md); the "
    "interval is that of the difference. Tie group (older experiments): algorithms whose "
    "difference from the best of their group is not significant (Holm over all pairs, 5%) "
    "share a group, which orders nothing inside it. MDD 80% (family level): the smallest "
    "difference from the baseline the row's paired seeds detect with 80% power at the "
    "level its family decides at. MDD 80% (one pair; older experiments): the smallest "
    "difference one pair's seeds detect at 5% with 80% power. "
    "pass@k: unbiased estimator (Chen et al. 2021) from 8 samples per held-out problem at "
    "the run's temperature, same checkpoints. AUC: area under the reward curve over the "
    "budget. Mechanism: the mean share of response tokens (GSPO: sequences) whose gradient "
    "the algorithm's own clip, cap or gate changed, beside the share merely out of its "
    "range, and the share of steps on which it acted (docs/algorithms.md). "
    "Compute fit: R(C) = R0 + (A - R0) / (1 + (C_mid / C)^B) (arXiv 2510.13786) "
    "with 95% bootstrap intervals over seeds, A withheld, with the reason, unless the "
    f"pooled fit and at least {MIN_IDENTIFIED_SHARE:.0%} of the bootstrap refits identify it "
    "and its interval stays off A's bounds. Reproduce a row: `python -m harness reproduce "
    "ROW_ID`."
)


def headline_legend(experiments: list[str], env: str) -> str:
    """LEGEND with the headline's checkpoints as the experiments' eval points give them
    (harness/analysis.py experiment_headline): named once when every experiment of the
    section used the same, else the general rule with a line per experiment."""
    texts = {Path(e).name: experiment_headline(Path(e), env) for e in experiments}
    if len(set(texts.values())) == 1:
        return LEGEND.format(headline=next(iter(texts.values())))
    per_experiment = "; ".join(f"{name}: {text}" for name, text in texts.items())
    return LEGEND.format(headline=HEADLINE) + f"\n\nHeadline by experiment: {per_experiment}."


PAIRS_LEGEND = (
    "P(a > b): probability that a's headline beats b's, seed by seed where paired (rliable; "
    "interval from 10 seeds up). p: paired t-test (Welch when unpaired); p (Holm): adjusted "
    "over all pairs of the env. MDD 80%: the difference this pair's seeds could detect."
)


BOARD_CAVEATS = {
    "arithmetic": "What this board can rank: little. Answers are at most ~6 tokens, so GSPO's "
    "range is left by nearly every sequence, CISPO's cap and SAPO's gate never bind and length "
    "normalisation has nothing to normalise; every algorithm ran at one learning rate tuned for "
    "GRPO and no controls were run. Mechanisms are ranked on running_sum.",
    "pyfunc": "What this board can rank: nothing yet. Its re-made experiment (from the "
    "tiny-code that ships, fine-tuned only on pyfunc's warm-start functions) shows every "
    "algorithm learning on functions it never saw (held-out 0.141 -> 0.148-0.177), but its "
    "positive control fails (grpo vs a quarter of its lr: +0.016, MDD 0.015): answers of "
    "at most 12 tokens leave the ratio mechanisms nearly idle (0.2-0.3% of tokens clipped; "
    "GSPO alone acts) and 5 seeds of ~25 steps cannot separate them. The older experiment "
    "started from a warm start fine-tuned on its own training functions (memory, not "
    "learning) and ran no controls.",
    "pyfunc_feedback": "What this board can rank: nothing yet. Two algorithms at 2 seeds, a "
    "short run that shows learning; its rows started from a tiny-code-feedback built before "
    "pyfunc set its warm-start functions apart.",
    "tool_arithmetic": "What this board can rank: little. Every algorithm saturates within the "
    "first eighth of the budget (held-out 0.20 -> 0.83-0.84), so the headline measures the "
    "plateau, not the climb; one learning rate. The gigpo experiment ran both controls: its "
    "positive control fails (grpo at a quarter of its lr ends level with grpo).",
}
"""The first lines of a board whose design limits what it can rank (as measured on its
committed runs), so that a reader meets them before its table."""


def caveat_lines(env: str) -> list[str]:
    return [BOARD_CAVEATS[env], ""] if env in BOARD_CAVEATS else []


def is_tuning_sweep(experiment: Path) -> bool:
    """An experiment of ``harness tune``: scored on the validation split, its rows are
    settings to choose from, not a board (its sweep.md is published beside the board)."""
    runs = read_json(experiment / "experiment.json").get("runs", {})
    return any(r.get("eval_split") == "validation" for r in runs.values())


def build_leaderboards(results: Path, out: Path, allow_dirty: bool = False) -> list[Path]:
    """Rows from a modified tree (or an unrecorded git state) raise ConfigError naming
    each such run, unless ``allow_dirty``: then they are built, their commits marked
    ``+dirty``. Nothing is written when refused. An experiment with unfinished runs is
    skipped, with a line on stderr."""
    experiments = [
        e
        for e in sorted(p.parent for p in results.glob("*/experiment.json"))
        if not is_tuning_sweep(e)
    ]
    for e in [e for e in experiments if unfinished_runs(e)]:
        total = len(read_json(e / "experiment.json").get("runs", {}))
        print(
            f"skipped {e}: {total - len(unfinished_runs(e))} of {total} runs finished; a "
            f"board enters the leaderboard whole (continue it with compare --resume)",
            file=sys.stderr,
        )
        experiments.remove(e)
    unclean = {e: runs for e in experiments if (runs := unclean_runs(e))}
    if unclean and not allow_dirty:
        lines = [f"  {run}" for runs in unclean.values() for run in runs]
        raise ConfigError(
            f"{len(lines)} run(s) of {len(unclean)} experiment(s) ran from a modified (dirty) "
            "working tree or without a recorded git state, so no commit holds the code behind "
            "their numbers:\n"
            + "\n".join(lines)
            + "\nRe-run them from a clean checkout, or pass --allow-dirty to build the "
            "leaderboards anyway with their commits marked '+dirty' (each run's diff, "
            "where recorded, is its folder's source.diff, or the file its source.diff.sha256 "
            "names in the experiment's diffs/)."
        )
    rows = [row for e in experiments for row in experiment_rows(e)]
    if not rows:
        raise FileNotFoundError(f"no experiment (experiment.json) under {results}")
    shipped = {model: shipped_start_weights(model) for model in {r["model"] for r in rows}}
    for row in rows:
        start = shipped[row["model"]]
        row["start_weights_shipped"] = (
            None if start is None else row["start_weights_sha256"] == [start]
        )
    out.mkdir(parents=True, exist_ok=True)
    (out / "leaderboard.json").write_text(json.dumps(rows, indent=2))
    frame = pd.DataFrame(rows)
    written = [out / "leaderboard.json"]
    boards = []
    for (model, env), g in frame.groupby(["model", "env"]):
        # tie groups and pairs are within one experiment (one matched-compute comparison)
        g = g.sort_values(["experiment", "reward"], ascending=[True, False])
        path = out / f"{model}__{env}.md"
        path.write_text(board_markdown(model, env, g, shipped[model]))
        written.append(path)
        boards.append((model, env, g))
    # the boards with a many-to-one experiment (verdicts, controls at delta) come first
    boards.sort(key=lambda b: (not (b[2].design == "many_to_one").any(), b[0], b[1]))
    (out / "index.html").write_text(index_html(boards, shipped, out))
    written.append(out / "index.html")
    return written


MDD_FAMILY = "MDD 80% (family level)"
"""A verdict board's resolution: the smallest difference from the baseline its seeds detect
with 80% power at the level its family decides at (tables/verdicts.csv's ``mdd``)."""
MDD_ONE_PAIR = "MDD 80% (one pair)"
"""An older board's: one pair's at 5%, which its Holm-over-all-pairs decisions did not use."""


def board_columns(e: pd.DataFrame, shipped: str | None) -> pd.DataFrame:
    """Every column of a Markdown board, for the rows ``e`` of one experiment: its verdict
    against the baseline (a many-to-one experiment) or its tie group (an old one)."""
    many_to_one = (e.design == "many_to_one").all()
    if many_to_one:
        first = {"verdict": e.verdict, "vs baseline [95% CI]": e.vs_baseline}
        mdd = {MDD_FAMILY: e.family_mdd.map(_num)}
    else:
        first = {"tie group": e.tie_group.map(lambda v: _num(v, ".0f"))}
        mdd = {MDD_ONE_PAIR: e.mdd_80.map(_num)} if e.mdd_80.notna().any() else {}
    return pd.DataFrame(
        {
            **first,
            "algorithm": e.algorithm,
            "headline [95% t-CI]": [
                _interval(r.reward, r.ci_low, r.ci_high) for r in e.itertuples()
            ],
            "per seed": e.per_seed,
            **mdd,
            "pass@1": e.pass_at_1.map(_num),
            "pass@8": e.pass_at_8.map(_num),
            "AUC": e.auc_mean.map(_num),
            "mechanism": e.mechanism,
            "compute fit": [fit_cell(r) for r in e.itertuples()],
            "B": e.fit_B.map(lambda v: _num(v, ".2f")),
            "seeds": e.seeds,
            "budget": e.budget,
            "gen tok/s": e.generate_tokens_per_s.map(lambda v: f"{v:,.0f}"),
            "train tok/s": e.train_tokens_per_s.map(lambda v: f"{v:,.0f}"),
            "config": e.config_hash,
            "commits": [commits_cell(r) for r in e.itertuples()],
            "start weights": [weights_cell(h, shipped) for h in e.start_weights_sha256],
            "date": e.date,
            "row id": e.id,
        }
    )


def board_markdown(model: str, env: str, g: pd.DataFrame, shipped: str | None) -> str:
    """leaderboards/<model>__<env>.md: the board's caveat and legend, then one table per
    experiment (each with its own tie groups, pairs and command)."""
    experiments = ranking_first(g)
    md = [
        f"# {model} on {env}",
        "",
        *caveat_lines(env),
        headline_legend(experiments, env),
        "",
        PAIRS_LEGEND,
        "",
        *exact_setup_lines(g),
        "",
        *start_weights_lines(g, model, shipped),
    ]
    for experiment in experiments:
        e = g[g.experiment == experiment]
        md += [
            f"## {Path(experiment).name}",
            "",
            *design_note(e),
            f"    {e.command.iloc[0]}",
            "",
            board_columns(e, shipped).to_markdown(index=False),
            "",
        ]
        pairs = pairs_markdown(Path(experiment), env)
        md += ["Pairs: probability of improvement", "", pairs, ""] if pairs else []
    notes = provenance_notes(g)
    md += ["Provenance:", "", *[f"- {n}" for n in notes], ""] if notes else []
    md += ["Versions: " + json.dumps(g.versions.iloc[0])]
    return "\n".join(md) + "\n"


def ranking_first(g: pd.DataFrame) -> list[str]:
    """The experiments of one board, those with verdicts (many-to-one) first, then by name:
    a reader meets what can rank before what cannot."""
    design = dict(zip(g.experiment, g.design, strict=True))
    return sorted(design, key=lambda e: (design[e] != "many_to_one", e))


OLD_DESIGN = (
    "Made under the old design (before 2026-12-06): decisions by Holm over every pair, "
    "resolution stated per pair at 5% (about half the real one), tie groups that neither "
    "order nor call equal, and, on running_sum, clip ranges shrunk ~33x from the papers' "
    "so that no row is its paper's algorithm. Read it as exploratory (docs/leaderboards.md)."
)


def design_note(e: pd.DataFrame) -> list[str]:
    """The line an old-design experiment's table opens with (none for a new one)."""
    return [] if (e.design == "many_to_one").all() else [f"*{OLD_DESIGN}*", ""]


PAGE_STYLE = (
    "body{font-family:sans-serif;font-size:15px;line-height:1.35;margin:0 auto;"
    "max-width:1320px;padding:1em 20px}"
    "table{border-collapse:collapse;margin:.4em 0}"
    "td,th{border:1px solid #ccc;padding:3px 8px;text-align:left;vertical-align:top}"
    "th{background:#f4f4f4}td.num{text-align:right;font-variant-numeric:tabular-nums}"
    "table.board td,table.board th{white-space:nowrap}"
    "table.board td.note{white-space:normal;color:#555;font-size:13px;max-width:22em}"
    "table.detail{width:100%;font-size:13px}table.detail td{overflow-wrap:anywhere}"
    "table.detail td.num{white-space:nowrap}"
    "details{margin:.25em 0}summary{cursor:pointer;color:#1a4d8f}"
    "details>div{border-left:3px solid #dde;padding:.1em 0 .1em .8em;margin:.2em 0 .6em}"
    "div.more{display:flex;flex-wrap:wrap;gap:0 1.6em}"
    "div.more>details[open]{flex-basis:100%;order:1}"
    "figure{margin:.6em 0}figcaption{font-size:13px;color:#444}"
    "p.meta{margin:.2em 0;color:#333}p.caveat{font-weight:bold}"
    "section.experiment{margin:1.2em 0 2em}h3{margin:.2em 0}"
    "img{max-width:100%}code{overflow-wrap:anywhere}"
    "nav li{margin:.15em 0}"
)
"""The board page's CSS: every table fits the window (the board tables' cells are short
and stay on one line; the detail tables take the width and wrap), images shrink to it."""


def index_html(boards: list[tuple[str, str, pd.DataFrame]], shipped: dict, out: Path) -> str:
    """leaderboards/index.html: a contents list, then per board its caveat, a legend one
    click away and one section per experiment (harness/leaderboard.py experiment_html)."""
    contents, sections = [], []
    for model, env, g in boards:
        experiments = ranking_first(g)
        anchor = f"{model}__{env}"
        links = " · ".join(
            f"<a href='#{escape(_anchor(e))}'>{escape(Path(e).name)}</a>" for e in experiments
        )
        contents.append(
            f"<li><a href='#{escape(anchor)}'>{escape(model)} on {escape(env)}</a>: {links}</li>"
        )
        caveat = "".join(
            f"<p class='caveat'>{escape(line)}</p>" for line in caveat_lines(env) if line
        )
        legend = [
            headline_legend(experiments, env),
            PAIRS_LEGEND,
            *exact_setup_lines(g),
            *start_weights_lines(g, model, shipped[model]),
        ]
        notes = provenance_notes(g)
        sections.append(
            f"<section class='board' id='{escape(anchor)}'><h2>{escape(model)} on "
            f"{escape(env)}</h2>{caveat}<details class='legend'><summary>How to read these "
            f"tables</summary><div>{''.join(_md_html(x) for x in legend if x)}</div></details>"
            + "".join(
                experiment_html(Path(e), env, g[g.experiment == e], shipped[model], out)
                for e in experiments
            )
            + _details(
                "notes",
                f"Package versions, provenance notes ({len(notes)})",
                f"<p>Versions: {escape(json.dumps(g.versions.iloc[0]))}</p>"
                f"<ul>{''.join(f'<li>{escape(n)}</li>' for n in notes)}</ul>",
            )
            + "</section>"
        )
    return (
        "<!doctype html><html><head><meta charset='utf-8'><meta name='viewport' "
        "content='width=device-width'><title>forge-zoo leaderboards</title>"
        f"<style>{PAGE_STYLE}</style></head><body><h1>forge-zoo leaderboards</h1>"
        "<p>One table per experiment: each is one matched-compute comparison, and rows of "
        "different experiments are not compared. Under each table, one click away: the "
        "compute fits, per-seed statistics, pairs and provenance; then every seed's curve "
        "and the experiment's samples.</p>"
        f"<nav><ul>{''.join(contents)}</ul></nav>{''.join(sections)}</body></html>"
    )


def _anchor(experiment: str) -> str:
    return f"experiment-{Path(experiment).name}"


def _md_html(text: str) -> str:
    """A paragraph or list of the Markdown legend as HTML (code spans, emphasis, items)."""
    html = escape(text)
    html = re.sub(r"`([^`]+)`", r"<code>\1</code>", html)
    html = re.sub(r"\*([^*]+)\*", r"<i>\1</i>", html)
    items = [line[2:] for line in html.splitlines() if line.startswith("- ")]
    if items:
        return f"<ul>{''.join(f'<li>{i}</li>' for i in items)}</ul>"
    return f"<p>{html}</p>"


Cell = str | tuple[str, str]
"""A table cell: escaped HTML, or (its <td> attributes, escaped HTML)."""


def _html_table(
    header: list[str], rows: list[list[Cell]], cls: str, numeric: tuple[int, ...] = ()
) -> str:
    """A table of escaped cells; the columns at ``numeric`` right-aligned. A row may be
    shorter than the header where a cell above spans it (rowspan)."""

    def td(i: int, cell: Cell) -> str:
        attrs, html = (
            cell if isinstance(cell, tuple) else (" class='num'" if i in numeric else "", cell)
        )
        return f"<td{attrs}>{html}</td>"

    head = "".join(f"<th>{h}</th>" for h in header)
    body = "".join("<tr>" + "".join(td(i, c) for i, c in enumerate(row)) + "</tr>" for row in rows)
    return f"<table class='{cls}'><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def control_cells(experiment: Path, env: str) -> dict[str, tuple[str, str]] | None:
    """Per row of an experiment run with controls (harness/controls.py), what its controls
    column says, with the longer reason as a tooltip: the anchor, and each control's
    verdict. None when the experiment ran no controls."""
    manifest = read_json(experiment / "experiment.json")
    controls = manifest.get("controls")
    if not controls:
        return None
    if controls.get("design") == "many_to_one":
        path = experiment / "tables" / "controls.csv"
        checks = read_table(path) if path.exists() else pd.DataFrame()
        checks = (
            checks[(checks.env == env) & (checks.control != "decision rule")]
            if len(checks)
            else checks
        )
        cells = {controls["baseline"]: ("baseline of the controls", "each control's comparison")}
        for c in checks.itertuples():
            cells[c.row] = (
                f"{c.control}: {c.verdict} (came out {c.came_out})",
                f"must come out {c.expect}: {c.why}",
            )
        return cells
    path = experiment / "tables" / "pairs.csv"
    pairs = read_table(path) if path.exists() else pd.DataFrame()
    verdicts = {v["control"]: v for v in legacy_verdicts(pairs, controls) if v["env"] == env}
    cells = {}
    for kind, spec in controls.items():
        anchor, row = spec["rows"]
        v = verdicts.get(kind, {"verdict": "missing"})
        p = f", Holm p {v['p_holm']:.2g}" if "p_holm" in v else ""
        cells[row] = (
            f"{kind}: {v['verdict']}{p}",
            f"must come out {spec['expect']} against {anchor}: {spec['why']}",
        )
        cells.setdefault(anchor, ("anchor of the controls", "the row the controls compare with"))
    return cells


def experiment_html(
    experiment: Path, env: str, e: pd.DataFrame, shipped: str | None, out: Path
) -> str:
    """One experiment of a board: a line of what it ran, the compact table (algorithm, tie
    group, headline with its interval, pass@k, seeds, controls), the compute fits,
    statistics, pairs and provenance in <details>, every seed's curve, and a link to its
    samples page (written under ``out``/samples)."""
    name = experiment.name
    controls = control_cells(experiment, env)
    rows = []
    verdicts = (e.design == "many_to_one").all()
    for i, r in enumerate(e.itertuples()):
        group = (
            escape(f"{r.verdict} {r.vs_baseline or ''}".strip())
            if verdicts
            else _num(r.tie_group, ".0f")
        )
        row = [
            escape(r.algorithm),
            group,
            escape(_interval(r.reward, r.ci_low, r.ci_high)),
            _num(r.pass_at_1),
            _num(getattr(r, "pass_at_4", None)),
            _num(r.pass_at_8),
            str(r.seeds),
        ]
        if controls is not None:
            text, why = controls.get(r.algorithm, ("", ""))
            row.append(f"<span title='{escape(why)}'>{escape(text)}</span>")
        elif i == 0:  # one cell for all rows; the reason in full where it has the height
            why = "nothing measures this experiment's false-positive rate or its power"
            text = f"none run: {why}" if len(e) > 2 else "none run"
            row.append((f" class='note' rowspan='{len(e)}' title='{escape(why)}'", text))
        rows.append(row)
    header = [
        "algorithm",
        "verdict vs baseline [95% CI]" if verdicts else "tie group",
        "headline [95% t-CI]",
        "pass@1",
        "pass@4",
        "pass@8",
        "seeds",
        "controls",
    ]
    table = _html_table(header, rows, "board", numeric=(1, 2, 3, 4, 5, 6))
    starts = sorted({s for s in e.start_weights_shipped if s is not None})
    weights = {
        (): "",
        (True,): "shipped start weights",
        (False,): "start weights not shipped (older warm start)",
        (False, True): "shipped and older start weights",
    }[tuple(starts)]
    seeds = sorted(set(e.seeds))
    meta = [
        f"{len(e)} rows",
        f"{'/'.join(map(str, seeds))} seeds each",
        f"{' / '.join(sorted(set(e.budget)))} per run",
        weights,
        f"<a href='{escape(samples_page_name(name))}'>samples</a>",
        f"<code>{escape(str(experiment))}</code>",
    ]
    write_board_samples_page(experiment, e, out)
    return (
        f"<section class='experiment' id='{escape(_anchor(str(experiment)))}'>"
        f"<h3>{escape(name)}</h3><p class='meta'>{' · '.join(m for m in meta if m)}</p>"
        f"<p class='meta'><code>{escape(e.command.iloc[0])}</code></p>"
        + "".join(f"<p class='caveat'>{escape(x.strip('*'))}</p>" for x in design_note(e) if x)
        + table
        + "<div class='more'>"
        + _details("fits", "Compute fits: A, B, C_mid with 95% bootstrap intervals", fits_table(e))
        + _details("stats", "Per seed, MDD, AUC, mechanism, budget, throughput", stats_table(e))
        + _details(
            "pairs", "Pairs: probability of improvement, p, Holm", pairs_html(experiment, env)
        )
        + _details(
            "provenance",
            "Provenance: row ids, config, commits, start weights, dates",
            provenance_table(e, shipped),
        )
        + _details(
            "mean",
            "Mean curves with 95% t-intervals (plots/reward_vs_flops.png)",
            _img(experiment / "plots" / "reward_vs_flops.png"),
        )
        + "</div>"
        + seed_curves_html(e)
        + "</section>"
    )


def _details(cls: str, summary: str, body: str) -> str:
    if not body:
        return ""
    return f"<details class='{cls}'><summary>{escape(summary)}</summary><div>{body}</div></details>"


def fits_table(e: pd.DataFrame) -> str:
    """The sigmoid compute fit of each row: A (or "withheld"), B, C_mid, the largest
    compute observed, the share of bootstrap refits that identify A, the half-budget
    extrapolation error, and why A is withheld."""
    rows = []
    for r in e.itertuples():
        a, why, _ = fit_parts(r)
        share = r.fit_identified_share
        rows.append(
            [
                escape(r.algorithm),
                escape(a),
                _num(r.fit_B, ".2f"),
                escape(_interval(r.fit_C_mid, r.fit_C_mid_low, r.fit_C_mid_high, ".2g")),
                _num(r.max_flops, ".2g"),
                "-" if share is None else f"{share:.0%}",
                _num(r.half_budget_error, "+.3f"),
                escape(why),
            ]
        )
    header = [
        "algorithm",
        "A [95% CI]",
        "B",
        "C_mid [95% CI]",
        "max FLOPs observed",
        "refits identifying A",
        "half-budget error",
        "A withheld because",
    ]
    return _html_table(header, rows, "detail", numeric=(2, 4, 5, 6)) + (
        f"<p>R(C) = R0 + (A - R0) / (1 + (C_mid / C)^B) (arXiv 2510.13786), bootstrapped "
        f"over seeds; A is shown only when the pooled fit and at least "
        f"{MIN_IDENTIFIED_SHARE:.0%} of the refits identify it and its interval stays off "
        "A's bounds. Half-budget error: a fit on the first half of the budget predicts the "
        "last checkpoint this far off.</p>"
    )


def stats_table(e: pd.DataFrame) -> str:
    rows = [
        [
            escape(r.algorithm),
            escape(str(r.per_seed)),
            _num(r.family_mdd if r.design == "many_to_one" else r.mdd_80),
            _num(r.auc_mean),
            escape(r.mechanism),
            escape(r.budget),
            f"{r.generate_tokens_per_s:,.0f}",
            f"{r.train_tokens_per_s:,.0f}",
        ]
        for r in e.itertuples()
    ]
    header = [
        "algorithm",
        "per seed",
        MDD_FAMILY if (e.design == "many_to_one").all() else MDD_ONE_PAIR,
        "AUC",
        "mechanism",
        "budget",
        "gen tok/s",
        "train tok/s",
    ]
    return _html_table(header, rows, "detail", numeric=(2, 3, 6, 7))


def pairs_html(experiment: Path, env: str) -> str:
    frame = pairs_frame(experiment, env)
    if frame is None:
        return ""
    rows = [[escape(str(v)) for v in row] for row in frame.itertuples(index=False)]
    return _html_table(list(frame.columns), rows, "detail", numeric=(2, 3, 5, 6, 7))


def provenance_table(e: pd.DataFrame, shipped: str | None) -> str:
    rows = [
        [
            escape(r.algorithm),
            f"<code>{escape(r.id)}</code>",
            escape(r.config_hash),
            escape(commits_cell(r)),
            escape(weights_cell(r.start_weights_sha256, shipped)),
            escape(r.date),
        ]
        for r in e.itertuples()
    ]
    header = [
        "algorithm",
        "row id (reproduce ROW_ID)",
        "config",
        "commits",
        "start weights",
        "first start .. last finish",
    ]
    return _html_table(header, rows, "detail")


def seed_curves(e: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """Every evaluation of every run of the rows ``e``: (frame of algorithm, seed, x,
    reward; the x column's name), x being the ledger's FLOPs where every evaluation
    recorded them, else the step."""
    points = []
    for r in e.itertuples():
        for run in r.runs:
            config = read_json(Path(run) / "config.json").get("run", {})
            seed = config.get("seed", Path(run).name.rpartition("seed")[2])
            records = read_metrics(Path(run))
            if not any("eval_reward" in record for record in records):
                raise UnreadableFile(
                    jsonl_shown(Path(run) / "metrics.jsonl"),
                    "holds no evaluation, though tables/summary.csv ranks the run",
                )
            for record in records:
                if "eval_reward" in record:
                    points.append(
                        {
                            "algorithm": r.algorithm,
                            "seed": seed,
                            "flops": record.get("flops"),
                            "step": record["step"],
                            "reward": record["eval_reward"],
                        }
                    )
    frame = pd.DataFrame(points)
    x = "flops" if len(frame) and frame["flops"].notna().all() else "step"
    return frame, x


def seed_curves_html(e: pd.DataFrame) -> str:
    """The figure of every seed's held-out curve, one panel per row, embedded as a PNG."""
    frame, x = seed_curves(e)
    if frame.empty:
        return ""
    buffer = io.BytesIO()
    xlabel = "model FLOPs (ledger)" if x == "flops" else "training step"
    plot_seed_curves(frame, x, xlabel, buffer, order=list(e.algorithm))
    seeds = frame["seed"].nunique()
    return (
        f"<figure><img alt='held-out greedy reward against {xlabel}, every seed' "
        f"src='{_png_uri(buffer.getvalue())}'><figcaption>Every seed's held-out greedy "
        f"reward ({seeds} seeds, a colour each, the same in every panel); black: the "
        "mean over seeds.</figcaption></figure>"
    )


def samples_page_name(experiment: str) -> str:
    return f"samples/{experiment}.html"


def write_board_samples_page(experiment: Path, e: pd.DataFrame, out: Path) -> Path:
    """``out``/samples/<experiment>.html, linked from the experiment's section: per row,
    its first run's last evaluation (greedy completion beside the reference) and links to
    every run's samples page (written into the experiment's samples/ folder when missing);
    rows whose runs kept no samples (recorded before samples.jsonl) say so."""
    parts = []
    for r in e.itertuples():
        run_dirs = [Path(d) for d in r.runs]
        kept = [d for d in run_dirs if jsonl_exists(d / SAMPLES)]
        if not kept:
            parts.append(
                f"<h2>{escape(r.algorithm)}</h2><p class='none'>No samples: its "
                f"{len(run_dirs)} runs were recorded before runs kept samples.jsonl; "
                "metrics.jsonl holds their numbers only. <code>python -m harness "
                f"reproduce {escape(r.id)}</code> re-makes them with samples.</p>"
            )
            continue
        if not all((experiment / "samples" / f"{d.name}.html").exists() for d in kept):
            write_samples_pages(experiment)
        pages = out / "samples"
        links = ", ".join(
            f"<a href='{escape(_relative(experiment / 'samples' / f'{d.name}.html', pages))}'>"
            f"{escape(d.name)}</a>"
            for d in kept
            if (experiment / "samples" / f"{d.name}.html").exists()
        )
        parts.append(
            f"<h2>{escape(r.algorithm)}: {escape(kept[0].name)}, last evaluation</h2>"
            f"{samples_table(last_eval_samples(kept[0]), f'samples-{escape(r.id)}')}"
            f"<p>Every sample, by run: {links}</p>"
        )
    name = experiment.name
    page = out / samples_page_name(name)
    page.parent.mkdir(parents=True, exist_ok=True)
    back = f"../index.html#{_anchor(str(experiment))}"
    page.write_text(
        "<!doctype html><html><head><meta charset='utf-8'><title>samples: "
        f"{escape(name)}</title><style>{SAMPLES_STYLE}table{{width:100%}}"
        "td.text{overflow-wrap:anywhere}</style></head><body>"
        f"<h1>Samples of {escape(name)}</h1><p><a href='{escape(back)}'>back to the board"
        "</a>. Eval rows: the first held-out problems at the run's last evaluation, greedy "
        "completion beside the reference answer.</p>" + "".join(parts) + "</body></html>",
        encoding="utf-8",
    )
    return page


def _relative(target: Path, start: Path) -> str:
    return Path(os.path.relpath(target.resolve(), start.resolve())).as_posix()


def setup_class(config: dict) -> tuple[str, str]:
    """(machine, versions): the setup a run's exact numbers need, from its config.json. The
    CPU model with its vector instruction sets and the torch thread count (the rounding of
    the kernels and the order of float reductions follow them), a GPU where one ran it; the
    package versions `reproduce` compares."""
    made_on = config.get("machine") or {}
    flags = made_on.get("cpu_vector_flags")
    threads = made_on.get("torch_threads")
    where = (
        f"{made_on.get('cpu') or 'CPU not recorded'} "
        f"[{flags if flags is not None else 'vector flags not recorded'}], "
        f"{threads or '?'} thread{'' if threads == 1 else 's'}"
    )
    if made_on.get("cuda"):
        where += f", GPU {made_on['cuda']} (no exact check on a GPU)"
    versions = ", ".join(f"{k} {v}" for k, v in (config.get("versions") or {}).items())
    return where, versions or "versions not recorded"


def exact_setup_lines(g: pd.DataFrame) -> list[str]:
    """Markdown naming the setup(s) whose exact numbers a board's rows (``g``) are: one line
    when all runs share one, else one item per setup with the rows made on it (and how many
    of a row's runs, when not all). Package versions are named once when all runs share
    them, else as part of each setup."""
    runs = {
        (r.Index, run): setup_class(read_json(Path(run) / "config.json"))
        for r in g.itertuples()
        for run in r.runs
    }
    shared = len({versions for _, versions in runs.values()}) == 1
    rows_by_setup: dict[str, list[str]] = {}
    for r in g.itertuples():
        counts: dict[str, int] = {}
        for run in r.runs:
            where, versions = runs[(r.Index, run)]
            key = where if shared else f"{where}; {versions}"
            counts[key] = counts.get(key, 0) + 1
        for key, n in counts.items():
            part = "" if n == len(r.runs) else f", {n} of its {len(r.runs)} runs"
            rows_by_setup.setdefault(key, []).append(
                f"{r.algorithm} ({Path(r.experiment).name}{part})"
            )
    intro = (
        "Exact numbers: `reproduce ROW_ID` matches every step only on the setup a row "
        "was made on (CPU model and vector instruction sets, thread count, package "
        "versions); on any other it re-runs seeds and tests them against the row "
        "(docs/provenance.md)."
    )
    versions = f" Package versions: {next(iter(runs.values()))[1]}." if shared else ""
    if len(rows_by_setup) == 1:
        return [f"{intro} All rows: {next(iter(rows_by_setup))}.{versions}"]
    return [
        f"{intro}{versions} Rows of {len(rows_by_setup)} setups:",
        "",
        *[f"- {key}: {', '.join(rows)}" for key, rows in rows_by_setup.items()],
    ]


def provenance_notes(g: pd.DataFrame) -> list[str]:
    notes = [f"{r.algorithm}: {n}" for r in g.itertuples() for n in r.provenance_notes]
    if g.dirty_runs.any():
        notes.append(
            "+dirty: built with --allow-dirty; the commit's code was modified when "
            "(some of) the runs ran, so it alone does not reproduce them"
        )
    return notes


def _img(path: Path) -> str:
    if not path.exists():
        return ""
    return f"<p><img alt='{escape(str(path))}' src='{_png_uri(path.read_bytes())}'></p>"


def _png_uri(png: bytes, colors: int = 64) -> str:
    """A PNG as a data: URI, its colours reduced to ``colors`` (line plots lose nothing
    visible; the page carries a fourth of the bytes)."""
    from PIL import Image

    buffer = io.BytesIO()
    Image.open(io.BytesIO(png)).convert("RGB").quantize(colors).save(buffer, "PNG", optimize=True)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def find_row(leaderboards: Path, row_id: str) -> dict:
    """The row ``row_id`` of ``leaderboards``/leaderboard.json (KeyError: no such row;
    FileNotFoundError: no such file; UnreadableFile: a damaged one)."""
    path = leaderboards / "leaderboard.json"
    if not path.exists():
        raise FileNotFoundError(path)
    rows = read_json(path, kind=list)
    for number, row in enumerate(rows, start=1):
        if not isinstance(row, dict) or not isinstance(row.get("runs"), list):
            raise UnreadableFile(path, f"row {number} is not a leaderboard row")
        if row.get("id") == row_id:
            return row
    raise KeyError(row_id)
