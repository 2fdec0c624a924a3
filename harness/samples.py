"""Readable samples: one static HTML page per run from its samples.jsonl (what the policy
wrote at each step and each evaluation point) beside its curves, with a step selector, a
train/eval filter and a text search. Pages are self-contained (inline CSS, script and
SVG, no network), so they open offline from the file system. The compare report links
them from ``samples/index.html``; the HTML leaderboard links a page per experiment
(leaderboards/samples/) with each row's last evaluation samples and links to these.

The pages are built on demand and never committed (git ignores them): they are made
entirely from samples.jsonl and metrics.jsonl, which are committed, and they weighed a
third of the tree. `harness samples PATH` builds them for a run or an experiment;
`harness analyze` and `harness leaderboard` build them too."""

from __future__ import annotations

import json
import math
import os
from html import escape
from pathlib import Path
from typing import Any

from harness.runner import read_metrics
from zoo.run.runlog import read_samples

COLUMNS = (
    "step",
    "kind",
    "index",
    "prompt",
    "completion",
    "reference",
    "reward",
    "advantage",
    "kept",
    "finish_reason",
    "policy_version",
)
"""samples.jsonl fields shown, in this order (absent ones stay empty)."""

STYLE = (
    "body{font-family:sans-serif;margin:1.5em}table{border-collapse:collapse}"
    "td,th{border:1px solid #ccc;padding:3px 6px;vertical-align:top;font-size:13px}"
    "td.text{white-space:pre-wrap;font-family:monospace;max-width:36em;overflow-wrap:anywhere}"
    "tr.eval{background:#f3f7ff}.controls{margin:1em 0}.controls>*{margin-right:1em}"
)

SCRIPT = """
function applyFilter() {
  const step = document.getElementById('step').value;
  const kind = document.getElementById('kind').value;
  const q = document.getElementById('q').value.toLowerCase();
  let shown = 0;
  for (const row of document.querySelectorAll('#samples tbody tr')) {
    const ok = (step === 'all' || row.dataset.step === step) &&
      (kind === 'all' || row.dataset.kind === kind) &&
      (!q || row.textContent.toLowerCase().includes(q));
    row.hidden = !ok;
    if (ok) shown += 1;
  }
  document.getElementById('count').textContent = shown + ' of ' + __TOTAL__ + ' samples';
}
for (const id of ['step', 'kind', 'q']) {
  document.getElementById(id).addEventListener('input', applyFilter);
}
applyFilter();
"""


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4g}"
    return escape(str(value))


def nice_ticks(lo: float, hi: float, count: int = 5, integer: bool = False) -> list[float]:
    """About ``count`` round tick values (steps of 1, 2, 2.5 or 5 times a power of ten)
    covering [``lo``, ``hi``]; whole numbers only when ``integer``."""
    if not hi > lo:
        hi = lo + 1
    raw = (hi - lo) / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw * (1 - 1e-9))
    if integer:
        step = max(1.0, round(step))
    first = math.ceil(lo / step - 1e-9)
    last = math.floor(hi / step + 1e-9)
    return [round(k * step, 10) for k in range(first, last + 1)]


CURVES = {
    "reward_mean": ("#1f77b4", "train reward (reward_mean)"),
    "eval_reward": ("#d62728", "held-out greedy reward (eval_reward)"),
}
"""The metrics a samples page plots against step: colour and legend label."""


def curves_svg(records: list[dict[str, Any]], width: int = 640, height: int = 240) -> str:
    """An inline SVG of a run's train reward (``reward_mean``) and held-out greedy reward
    (``eval_reward``) against step, with ticks and labels on both axes, a grid at the
    reward ticks and a legend; empty when there is nothing to draw."""
    series = {name: [(r["step"], r[name]) for r in records if name in r] for name in CURVES}
    points = [p for pts in series.values() for p in pts]
    if not points:
        return ""
    x_max = max(1, max(s for s, _ in points))
    y_lo, y_hi = min(0.0, min(v for _, v in points)), max(1.0, max(v for _, v in points))
    left, right, top, bottom = 56, 16, 30, 44
    plot_w, plot_h = width - left - right, height - top - bottom

    def x_of(step: float) -> float:
        return left + plot_w * step / x_max

    def y_of(value: float) -> float:
        return top + plot_h - plot_h * (value - y_lo) / (y_hi - y_lo)

    parts = [
        f"<svg id='curves' width='{width}' height='{height}' role='img' "
        "aria-label='reward against step' font-family='sans-serif' font-size='12'>",
        f"<rect x='0' y='0' width='{width}' height='{height}' fill='white'/>",
    ]
    for v in nice_ticks(y_lo, y_hi):
        y = y_of(v)
        parts += [
            f"<line class='grid' x1='{left}' y1='{y:.1f}' x2='{width - right}' y2='{y:.1f}' "
            "stroke='#e5e5e5'/>",
            f"<line class='tick y' x1='{left - 5}' y1='{y:.1f}' x2='{left}' y2='{y:.1f}' "
            "stroke='#444'/>",
            f"<text class='tick-label y' x='{left - 8}' y='{y + 4:.1f}' "
            f"text-anchor='end'>{v:g}</text>",
        ]
    for s in nice_ticks(0, x_max, count=8, integer=True):
        x = x_of(s)
        parts += [
            f"<line class='tick x' x1='{x:.1f}' y1='{top + plot_h}' x2='{x:.1f}' "
            f"y2='{top + plot_h + 5}' stroke='#444'/>",
            f"<text class='tick-label x' x='{x:.1f}' y='{top + plot_h + 18}' "
            f"text-anchor='middle'>{s:g}</text>",
        ]
    parts += [
        f"<line x1='{left}' y1='{top + plot_h}' x2='{width - right}' y2='{top + plot_h}' "
        "stroke='#444'/>",
        f"<line x1='{left}' y1='{top}' x2='{left}' y2='{top + plot_h}' stroke='#444'/>",
        f"<text class='axis-label x' x='{left + plot_w / 2:.1f}' y='{height - 6}' "
        "text-anchor='middle'>training step</text>",
        f"<text class='axis-label y' x='14' y='{top + plot_h / 2:.1f}' text-anchor='middle' "
        f"transform='rotate(-90 14 {top + plot_h / 2:.1f})'>reward</text>",
    ]
    for i, (name, pts) in enumerate(series.items()):
        color, label = CURVES[name]
        if pts:
            path = " ".join(f"{x_of(s):.1f},{y_of(v):.1f}" for s, v in pts)
            parts.append(
                f"<polyline class='curve' fill='none' stroke='{color}' "
                f"stroke-width='2' points='{path}'/>"
            )
            parts += [
                f"<circle cx='{x_of(s):.1f}' cy='{y_of(v):.1f}' r='2.5' fill='{color}'/>"
                for s, v in pts
            ]
        x = left + 8 + 260 * i
        parts.append(
            f"<line x1='{x}' y1='{top - 14}' x2='{x + 18}' y2='{top - 14}' "
            f"stroke='{color}' stroke-width='2'/><text class='legend' x='{x + 24}' "
            f"y='{top - 10}'>{label}</text>"
        )
    parts.append("</svg>")
    return "".join(parts)


def samples_table(rows: list[dict[str, Any]], table_id: str = "samples") -> str:
    """The rows as an HTML table, each ``<tr>`` carrying its step and kind as data
    attributes (for the page's filter)."""
    head = "".join(f"<th>{c}</th>" for c in COLUMNS)
    body = []
    for r in rows:
        cells = "".join(
            f"<td class='text'>{_cell(r.get(c))}</td>"
            if c in ("prompt", "completion", "reference")
            else f"<td>{_cell(r.get(c))}</td>"
            for c in COLUMNS
        )
        kind = escape(str(r.get("kind", "")))
        body.append(
            f"<tr class='{kind}' data-step='{r.get('step')}' data-kind='{kind}'>{cells}</tr>"
        )
    return (
        f"<table id='{table_id}'><thead><tr>{head}</tr></thead>"
        f"<tbody>{''.join(body)}</tbody></table>"
    )


def samples_page(run_dir: Path, title: str | None = None) -> str:
    """A run's samples page: its curves, then every row of its samples.jsonl in a table
    with a step selector (default: the last step), a train/eval filter and a search."""
    rows = read_samples(run_dir)
    records = read_metrics(run_dir)
    steps = sorted({r["step"] for r in rows})
    options = "<option value='all'>all steps</option>" + "".join(
        f"<option value='{s}'{' selected' if s == steps[-1] else ''}>step {s}"
        f"{' (eval)' if any(r['step'] == s and r.get('kind') == 'eval' for r in rows) else ''}"
        "</option>"
        for s in steps
    )
    title = title or run_dir.name
    script = SCRIPT.replace("__TOTAL__", json.dumps(len(rows)))
    return (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>samples: {escape(title)}</title><style>{STYLE}</style></head><body>"
        f"<h1>Samples of {escape(title)}</h1>"
        "<p>Train rows: the first groups of each step's first sampling round (reward from "
        "the env, the algorithm's advantage, whether its group was kept). Eval rows: the "
        "first held-out problems at each evaluation point, greedy completion beside the "
        "reference answer.</p>"
        f"{curves_svg(records)}"
        "<div class='controls'><label>step <select id='step'>"
        f"{options}</select></label><label>kind <select id='kind'><option value='all'>all"
        "</option><option value='train'>train</option><option value='eval'>eval</option>"
        "</select></label><label>search <input id='q' type='search'></label>"
        "<span id='count'></span></div>"
        f"{samples_table(rows)}<script>{script}</script></body></html>"
    )


def run_page_name(run_dir: Path) -> str:
    """The file name of a run's samples page (the compare report links it by this name)."""
    return f"{run_dir.name}.html"


def write_run_page(run_dir: Path, out: Path) -> Path:
    """``out``/<run>.html, the run's samples page; ``out`` is made when missing."""
    out.mkdir(parents=True, exist_ok=True)
    page = out / run_page_name(run_dir)
    page.write_text(samples_page(run_dir), encoding="utf-8")
    return page


def runs_with_samples(experiment: Path) -> list[Path]:
    """The run folders of ``experiment`` that kept samples (runs recorded before
    samples.jsonl existed have none)."""
    return [d for d in sorted((experiment / "runs").glob("*")) if read_samples(d)]


def write_samples_pages(experiment: Path, out: Path | None = None) -> Path | None:
    """A page per run of ``experiment`` with a samples.jsonl, and ``index.html`` (the
    reward plot, the runs, links), written into ``out`` (default: the experiment's
    samples/, where its report.md links them); None when no run kept samples (runs
    recorded before samples.jsonl)."""
    run_dirs = runs_with_samples(experiment)
    if not run_dirs:
        return None
    out = out if out is not None else experiment / "samples"
    links = []
    for d in run_dirs:
        page = write_run_page(d, out)
        evals = [r["eval_reward"] for r in read_metrics(d) if "eval_reward" in r]
        last = f"{evals[-1]:.3f}" if evals else "-"
        links.append(
            f"<tr><td><a href='{escape(page.name)}'>{escape(d.name)}</a></td>"
            f"<td>{len(read_samples(d))}</td><td>{last}</td></tr>"
        )
    plot = experiment / "plots" / "reward_vs_flops.png"
    src = Path(os.path.relpath(plot.absolute(), out.absolute())).as_posix()
    image = f"<p><img alt='reward vs FLOPs' src='{escape(src)}'></p>"
    index = (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>samples: {escape(experiment.name)}</title><style>{STYLE}img{{max-width:"
        f"720px}}</style></head><body><h1>Samples of {escape(experiment.name)}</h1>"
        f"{image if plot.exists() else ''}<table id='runs'><thead><tr><th>run</th>"
        "<th>samples</th><th>last eval_reward</th></tr></thead><tbody>"
        f"{''.join(links)}</tbody></table></body></html>"
    )
    (out / "index.html").write_text(index, encoding="utf-8")
    return out / "index.html"


def last_eval_samples(run_dir: Path) -> list[dict[str, Any]]:
    """The eval rows of a run's last evaluation point."""
    rows = [r for r in read_samples(run_dir) if r.get("kind") == "eval"]
    last = max((r["step"] for r in rows), default=None)
    return [r for r in rows if r["step"] == last]
