"""A board's controls: two rows whose outcome is known before the board runs.

- Negative control: ``grpo_twin`` (zoo/algorithms/controls.py), grpo under another name,
  at grpo's settings and at grpo's seeds + CONTROL_SEED_OFFSET, so an independent sample
  of the same algorithm. The board must not separate it from grpo (Holm-adjusted p >=
  0.05): a board that separates identical algorithms makes false discoveries.
- Positive control: grpo at a quarter of its learning rate (row ``grpo@quarter_lr``), at
  grpo's own seeds. Within the same budget it learns less; the board must separate it
  from grpo with grpo ahead, or it has too little power to rank anything.

A board ranks only when both come out as they must (``control_verdicts``); its minimum
detectable difference (MDD at 80% power) says how large a difference it could see.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from zoo.core.config import ConfigError

if TYPE_CHECKING:
    import pandas as pd

    from zoo.run.run_config import RunConfig

CONTROL_SEED_OFFSET = 1000
"""grpo_twin runs grpo's seeds shifted by this (an independent sample, compared unpaired)."""
ANCHOR = "grpo"
NEGATIVE = "grpo_twin"
POSITIVE = "grpo@quarter_lr"
LR_FACTOR = 0.25
ALPHA = 0.05


def control_configs(cfgs: list[RunConfig], seeds: int) -> tuple[list[RunConfig], dict]:
    """The control runs for a board whose runs are ``cfgs`` (which must hold grpo's,
    tuned or not), and the record of them that experiment.json keeps."""
    anchors = [c for c in cfgs if c.algorithm == ANCHOR and not c.variant]
    if not anchors:
        raise ConfigError("--controls needs grpo among the algorithms (the controls are its "
                          "twin and grpo at a quarter of its learning rate)")  # fmt: skip
    out = []
    for c in anchors:
        out.append(replace(c, algorithm=NEGATIVE, seed=c.seed + CONTROL_SEED_OFFSET))
        out.append(replace(c, lr=c.lr * LR_FACTOR, variant=POSITIVE))
    for c in out:
        c.validate()
    record = {
        "negative": {"rows": [ANCHOR, NEGATIVE], "expect": "tie",
                     "why": f"an exact copy of grpo at seeds + {CONTROL_SEED_OFFSET}"},
        "positive": {"rows": [ANCHOR, POSITIVE], "expect": f"{ANCHOR} better",
                     "why": f"grpo at {LR_FACTOR:g} x its learning rate ({anchors[0].lr:g} -> "
                            f"{anchors[0].lr * LR_FACTOR:g})"},
    }  # fmt: skip
    return out, record


def control_verdicts(pairs: pd.DataFrame, controls: dict[str, Any]) -> list[dict[str, Any]]:
    """Per env and control: the pair's difference, Holm-adjusted p and MDD, and whether
    it came out as it must ("passed"), "failed", or "missing" (a row without runs)."""
    out = []
    if pairs.empty:
        return out
    for env, e in pairs.groupby("env"):
        for kind, spec in controls.items():
            a, b = spec["rows"]
            hit = e[((e.a == a) & (e.b == b)) | ((e.a == b) & (e.b == a))]
            row = {"env": env, "control": kind, "rows": f"{a} vs {b}", "expect": spec["expect"],
                   "why": spec["why"]}  # fmt: skip
            if hit.empty:
                out.append({**row, "verdict": "missing"})
                continue
            r = hit.iloc[0]
            diff = r.mean_a_minus_b if r.a == a else -r.mean_a_minus_b  # a - b
            separated = r.p_holm < ALPHA
            passed = not separated if spec["expect"] == "tie" else separated and diff > 0
            out.append({**row, "difference": float(diff), "p_holm": float(r.p_holm),
                        "mdd_80": float(r.mdd_80),
                        "verdict": "passed" if passed else "failed"})  # fmt: skip
    return out


def board_power(pairs: pd.DataFrame, controls: dict[str, Any] | None) -> list[str]:
    """The report's "Can this board rank?" lines: the MDD over the pairs of the
    algorithms (controls left out), then each control's verdict."""
    import numpy as np
    import pandas as pd

    lines = []
    control_rows = {NEGATIVE, POSITIVE} if controls else set()
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
        lines.append("- No controls were run (compare --controls): nothing shows this board's "
                     "false-positive rate or its power.")  # fmt: skip
        return lines
    verdicts = control_verdicts(pairs, controls)
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
            + ("both controls passed: the ranking below is supported at these seeds."
               if ok else "**a control failed or is missing: this board cannot rank.**")
        )  # fmt: skip
    return lines
