"""A board's controls: rows whose outcome is known before the board runs, judged by the
board's own decision rule (harness/verdicts.py) at the level its family decides.

- **Negative (A/A) control**, row ``<baseline>@twin``: the baseline itself at the same seeds,
  so the same prompt stream, with independent sampling noise (``RunConfig.noise_seed``). It
  is paired with the baseline like every other row. It must not come out better or worse;
  with enough seeds it comes out "equivalent within +/-delta", which shows the board can
  call equivalence at its stated resolution. Beside it, the false-positive rate of the
  decision rule itself, from resampling the A/A differences (harness/robustness.py).
- **Positive controls**, rows ``<baseline>@half_lr`` and ``<baseline>@quarter_lr`` (by
  default): the baseline at fractions of its learning rate, which learn less within the
  same budget. Each must come out worse. The one whose gap is nearest delta shows the
  board's power at the resolution it claims, not only at several times it.

A board ranks only when every control comes out as it must (``control_verdicts``).

Boards made before this design (results/ from 2026-12-05 and earlier) ran ``grpo_twin`` at
seeds + 1000, compared unpaired, and one positive control at a quarter of the learning
rate; their experiment.json keeps that record and ``legacy_verdicts`` reads it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from zoo.core.config import ConfigError

if TYPE_CHECKING:
    import pandas as pd

    from zoo.run.run_config import RunConfig

CONTROL_NOISE_SEED = 1
"""``noise_seed`` of the A/A twin: the baseline's seeds and prompts, other sampling noise."""
LR_FACTORS = (0.5, 0.25)
"""Default learning-rate fractions of the positive controls."""
FACTOR_NAMES = {0.5: "half_lr", 0.25: "quarter_lr"}
ALPHA = 0.05
POWER_SHOWN_WITHIN = 1.5
"""A detected positive control shows the board's power at delta when its gap is at most
this many deltas (a control at 3 delta shows power at 3 delta, not at delta)."""


def twin_row(baseline: str) -> str:
    return f"{baseline}@twin"


def lr_row(baseline: str, factor: float) -> str:
    return f"{baseline}@{FACTOR_NAMES.get(factor, f'lr_x{factor:g}')}"


def control_configs(
    cfgs: list[RunConfig], baseline: str, lr_factors: tuple[float, ...] = LR_FACTORS
) -> tuple[list[RunConfig], dict]:
    """The control runs of a board whose runs are ``cfgs`` (the baseline's among them,
    tuned or not), and the record experiment.json keeps of them."""
    anchors = [c for c in cfgs if (c.run.variant or c.run.algorithm) == baseline]
    if not anchors:
        raise ConfigError(f"--controls needs the baseline {baseline!r} among the rows")
    if not lr_factors or any(not 0 < f < 1 for f in lr_factors):
        raise ConfigError(f"the positive controls' lr factors must lie in (0, 1), got {lr_factors}")
    out = []
    for c in anchors:
        out.append(c.replace(variant=twin_row(baseline), noise_seed=CONTROL_NOISE_SEED))
        out += [c.replace(lr=c.optimizer.lr * f, variant=lr_row(baseline, f)) for f in lr_factors]
    lr = anchors[0].optimizer.lr
    record = {
        "design": "many_to_one",
        "baseline": baseline,
        "negative": {
            "row": twin_row(baseline),
            "expect": "not separated",
            "why": f"{baseline} at the same seeds and prompts with independent sampling noise "
            f"(noise_seed {CONTROL_NOISE_SEED})",
        },
        "positive": [
            {
                "row": lr_row(baseline, f),
                "factor": f,
                "expect": "worse (equivalent, if its gap is below delta)",
                "why": f"{baseline} at {f:g} x its learning rate ({lr:g} -> {lr * f:g})",
            }
            for f in lr_factors
        ],
    }
    return out, record


def control_rows(controls: dict[str, Any] | None) -> list[str]:
    """The rows a control record adds (none for no record)."""
    if not controls:
        return []
    if controls.get("design") != "many_to_one":
        return legacy_rows(controls)
    return [controls["negative"]["row"], *(p["row"] for p in controls["positive"])]


def legacy_rows(controls: dict[str, Any] | None) -> list[str]:
    if not controls:
        return []
    return [controls["negative"]["rows"][1], controls["positive"]["rows"][1]]


def control_verdicts(
    verdicts: pd.DataFrame, controls: dict[str, Any], delta: float
) -> list[dict[str, Any]]:
    """Per control: its verdict against the baseline (``verdicts``: harness/verdicts.py's
    frame, controls included) and whether it came out as it must ("passed"), "failed",
    or "missing" (no finished runs). A positive control's gap is stated in units of delta:
    the board shows power at its resolution when a control with a gap near delta is found."""
    out = []
    by_row = verdicts.set_index("algorithm") if len(verdicts) else None
    specs = [("negative", controls["negative"])] + [("positive", p) for p in controls["positive"]]
    for kind, spec in specs:
        row = {"control": kind, "row": spec["row"], "expect": spec["expect"], "why": spec["why"]}
        if by_row is None or spec["row"] not in by_row.index:
            out.append({**row, "verdict": "missing"})
            continue
        v = by_row.loc[spec["row"]]
        out.append(
            {
                **row,
                "difference": float(v.difference),
                "gap_in_delta": abs(float(v.difference)) / delta,
                "p_difference_adjusted": float(v.p_difference_adjusted),
                "p_equivalence_adjusted": float(v.p_equivalence_adjusted),
                "came_out": str(v.verdict),
                "verdict": control_outcome(kind, str(v.verdict), float(v.difference), delta),
            }
        )
    return out


def control_outcome(kind: str, verdict: str, difference: float, delta: float) -> str:
    """Whether a control came out as it must.

    Negative: "passed" unless separated (better or worse). Positive: "passed" when worse;
    "failed" when better (the weaker copy won) or when unresolved although its gap is delta
    or more (the board could not separate a difference of the size it claims to resolve);
    "below delta" when its gap turned out smaller than delta and the board called it
    equivalent or left it unresolved: a correct outcome that shows no power."""
    if kind == "negative":
        return "failed" if verdict in ("better", "worse") else "passed"
    if verdict == "worse":
        return "passed"
    if verdict == "better" or (verdict == "unresolved" and abs(difference) >= delta):
        return "failed"
    return "below delta"


def power_at_resolution(checks: list[dict[str, Any]], delta: float) -> str:
    """Whether the positive controls show the board's power at delta: the detected control
    with the smallest gap, in units of delta."""
    found = [c for c in checks if c["control"] == "positive" and c["verdict"] == "passed"]
    if not found:
        return "no positive control was detected: no power is shown, even at the largest gap"
    smallest = min(found, key=lambda c: c["gap_in_delta"])
    shown = (
        "so the board's power at delta is shown"
        if smallest["gap_in_delta"] <= POWER_SHOWN_WITHIN
        else f"above {POWER_SHOWN_WITHIN:g} x delta, so no control shows power at delta itself"
    )
    return (
        f"the smallest control gap detected is {abs(smallest['difference']):.3f} "
        f"({smallest['gap_in_delta']:.1f} x delta, {smallest['row']}), {shown}"
    )


def legacy_verdicts(pairs: pd.DataFrame, controls: dict[str, Any]) -> list[dict[str, Any]]:
    """The controls of a board made before the many-to-one design, from its all-pairs
    table: the pair's difference, Holm-adjusted p over every pair, and whether it came out
    as that design required."""
    out = []
    if pairs.empty:
        return out
    for env, e in pairs.groupby("env"):
        for kind in ("negative", "positive"):
            spec = controls[kind]
            a, b = spec["rows"]
            hit = e[((e.a == a) & (e.b == b)) | ((e.a == b) & (e.b == a))]
            row = {
                "env": env,
                "control": kind,
                "rows": f"{a} vs {b}",
                "expect": spec["expect"],
                "why": spec["why"],
            }
            if hit.empty:
                out.append({**row, "verdict": "missing"})
                continue
            r = hit.iloc[0]
            diff = r.mean_a_minus_b if r.a == a else -r.mean_a_minus_b
            separated = r.p_holm < ALPHA
            passed = not separated if spec["expect"] == "tie" else separated and diff > 0
            out.append(
                {
                    **row,
                    "difference": float(diff),
                    "p_holm": float(r.p_holm),
                    "mdd_80": float(r.mdd_80),
                    "verdict": "passed" if passed else "failed",
                }
            )
    return out


def legacy_board_power(pairs: pd.DataFrame, controls: dict[str, Any] | None) -> list[str]:
    """The "Can this board rank?" lines of a board made before the many-to-one design: the
    MDD over the pairs of the algorithms (controls left out), then each control's verdict."""
    import numpy as np
    import pandas as pd

    lines = []
    control_rows = set(legacy_rows(controls))
    if pairs.empty:  # one row per env: no pair to compare
        pairs = pd.DataFrame(columns=["env", "a", "b", "mdd_80", "mean_a_minus_b", "p_holm"])
        lines.append("- One row per env: no pair to compare, no minimum detectable difference.")
    for env, e in pairs.groupby("env"):
        real = e[~e.a.isin(control_rows) & ~e.b.isin(control_rows)]
        mdd = real["mdd_80"].to_numpy(dtype=float)
        if len(real) and np.isnan(mdd).all():
            lines.append(f"- {env}: no minimum detectable difference (one seed per row).")
        elif len(real):
            lines.append(
                f"- {env}: minimum detectable difference (80% power, 5% two-sided) over "
                f"{len(real)} pairs: median {np.nanmedian(mdd):.3f}, range "
                f"{np.nanmin(mdd):.3f}-{np.nanmax(mdd):.3f}."
            )
    if not controls:
        lines.append(
            "- No controls were run (compare --controls): nothing shows this board's "
            "false-positive rate or its power."
        )
        return lines
    verdicts = legacy_verdicts(pairs, controls)
    for v in verdicts:
        if v["verdict"] == "missing":
            lines.append(f"- {v['env']}: {v['control']} control ({v['rows']}): no finished runs.")
            continue
        lines.append(
            f"- {v['env']}: {v['control']} control ({v['rows']}; {v['why']}): difference "
            f"{v['difference']:+.3f}, Holm p {v['p_holm']:.3g}, MDD {v['mdd_80']:.3f}; must "
            f"come out {v['expect']}: **{v['verdict']}**."
        )
    for env in sorted({v["env"] for v in verdicts}):
        ok = all(v["verdict"] == "passed" for v in verdicts if v["env"] == env)
        lines.append(
            f"- {env}: "
            + (
                "both controls passed: the ranking below is supported at these seeds."
                if ok
                else "**a control failed or is missing: this board cannot rank.**"
            )
        )
    return lines
