"""`harness leaderboard`: every experiment under results/ aggregated into
leaderboards/<model>__<env>.md, a static leaderboards/index.html (plots embedded, readable
offline) and leaderboards/leaderboard.json. Each row carries what made it: the exact
command, a hash of the run config, package versions, every git commit its runs (and their
resumes) ran, how many of them ran from a modified tree, the hash of the starting weights
and the dates from the first start to the last finish. Rows from a modified (dirty) tree
are refused unless ``allow_dirty``: their code is not a commit anyone can check out."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import sys
from html import escape
from pathlib import Path

import pandas as pd

from harness.analysis import HEADLINE, experiment_headline, write_analysis
from harness.fits import MIN_IDENTIFIED_SHARE, share_shortfall
from harness.samples import last_eval_samples, samples_table, write_samples_pages
from zoo.core.config import ConfigError
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
    config = json.loads((run_dir / "config.json").read_text())
    git = config.get("git") or {}
    states = [(git.get("commit"), git.get("dirty"))]
    states += [(s.get("commit"), s.get("dirty")) for s in read_sessions(run_dir)]
    complete = run_dir / "complete.json"
    finished = json.loads(complete.read_text()).get("finished") if complete.exists() else None
    return {
        "run": run_dir.name,
        "states": states,
        "dirty": any(d is True for _, d in states),
        "diff_kept": any(run_dir.glob("source*.diff")),
        "unknown": any(c is None or d is None for c, d in states),
        "start_weights_sha256": config.get("start_weights_sha256"),
        "start_weights": config.get("start_weights"),
        "created": config.get("created"),
        "finished": finished,
    }


def unfinished_runs(experiment: Path) -> list[str]:
    """The runs ``experiment.json`` lists whose folder holds no ``complete.json``: a board
    still running (or stopped) between sittings. Its rows would rank part of its seeds."""
    runs = json.loads((experiment / "experiment.json").read_text()).get("runs", {})
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
        how = sorted({r["start_weights"] or "not recorded" for r in runs
                      if not r["start_weights_sha256"]})  # fmt: skip
        notes.append(f"start weights of {len(missing)} of {len(runs)} runs: {'; '.join(how)}")
    dirty = sum(r["dirty"] for r in runs)
    if dirty:
        kept = sum(r["dirty"] and r["diff_kept"] for r in runs)
        notes.append(f"{dirty} of {len(runs)} runs from a modified tree; the diff is kept "
                     f"(source.diff in the run folder) for {kept} of them")  # fmt: skip
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
    "per_seed", "seed_sd", "mdd_80", "tie_group", "iqm", "iqm_ci_low", "iqm_ci_high",
    "auc_mean", "pass_at_1", "pass_at_4", "pass_at_8", "mean_at_8", "fit_A", "fit_A_low",
    "fit_A_high", "fit_B", "fit_B_low", "fit_B_high", "fit_C_mid", "fit_C_mid_low",
    "fit_C_mid_high", "max_flops", "fit_identified", "fit_identified_share", "fit_note",
    "half_budget_error",
)  # fmt: skip
"""Columns of an experiment's tables/summary.csv (harness/analysis.py) a row carries."""


def experiment_rows(experiment: Path) -> list[dict]:
    summary_csv = experiment / "tables" / "summary.csv"
    if not summary_csv.exists() or "headline_mean" not in pd.read_csv(summary_csv, nrows=0):
        write_analysis(experiment)  # none yet, or written by an older version
    manifest = json.loads((experiment / "experiment.json").read_text())
    summary = pd.read_csv(experiment / "tables" / "summary.csv")
    throughput = pd.read_csv(experiment / "tables" / "throughput.csv")
    mechanisms = mechanism_cells(experiment / "tables" / "off_policy.csv")
    rows = []
    for r in summary.itertuples():
        run_dirs = sorted((experiment / "runs").glob(f"{r.algorithm}__{r.env}__seed*"))
        config = json.loads((run_dirs[0] / "config.json").read_text())
        t = throughput[(throughput.algorithm == r.algorithm) & (throughput.env == r.env)]
        rows.append({
            "id": f"{config['run']['model']}__{r.env}__{r.algorithm}__{experiment.name}",
            "model": config["run"]["model"], "env": r.env, "algorithm": r.algorithm,
            "reward": r.headline_mean, "ci_low": r.ci_low, "ci_high": r.ci_high,
            **{k: _plain(getattr(r, k, None)) for k in STAT_FIELDS}, "seeds": int(r.seeds),
            "generate_tokens_per_s": float(t.generate_tokens_per_s.iloc[0]),
            "train_tokens_per_s": float(t.train_tokens_per_s.iloc[0]),
            "budget": _budget(config["run"]),
            "command": manifest["command"], "config_hash": config_hash(config["run"]),
            "versions": manifest["versions"], **row_provenance(run_dirs),
            "experiment": str(experiment),
            "runs": [str(d) for d in run_dirs],
            "mechanism": mechanisms.get((r.env, r.algorithm), "not recorded"),
        })  # fmt: skip
    return rows


def mechanism_cells(off_policy_csv: Path) -> dict[tuple[str, str], str]:
    """Per (env, algorithm), what its mechanism did (harness/analysis.py off_policy_table):
    the mean share of tokens or sequences whose gradient it changed, beside the share
    merely out of range, and the share of steps on which it acted. Experiments whose runs
    logged no acting shares (made before they existed) get none."""
    if not off_policy_csv.exists():
        return {}
    table = pd.read_csv(off_policy_csv)
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


def fit_cell(r) -> str:
    """A with its interval, or why it is withheld; C_mid with its interval against the
    largest compute observed."""
    c_mid = _interval(r.fit_C_mid, r.fit_C_mid_low, r.fit_C_mid_high, ".2g")
    where = f"C_mid {c_mid} (max observed {_num(r.max_flops, '.2g')})"
    if r.fit_A is None or r.fit_A != r.fit_A:
        return f"A withheld ({(r.fit_note or 'no fit').removeprefix('A withheld: ')}); {where}"
    # A summary.csv written before the identified-share rule (harness/fits.py) may still
    # carry A at a low share; experiment_rows reuses such files, so the rule is applied here
    # too. (The rule's bound test needs A's range, which those files do not hold.)
    share = r.fit_identified_share
    if share is not None and (shortfall := share_shortfall(share)):
        return f"A withheld ({shortfall}); {where}"
    return f"A {_interval(r.fit_A, r.fit_A_low, r.fit_A_high)}; {where}"


def pairs_markdown(experiment: Path, env: str) -> str:
    """The probability-of-improvement table of one env (tables/pairs.csv)."""
    path = experiment / "tables" / "pairs.csv"
    if not path.exists():
        return ""
    p = pd.read_csv(path)
    p = p[p.env == env]
    if p.empty:
        return ""
    return pd.DataFrame({
        "a": p.a, "b": p.b, "mean a - b": p.mean_a_minus_b.map(lambda v: f"{v:+.3f}"),
        "P(a > b)": [_interval(r.p_a_better, r.p_a_better_low, r.p_a_better_high, ".2f")
                     for r in p.itertuples()],
        "paired": p.paired, "p": p.p_value.map(lambda v: _num(v, ".3g")),
        "p (Holm)": p.p_holm.map(lambda v: _num(v, ".3g")),
        "MDD 80%": p.mdd_80.map(_num),
    }).to_markdown(index=False)  # fmt: skip


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
    text = (f"Start weights: the `{model}` preset's ship with forge-zoo "
            f"(zoo/models/start_weights/{model}; runs record them as {shipped[:12]}).")  # fmt: skip
    others = sorted({h for hashes in g.start_weights_sha256 if hashes != [shipped]
                     for h in hashes})  # fmt: skip
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
    for key, unit in (("budget_flops", "FLOPs"), ("budget_samples", "samples"),
                      ("budget_seconds", "s")):  # fmt: skip
        if run.get(key):
            return f"{run[key]:.3g} {unit}"
    return f"{run['steps']} steps"


LEGEND = (
    "Headline ({headline}) with a 95% Student t interval over seeds; `per seed`: each "
    "seed's value. Each experiment is one matched-compute comparison; rows of different "
    "experiments are not compared. Tie group: algorithms of one experiment whose difference "
    "from the best of their group is not significant (t-test, Holm-adjusted over all pairs, "
    "5%) share a group; 1 is the top group, and no order inside a group is supported by "
    "these seeds. MDD 80%: the smallest "
    "difference of means these seeds detect with 80% power at this row's seed spread. "
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
    "pyfunc": "What this board can rank: little. Its rows started from a tiny-code warm start "
    "fine-tuned on their own training functions, so training reward mostly paid for memorised "
    "functions (0.68 -> 0.78 on them, held-out 0.19 -> 0.21-0.22); one learning rate, no "
    "controls. pyfunc now sets 400 functions apart for the warm start and tiny-code ships "
    "rebuilt on them; this board predates that and is not yet re-made.",
    "pyfunc_feedback": "What this board can rank: nothing yet. Two algorithms at 2 seeds, a "
    "short run that shows learning; its rows started from a tiny-code-feedback built before "
    "pyfunc set its warm-start functions apart.",
    "tool_arithmetic": "What this board can rank: little. Every algorithm saturates within the "
    "first eighth of the budget (held-out 0.21 -> 0.83-0.84), so the headline measures the "
    "plateau, not the climb; one learning rate, no controls.",
}
"""The first lines of a board whose design limits what it can rank (as measured on its
committed runs), so that a reader meets them before its table."""


def caveat_lines(env: str) -> list[str]:
    return [BOARD_CAVEATS[env], ""] if env in BOARD_CAVEATS else []


def is_tuning_sweep(experiment: Path) -> bool:
    """An experiment of ``harness tune``: scored on the validation split, its rows are
    settings to choose from, not a board (its sweep.md is published beside the board)."""
    runs = json.loads((experiment / "experiment.json").read_text()).get("runs", {})
    return any(r.get("eval_split") == "validation" for r in runs.values())


def build_leaderboards(results: Path, out: Path, allow_dirty: bool = False) -> list[Path]:
    """Rows from a modified tree (or an unrecorded git state) raise ConfigError naming
    each such run, unless ``allow_dirty``: then they are built, their commits marked
    ``+dirty``. Nothing is written when refused. An experiment with unfinished runs is
    skipped, with a line on stderr."""
    experiments = [e for e in sorted(p.parent for p in results.glob("*/experiment.json"))
                   if not is_tuning_sweep(e)]  # fmt: skip
    for e in [e for e in experiments if unfinished_runs(e)]:
        total = len(json.loads((e / "experiment.json").read_text()).get("runs", {}))
        print(f"skipped {e}: {total - len(unfinished_runs(e))} of {total} runs finished; a "
              f"board enters the leaderboard whole (continue it with compare --resume)",
              file=sys.stderr)  # fmt: skip
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
            "where recorded, is its folder's source.diff)."
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
    sections = []
    for (model, env), g in frame.groupby(["model", "env"]):
        # tie groups and pairs are within one experiment (one matched-compute comparison)
        g = g.sort_values(["experiment", "tie_group", "reward"], ascending=[True, True, False])
        table = pd.DataFrame({
            "experiment": g.experiment.map(lambda e: Path(e).name),
            "tie group": g.tie_group.map(lambda v: _num(v, ".0f")), "algorithm": g.algorithm,
            "headline [95% t-CI]": [_interval(r.reward, r.ci_low, r.ci_high)
                                    for r in g.itertuples()],
            "per seed": g.per_seed, "MDD 80%": g.mdd_80.map(_num),
            "pass@1": g.pass_at_1.map(_num), "pass@8": g.pass_at_8.map(_num),
            "AUC": g.auc_mean.map(_num), "mechanism": g.mechanism,
            "compute fit": [fit_cell(r) for r in g.itertuples()],
            "B": g.fit_B.map(lambda v: _num(v, ".2f")), "seeds": g.seeds, "budget": g.budget,
            "gen tok/s": g.generate_tokens_per_s.map(lambda v: f"{v:,.0f}"),
            "train tok/s": g.train_tokens_per_s.map(lambda v: f"{v:,.0f}"),
            "config": g.config_hash, "commits": [commits_cell(r) for r in g.itertuples()],
            "start weights": [weights_cell(h, shipped[model]) for h in g.start_weights_sha256],
            "date": g.date, "row id": g.id,
        })  # fmt: skip
        pairs = [pairs_markdown(Path(e), env) for e in sorted(set(g.experiment))]
        commands = sorted(set(g.command))
        md = [f"# {model} on {env}", "", *caveat_lines(env),
              headline_legend(sorted(set(g.experiment)), env), "",
              *exact_setup_lines(g), "", *start_weights_lines(g, model, shipped[model]),
              table.to_markdown(index=False), ""]  # fmt: skip
        md += ["## Pairs: probability of improvement", "", PAIRS_LEGEND, "",
               *[p + "\n" for p in pairs if p]] if any(pairs) else []  # fmt: skip
        md += ["Commands:", ""]
        md += [f"    {c}" for c in commands]
        notes = provenance_notes(g)
        md += ["", "Provenance:", "", *[f"- {n}" for n in notes]] if notes else []
        md += ["", "Versions: " + json.dumps(g.versions.iloc[0])]
        path = out / f"{model}__{env}.md"
        path.write_text("\n".join(md) + "\n")
        written.append(path)
        images = "".join(_img(Path(e) / "plots" / "reward_vs_flops.png")
                         for e in sorted(set(g.experiment)))  # fmt: skip
        caveat = "".join(f"<p><b>{escape(line)}</b></p>" for line in caveat_lines(env)
                         if line)  # fmt: skip
        sections.append(f"<h2>{model} on {env}</h2>{caveat}{table.to_html(index=False)}"
                        f"<p>Commands: {'<br>'.join(f'<code>{c}</code>' for c in commands)}</p>"
                        + (f"<p>Provenance:<br>{'<br>'.join(escape(n) for n in notes)}"
                           "</p>" if notes else "")
                        + images + samples_html(g, out))  # fmt: skip
    html = ("<!doctype html><html><head><meta charset='utf-8'><title>forge-zoo leaderboards"
            "</title><style>body{font-family:sans-serif;margin:2em}table{border-collapse:"
            "collapse}td,th{border:1px solid #ccc;padding:4px 8px}img{max-width:720px}"
            "</style></head><body><h1>forge-zoo leaderboards</h1>" + "".join(sections)
            + "</body></html>")  # fmt: skip
    (out / "index.html").write_text(html)
    written.append(out / "index.html")
    return written


def samples_html(g: pd.DataFrame, out: Path) -> str:
    """Beside a section's plots: each row's first run's last evaluation samples (greedy
    completion, reference, reward), and links to every run's samples page (written into
    its experiment's samples/ folder when missing)."""
    parts = []
    for r in g.itertuples():
        run_dirs = [Path(d) for d in r.runs]
        if not any((d / SAMPLES).exists() for d in run_dirs):
            continue
        experiment = Path(r.experiment)
        if not all((experiment / "samples" / f"{d.name}.html").exists() for d in run_dirs):
            write_samples_pages(experiment)
        links = ", ".join(
            f"<a href='{escape(_relative(experiment / 'samples' / f'{d.name}.html', out))}'>"
            f"{escape(d.name)}</a>"
            for d in run_dirs if (experiment / "samples" / f"{d.name}.html").exists()
        )  # fmt: skip
        rows = last_eval_samples(run_dirs[0])
        parts.append(f"<h4>{escape(r.algorithm)}: {escape(run_dirs[0].name)}, last evaluation"
                     f"</h4>{samples_table(rows, table_id=f'samples-{escape(r.id)}')}"
                     f"<p>All samples, by run: {links}</p>")  # fmt: skip
    if not parts:
        return ""
    return "<h3>Samples</h3>" + "".join(parts)


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
    where = (f"{made_on.get('cpu') or 'CPU not recorded'} "
             f"[{flags if flags is not None else 'vector flags not recorded'}], "
             f"{threads or '?'} thread{'' if threads == 1 else 's'}")  # fmt: skip
    if made_on.get("cuda"):
        where += f", GPU {made_on['cuda']} (no exact check on a GPU)"
    versions = ", ".join(f"{k} {v}" for k, v in (config.get("versions") or {}).items())
    return where, versions or "versions not recorded"


def exact_setup_lines(g: pd.DataFrame) -> list[str]:
    """Markdown naming the setup(s) whose exact numbers a board's rows (``g``) are: one line
    when all runs share one, else one item per setup with the rows made on it (and how many
    of a row's runs, when not all). Package versions are named once when all runs share
    them, else as part of each setup."""
    runs = {(r.Index, run): setup_class(json.loads((Path(run) / "config.json").read_text()))
            for r in g.itertuples() for run in r.runs}  # fmt: skip
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
    intro = ("Exact numbers: `reproduce ROW_ID` matches every step only on the setup a row "
             "was made on (CPU model and vector instruction sets, thread count, package "
             "versions); on any other it re-runs seeds and tests them against the row "
             "(docs/provenance.md).")  # fmt: skip
    versions = f" Package versions: {next(iter(runs.values()))[1]}." if shared else ""
    if len(rows_by_setup) == 1:
        return [f"{intro} All rows: {next(iter(rows_by_setup))}.{versions}"]
    return [f"{intro}{versions} Rows of {len(rows_by_setup)} setups:", "",
            *[f"- {key}: {', '.join(rows)}" for key, rows in rows_by_setup.items()]]  # fmt: skip


def provenance_notes(g: pd.DataFrame) -> list[str]:
    notes = [f"{r.algorithm}: {n}" for r in g.itertuples() for n in r.provenance_notes]
    if g.dirty_runs.any():
        notes.append("+dirty: built with --allow-dirty; the commit's code was modified when "
                     "(some of) the runs ran, so it alone does not reproduce them")  # fmt: skip
    return notes


def _img(path: Path) -> str:
    if not path.exists():
        return ""
    data = base64.b64encode(path.read_bytes()).decode()
    return f"<p><img alt='{path}' src='data:image/png;base64,{data}'></p>"


def find_row(leaderboards: Path, row_id: str) -> dict:
    rows = json.loads((leaderboards / "leaderboard.json").read_text())
    for row in rows:
        if row["id"] == row_id:
            return row
    raise KeyError(row_id)
