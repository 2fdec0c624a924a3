"""The HTML leaderboard as a reader meets it: one compact table per experiment (its own tie
groups and controls), the compute fits and provenance one click away (<details>), every
seed's curve with labelled axes, a samples page for every experiment (also one whose runs
kept no samples), and, in headless Chromium at 1400 px, no horizontal scrolling.

The board is built from two synthetic experiments written as `compare` writes them (no
training): ten seeds of seven rows without samples, as the committed 10-seed board is, and
four rows with both controls and samples."""

from __future__ import annotations

import itertools
import json
import re
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest

import harness.analysis
from harness.analysis import seed_curves_figure, write_analysis
from harness.board import new_design
from harness.leaderboard import build_leaderboards
from harness.samples import curves_svg
from zoo.services.ledger import PHASES

BUDGET, POINTS = 2e12, 8
TEN_SEEDS = ("grpo", "dr_grpo", "dapo", "cispo", "gspo", "sapo", "grpo@mini_batches=4")
CONTROLLED = ("grpo", "grpo_twin", "grpo@quarter_lr", "dapo")
VERDICT_ROWS = ("grpo", "dapo", "gspo")
BOARD_COLUMNS = [
    "algorithm",
    "tie group",
    "headline [95% t-CI]",
    "pass@1",
    "pass@4",
    "pass@8",
    "seeds",
    "controls",
]
WIDTH = 1400


def reward(row: str, seed: int, point: int) -> float:
    """Held-out reward at checkpoint ``point``: 0.25 at the start, rising by a row- and
    seed-specific amount (grpo@quarter_lr learns least, as a positive control must)."""
    if point == 0:
        return 0.25
    rate = {"grpo@quarter_lr": 0.004, "dapo": 0.018}.get(row, 0.014)
    return 0.25 + rate * point + 0.003 * ((seed * 7 + sum(map(ord, row))) % 5) + 0.001 * (point % 2)


def write_run(exp: Path, row: str, seed: int, samples: bool) -> str:
    algorithm, _, _ = row.partition("@")
    name = f"{row}__arithmetic__seed{seed}"
    run_dir = exp / "runs" / name
    run_dir.mkdir(parents=True)
    run = {
        "algorithm": algorithm,
        "variant": row if "@" in row else None,
        "env": "arithmetic",
        "seed": seed,
        "model": "tiny",
        "steps": 1000,
        "eval_every": 25,
        "budget_flops": BUDGET,
        "eval_points": POINTS,
        "mini_batches": 4,
        "epochs": 1,
    }
    config = {
        "run": run,
        "git": {"commit": "ab" * 20, "dirty": False},
        "start_weights_sha256": "f" * 64,
        "created": "2026-11-01T10:00:00+00:00",
        "versions": {"torch": "test"},
    }
    (run_dir / "config.json").write_text(json.dumps(config))
    (run_dir / "complete.json").write_text(json.dumps({"finished": "2026-11-01T11:00:00+00:00"}))
    records = []
    for k in range(POINTS + 1):
        flops = BUDGET * k / POINTS
        record: dict = {
            "step": 10 * k,
            "samples": 640 * k,
            "flops": flops,
            "seconds": 5.0 * k,
            "eval_reward": reward(row, seed, k),
            "eval_pass_at_1": 0.2,
            "eval_pass_at_4": 0.5,
            "eval_pass_at_8": 0.7,
            "eval_mean_at_8": 0.2,
        }
        if k:
            record["reward_mean"] = reward(row, seed, k) - 0.05
            for p in PHASES:
                record.update(
                    {f"{p}_flops": flops / len(PHASES), f"{p}_seconds": 0.1, f"{p}_tokens": 100}
                )
        records.append(record)
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    if samples:  # long prompts and completions: the samples tables must still fit the window
        rows = [
            {
                "step": 10 * POINTS,
                "kind": "eval",
                "index": i,
                "prompt": f"Compute {' + '.join(str(n) for n in range(i, i + 40))}. Answer:",
                "completion": "the sum is " + "9" * 120,
                "reference": str(sum(range(i, i + 40))),
                "reward": 0.0,
            }
            for i in range(4)
        ]
        (run_dir / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return name


def write_experiment(
    results: Path,
    name: str,
    rows: tuple[str, ...],
    seeds: int,
    samples: bool,
    controls: dict | None = None,
    design: dict | None = None,
) -> Path:
    exp = results / name
    runs = [write_run(exp, row, seed, samples) for row in rows for seed in range(seeds)]
    manifest = {
        "command": f"python -m harness compare {' '.join(rows)} --seeds {seeds} "
        f"--out {exp} (synthetic)",
        "created": "2026-11-01T09:00:00+00:00",
        "versions": {"torch": "test"},
        "machine": {"cpu": "test", "cores": 1, "memory_gib": 1, "torch_threads": 1},
        "runs": {r: {} for r in runs},
    }
    if controls:
        manifest["controls"] = controls
    if design:
        manifest["design"] = design
    (exp / "experiment.json").write_text(json.dumps(manifest))
    return exp


CONTROLS = {
    "negative": {"rows": ["grpo", "grpo_twin"], "expect": "tie", "why": "a copy of grpo"},
    "positive": {
        "rows": ["grpo", "grpo@quarter_lr"],
        "expect": "grpo better",
        "why": "grpo at 0.25 x its learning rate",
    },
}


@pytest.fixture(scope="module")
def board(tmp_path_factory) -> Path:
    """leaderboards/ built from the two synthetic experiments (their tables from
    write_analysis, with few bootstrap resamples: the fits are not checked here)."""
    root = tmp_path_factory.mktemp("board")
    results = root / "results"
    experiments = [
        write_experiment(results, "ten-seeds", TEN_SEEDS, seeds=10, samples=False),
        write_experiment(
            results, "with-controls", CONTROLLED, seeds=3, samples=True, controls=CONTROLS
        ),
        # the one that ranks: named to sort last, it must still come first
        write_experiment(
            results, "z-verdicts", VERDICT_ROWS, seeds=10, samples=False, design=new_design("grpo")
        ),
    ]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(harness.analysis, "FIT_BOOTSTRAP_REPS", 5)
        for exp in experiments:
            write_analysis(exp)
    build_leaderboards(results, root / "leaderboards")
    return root / "leaderboards"


def sections(html: str) -> dict[str, str]:
    """Each experiment's <section> of the page, by experiment name."""
    found = re.findall(
        r"<section class='experiment' id='experiment-([^']+)'>(.*?)</section>", html, re.S
    )
    return dict(found)


def cells(table: str, tag: str = "td") -> list[list[str]]:
    rows = re.findall(r"<tr>(.*?)</tr>", table, re.S)
    return [
        [re.sub(r"<[^>]+>", "", c) for c in re.findall(rf"<{tag}[^>]*>(.*?)</{tag}>", r, re.S)]
        for r in rows
    ]


def test_a_verdict_board_states_its_resolution_at_its_familys_level(board):
    """The Markdown board of a many-to-one experiment gives each row the MDD its verdict was
    decided at (tables/verdicts.csv's ``mdd``: 80% power at the family's level), not one
    pair's at 5%, which the older boards state and label so."""
    text = next(board.glob("*.md")).read_text()
    verdict_part = text.split("## z-verdicts", 1)[1].split("\n## ", 1)[0]
    header = next(line for line in verdict_part.splitlines() if line.startswith("| verdict"))
    columns = [c.strip() for c in header.strip("|").split("|")]
    assert "MDD 80% (family level)" in columns and "MDD 80% (one pair)" not in columns
    at = columns.index("MDD 80% (family level)")
    shown = {}
    for line in verdict_part.splitlines():
        cells_ = [c.strip() for c in line.strip("|").split("|")]
        if len(cells_) == len(columns) and cells_[2] in VERDICT_ROWS:
            shown[cells_[2]] = cells_[at]
    exp = board.parent / "results" / "z-verdicts"
    table = pd.read_csv(exp / "tables" / "verdicts.csv").set_index("algorithm")
    for row in ("dapo", "gspo"):
        assert shown[row] == f"{table.loc[row, 'mdd']:.3f}", (row, shown)
    older = text.split("## ten-seeds", 1)[1].split("\n## ", 1)[0]
    assert "MDD 80% (one pair)" in older and "MDD 80% (family level)" not in older


def test_one_compact_table_per_experiment_with_fits_and_provenance_one_click_away(board):
    html = (board / "index.html").read_text()
    found = sections(html)
    assert list(found) == ["z-verdicts", "ten-seeds", "with-controls"]  # what ranks first
    verdicts = re.search(r"<table class='board'>.*?</table>", found.pop("z-verdicts"), re.S)
    header, *body = cells(verdicts.group(0), "th")[:1] + cells(verdicts.group(0))[1:]
    assert header[1] == "verdict vs baseline [95% CI]"
    by_row = {r[0]: r[1] for r in body}
    assert by_row["grpo"] == "baseline" and set(by_row) == set(VERDICT_ROWS)
    assert by_row["dapo"].split(" ")[0] in ("better", "worse", "equivalent", "unresolved")
    assert "[" in by_row["dapo"]  # the difference with its interval
    for name, section in found.items():
        tables = re.findall(r"<table class='board'>.*?</table>", section, re.S)
        assert len(tables) == 1, name  # its own table, with its own tie groups
        assert cells(tables[0], "th")[0] == BOARD_COLUMNS
        body = cells(tables[0])[1:]
        rows = TEN_SEEDS if name == "ten-seeds" else CONTROLLED
        assert sorted(r[0] for r in body) == sorted(rows)
        assert all(len(c) <= 24 for r in body for c in r[:7]), body  # short cells only
        assert all(r[1].isdigit() for r in body)  # tie groups
        assert all(r[6] == ("10" if name == "ten-seeds" else "3") for r in body)
        # one click away: the fits, statistics, pairs and provenance sit in <details>
        summaries = re.findall(r"<summary>([^<]*)</summary>", section)
        assert any(s.startswith("Compute fits") for s in summaries), summaries
        assert any(s.startswith("Provenance") for s in summaries), summaries
        assert any(s.startswith("Pairs") for s in summaries), summaries
        fits = re.search(r"<details class='fits'>.*?</details>", section, re.S).group(0)
        assert "A withheld because" in fits and all(row in fits for row in rows)
        provenance = re.search(r"<details class='provenance'>.*?</details>", section, re.S)
        assert f"arithmetic__grpo__{name}" in provenance.group(0)  # row ids to reproduce
        assert ("ab" * 20)[:10] in provenance.group(0)  # commits
        # every seed's curve, embedded
        assert section.count("<figure><img") == 1 and "data:image/png;base64," in section
    # the controls: the anchor, each control's verdict; an experiment without: one cell
    table = re.search(r"<table class='board'>.*?</table>", found["with-controls"], re.S)
    controlled = {r[0]: r[7] for r in cells(table.group(0))[1:]}
    assert controlled["grpo"] == "anchor of the controls"
    assert controlled["grpo_twin"].startswith("negative: passed, Holm p")
    assert controlled["grpo@quarter_lr"].startswith("positive: passed, Holm p")
    assert controlled["dapo"] == ""
    assert found["ten-seeds"].count("rowspan='7'") == 1 and "none run" in found["ten-seeds"]


def test_every_experiment_links_a_samples_page_also_without_samples(board):
    html = (board / "index.html").read_text()
    for name, section in sections(html).items():
        link = re.search(r"<a href='(samples/[^']+)'>samples</a>", section)
        assert link, name
        page = board / link.group(1)
        text = page.read_text()
        assert "back to the board" in text
        if name in ("ten-seeds", "z-verdicts"):  # no samples.jsonl: said, with the way out
            rows = TEN_SEEDS if name == "ten-seeds" else VERDICT_ROWS
            assert text.count("No samples") == len(rows)
            assert f"python -m harness reproduce tiny__arithmetic__grpo__{name}" in text
        else:
            assert text.count("last evaluation</h2>") == len(CONTROLLED)
            runs = re.findall(r"<a href='([^']+\.html)'>", text)
            assert len(runs) == 3 * len(CONTROLLED)
            assert all((page.parent / r).resolve().exists() for r in runs), runs


def test_seed_curves_have_a_panel_per_row_every_seed_and_labelled_axes():
    curves = pd.DataFrame(
        [
            {"algorithm": a, "seed": s, "flops": 1e11 * k, "reward": 0.1 * k + s}
            for a in TEN_SEEDS
            for s in range(10)
            for k in range(5)
        ]
    )
    fig = seed_curves_figure(curves, "flops", "model FLOPs (ledger)", order=list(TEN_SEEDS))
    fig.canvas.draw()
    panels = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title() for ax in panels] == list(TEN_SEEDS)
    for i, ax in enumerate(panels):
        assert len(ax.get_lines()) == 10 + 1  # every seed, and the mean
        assert [t.get_text() for t in ax.get_xticklabels() if t.get_text()], i
        assert [t.get_text() for t in ax.get_yticklabels() if t.get_text()], i
    assert {ax.get_ylabel() for ax in panels[::5]} == {"held-out reward"}  # the first column
    assert {ax.get_xlabel() for ax in panels[-5:]} == {"model FLOPs (ledger)"}  # bottom ones
    harness.analysis.plt.close(fig)


def test_the_samples_page_chart_has_ticks_and_axis_titles():
    records = [{"step": s, "reward_mean": 0.1 * s} for s in range(1, 31)]
    records += [{"step": s, "eval_reward": 0.05 * s} for s in (0, 10, 20, 30)]
    svg = curves_svg(records)
    x_labels = re.findall(r"class='tick-label x'[^>]*>([^<]+)<", svg)
    y_labels = re.findall(r"class='tick-label y'[^>]*>([^<]+)<", svg)
    assert x_labels[0] == "0" and float(x_labels[-1]) <= 30 and len(x_labels) >= 4
    assert y_labels[0] == "0" and float(y_labels[-1]) >= 3 and len(y_labels) >= 4
    assert all(float(b) > float(a) for a, b in itertools.pairwise(x_labels))
    assert ">training step</text>" in svg and ">reward</text>" in svg
    assert "train reward (reward_mean)" in svg and "held-out greedy reward" in svg


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


MEASURE = """<script>
window.addEventListener('load', () => {
  const root = document.documentElement;
  const measure = () => ({scroll: root.scrollWidth, client: root.clientWidth,
    widest: Math.max(0, ...[...document.querySelectorAll('table, img, svg, pre')]
      .map(e => e.getBoundingClientRect().right)),
    spilled: [...document.querySelectorAll('td, th')]  // text running out of its cell
      .filter(c => c.scrollWidth > c.clientWidth + 1).map(c => c.textContent.slice(0, 40))});
  const board = [...document.querySelectorAll('table.board tbody tr')]
    .map(r => r.getBoundingClientRect().height);
  const img = document.querySelector('figure img');
  const first_plot = img ? img.getBoundingClientRect().top + window.scrollY : null;
  const table = document.querySelector('table.board');
  const first_table = table ? {bottom: table.getBoundingClientRect().bottom + window.scrollY,
    header: table.querySelector('thead').textContent} : null;
  const closed = measure();
  document.querySelectorAll('details').forEach(d => { d.open = true; });
  const open = measure();
  document.body.setAttribute('data-check', JSON.stringify({closed, open, board,
    inner: window.innerWidth, details: document.querySelectorAll('details').length,
    first_plot, first_table,
    images: [...document.images].map(i => i.naturalWidth)}));
});
</script>"""


def measure(page: Path, screenshot: Path) -> dict:
    """``page`` at 1400 px in headless Chromium: the page's widths with every <details>
    closed and open, the height of each board row, where the first plot starts; and a
    screenshot. (A probe copy of the page sits beside it, so its links resolve alike.)"""
    probe = page.with_name(f"_probe_{page.name}")
    probe.write_text(page.read_text().replace("</body>", MEASURE + "</body>"))
    flags = [
        chromium(),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        f"--window-size={WIDTH},900",
        "--virtual-time-budget=5000",
    ]
    try:
        dom = subprocess.run(
            [*flags, "--dump-dom", probe.as_uri()],
            capture_output=True,
            text=True,
            timeout=180,
            check=True,
        ).stdout
        subprocess.run(
            [*flags, f"--screenshot={screenshot}", page.as_uri()],
            capture_output=True,
            timeout=180,
            check=True,
        )
    finally:
        probe.unlink()
    found = re.search(r"data-check=\"([^\"]*)\"", dom)
    assert found, f"the page's script did not run: {dom[:500]}"
    return json.loads(found.group(1).replace("&quot;", '"'))


@pytest.mark.skipif(
    chromium() is None,
    reason="no chromium binary (Debian: apt-get install chromium, ~80 MB download, 290 MB "
    "installed; not in scripts/setup.sh)",
)
def test_the_board_fits_1400_px_in_chromium_with_compact_rows(board, tmp_path):
    from matplotlib.image import imread

    samples = sorted((board / "samples").glob("*.html"))
    run_page = next((board.parent / "results" / "with-controls" / "samples").glob("grpo__*"))
    for page in [board / "index.html", *samples, run_page]:
        check = measure(page, tmp_path / f"{page.stem}.png")
        assert check["inner"] == WIDTH, check  # the window is what was asked for
        for state in ("closed", "open"):  # no horizontal scrolling, every <details> opened too
            assert check[state]["scroll"] <= check[state]["client"] <= WIDTH, (page, check)
            assert check[state]["widest"] <= WIDTH, (page, check)
            assert check[state]["spilled"] == [], (page, state, check[state]["spilled"])
        shot = imread(tmp_path / f"{page.stem}.png")
        assert shot.shape[1] == WIDTH and shot.std() > 0.01, page  # not a blank page
        if page.name == "index.html":
            assert len(check["board"]) == len(TEN_SEEDS) + len(CONTROLLED) + len(VERDICT_ROWS)
            # the experiment that ranks opens the page: its verdict table in the first screen
            assert "verdict vs baseline" in check["first_table"]["header"], check
            assert check["first_table"]["bottom"] < 900, check
            assert max(check["board"]) <= 36, check["board"]  # one line a row
            assert check["details"] >= 2 * 5  # fits, statistics, pairs, provenance, mean
            assert check["images"] and all(w > 0 for w in check["images"]), check
            assert check["first_plot"] < 900 * 1.5, check  # within the first screen and a half
