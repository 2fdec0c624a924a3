"""Tables (pandas -> CSV + Markdown), plots (matplotlib), samples pages (harness/samples.py)
and report.md of an experiment folder written by `harness compare`. Everything here reads
only the run folders, so it can be re-done at any time: `harness analyze DIR`."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from harness.board import board_lines, board_tables, experiment_design
from harness.claims import claims_table
from harness.controls import legacy_board_power, legacy_verdicts
from harness.eval_cost import evaluation_table
from harness.fits import MIN_IDENTIFIED_SHARE, bootstrap_fit, extrapolation_check
from harness.run_flags import REPO_ROOT
from harness.samples import run_page_name, runs_with_samples, write_samples_pages
from harness.scores import (
    HEADLINE_POINTS,
    SAMPLED_METRICS,
    check_headlines,
    checkpoint_rows,
    experiment_headline,
    load_runs,
    run_scores,
)
from harness.stats import (
    holm,
    iqm_interval,
    min_detectable_difference,
    normalised_scores,
    performance_profile,
    probability_of_improvement,
    t_interval,
    tie_groups,
)
from harness.walltime import wall_time_table
from zoo.files import read_json
from zoo.services.ledger import OPTIONAL_PHASES, PHASES

if TYPE_CHECKING:
    from matplotlib.figure import Figure

FIT_BOOTSTRAP_REPS = 200


def interval(values: np.ndarray) -> tuple[float, float, float]:
    """Mean and 95% Student t interval over seeds (harness/stats.py: with a handful of
    seeds a bootstrap interval collapses to the seeds' minimum and maximum)."""
    return t_interval(np.asarray(values, dtype=float))


def reward_table(points: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for (env, algo, k), g in points.groupby(["env", "algorithm", "point"]):
        mid, low, high = interval(g["reward"].to_numpy())
        row = {
            "env": env,
            "algorithm": algo,
            "point": k,
            "budget_fraction": g["budget_fraction"].iloc[0],
            "flops": g["flops"].mean(),
            "seconds": g["seconds"].mean(),
            "reward_mean": mid,
            "ci_low": low,
            "ci_high": high,
            "seeds": len(g),
        }
        for m in SAMPLED_METRICS:
            if m in g and g[m].notna().all():
                row[m.removeprefix("eval_")] = g[m].mean()
        rows.append(row)
    return pd.DataFrame(rows)


def summary_table(points: pd.DataFrame, pairs: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per (env, algorithm): every seed's headline, its mean with a t-interval (and the
    IQM with a bootstrap interval from MIN_BOOTSTRAP_SEEDS seeds up), the seed standard
    deviation and the minimum detectable difference at 80% power, the tie group (from
    ``pairs``), AUC, the sampled metrics, and the sigmoid fit bootstrapped over seeds with
    A withheld, and the reason given, where the data do not identify it."""
    scores = run_scores(points)
    groups = tie_group_of(scores, pairs) if pairs is not None else {}
    rows = []
    for (env, algo), g in scores.groupby(["env", "algorithm"]):
        g = g.sort_values("seed")
        values = g["headline"].to_numpy()
        mean, low, high = interval(values)
        mid, b_low, b_high = iqm_interval(values)
        sd = float(np.std(values, ddof=1)) if len(values) > 1 else float("nan")
        row = {
            "env": env,
            "algorithm": algo,
            "seeds": len(g),
            "per_seed": " ".join(f"{v:.3f}" for v in values),
            "headline_mean": mean,
            "ci_low": low,
            "ci_high": high,
            "seed_sd": sd,
            "mdd_80": min_detectable_difference(sd, len(values), len(values)),
            "tie_group": groups.get((env, algo), np.nan),
            "iqm": mid,
            "iqm_ci_low": b_low,
            "iqm_ci_high": b_high,
        }
        row["auc_mean"], row["auc_ci_low"], row["auc_ci_high"] = interval(g["auc"].to_numpy())
        for m in SAMPLED_METRICS:
            key = m.removeprefix("eval_")
            if key in g and g[key].notna().all():
                row[key] = g[key].mean()
        row.update(fit_columns(points[(points.env == env) & (points.algorithm == algo)]))
        rows.append(row)
    table = pd.DataFrame(rows)
    if pairs is None:  # many-to-one: resolution and verdicts live in the verdicts table,
        # at the level the family decides (harness/board.py), not per pair at 5%
        table = table.drop(columns=["mdd_80", "tie_group"])
    return table


def fit_columns(points: pd.DataFrame) -> dict:
    """The sigmoid compute fit (Khatri et al., arXiv 2510.13786) of one algorithm's
    checkpoints: the start and the first checkpoint are excluded (early, noisy points),
    A, B and C_mid come with 95% bootstrap intervals over seeds, A is blank (with the
    reason in ``fit_note``) unless the pooled fit is identified, at least
    MIN_IDENTIFIED_SHARE of the bootstrap refits are too and A's interval stays off its
    bounds (harness/fits.py bootstrap_fit), and a fit on the first half of the budget
    predicts the last checkpoint (ScaleRL's extrapolation check)."""
    r0 = float(points[points["point"] == 0]["reward"].mean())
    first = points[points["point"] == 1]["flops"]
    exclude = float(first.max()) if len(first) else 0.0
    curves = [(d["flops"].to_numpy(), d["reward"].to_numpy()) for _, d in points.groupby("seed")]
    summary = bootstrap_fit(curves, r0, exclude, reps=FIT_BOOTSTRAP_REPS)
    check = extrapolation_check(curves, r0, 0.5, exclude)
    fit = summary.fit
    return {
        "fit_A": summary.a,
        "fit_A_low": summary.a_low,
        "fit_A_high": summary.a_high,
        "fit_B": fit.b,
        "fit_B_low": summary.b_low,
        "fit_B_high": summary.b_high,
        "fit_C_mid": fit.c_mid,
        "fit_C_mid_low": summary.c_mid_low,
        "fit_C_mid_high": summary.c_mid_high,
        "max_flops": float(points["flops"].max()),
        "fit_identified": fit.identified,
        "fit_identified_share": summary.identified_share,
        "fit_note": summary.reason,
        "fit_points": fit.points_used,
        "half_budget_predicted": check["predicted"],
        "half_budget_error": check["error"],
    }


def pairs_table(points: pd.DataFrame) -> pd.DataFrame:
    """Every pair of algorithms on an env: the difference of headline means, the
    probability of improvement P(A > B) (rliable; its bootstrap interval from
    MIN_BOOTSTRAP_SEEDS seeds up), the t-test p-value and its Holm adjustment over all
    pairs of the env, and the minimum detectable difference of this comparison. Runs with
    the same seed share their prompt stream and evaluation samples, so pairs are compared
    seed by seed (paired) when both algorithms ran the same seeds."""
    scores = run_scores(points)
    rows = []
    for env, e in scores.groupby("env"):
        by_algo = {
            a: d.set_index("seed")["headline"].sort_index() for a, d in e.groupby("algorithm")
        }
        names = sorted(by_algo)
        env_rows = []
        for i, a in enumerate(names):
            for b in names[i + 1 :]:
                x, y = by_algo[a], by_algo[b]
                paired = list(x.index) == list(y.index) and len(x) > 1
                cmp = probability_of_improvement(x.to_numpy(), y.to_numpy(), paired=paired)
                diff = (x - y).to_numpy() if paired else None
                sd = (
                    float(np.std(diff, ddof=1))
                    if paired
                    else float(np.sqrt((x.var(ddof=1) + y.var(ddof=1)) / 2))
                )
                mdd = (
                    min_detectable_difference(sd, len(x), paired=True)
                    if paired
                    else min_detectable_difference(sd, len(x), len(y))
                )
                env_rows.append(
                    {
                        "env": env,
                        "a": a,
                        "b": b,
                        "mean_a_minus_b": cmp.mean_difference,
                        "p_a_better": cmp.p_improve,
                        "p_a_better_low": cmp.ci_low,
                        "p_a_better_high": cmp.ci_high,
                        "paired": paired,
                        "p_value": cmp.p_value,
                        "mdd_80": mdd,
                    }
                )
        for row, adjusted in zip(env_rows, holm([r["p_value"] for r in env_rows]), strict=True):
            row["p_holm"] = adjusted
        rows += env_rows
    return pd.DataFrame(rows)


def tie_group_of(scores: pd.DataFrame, pairs: pd.DataFrame) -> dict[tuple[str, str], int]:
    """(env, algorithm) -> its tie group, 1 = the group of the best mean (harness/stats.py
    tie_groups, at Holm-adjusted p < 0.05)."""
    out = {}
    for env, e in scores.groupby("env"):
        means = e.groupby("algorithm")["headline"].mean().to_dict()
        p = pairs[pairs.env == env] if len(pairs) else pairs
        adjusted = {(r.a, r.b): r.p_holm for r in p.itertuples()}
        for rank, group in enumerate(tie_groups(means, adjusted), start=1):
            out.update({(env, a): rank for a in group})
    return out


def throughput_table(runs: list[dict]) -> pd.DataFrame:
    """Systems figures, apart from learning: tokens/s, seconds per step by phase, share of
    FLOPs by phase, achieved FLOP/s (ledger FLOPs / phase seconds)."""
    rows = []
    frame = step_frame(runs)
    phases = phases_of(frame)
    for p in phases:  # runs recorded before a phase existed spent nothing in it
        for what in ("flops", "seconds", "tokens"):
            frame[f"{p}_{what}"] = frame.get(f"{p}_{what}", 0.0)
    frame = frame.fillna({f"{p}_{w}": 0.0 for p in phases for w in ("flops", "seconds")})
    for (env, algo), g in frame.groupby(["env", "algorithm"]):
        row = {
            "env": env,
            "algorithm": algo,
            "steps": len(g),
            "generate_tokens_per_s": g["generate_tokens"].sum() / g["generate_seconds"].sum(),
            "train_tokens_per_s": g["train_tokens"].sum() / g["train_seconds"].sum(),
        }
        total_flops = sum(g[f"{p}_flops"].sum() for p in phases)
        total_seconds = sum(g[f"{p}_seconds"].sum() for p in phases)
        for p in phases:
            row[f"{p}_s_per_step"] = g[f"{p}_seconds"].mean()
        for p in phases:
            row[f"{p}_flops_share"] = g[f"{p}_flops"].sum() / total_flops if total_flops else 0
        row["achieved_flops_per_s"] = total_flops / total_seconds if total_seconds else 0
        rows.append(row)
    return pd.DataFrame(rows)


def phases_of(frame: pd.DataFrame) -> tuple[str, ...]:
    """The ledger's phases, and those of ``OPTIONAL_PHASES`` that a run of ``frame``
    spent in (ReMax's ``baseline``): a table of runs without one keeps its columns."""
    return PHASES + tuple(p for p in OPTIONAL_PHASES if f"{p}_flops" in frame.columns)


def step_frame(runs: list[dict]) -> pd.DataFrame:
    """Every training step of every run (step 0, the evaluation of the start, left out)."""
    return pd.DataFrame(
        [
            {**r, "env": run["env"], "algorithm": run["algorithm"]}
            for run in runs
            for r in run["records"]
            if r["step"] > 0
        ]
    )


OFF_POLICY_METRICS = (
    "ratio_mean",
    "ratio_max",
    "clip_low_frac",
    "clip_low_acting_frac",
    "clip_high_frac",
    "clip_high_acting_frac",
    "seq_clip_low_frac",
    "seq_clip_low_acting_frac",
    "seq_clip_high_frac",
    "seq_clip_high_acting_frac",
    "capped_frac",
    "capped_acting_frac",
    "gate_weight_mean",
    "gate_weight_q05",
    "gate_acting_frac",
    "policy_kl",
    "staleness_kl",
    "mismatch_logprob_mean",
    "mismatch_logprob_max",
    "mismatch_kl",
    "is_weight_mean",
    "is_truncated_frac",
    "is_masked_frac",
    "cov_clip_frac",
    "kl_cov_frac",
    "kl_cov_penalty",
    "kl_cov_acting_frac",
    "dual_clip_frac",
    "grad_norm",
    "grad_clip_frac",
)
"""Per-step metrics of the training regime (zoo/services/trainer.py, zoo/services/offpolicy.py)
and the algorithms' mechanisms, each share out of range beside its acting share (the
tokens or sequences whose gradient the mechanism changed; docs/algorithms.md); a column
appears when some run logged it."""


def off_policy_table(runs: list[dict]) -> pd.DataFrame:
    """The training regime of each algorithm and what its mechanism did: the mean over
    steps and seeds of each metric (``*_max``: the largest seen), and
    ``mechanism_acted_steps``, the share of steps on which an acting share the algorithm
    declares (``Algorithm.acting_shares``, zoo/algorithms/base.py) was above 0. Runs that
    logged none of those shares (written before they existed) leave it blank: an
    out-of-range share does not say whether a gradient changed."""
    from zoo.algorithms import ALGORITHMS
    from zoo.core.registry import PluginError

    frame = step_frame(runs)
    regime = {(run["env"], run["algorithm"]): run["config"]["run"] for run in runs}
    plugin = {run["algorithm"]: run["plugin"] for run in runs}
    rows = []
    for (env, algo), g in frame.groupby(["env", "algorithm"]):
        cfg = regime[(env, algo)]
        regime_text = (
            f"{cfg.get('mini_batches', 1)} mini-batches x {cfg.get('epochs', 1)} epochs, "
            f"correction {cfg.get('correction', 'none')}"
        )
        row = {"env": env, "algorithm": algo, "regime": regime_text}
        for key in OFF_POLICY_METRICS:
            if key in g and g[key].notna().any():
                row[key] = g[key].max() if key.endswith("_max") else g[key].mean()
        try:
            acting = ALGORITHMS.load(plugin[algo]).acting_shares()
        except PluginError:
            acting = []
        if not acting:
            row["mechanism_unit"] = "none declared"
        shares = g[[m for m in acting if m in g]]
        logged = shares.notna().any(axis=1)  # steps of runs that logged acting shares
        if logged.any():
            acted = (shares[logged] > 0).any(axis=1)
            row["mechanism_acted_steps"] = float(acted.mean())
            total = shares[logged].sum(axis=1)  # low + high sides of one mechanism
            row["mechanism_in_band_steps"] = float(total.between(*ACTING_BAND).mean())
            row.update(mechanism_summary(g[logged], acting))
        rows.append(row)
    table = pd.DataFrame(rows)
    # the order of OFF_POLICY_METRICS, whichever row came first: each out-of-range share
    # beside its acting share
    order = [
        "env",
        "algorithm",
        "regime",
        *OFF_POLICY_METRICS,
        "mechanism_acted_steps",
        "mechanism_in_band_steps",
        *MECHANISM_SUMMARY,
    ]
    return table[[c for c in order if c in table.columns]]


ACTING_BAND = (0.01, 0.5)
"""Where a mechanism's acting share (the share of its units whose gradient it changed)
should lie at most steps for it to be tested at all: below 1% it is nearly the unclipped
gradient, above 50% it governs most of the update (``mechanism_in_band_steps`` is the share
of steps inside)."""


MECHANISM_SUMMARY = ("mechanism_acting", "mechanism_out_of_range", "mechanism_unit")
"""Columns of ``off_policy_table`` that sum an algorithm's declared mechanism over its
sides (low + high clip): the mean acting share, the mean out-of-range share where the
mechanism has one (``<stem>_acting_frac`` beside ``<stem>_frac``), and what they count
("tokens", "sequences"; "none declared" for an algorithm with no mechanism)."""


def mechanism_summary(steps: pd.DataFrame, acting: list[str]) -> dict:
    """``MECHANISM_SUMMARY`` of one algorithm from its steps that logged acting shares."""
    present = [m for m in acting if m in steps]
    # a ratio mechanism's out-of-range share sits beside its acting share; a selection's
    # (Clip-Cov's cov_clip_frac) has none
    counterparts = [m.replace("_acting_frac", "_frac") for m in present if "_acting_" in m]
    out = {
        "mechanism_acting": float(sum(steps[m].mean() for m in present)),
        "mechanism_unit": "sequences" if all(m.startswith("seq_") for m in present) else "tokens",
    }
    if counterparts and len(counterparts) == len(present) and all(c in steps for c in counterparts):
        out["mechanism_out_of_range"] = float(sum(steps[c].mean() for c in counterparts))
    return out


TOOL_METRICS = (
    ("turns", "turns_mean"),
    ("tool_calls", "tool_calls_mean"),
    ("tool_success", "tool_success_rate"),
)
"""(column stem, step metric) of a multi-turn run (zoo/run/episodes.py); the evaluation
records carry the same with an ``eval_`` prefix. Single-turn runs log none of them."""


def tool_runs(runs: list[dict]) -> list[dict]:
    """The runs of multi-turn envs: those that logged a turn count at a step or an eval."""
    keys = ("turns_mean", "eval_turns_mean")
    return [run for run in runs if any(k in r for r in run["records"] for k in keys)]


def tool_use_row(run: dict) -> dict:
    """One run's tool use: the held-out greedy episodes at the start (the step-0
    evaluation) and at its last evaluation, and the training samples' means over the last
    quarter of its steps (at least one step), where the policy has settled most."""
    evals = [r for r in run["records"] if "eval_turns_mean" in r]
    steps = [r for r in run["records"] if r["step"] > 0 and "turns_mean" in r]
    tail = steps[-max(1, math.ceil(len(steps) / 4)) :]
    row = {"env": run["env"], "algorithm": run["algorithm"], "seed": run["seed"]}
    for stem, key in TOOL_METRICS:
        row[f"{stem}_start"] = evals[0][f"eval_{key}"] if evals else np.nan
        row[f"{stem}_last"] = evals[-1][f"eval_{key}"] if evals else np.nan
    for stem, key in TOOL_METRICS:
        row[f"train_{stem}"] = float(np.mean([r[key] for r in tail])) if tail else np.nan
    return row


def tool_use_table(runs: list[dict]) -> pd.DataFrame:
    """Per (env, algorithm): each run's tool_use_row, then the mean over seeds; the
    columns follow TOOL_METRICS (start, last evaluation), then the training means."""
    per_run = pd.DataFrame([tool_use_row(run) for run in tool_runs(runs)])
    rows = []
    for (env, algo), g in per_run.groupby(["env", "algorithm"]):
        row = {"env": env, "algorithm": algo, "seeds": len(g)}
        row.update(g.drop(columns=["env", "algorithm", "seed"]).mean().to_dict())
        rows.append(row)
    return pd.DataFrame(rows)


def plot_tool_use(runs: list[dict], path: Path) -> None:
    """Turns, tool calls and tool success of the training samples at every step against
    the ledger's FLOPs, one line per (env, algorithm): the mean over seeds at each step,
    drawn at the seeds' mean FLOPs (as the reward curves are)."""
    frame = step_frame(tool_runs(runs))
    several_envs = frame["env"].nunique() > 1
    titles = ("turns per episode", "tool calls per episode", "tool success rate")
    fig, axes = plt.subplots(1, len(TOOL_METRICS), figsize=(5 * len(TOOL_METRICS), 4))
    for ax, (_, key), title in zip(axes, TOOL_METRICS, titles, strict=True):
        for (env, algo), g in frame.groupby(["env", "algorithm"]):
            curve = g.groupby("step")[["flops", key]].mean()
            ax.plot(curve["flops"], curve[key], label=f"{algo} ({env})" if several_envs else algo)
        ax.set_title(f"{title} (training samples)")
        ax.set_xlabel("model FLOPs (ledger)")
        ax.set_ylabel(title)
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_curves(
    table: pd.DataFrame, x: str, xlabel: str, path: Path, baseline: str | None = None
) -> None:
    """Held-out reward against ``x``: small multiples, one panel per row, each beside the
    baseline (dashed black; default the first row by name), mean over seeds with its 95%
    t-band, one colour per row, so no panel holds more than two curves."""
    panels = []
    for env in sorted(table["env"].unique()):
        e = table[table["env"] == env]
        names = sorted(e["algorithm"].unique())
        base = baseline if baseline in names else names[0]
        others = [a for a in names if a != base] or [base]
        panels += [(env, base, a, e) for a in others]
    cols = min(4, len(panels))
    rows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(
        rows, cols, figsize=(3.6 * cols, 2.9 * rows), squeeze=False, sharey=True
    )
    colours = plt.get_cmap("tab10")
    for i, (ax, (env, base, algo, e)) in enumerate(zip(axes.flat, panels, strict=False)):
        for name, style in (
            (base, {"color": "black", "linestyle": "--"}),
            (algo, {"color": colours(i % 10)}),
        ):
            g = e[e["algorithm"] == name].sort_values("point")
            ax.plot(g[x], g["reward_mean"], marker="o", markersize=3, label=name, **style)
            ax.fill_between(g[x], g["ci_low"], g["ci_high"], alpha=0.15, color=style["color"])
            if name == algo:
                break  # (one panel, one row: a lone baseline)
        ax.set_title(f"{algo}" + (f" ({env})" if table["env"].nunique() > 1 else ""), fontsize=9)
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=7)
        ax.legend(fontsize=7, loc="lower right")
    for ax in axes.flat[len(panels) :]:
        ax.set_visible(False)
    fig.supxlabel(xlabel, fontsize=9)
    fig.supylabel("held-out greedy reward (mean, 95% t-band)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def seed_curves_figure(
    curves: pd.DataFrame, x: str, xlabel: str, order: list[str] | None = None, columns: int = 5
) -> Figure:
    """Every seed's held-out greedy reward at each evaluation, one panel per algorithm
    (``order``, else sorted; at most ``columns`` panels a line) on shared axes, each with
    its own tick labels: a thin line per seed, in the same colour in every panel (runs of
    one seed share their prompts), and the mean over the seeds at each evaluation in
    black. ``curves``: columns algorithm, seed, ``x``, reward."""
    names = order or sorted(curves["algorithm"].unique())
    seeds = sorted(curves["seed"].unique(), key=str)
    colors = plt.get_cmap("tab10" if len(seeds) <= 10 else "tab20")
    cols = min(columns, len(names))
    rows = math.ceil(len(names) / cols)
    fig, axes = plt.subplots(
        rows,
        cols,
        figsize=(2.6 * cols + 0.6, 2.2 * rows + 0.4),
        sharex=True,
        sharey=True,
        squeeze=False,
    )
    for ax, name in zip(axes.flat, names, strict=False):
        g = curves[curves["algorithm"] == name]
        for i, seed in enumerate(seeds):
            d = g[g["seed"] == seed].sort_values(x)
            if len(d):
                ax.plot(d[x], d["reward"], color=colors(i % colors.N), lw=0.9, alpha=0.8)
        # the k-th evaluation of every seed (their x differ by a step's FLOPs at most)
        g = g.assign(k=g.groupby("seed").cumcount())
        mean = g.groupby("k").agg(x=(x, "mean"), reward=("reward", "mean"))
        ax.plot(mean["x"], mean["reward"], color="black", lw=2)
        ax.set_title(name, fontsize=10)
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=8, labelbottom=True, labelleft=True)
        ax.xaxis.get_offset_text().set_fontsize(8)
    for ax in axes.flat[len(names) :]:
        ax.set_visible(False)
    for ax in axes[:, 0]:
        ax.set_ylabel("held-out reward", fontsize=9)
    for ax in axes.flat[max(0, len(names) - cols) : len(names)]:
        ax.set_xlabel(xlabel, fontsize=9)
    fig.tight_layout()
    return fig


def plot_seed_curves(
    curves: pd.DataFrame,
    x: str,
    xlabel: str,
    target: Path | BinaryIO,
    order: list[str] | None = None,
) -> None:
    """``seed_curves_figure`` as a PNG in ``target`` (a path or a binary file)."""
    fig = seed_curves_figure(curves, x, xlabel, order)
    fig.savefig(target, dpi=80, format="png")
    plt.close(fig)


def plot_profile(scores: pd.DataFrame, points: pd.DataFrame, path: Path) -> None:
    """rliable's performance profile over envs: the share of an algorithm's runs (all envs
    and seeds) whose normalised headline exceeds tau; 0 = the env's starting reward, 1 =
    the best run on that env (harness/stats.py normalised_scores)."""
    per_env = {
        env: {a: d["headline"].to_numpy() for a, d in e.groupby("algorithm")}
        for env, e in scores.groupby("env")
    }
    start = {env: float(d[d["point"] == 0]["reward"].mean()) for env, d in points.groupby("env")}
    taus = np.linspace(0, 1, 101)
    profile = performance_profile(normalised_scores(per_env, start), taus)
    fig, ax = plt.subplots(figsize=(6, 4))
    for algo, share in sorted(profile.items()):
        ax.plot(taus, share, label=algo)
    ax.set_xlabel("normalised headline tau (0: start, 1: best run on the env)")
    ax.set_ylabel("share of runs above tau")
    ax.set_title("Performance profile over envs and seeds")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_throughput(table: pd.DataFrame, path: Path) -> None:
    labels = [f"{r.algorithm}\n{r.env}" for r in table.itertuples()]
    fig, ax = plt.subplots(figsize=(max(5, 1.4 * len(labels)), 4))
    bottom = np.zeros(len(table))
    for p in (p for p in (*PHASES, *OPTIONAL_PHASES) if f"{p}_s_per_step" in table.columns):
        values = table[f"{p}_s_per_step"].to_numpy()
        ax.bar(labels, values, bottom=bottom, label=p)
        bottom += values
    ax.set_ylabel("seconds per step (mean)")
    ax.set_title("Where a step's time goes, by phase")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_table(df: pd.DataFrame, directory: Path, name: str) -> str:
    df.to_csv(directory / f"{name}.csv", index=False)
    text = df.to_markdown(index=False, floatfmt=".4g")
    (directory / f"{name}.md").write_text(text + "\n")
    return text


def write_analysis(out: Path) -> dict[str, pd.DataFrame]:
    """Every table, plot and report.md of an experiment folder. The design experiment.json
    records decides the verdicts: many-to-one against a baseline (harness/board.py), with
    every pair as well under ``--pairs all``; experiments recorded before the design keep
    their all-pairs tables and tie groups."""
    runs = load_runs(out)
    if not runs:
        raise FileNotFoundError(f"{out}/runs holds no run with metrics")
    manifest = read_json(out / "experiment.json")
    check_headlines(out, runs, manifest)
    design = experiment_design(manifest)
    controls = manifest.get("controls")
    tables_dir, plots_dir = out / "tables", out / "plots"
    tables_dir.mkdir(exist_ok=True)
    plots_dir.mkdir(exist_ok=True)
    points = pd.DataFrame([row for run in runs for row in checkpoint_rows(run)])
    scores = run_scores(points)
    pairs = pairs_table(points) if design["pairs"] == "all" else None
    tables = {
        "reward_at_checkpoints": reward_table(points),
        "summary": summary_table(points, pairs),
        "throughput": throughput_table(runs),
        "wall_time": wall_time_table(runs),
        "evaluation": evaluation_table(runs, points, HEADLINE_POINTS),
        "off_policy": off_policy_table(runs),
    }
    if pairs is not None:
        tables["pairs"] = pairs
    board = {}
    if design["kind"] != "legacy":
        board = board_tables(points, scores, runs, design, controls, tables["off_policy"])
        tables.update(board)
    delta = design.get("delta", 0.02)
    claims = claims_table(runs, scores, tables["off_policy"], delta)
    if len(claims):  # boards that ran a built-in and its paper's baseline
        tables["claims"] = claims
    if tool_runs(runs):  # multi-turn envs only: single-turn reports stay as they were
        tables["tool_use"] = tool_use_table(runs)
        plot_tool_use(runs, plots_dir / "tool_use.png")
    text = {name: write_table(df, tables_dir, name) for name, df in tables.items()}
    if "claims" in tables:  # the report's view: one line per claim (the CSV has it all)
        text["claims"] = claims_markdown(tables["claims"])
    baseline = design.get("baseline")
    plot_curves(
        tables["reward_at_checkpoints"],
        "flops",
        "model FLOPs (ledger)",
        plots_dir / "reward_vs_flops.png",
        baseline,
    )
    plot_curves(
        tables["reward_at_checkpoints"],
        "seconds",
        "wall seconds of training",
        plots_dir / "reward_vs_seconds.png",
        baseline,
    )
    plot_throughput(tables["throughput"], plots_dir / "throughput.png")
    if points["env"].nunique() > 1:
        plot_profile(scores, points, plots_dir / "performance_profile.png")
    write_samples_pages(out)
    if design["kind"] == "legacy":
        if controls:
            tables["controls"] = pd.DataFrame(legacy_verdicts(pairs, controls))
            text["controls"] = write_table(tables["controls"], tables_dir, "controls")
        opening = ["## Can this board rank?", "", *legacy_board_power(pairs, controls), ""]
    elif board:
        opening = board_lines(board, design, runs, manifest.get("power_plan"))
    else:
        opening = [f"The baseline {baseline} has no finished runs: no verdicts yet.", ""]
    write_report(out, text, opening, design)
    return tables


def samples_section(out: Path) -> list[str]:
    """report.md's links to the samples pages (none for runs from before samples.jsonl),
    saying how to build them: the pages are not committed, so a reader of a committed
    report needs the command."""
    runs = runs_with_samples(out)
    if not runs:
        return []
    return [
        "## Samples",
        "",
        "What the policy wrote: per run, the first groups of every step (reward, advantage,",
        "finish reason, policy version) and the first held-out problems at every evaluation",
        "point (greedy completion beside the reference), with a step selector and filter;",
        "the pages open offline. They are built on demand, not committed (git ignores",
        f"them): `python -m harness samples {shown_folder(out)}` writes them from the runs'",
        "samples.jsonl (`analyze` and `leaderboard` do too). [All runs](samples/index.html).",
        "",
        f"<details><summary>The {len(runs)} runs' pages</summary>",
        "",
        *[f"- [{d.name}](samples/{run_page_name(d)})" for d in runs],
        "",
        "</details>",
        "",
    ]


def shown_folder(out: Path) -> str:
    """``out`` as a command in report.md names it: relative to the repository when inside
    it (``results/<experiment>``, whatever the folder the report was written from), else
    as given."""
    try:
        return out.resolve().relative_to(REPO_ROOT).as_posix()
    except ValueError:
        return out.as_posix()


def tool_use_section(tables: dict[str, str]) -> list[str]:
    """report.md's tool-use section, for experiments with multi-turn runs only."""
    if "tool_use" not in tables:
        return []
    return [
        "## Tool use over training",
        "",
        "Turns, tool calls per episode and the share of tool calls that succeeded.",
        "`*_start`, `*_last`: held-out greedy episodes of the starting weights and at the",
        "last evaluation; `train_*` and the plot: the training samples (drawn at the run's",
        "temperature), the table over the last quarter of the steps. Means over seeds; a",
        "success rate counts 0 where no tool was called.",
        "",
        "![tool use vs FLOPs](plots/tool_use.png)",
        "",
        tables["tool_use"],
        "",
    ]


def claims_markdown(claims: pd.DataFrame) -> str:
    """The claims table as the report shows it: the claim, its source, what was measured,
    the difference with its interval, the verdict and the acting share."""
    view = pd.DataFrame(
        {
            "env": claims.env,
            "algorithm vs baseline": claims.algorithm + " vs " + claims.baseline,
            "claim (source)": claims.claim + " (" + claims["where"] + ")",
            "quantity (predicted)": claims.quantity + " (" + claims.predicts + ")",
            "algorithm - baseline [95% CI]": [
                f"{r.difference:+.4g} [{r.ci_low:+.4g}, {r.ci_high:+.4g}]"
                for r in claims.itertuples()
            ],
            "seeds": claims.seeds,
            "verdict": claims.verdict,
            "acting share": claims.mechanism_acting.map(
                lambda v: "n/a" if pd.isna(v) else f"{v:.2%}"
            ),
            "scope": claims.scope,
        }
    )
    return view.to_markdown(index=False)


def claims_section(tables: dict[str, str]) -> list[str]:
    if "claims" not in tables:
        return []
    return [
        "## The papers' claims, tested",
        "",
        "One central claim per algorithm (harness/claims.py), the quantity that tests it",
        "here, and the difference algorithm - baseline over seeds with a 95% t-interval",
        "(paired when both ran the same seeds): supported or contradicted when the interval",
        "lies on one side of 0, inconclusive when it contains 0. The acting share is the",
        "algorithm's mean (its mechanism's): a claim about a clip that did not act is no test.",
        "",
        tables["claims"],
        "",
    ]


def write_report(
    out: Path, tables: dict[str, str], opening: list[str], design: dict | None = None
) -> None:
    """report.md: what was run, then ``opening`` (a many-to-one board's verdicts, power,
    controls and budget, harness/board.py; a legacy board's "Can this board rank?"), then
    the plots, the claims, the detail tables, and the samples pages last."""
    manifest = read_json(out / "experiment.json")
    m = manifest["machine"]
    versions = ", ".join(f"{k} {v}" for k, v in manifest["versions"].items())
    lines = [
        f"# Experiment: {out.name}",
        "",
        "    " + manifest["command"],
        "",
        f"Machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB, "
        f"torch threads {m['torch_threads']}{', ' + m['cuda'] if m.get('cuda') else ''}. "
        f"Versions: {versions}. Created {manifest['created']}.",
        "",
        "Every algorithm had the same model, env, prompt order per seed, sampling settings,",
        "generation budget and compute budget; held-out reward was measured at the same",
        "points of the budget (evaluation is not charged). Runs with the same seed share",
        "their prompt stream and evaluation samples, so algorithms are compared seed by seed.",
        "",
        f"Headline, fixed before the runs: {experiment_headline(out)}.",
        "",
        *opening,
        "## Held-out reward against compute",
        "",
        "![reward vs FLOPs](plots/reward_vs_flops.png)",
        "![reward vs wall time](plots/reward_vs_seconds.png)",
        *(
            ["![performance profile](plots/performance_profile.png)", ""]
            if (out / "plots" / "performance_profile.png").exists()
            else []
        ),
        "",
        *tool_use_section(tables),
        *claims_section(tables),
        "## Summary: headline, pass@k, area under the curve, sigmoid compute fit",
        "",
        "`per_seed`: each seed's headline. `headline_mean` [`ci_low`, `ci_high`]: mean over",
        "seeds with a 95% Student t interval (an IQM with a bootstrap interval only from 10",
        "seeds up). `pass_at_k`, `mean_at_8`: sampled at the run's temperature, 8 samples",
        "per held-out problem, same last checkpoints.",
        *(
            []
            if "pairs" not in tables
            else [
                "`mdd_80`: the smallest difference of means a t-test at 5% detects with 80% power",
                "at this seed spread, for one pair of algorithms with this many seeds each.",
                "`tie_group`: algorithms not separated from the best of their group at",
                "Holm-adjusted p < 0.05 over every pair share a group (1 = the top group).",
            ]
        ),
        "",
        "Fit: R(C) = R0 + (A - R0) / (1 + (C_mid / C)^B) (Khatri et al., arXiv 2510.13786)",
        f"on every seed's checkpoints after the first, intervals from {FIT_BOOTSTRAP_REPS}",
        "bootstrap resamples of the seeds. A is left blank, with the reason in `fit_note`,",
        "when C_mid lies beyond the largest compute observed or a parameter sits on its",
        f"bound, when fewer than {MIN_IDENTIFIED_SHARE:.0%} of the bootstrap refits are",
        "identified (`fit_identified_share`), or when A's interval reaches a bound of its",
        "range: the data then do not pin the asymptote down. `half_budget_error`: a fit on",
        "the first half of the budget predicts the last checkpoint this far off (ScaleRL's",
        "extrapolation check).",
        "",
        tables["summary"],
        "",
        *pairs_section(tables),
        "## Reward at each compute checkpoint",
        "",
        tables["reward_at_checkpoints"],
        "",
        "## Training regime: the ratio, the mechanisms, the trainer-sampler gap",
        "",
        "Means over steps and seeds (`*_max`: the largest seen). Each rollout batch trains",
        "in several mini-batches, so the ratio pi_theta / pi_old moves after the first",
        "update. Each clip/cap share comes in two: `clip_low_frac`, `clip_high_frac`,",
        "`capped_frac` count response tokens whose ratio is out of range, whatever their",
        "advantage; the `*_acting_frac` beside them count those whose gradient the",
        "mechanism changed (a PPO clip: r below the range with A < 0, above it with A > 0;",
        "A = 0 never). GSPO's `seq_clip_*` are shares of sequences (its clip is one",
        "decision per response). `gate_weight_mean` is SAPO's mean gradient weight (1 =",
        "inactive), `gate_weight_q05` its 5% quantile over tokens with A != 0, and",
        "`gate_acting_frac` the share of tokens with A != 0 whose weight the gate cut",
        "below 0.9. `policy_kl` is the k3 KL(old || new) per update, `staleness_kl` the",
        "same at the first update (0 unless the batch was sampled by older weights), and",
        "`mismatch_*` compare the sampler's log-probs with the trainer's at the same",
        "weights. `mechanism_acted_steps`: the share of steps on which one of the",
        "algorithm's declared acting shares was above 0, i.e. its mechanism changed at",
        "least one token's or sequence's gradient (blank for runs that predate acting",
        "shares); `mechanism_in_band_steps`: the share of steps on which it acted on 1-50%",
        "of its units (below, it barely differs from the unclipped gradient; above, it",
        "governs the update). `grad_clip_frac`: the share of optimizer steps whose gradient",
        "norm the `grad_clip` bound rescaled.",
        "",
        tables["off_policy"],
        "",
        "## Throughput (systems, apart from learning)",
        "",
        "![throughput](plots/throughput.png)",
        "",
        tables["throughput"],
        "",
        "## Where the wall time went",
        "",
        "Seconds per run, the mean over each row's complete single-session runs",
        "(`harness/walltime.py`): `startup`, building the run's services (engine, model,",
        "reference; small when compare reused the engine of an earlier run); the loop's",
        "phases as in the throughput table, summed over the run's steps; `step_other`, the",
        "rest of the steps' time; `evaluation`, every held-out evaluation (not charged to",
        "the budget); `checkpoint_and_io`, checkpoints and the run's files; `wall`, all of",
        "it. Runs that shared the machine's cores with others took longer than alone.",
        "",
        tables["wall_time"],
        "",
        "## What the evaluation costs and buys",
        "",
        "Per row (`harness/eval_cost.py`): evaluations per run and the mean seconds of one",
        "that is greedy only and of one that also samples for pass@k; `checkpoint_sd`, how",
        "much the reward moves between the checkpoints the headline averages (median over",
        "runs), and `checkpoint_se`, that over the square root of their number: the part of",
        "a run's headline that more evaluation points could shrink; `seed_sd`, the spread of",
        "the headlines over seeds, which every interval and test above is made of;",
        "`problems_se`, the standard error of a reward measured on this many held-out",
        "problems, shared by every row (the same problems), so it cancels in a paired",
        "difference and bounds only the absolute level.",
        "",
        tables["evaluation"],
        "",
        *samples_section(out),
    ]
    if design and design.get("kind") != "legacy":
        lines[1:1] = ["", f"Design: many-to-one against {design['baseline']} (docs/statistics.md)."]
    (out / "report.md").write_text("\n".join(lines))


def pairs_section(tables: dict[str, str]) -> list[str]:
    """Every pair of rows, for legacy boards and ``compare --pairs all``."""
    if "pairs" not in tables:
        return []
    return [
        "## Pairs: probability of improvement",
        "",
        "`p_a_better`: P(headline of a > headline of b), seed by seed where `paired`",
        "(rliable's probability of improvement; its interval needs 10 seeds). `p_value`:",
        "paired (or Welch) t-test of the means; `p_holm`: Holm-adjusted over every pair of",
        "the env, a family of its own: the verdicts against the baseline do not use it.",
        "`mdd_80`: the difference this comparison could detect with 80% power at 5%.",
        "",
        tables["pairs"],
        "",
    ]
