"""`harness bench`: every performance benchmark under benchmarks/, one after another in
this process, into ``<out>/performance.md`` (tables with the machine described), a plot
per benchmark that has one, and the raw figures as JSON.

Each benchmark compares forge-zoo against a named baseline measured in the same run and
reports ratios. Hand-written analysis (profiles, what changed because of them) lives in
``performance_notes.md`` and the GPU check's figures in ``gpu_check.md``, both next to the
output and included verbatim, so a re-run never loses them.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

BENCHMARKS = (
    "rl_step",
    "generation",
    "utilisation",
    "scaling",
    "sandbox",
    "board",
    "evaluation",
    "eval_overlap",
    "parity",
)
"""Every benchmark, in report order; valid names of ``--only``."""
BY_DEFAULT = tuple(name for name in BENCHMARKS if name != "parity")
"""What ``harness bench`` runs without ``--only``: the speed benchmarks. Parity with TRL
measures agreement, not speed, and takes its own minutes (``--only parity``)."""

TARGETS = {
    "rl_step": "framework overhead over the bare loop at most 15% in synchronous mode "
    "(bare s / forge-zoo s >= 0.87); with generation and training overlapped (Monarch "
    "placement, async mode) at least 1.3x the bare loop",
    "generation": "at least 2x transformers' generate at the 50m setting; at the tiny "
    "setting, report honestly",
    "utilisation": "at least 30% of the measured float32 matmul peak on the 50m shape",
    "scaling": "no target: where the curves bend, and why",
    "sandbox": "a code verdict (candidate and tests in two sandboxes) at no less than half "
    "the executions per second of the one-process baseline",
    "board": "no fixed ratio: a board's rows should cost little beyond their training "
    "steps (start-up paid once per worker, evaluation a minor share)",
    "evaluation": "adopt one call for greedy and sampled evaluation if it is faster with "
    "the same tokens",
    "eval_overlap": "the same numbers with the overlap on; make it the default where it "
    "makes a run faster",
    "parity": "not speed: agreement with TRL's GRPOTrainer (loss and gradient within float "
    "rounding on the same inputs; learning equivalent within +/-0.02; docs/parity.md)",
}


def run_benchmark(name: str, root: Path, quick: bool) -> list[dict[str, Any]]:
    if name == "rl_step":
        from benchmarks.rl_step import table

        return table(root, quick)
    if name == "generation":
        from benchmarks.generation import generation_table

        return generation_table(root, quick)
    if name == "utilisation":
        from benchmarks.utilisation import utilisation_table

        return utilisation_table(root, quick)
    if name == "scaling":
        from benchmarks.scaling import scaling_table

        return scaling_table(root, quick)
    if name == "board":
        from benchmarks.board import board_table

        return board_table(root, quick)
    if name == "evaluation":
        from benchmarks.evaluation import evaluation_table

        return evaluation_table(root, quick)
    if name == "eval_overlap":
        from benchmarks.eval_overlap import eval_overlap_table

        return eval_overlap_table(root, quick)
    if name == "parity":
        from benchmarks.parity.run import parity_table

        return parity_table(root, quick)
    from benchmarks.sandbox_bench import sandbox_table

    return sandbox_table(n=6 if quick else 40)


def plot_rl_step(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 3))
    names = [r["system"] for r in rows]
    family = {"forge-zoo": "C0", "bare": "C7", "TRL": "C1"}  # one colour per system
    colors = [next(c for k, c in family.items() if k in name) for name in names]
    ax.barh(names, [r["s/step"] for r in rows], color=colors)
    for i, r in enumerate(rows):
        ax.text(r["s/step"], i, f" {r['s/step']:.3f} s", va="center", fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("seconds per RL step (lower is better)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_report(sections: dict[str, dict[str, Any]], out: Path) -> Path:
    """performance.md from each benchmark's section ({"rows", "command", "date",
    "minutes", "machine"}), in BENCHMARKS order, with the notes and the GPU check included;
    the sections also go to perf/bench.json, from which a partial re-run (--only) starts."""
    from benchmarks.scaling import exponents, plot

    plots = out / "perf"
    plots.mkdir(parents=True, exist_ok=True)
    lines = [
        "# Performance",
        "",
        "Figures are measured, each with its command, machine and denominator; ratios are "
        "against a baseline measured in the same run. Speed claims live here and in "
        "`benchmarks/`, never in tests. Regenerate with `python -m harness bench`.",
        "",
    ]
    titles = {
        "rl_step": "1. RL step throughput",
        "generation": "2. Generation",
        "utilisation": "3. Training utilisation",
        "scaling": "4. How cost grows",
        "sandbox": "5. Sandbox executions",
        "board": "6. Board runs",
        "evaluation": "7. Evaluation batching",
        "eval_overlap": "8. Evaluation overlapped with training",
        "parity": "9. Parity with TRL's GRPOTrainer",
    }
    for name in [n for n in BENCHMARKS if n in sections]:
        section = sections[name]
        rows = section["rows"]
        module = "sandbox_bench" if name == "sandbox" else name
        doc = __import__(f"benchmarks.{module}", fromlist=["_"]).__doc__ or ""
        measured = (
            f"Measured by `{section['command']}` on {section['date']} "
            f"({section['minutes']:.1f} min); machine: {section['machine']}."
        )
        lines += [
            f"## {titles[name]}",
            "",
            doc.split("\n\n")[0].replace("\n", " "),
            "",
            f"Target: {TARGETS[name]}.",
            "",
            measured,
            "",
        ]
        table = pd.DataFrame(rows)
        if name == "scaling":
            table = table[
                [
                    "sweep",
                    "x",
                    "model",
                    "params",
                    "step_seconds",
                    "generate_seconds",
                    "train_seconds",
                    "response_tokens",
                ]
            ]
            slopes = exponents(rows)
            plot(rows, plots / "scaling.png")
            lines += [
                "Fitted exponents (seconds per step ~ x^k): "
                + ", ".join(f"{k}: k = {v:.2f}" for k, v in slopes.items()),
                "",
                "![scaling](perf/scaling.png)",
                "",
            ]
        if name == "rl_step":
            plot_rl_step(rows, plots / "rl_step.png")
            lines += ["![rl step](perf/rl_step.png)", ""]
        lines += [table.to_markdown(index=False, floatfmt=".3g"), ""]
    for extra in ("performance_notes.md", "gpu_check.md"):
        if (out / extra).exists():
            lines += [(out / extra).read_text().strip(), ""]
    (plots / "bench.json").write_text(json.dumps(sections, indent=2, default=str))
    report = out / "performance.md"
    report.write_text("\n".join(lines))
    return report


def run_all(
    names: list[str], out: Path, quick: bool, command: str, log: Callable[[str], None] = print
) -> Path:
    """Run ``names`` and rewrite the report; sections of other benchmarks are kept from
    ``out/perf/bench.json`` (each says when and how it was measured)."""
    from benchmarks.common import machine_line

    unknown = sorted(set(names) - set(BENCHMARKS))
    if unknown:
        from zoo.core.config import ConfigError

        raise ConfigError(f"unknown benchmark(s) {unknown}; valid: {', '.join(BENCHMARKS)}")
    previous = out / "perf" / "bench.json"
    sections = json.loads(previous.read_text()) if previous.exists() else {}
    with tempfile.TemporaryDirectory(prefix="bench-") as tmp:
        for name in names:
            log(f"[bench] {name} ...")
            machine = machine_line()
            start = time.perf_counter()
            rows = run_benchmark(name, Path(tmp), quick)
            minutes = (time.perf_counter() - start) / 60
            date = time.strftime("%Y-%m-%d %H:%M")
            sections[name] = {
                "rows": rows,
                "command": command,
                "minutes": minutes,
                "date": date,
                "machine": machine,
            }
            log(f"[bench] {name} done in {minutes * 60:.0f} s")
    return write_report(sections, out)
