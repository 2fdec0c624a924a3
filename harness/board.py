"""A board's verdict section: the tables and the report's opening sections of an
experiment run with the many-to-one design (harness/verdicts.py).

``board_tables`` turns the runs of an experiment into:

- ``verdicts``: one row per board row (the baseline, the algorithms, the controls),
  sorted by headline: its headline with its interval, its difference to the baseline with
  its interval, the verdict, the adjusted p-values, the family-level resolution (MDD) and
  power, its rank with a bootstrap interval, its headline at half the budget and at
  matched optimizer steps, whether it is still rising, its mechanism's acting share, and
  the testbed's health for it (share of groups carrying a gradient, training-reward trend);
- ``controls``: each control's verdict and whether it came out as it must;
- ``budget``: per env, the rank correlation between half and full budget.

``board_lines`` writes what report.md opens with. Experiments recorded before the design
(no ``design`` in experiment.json) keep their all-pairs analysis (harness/analysis.py).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from harness.controls import control_rows, control_verdicts, power_at_resolution
from harness.robustness import (
    decision_rule_false_positives,
    half_budget_stability,
    rank_intervals,
    step_matched_scores,
    still_rising,
)
from harness.scores import checkpoint_rows, load_runs, run_scores
from harness.stats import MIN_BOOTSTRAP_SEEDS, t_interval
from harness.verdicts import (
    ALPHA,
    DEFAULT_DELTA,
    headline_sentence,
    many_to_one,
    paired_differences,
    plan_text,
    power_plan,
    verdict_frame,
    verdict_text,
)

LEGACY = {"kind": "legacy", "pairs": "all"}
"""The design of an experiment recorded before many-to-one verdicts: every pair, Holm over
all of them, tie groups."""


def experiment_design(manifest: dict[str, Any]) -> dict[str, Any]:
    """The decision design experiment.json records (``compare`` writes it): the baseline,
    "baseline" or "all" pairs, delta, alpha, and the power plan when seeds came from one."""
    return manifest.get("design") or dict(LEGACY)


def new_design(
    baseline: str, pairs: str = "baseline", delta: float = DEFAULT_DELTA, alpha: float = ALPHA
) -> dict:
    return {
        "kind": "many_to_one",
        "baseline": baseline,
        "pairs": pairs,
        "delta": delta,
        "alpha": alpha,
    }


def seed_plan(
    out: Path, design: dict[str, Any], controls: dict | None, pilot: int, minimum: int, cap: int
) -> dict[str, Any]:
    """How many seeds the board needs (``compare --resolve``): ``power_plan`` on the pilot's
    runs (seeds 0..pilot-1 of every row) of each env; the board runs the most any env
    needs. The plan and its reasons go into experiment.json and the report."""
    runs = [r for r in load_runs(out) if r["seed"] < pilot]
    points = pd.DataFrame([row for run in runs for row in checkpoint_rows(run)])
    scores = run_scores(points)
    plans = {}
    for env, e in scores.groupby("env"):
        if design["baseline"] in set(e.algorithm):
            plans[env] = power_plan(
                e,
                design["baseline"],
                design["delta"],
                design["alpha"],
                minimum=minimum,
                cap=cap,
                outside=control_rows(controls),
            )
    if not plans:
        raise ValueError(f"{out}: the pilot has no finished run of {design['baseline']}")
    env = max(plans, key=lambda k: plans[k]["seeds"])
    plan = {**plans[env], "env": env, "by_env": {k: v["seeds"] for k, v in plans.items()}}
    plan["text"] = plan_text(plan)
    return plan


def health_table(runs: list[dict]) -> pd.DataFrame:
    """Per (env, row): whether the testbed gave it something to learn from. The share of
    sampled groups whose rewards differ (they carry a gradient; the rest are all right or
    all wrong) over the first 5 steps and over the run, and the training reward's trend:
    the least-squares slope of the sampled reward per step, in reward per 10 steps, mean
    over seeds with a 95% t-interval."""
    rows = []
    by_row: dict[tuple[str, str], list[dict]] = {}
    for run in runs:
        by_row.setdefault((run["env"], run["algorithm"]), []).append(run)
    for (env, algo), group in sorted(by_row.items()):
        early, overall, slopes = [], [], []
        for run in group:
            steps = [r for r in run["records"] if r["step"] > 0 and "reward_mean" in r]
            shares = [r["informative_group_frac"] for r in steps if "informative_group_frac" in r]
            if shares:
                early.append(float(np.mean(shares[:5])))
                overall.append(float(np.mean(shares)))
            if len(steps) >= 3:
                x = np.array([r["step"] for r in steps], dtype=float)
                y = np.array([r["reward_mean"] for r in steps], dtype=float)
                slopes.append(float(np.polyfit(x, y, 1)[0] * 10))
        mean, low, high = t_interval(np.array(slopes)) if slopes else (math.nan,) * 3
        rows.append(
            {
                "env": env,
                "algorithm": algo,
                "informative_groups_start": float(np.mean(early)) if early else math.nan,
                "informative_groups": float(np.mean(overall)) if overall else math.nan,
                "train_reward_per_10_steps": mean,
                "train_reward_trend_low": low,
                "train_reward_trend_high": high,
            }
        )
    return pd.DataFrame(rows)


def provenance_table(runs: list[dict]) -> pd.DataFrame:
    """Per (env, row): the commits and machine classes its runs were made on."""
    rows = {}
    for run in runs:
        cfg = run["config"]
        key = (run["env"], run["algorithm"])
        entry = rows.setdefault(key, {"commits": set(), "machines": set()})
        entry["commits"].add(str(cfg.get("git", {}).get("commit", "?"))[:7])
        entry["machines"].add(str(cfg.get("machine", {}).get("cpu", "?")))
    return pd.DataFrame(
        [
            {
                "env": e,
                "algorithm": a,
                "commits": ", ".join(sorted(v["commits"])),
                "machines": ", ".join(sorted(v["machines"])),
            }
            for (e, a), v in sorted(rows.items())
        ]
    )


def board_tables(
    points: pd.DataFrame,
    scores: pd.DataFrame,
    runs: list[dict],
    design: dict[str, Any],
    controls: dict[str, Any] | None,
    off_policy: pd.DataFrame,
) -> dict[str, pd.DataFrame]:
    """The verdict, control and budget tables of a many-to-one board (module docstring)."""
    baseline = design["baseline"]
    steps_ok = points["optimizer_steps"].notna().all() if "optimizer_steps" in points else False
    at_steps, matched = step_matched_scores(points) if steps_ok else (pd.DataFrame(), {})
    frames, checks = [], []
    for env, e in scores.groupby("env"):
        if baseline not in set(e.algorithm):
            continue
        table, env_checks = env_verdicts(e, design, controls)
        if len(at_steps):
            s = at_steps[at_steps.env == env].rename(columns={"headline_at_steps": "headline"})
            diffs = [
                t_interval(paired_differences(s, a, baseline).to_numpy()) for a in table.algorithm
            ]
            table[
                ["difference_at_steps", "difference_at_steps_low", "difference_at_steps_high"]
            ] = diffs
            table["matched_steps"] = matched.get(env, math.nan)
        frames.append(table.assign(env=env))
        checks += [{"env": env, **c} for c in env_checks]
    if not frames:
        return {}
    table = pd.concat(frames, ignore_index=True)
    half, budget = half_budget_stability(points)
    for extra, cols in (
        (rank_intervals(scores), ["rank", "rank_low", "rank_high"]),
        (half, ["headline_half", "rank_half", "rank_full"]),
        (still_rising(points, design["alpha"]), ["still_rising", "last_gain"]),
        (
            health_table(runs),
            ["informative_groups_start", "informative_groups", "train_reward_per_10_steps"],
        ),
        (provenance_table(runs), ["commits", "machines"]),
        (off_policy, ["mechanism_acting"]),
    ):
        present = [c for c in cols if c in extra]
        if len(extra) and present:
            table = table.merge(
                extra[["env", "algorithm", *present]], on=["env", "algorithm"], how="left"
            )
    for column in EXPECTED_COLUMNS:  # (a board too small for a statistic leaves it blank)
        if column not in table:
            table[column] = math.nan
    table["verdict_text"] = [
        "baseline" if r.role == "baseline" else verdict_text(r) for r in table.itertuples()
    ]
    table = table.sort_values(["env", "headline"], ascending=[True, False], ignore_index=True)
    table = table[["env", *(c for c in table.columns if c != "env")]]
    out = {"verdicts": table, "budget": budget}
    if checks:
        out["controls"] = pd.DataFrame(checks)
    return out


def env_verdicts(
    e: pd.DataFrame, design: dict[str, Any], controls: dict[str, Any] | None
) -> tuple[pd.DataFrame, list[dict[str, Any]]]:
    """One env's verdict rows (the baseline's first) with each row's headline interval, and
    its controls' checks (``e``: one row per run of the env)."""
    baseline, delta, alpha = design["baseline"], design["delta"], design["alpha"]
    outside = control_rows(controls)
    verdicts = verdict_frame(many_to_one(e, baseline, delta, alpha, outside=outside))
    base = {"algorithm": baseline, "verdict": "baseline", "difference": 0.0}
    table = pd.concat([pd.DataFrame([base]), verdicts], ignore_index=True)
    table["role"] = [
        "baseline" if a == baseline else "control" if a in outside else "algorithm"
        for a in table.algorithm
    ]
    headlines = e.groupby("algorithm")["headline"].agg(list)
    table[["headline", "headline_low", "headline_high"]] = [
        t_interval(np.array(headlines[a])) for a in table.algorithm
    ]
    table["runs"] = [len(headlines[a]) for a in table.algorithm]
    if not controls:
        return table, []
    checks = control_verdicts(verdicts, controls, delta)
    twin = paired_differences(e, controls["negative"]["row"], baseline).to_numpy()
    if len(twin) >= MIN_BOOTSTRAP_SEEDS:  # (resamples of fewer repeat values: biased high)
        family = max(1, len(set(e.algorithm) - {baseline} - set(outside)))
        checks.append(decision_rule_check(twin, alpha / family, controls["negative"]["row"]))
    return table, checks


def decision_rule_check(differences: np.ndarray, level: float, twin: str) -> dict[str, Any]:
    """The A/A control's test of the test: how often the decision rule, at the family's
    level, separates the baseline from itself under the twin's noise; failed when that
    rate is significantly above the level (harness/robustness.py)."""
    fpr = decision_rule_false_positives(differences, level)
    low, high = fpr["interval"]
    return {
        "control": "decision rule",
        "row": twin,
        "expect": f"false positives near {level:.4f}",
        "why": "sign-flipped resamples of the A/A differences",
        "false_positive_rate": fpr["rate"],
        "fpr_low": low,
        "fpr_high": high,
        "verdict": "passed" if low <= level else "failed",
    }


EXPECTED_COLUMNS = (
    "ci_low",
    "ci_high",
    "p_difference_adjusted",
    "p_equivalence_adjusted",
    "mdd",
    "power_at_delta",
    "equivalence_power",
    "level",
    "rank",
    "rank_low",
    "rank_high",
    "headline_half",
    "rank_half",
    "rank_full",
    "still_rising",
    "last_gain",
    "mechanism_acting",
    "informative_groups_start",
    "informative_groups",
    "train_reward_per_10_steps",
)


def _pct(v: float) -> str:
    return "n/a" if v != v else f"{v:.1%}"


def _num(v: float, fmt: str = ".3f") -> str:
    return "-" if v is None or v != v else format(v, fmt)


def _interval(mid: float, low: float, high: float, fmt: str = "+.3f") -> str:
    return f"{_num(mid, fmt)} [{_num(low, fmt)}, {_num(high, fmt)}]"


def verdict_markdown(table: pd.DataFrame) -> str:
    """The report's first table: one line per row, sorted by headline."""

    def line(r: Any) -> dict[str, Any]:
        compared = r.role != "baseline"
        return {
            "env": r.env,
            "row": r.algorithm,
            "headline [95% CI]": _interval(r.headline, r.headline_low, r.headline_high, ".3f"),
            "vs baseline [95% CI]": _interval(r.difference, r.ci_low, r.ci_high)
            if compared
            else "",
            "verdict": r.verdict_text,
            "p diff / equiv (adj.)": (
                f"{_num(r.p_difference_adjusted, '.2g')} / {_num(r.p_equivalence_adjusted, '.2g')}"
                if compared
                else ""
            ),
            "MDD (80%)": _num(r.mdd) if compared else "",
            "power at δ": _pct(r.power_at_delta) if compared else "",
            "rank [95%]": _num(r.rank, ".0f")
            + (f" [{r.rank_low:.0f}-{r.rank_high:.0f}]" if r.rank_low == r.rank_low else ""),
            "seeds": r.runs,
        }

    return pd.DataFrame([line(r) for r in table.itertuples()]).to_markdown(index=False)


def budget_markdown(table: pd.DataFrame) -> str:
    """Per row: the headline at half and full budget, the last half's gain, still rising,
    the difference to the baseline at matched optimizer steps beside the FLOP-matched one,
    the acting share and the testbed's health."""

    def line(r: Any) -> dict[str, Any]:
        compared = r.role != "baseline"
        steps = getattr(r, "difference_at_steps", math.nan)
        at_steps = (
            _interval(steps, r.difference_at_steps_low, r.difference_at_steps_high)
            if compared and steps == steps
            else ""
        )
        return {
            "env": r.env,
            "row": r.algorithm,
            "half budget (rank)": f"{_num(r.headline_half)} ({_num(r.rank_half, '.0f')})",
            "full budget (rank)": f"{r.headline:.3f} ({_num(r.rank_full, '.0f')})",
            "gain, last half": _num(r.last_gain, "+.3f"),
            "still rising": "yes" if r.still_rising is True else "no",
            "vs baseline, equal FLOPs": f"{r.difference:+.3f}" if compared else "",
            "vs baseline, equal optimizer steps [95% CI]": at_steps,
            "acting share": _pct(r.mechanism_acting),
            "groups with signal (start / all)": (
                f"{_pct(r.informative_groups_start)} / {_pct(r.informative_groups)}"
            ),
            "train reward per 10 steps": _num(r.train_reward_per_10_steps, "+.3f"),
        }

    return pd.DataFrame([line(r) for r in table.itertuples()]).to_markdown(index=False)


def power_lines(
    table: pd.DataFrame, design: dict[str, Any], controls: pd.DataFrame | None, plan: dict | None
) -> list[str]:
    """The "Can this board rank?" section: the family, the level, the resolution and power
    at that level, the seeds' plan, each control, and the board's conclusion."""
    lines = []
    delta, alpha = design["delta"], design["alpha"]
    for env, t in table.groupby("env"):
        family = t[t.role == "algorithm"]
        if family.empty:
            lines.append(f"- {env}: no algorithm besides the baseline: nothing to decide.")
            continue
        level = float(family.level.iloc[0])
        lines.append(
            f"- {env}: {len(family)} comparison{'s' if len(family) > 1 else ''} with the "
            f"baseline {design['baseline']}, paired by "
            f"seed, decided together at a family-wise error rate of {alpha:g} (Holm's step-down "
            f"with Shaffer's restriction over each comparison's two tests, harness/verdicts.py): "
            f"each is judged at {alpha:g}/{len(family)} = {level:.4f} at the strictest, and "
            f"resolution and power are stated there."
        )
        lines.append(
            f"- {env}: minimum detectable difference at that level (80% power): median "
            f"{family.mdd.median():.3f} (range {family.mdd.min():.3f}-{family.mdd.max():.3f}); "
            f"power to detect a difference of δ = {delta:g}: median "
            f"{family.power_at_delta.median():.0%} (range {family.power_at_delta.min():.0%}-"
            f"{family.power_at_delta.max():.0%}); power to "
            f"show equivalence within ±{delta:g} when there is no difference: median "
            f"{family.equivalence_power.median():.0%}."
        )
    if plan:
        lines.append(f"- {plan_text(plan)}")
    lines += provenance_lines(table)
    if controls is None or controls.empty:
        lines.append(
            "- No controls were run (compare --controls): nothing shows this board's "
            "false-positive rate or its power at δ."
        )
        return lines
    for c in controls.itertuples():
        if c.verdict == "missing":
            lines.append(f"- {c.env}: {c.control} control {c.row}: no finished runs.")
        elif c.control == "decision rule":
            lines.append(
                f"- {c.env}: the decision rule's false-positive rate on the A/A noise "
                f"({c.why}): {c.false_positive_rate:.4f} [{c.fpr_low:.4f}, {c.fpr_high:.4f}] "
                f"against its level {c.expect.split()[-1]}: **{c.verdict}**."
            )
        else:
            lines.append(
                f"- {c.env}: {c.control} control {c.row} ({c.why}): {c.difference:+.3f} "
                f"({c.gap_in_delta:.1f} x δ), came out {c.came_out}; must come out "
                f"{c.expect}: **{c.verdict}**."
            )
    for env, c in controls.groupby("env"):
        if not (c.control == "decision rule").any():
            lines.append(
                f"- {env}: the decision rule's false-positive rate is estimated from "
                f"{MIN_BOOTSTRAP_SEEDS} paired seeds of the twin up: not here."
            )
        ok = not c.verdict.isin(["failed", "missing"]).any()
        lines.append(f"- {env}: {power_at_resolution(c.to_dict('records'), delta)}.")
        lines.append(
            f"- {env}: "
            + (
                "every control came out as it must: the verdicts above are supported at these "
                "seeds."
                if ok
                else "**a control failed or is missing: this board's verdicts are not supported.**"
            )
        )
    return lines


def provenance_lines(table: pd.DataFrame) -> list[str]:
    """One commit and one CPU class per board: said in one line when so, else per row."""
    if "commits" not in table:
        return []
    commits, machines = set(table.commits), set(table.machines)
    if len(commits) == 1 and len(machines) == 1 and "," not in f"{commits}{machines}":
        return [f"- Every run at commit {commits.pop()} on {machines.pop()}."]
    per_row = "; ".join(f"{r.algorithm}: {r.commits} on {r.machines}" for r in table.itertuples())
    return [f"- **Mixed provenance** (compare --allow-mixed): {per_row}."]


def budget_lines(budget: pd.DataFrame, table: pd.DataFrame, runs: list[dict]) -> list[str]:
    """The budget section's sentences: rank stability, rows still rising, what doubling the
    budget would cost, and the matched-steps count."""
    lines = []
    for r in budget.itertuples():
        moved = (
            f"; the largest move: {r.moved} from {r.moved_from:.0f} to {r.moved_to:.0f}"
            if isinstance(r.moved, str)
            else ""
        )
        lines.append(
            f"- {r.env}: ranks at half against full budget: Kendall tau {r.kendall_tau:.2f} "
            f"over {r.n} rows{moved}."
        )
    for env, t in table.groupby("env"):
        rising = t[t.get("still_rising", pd.Series(False, index=t.index)) == True]  # noqa: E712
        names = ", ".join(rising.algorithm) or "none"
        walls = [run["records"][-1].get("seconds", math.nan) for run in runs if run["env"] == env]
        per_run = float(np.nanmean(walls)) if walls else math.nan
        cost = len(walls) * per_run / 3600
        lines.append(
            f"- {env}: still rising at the end of the budget (slope over the second half > 0, "
            f"one-sided 5%): {len(rising)} of {len(t)} rows ({names}). Each run trained "
            f"{per_run / 60:.1f} min on average; doubling the budget would cost about "
            f"{cost:.1f} more core-hours of training for these {len(walls)} runs."
        )
        if "matched_steps" in t:
            lines.append(
                f"- {env}: at equal optimizer steps every run is read at "
                f"{t.matched_steps.iloc[0]:.0f} steps (the fewest any run took), its reward "
                f"interpolated between checkpoints: a gap that holds there is the update "
                f"rule's, one that shrinks was bought by cheaper steps."
            )
    return lines


def board_lines(
    out: dict[str, pd.DataFrame], design: dict[str, Any], runs: list[dict], plan: dict | None
) -> list[str]:
    """report.md's opening: the headline sentence per env, the verdict table, the power
    and controls, the budget and step-matched view."""
    table = out["verdicts"]
    lines = []
    for env, t in table.groupby("env"):
        rows = t[t.role == "algorithm"]
        verdicts = [v for v in rows.itertuples()]
        lines.append(f"**{env}: {headline_sentence(verdicts, design['baseline'])}**")
        lines.append("")
    lines += [
        f"## Verdicts against {design['baseline']}",
        "",
        f"Each row against the baseline, paired by seed: **better** or **worse** when the "
        f"difference is significant, **equivalent within ±{design['delta']:g}** when a "
        f"difference of {design['delta']:g} or more is excluded (two one-sided tests), "
        f"**unresolved** when neither; all verdicts of an env as one family at "
        f'{design["alpha"]:g} (docs/statistics.md, "Verdicts"). The interval is the 95% '
        f"paired t-interval of the difference; MDD and power are at the family's strictest "
        f"level; rank intervals from 2,000 paired bootstrap resamples of the seeds (10 seeds "
        f"and up). Controls are judged by the same rule but are not in the family.",
        "",
        verdict_markdown(table),
        "",
        "## Can this board rank?",
        "",
        *power_lines(table, design, out.get("controls"), plan),
        "",
        "## Budget, steps and the testbed",
        "",
        *budget_lines(out["budget"], table, runs),
        "",
        "Acting share: the mean share of its units (tokens, or sequences for GSPO) whose "
        "gradient the row's mechanism changed; reported, never tuned into a band. Groups "
        "with signal: the share of sampled groups whose rewards differ (the others carry "
        "no gradient), over the first 5 steps and over the run.",
        "",
        budget_markdown(table),
        "",
    ]
    return lines
