"""How cost grows: seconds per forge-zoo RL step (GRPO, beta 0, local placement) against
group size, response length and model size, each with the exponent of a log-log fit
(seconds ~ x^k: k = 1 is linear, k < 1 means fixed costs still dominate).

- group size G in 4..32: the tiny model, 32 prompts, <= 6 new tokens;
- response length 16..256: the ~10M shape (random weights, EOS ignored so every response
  has the full length), 16 prompts x 4;
- model size tiny, ~10M, ~50M: 16 prompts x 4 x 32 new tokens (EOS ignored).

    python -m benchmarks.scaling [--quick]
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import model_dir, script_main
from benchmarks.rl_step import StepSetting, forge_zoo_steps
from zoo.models.presets import ModelShape


def sweeps(quick: bool) -> dict[str, list[tuple[Any, str, StepSetting, bool]]]:
    """sweep -> [(x, model, setting, ignore_eos)]."""
    steps = {"steps": 1, "warmup": 1} if quick else {"steps": 2, "warmup": 1}
    groups = [4, 8] if quick else [4, 8, 16, 32]
    lengths = [16, 32] if quick else [16, 32, 64, 128, 256]
    models = ["tiny", "10m"] if quick else ["tiny", "10m", "50m"]
    return {
        "group size": [(g, "tiny", StepSetting(32, g, 6, **steps), False) for g in groups],
        "response length": [(n, "10m", StepSetting(16, 4, n, **steps), True) for n in lengths],
        "model size": [(m, m, StepSetting(16, 4, 32, **steps), True) for m in models],
    }


def scaling_table(root: Path, quick: bool = False) -> list[dict[str, Any]]:
    rows = []
    generators: dict[str, Any] = {}
    for sweep, points in sweeps(quick).items():
        for x, model, setting, ignore_eos in points:
            path, init = model_dir(model, root)
            r = forge_zoo_steps(
                path, setting, init=init, ignore_eos=ignore_eos, generator=generators.get(model)
            )
            generators[model] = r.pop("generator")
            params = ModelShape.from_hf_dir(path).params
            rows.append(
                {
                    "sweep": sweep,
                    "x": x,
                    "model": model,
                    "params": params,
                    "x value": params if sweep == "model size" else x,
                    **r,
                }
            )
    return rows


def exponents(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Slope of log(seconds per step) against log(x) per sweep (least squares)."""
    out = {}
    for sweep in dict.fromkeys(r["sweep"] for r in rows):
        xs = [r["x value"] for r in rows if r["sweep"] == sweep]
        ys = [r["step_seconds"] for r in rows if r["sweep"] == sweep]
        out[sweep] = float(np.polyfit(np.log(xs), np.log(ys), 1)[0])
    return out


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    slopes = exponents(rows)
    sweeps_ = list(slopes)
    fig, axes = plt.subplots(1, len(sweeps_), figsize=(4.2 * len(sweeps_), 3.6))
    for ax, sweep in zip(np.atleast_1d(axes), sweeps_, strict=True):
        pts = [r for r in rows if r["sweep"] == sweep]
        xs = [r["x value"] for r in pts]
        for phase in ("generate", "train"):
            ax.loglog(xs, [r[f"{phase}_seconds"] for r in pts], "o--", label=phase, alpha=0.7)
        ax.loglog(
            xs,
            [r["step_seconds"] for r in pts],
            "o-",
            color="k",
            label=f"step (k = {slopes[sweep]:.2f})",
        )
        ax.set_xticks(xs, [f"{x / 1e6:.1f}M" if sweep == "model size" else str(x) for x in xs])
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_xlabel("parameters" if sweep == "model size" else sweep)
        ax.set_ylabel("seconds per step")
        ax.set_title(sweep)
        ax.legend(fontsize=8)
        ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    script_main(__doc__, scaling_table, ".3f")
