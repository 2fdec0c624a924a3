"""Tables (pandas -> CSV + Markdown), plots (matplotlib) and report.md of an experiment
folder written by `harness compare`. Everything here reads only the run folders, so it
can be re-done at any time: `harness analyze DIR`."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from harness.runner import read_metrics
from harness.stats import fit_sigmoid, iqm, stratified_bootstrap_ci
from zoo.core.ledger import PHASES

SPENT_KEY = {"flops": "flops", "samples": "samples", "seconds": "seconds", "steps": "step"}


def budget_of(run: dict) -> tuple[str, float, int]:
    """(unit, amount, K evaluation points) of a run's config."""
    r = run["config"]["run"]
    for unit, key in (("flops", "budget_flops"), ("samples", "budget_samples"),
                      ("seconds", "budget_seconds")):  # fmt: skip
        if r.get(key):
            return unit, float(r[key]), int(r["eval_points"])
    steps = int(r["steps"])
    return "steps", float(steps), max(1, steps // int(r["eval_every"]))


def load_runs(out: Path) -> list[dict]:
    runs = []
    for run_dir in sorted((out / "runs").iterdir()):
        if not (run_dir / "config.json").exists():
            continue
        config = json.loads((run_dir / "config.json").read_text())
        records = read_metrics(run_dir)
        if records:
            runs.append({"dir": run_dir, "config": config, "records": records,
                         "algorithm": config["run"]["algorithm"], "env": config["run"]["env"],
                         "seed": config["run"]["seed"]})  # fmt: skip
    return runs


def checkpoint_rows(run: dict) -> list[dict]:
    """Held-out reward at each compute checkpoint k = 0..K: the first evaluation at or
    past k/K of the budget (k = 0: the starting weights)."""
    unit, amount, points = budget_of(run)
    evals = [r for r in run["records"] if "eval_reward" in r]
    rows = []
    for k in range(points + 1):
        target = amount * k / points
        hit = next((r for r in evals if r[SPENT_KEY[unit]] >= target - 1e-9), None)
        if hit is None:
            break  # the run did not get there (interrupted)
        rows.append({"env": run["env"], "algorithm": run["algorithm"], "seed": run["seed"],
                     "point": k, "budget_fraction": k / points, "flops": hit["flops"],
                     "seconds": hit["seconds"], "reward": hit["eval_reward"]})  # fmt: skip
    return rows


def interval(values: np.ndarray) -> tuple[float, float, float]:
    low, high = stratified_bootstrap_ci([np.asarray(values, dtype=float)])
    return iqm(values), low, high


def reward_table(points: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for (env, algo, k), g in points.groupby(["env", "algorithm", "point"]):
        mid, low, high = interval(g["reward"].to_numpy())
        rows.append({"env": env, "algorithm": algo, "point": k,
                     "budget_fraction": g["budget_fraction"].iloc[0],
                     "flops": g["flops"].mean(), "seconds": g["seconds"].mean(),
                     "reward_iqm": mid, "ci_low": low, "ci_high": high,
                     "seeds": len(g)})  # fmt: skip
    return pd.DataFrame(rows)


def summary_table(points: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for (env, algo), g in points.groupby(["env", "algorithm"]):
        per_seed = {s: d.sort_values("point") for s, d in g.groupby("seed")}
        last = g["point"].max()
        final = g[g["point"] == last]["reward"].to_numpy()
        auc = np.array([np.trapezoid(d["reward"], d["budget_fraction"])
                        for d in per_seed.values()])  # fmt: skip
        r0 = iqm(g[g["point"] == 0]["reward"].to_numpy())
        first = g["point"][g["point"] > 0].min() if (g["point"] > 0).any() else 0
        early = g[g["point"] == first]["flops"].min() if first else 0.0
        pooled = fit_sigmoid(g["flops"].to_numpy(), g["reward"].to_numpy(), r0, early)
        seed_fits = [fit_sigmoid(d["flops"].to_numpy(), d["reward"].to_numpy(), r0, early)
                     for d in per_seed.values()]  # fmt: skip
        a_seeds = [f.a for f in seed_fits if f.converged]
        b_seeds = [f.b for f in seed_fits if f.converged]
        f_mid, f_low, f_high = interval(final)
        a_mid, a_low, a_high = interval(auc)
        rows.append({
            "env": env, "algorithm": algo, "seeds": len(per_seed),
            "final_reward_iqm": f_mid, "final_ci_low": f_low, "final_ci_high": f_high,
            "auc_iqm": a_mid, "auc_ci_low": a_low, "auc_ci_high": a_high,
            "fit_A": pooled.a, "fit_B": pooled.b, "fit_C_mid": pooled.c_mid,
            "fit_rmse": pooled.rmse, "fit_converged": pooled.converged,
            "fit_note": pooled.note,
            "A_seed_range": _range(a_seeds), "B_seed_range": _range(b_seeds),
            "seed_fits_converged": f"{sum(f.converged for f in seed_fits)}/{len(seed_fits)}",
        })  # fmt: skip
    return pd.DataFrame(rows)


def _range(values: list[float]) -> str:
    return f"{min(values):.3g}..{max(values):.3g}" if values else "n/a"


def throughput_table(runs: list[dict]) -> pd.DataFrame:
    """Systems figures, apart from learning: tokens/s, seconds per step by phase, share of
    FLOPs by phase, achieved FLOP/s (ledger FLOPs / phase seconds)."""
    rows = []
    frame = step_frame(runs)
    for p in PHASES:  # runs recorded before a phase existed spent nothing in it
        for what in ("flops", "seconds", "tokens"):
            frame[f"{p}_{what}"] = frame.get(f"{p}_{what}", 0.0)
    frame = frame.fillna({f"{p}_{w}": 0.0 for p in PHASES for w in ("flops", "seconds")})
    for (env, algo), g in frame.groupby(["env", "algorithm"]):
        row = {
            "env": env,
            "algorithm": algo,
            "steps": len(g),
            "generate_tokens_per_s": g["generate_tokens"].sum() / g["generate_seconds"].sum(),
            "train_tokens_per_s": g["train_tokens"].sum() / g["train_seconds"].sum(),
        }
        total_flops = sum(g[f"{p}_flops"].sum() for p in PHASES)
        total_seconds = sum(g[f"{p}_seconds"].sum() for p in PHASES)
        for p in PHASES:
            row[f"{p}_s_per_step"] = g[f"{p}_seconds"].mean()
        for p in PHASES:
            row[f"{p}_flops_share"] = g[f"{p}_flops"].sum() / total_flops if total_flops else 0
        row["achieved_flops_per_s"] = total_flops / total_seconds if total_seconds else 0
        rows.append(row)
    return pd.DataFrame(rows)


def step_frame(runs: list[dict]) -> pd.DataFrame:
    """Every training step of every run (step 0, the evaluation of the start, left out)."""
    return pd.DataFrame([{**r, "env": run["env"], "algorithm": run["algorithm"]}
                         for run in runs for r in run["records"] if r["step"] > 0])  # fmt: skip


OFF_POLICY_METRICS = (
    "ratio_mean", "ratio_max", "clip_low_frac", "clip_high_frac", "capped_frac",
    "gate_weight_mean", "policy_kl", "staleness_kl", "mismatch_logprob_mean",
    "mismatch_logprob_max", "mismatch_kl", "is_weight_mean", "is_truncated_frac",
    "is_masked_frac",
)  # fmt: skip
"""Per-step metrics of the training regime (zoo/core/trainer.py, zoo/core/offpolicy.py)
and the algorithms' mechanisms; a column appears when some run logged it."""


def off_policy_table(runs: list[dict]) -> pd.DataFrame:
    """The training regime of each algorithm and what its mechanism did: the mean over
    steps and seeds of each metric (``*_max``: the largest seen), and the share of steps
    on which the algorithm's declared mechanism acted (zoo/algorithms/base.py)."""
    from zoo.algorithms import ALGORITHMS
    from zoo.core.registry import PluginError

    frame = step_frame(runs)
    regime = {(run["env"], run["algorithm"]): run["config"]["run"] for run in runs}
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
            idle = ALGORITHMS.load(algo).mechanism
        except PluginError:
            idle = {}
        acted = [g[m] != v for m, v in idle.items() if m in g]
        if acted:
            row["mechanism_acted_steps"] = float(pd.concat(acted, axis=1).any(axis=1).mean())
        rows.append(row)
    return pd.DataFrame(rows)


def plot_curves(table: pd.DataFrame, x: str, xlabel: str, path: Path) -> None:
    envs = sorted(table["env"].unique())
    fig, axes = plt.subplots(1, len(envs), figsize=(6 * len(envs), 4), squeeze=False)
    for ax, env in zip(axes[0], envs, strict=True):
        for algo, g in table[table["env"] == env].groupby("algorithm"):
            g = g.sort_values("point")
            ax.plot(g[x], g["reward_iqm"], marker="o", label=algo)
            ax.fill_between(g[x], g["ci_low"], g["ci_high"], alpha=0.2)
        ax.set_title(f"{env}: held-out reward (IQM, 95% CI)")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("held-out reward")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_throughput(table: pd.DataFrame, path: Path) -> None:
    labels = [f"{r.algorithm}\n{r.env}" for r in table.itertuples()]
    fig, ax = plt.subplots(figsize=(max(5, 1.4 * len(labels)), 4))
    bottom = np.zeros(len(table))
    for p in PHASES:
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
    runs = load_runs(out)
    if not runs:
        raise FileNotFoundError(f"{out}/runs holds no run with metrics")
    tables_dir, plots_dir = out / "tables", out / "plots"
    tables_dir.mkdir(exist_ok=True)
    plots_dir.mkdir(exist_ok=True)
    points = pd.DataFrame([row for run in runs for row in checkpoint_rows(run)])
    tables = {
        "reward_at_checkpoints": reward_table(points),
        "summary": summary_table(points),
        "throughput": throughput_table(runs),
        "off_policy": off_policy_table(runs),
    }
    text = {name: write_table(df, tables_dir, name) for name, df in tables.items()}
    plot_curves(tables["reward_at_checkpoints"], "flops", "model FLOPs (ledger)",
                plots_dir / "reward_vs_flops.png")  # fmt: skip
    plot_curves(tables["reward_at_checkpoints"], "seconds", "wall seconds of training",
                plots_dir / "reward_vs_seconds.png")  # fmt: skip
    plot_throughput(tables["throughput"], plots_dir / "throughput.png")
    write_report(out, text)
    return tables


def write_report(out: Path, tables: dict[str, str]) -> None:
    manifest = json.loads((out / "experiment.json").read_text())
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
        "points of the budget (evaluation is not charged). Figures are interquartile means",
        "across seeds with 95% stratified-bootstrap intervals (rliable's method).",
        "",
        "## Held-out reward against compute",
        "",
        "![reward vs FLOPs](plots/reward_vs_flops.png)",
        "![reward vs wall time](plots/reward_vs_seconds.png)",
        "",
        "## Summary: final reward, area under the curve, sigmoid compute fit",
        "",
        "Fit: R(C) = R0 + (A - R0) / (1 + (C_mid / C)^B) (Khatri et al., arXiv 2510.13786),",
        "A the asymptote, B the efficiency; the first checkpoint's points are excluded.",
        "",
        tables["summary"],
        "",
        "## Reward at each compute checkpoint",
        "",
        tables["reward_at_checkpoints"],
        "",
        "## Training regime: the ratio, the mechanisms, the trainer-sampler gap",
        "",
        "Means over steps and seeds (`*_max`: the largest seen). Each rollout batch trains",
        "in several mini-batches, so the ratio pi_theta / pi_old moves after the first",
        "update; clip/cap fractions are shares of response tokens (of sequences, counted",
        "per token, for GSPO), `gate_weight_mean` is SAPO's mean gradient weight (1 =",
        "inactive), `policy_kl` the k3 KL(old || new) per update, `staleness_kl` the",
        "same at the first update (0 unless the batch was sampled by older weights), and",
        "`mismatch_*` compare the sampler's log-probs with the trainer's at the same",
        "weights. `mechanism_acted_steps`: the share of steps on which the algorithm's",
        "own mechanism changed at least one token's or sequence's gradient.",
        "",
        tables["off_policy"],
        "",
        "## Throughput (systems, apart from learning)",
        "",
        "![throughput](plots/throughput.png)",
        "",
        tables["throughput"],
        "",
    ]
    (out / "report.md").write_text("\n".join(lines))
