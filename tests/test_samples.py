"""samples.jsonl: what each step and evaluation kept, the same after a kill and --resume;
its pages in the compare report and the HTML leaderboard, opened offline in headless
Chromium (DOM dumped after the page's script ran, a screenshot under the test's folder)."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from harness.runner import execute_run
from zoo.run.loop import EVAL_SAMPLES, SAMPLE_GROUPS
from zoo.run.run_config import RunConfig
from zoo.run.runlog import read_samples

SMALL = {
    "steps": 3,
    "prompts_per_step": 8,
    "eval_every": 2,
    "checkpoint_every": 2,
    "env_config": {"eval_size": 16},
}


class Interrupted(Exception):
    pass


def lines(run_dir: Path) -> list[dict]:
    return [json.loads(x) for x in (run_dir / "samples.jsonl").read_text().splitlines()]


def test_samples_are_kept_per_step_and_eval_and_survive_a_kill_and_resume(loop_for, tmp_path):
    cfg = RunConfig(algorithm="grpo", seed=2, **SMALL)
    loop = loop_for(cfg)
    straight = tmp_path / "straight"
    execute_run(cfg, straight, loop.s, command="test")
    rows = lines(straight)
    train = [r for r in rows if r["kind"] == "train"]
    evals = [r for r in rows if r["kind"] == "eval"]
    assert sorted({r["step"] for r in train}) == [1, 2, 3]
    assert all(
        sum(r["step"] == s for r in train) == SAMPLE_GROUPS * cfg.group_size for s in (1, 2, 3)
    )
    assert sorted({r["step"] for r in evals}) == [0, 2, 3]  # eval_every 2, and the end
    assert all(sum(r["step"] == s for r in evals) == EVAL_SAMPLES for s in (0, 2, 3))
    for r in train:
        assert {
            "prompt",
            "completion",
            "reward",
            "advantage",
            "finish_reason",
            "policy_version",
            "kept",
        } <= set(r)
        assert r["policy_version"] == r["step"] - 1  # sampled by the weights before it
        assert r["finish_reason"] in ("stop", "length")
    for s in (1, 2, 3):  # GRPO's advantages: centred within each group
        group = [r["advantage"] for r in train if r["step"] == s][: cfg.group_size]
        assert abs(sum(group)) < 1e-4
    for r in evals:
        assert r["reference"] and r["prompt"] and "completion" in r
        assert r["reward"] in (0.0, 1.0)
    metrics = [json.loads(x) for x in (straight / "metrics.jsonl").read_text().splitlines()]
    assert [r["reward"] for r in train if r["step"] == 1] == [r["reward"] for r in train][:16]
    assert metrics[-1]["step"] == 3

    # Killed after step 3 was written but before the end's checkpoint (the last one is at
    # step 2), with a line cut short; the resume re-does step 3 once.
    killed = tmp_path / "killed"

    def stop_at_3(record: dict) -> None:
        if record["step"] == 3:
            raise Interrupted

    loop = loop_for(cfg)
    with pytest.raises(Interrupted):
        execute_run(cfg, killed, loop.s, command="test", on_record=stop_at_3)
    with open(killed / "samples.jsonl", "a") as f:
        f.write('{"step": 3, "kind": "train", "prompt": "1+')
    loop = loop_for(cfg)
    execute_run(cfg, killed, loop.s, command="test", resume=True)
    text = (killed / "samples.jsonl").read_text()
    assert text.endswith("\n")
    assert lines(killed) == rows  # no duplicate, no torn line, same samples


@pytest.fixture(scope="module")
def experiment(tiny_path, tiny_generator, tmp_path_factory) -> Path:
    """A small experiment written as `compare` writes one (runs of grpo and dapo, 2 seeds
    each, then tables, plots, samples pages, report.md), and a leaderboard from it."""
    from conftest import loop_builder

    from harness.analysis import write_analysis
    from harness.experiment import run_name, write_manifest
    from harness.leaderboard import build_leaderboards

    build, restore = loop_builder(tiny_path, tiny_generator)
    root = tmp_path_factory.mktemp("samples")
    out = root / "results" / "exp"
    base = RunConfig(
        steps=2, prompts_per_step=8, eval_every=1, checkpoint_every=0, env_config={"eval_size": 16}
    )
    cfgs = [
        dataclasses.replace(base, algorithm=a, seed=s) for a in ("grpo", "dapo") for s in (0, 1)
    ]
    out.mkdir(parents=True)
    write_manifest(out, cfgs, "python -m harness compare grpo dapo (test)", resume=False)
    try:
        for cfg in cfgs:
            execute_run(cfg, out / "runs" / run_name(cfg), build(cfg).s, command="test")
    finally:
        restore()
    write_analysis(out)
    build_leaderboards(root / "results", root / "leaderboards", allow_dirty=True)
    return out


@pytest.mark.slow  # the experiment fixture: four tiny runs, ~50 s
def test_the_report_links_a_samples_page_for_every_run(experiment):
    report = (experiment / "report.md").read_text()
    assert "## Samples" in report and "(samples/index.html)" in report
    for run_dir in sorted((experiment / "runs").iterdir()):
        page = experiment / "samples" / f"{run_dir.name}.html"
        assert f"(samples/{run_dir.name}.html)" in report
        html = page.read_text()
        assert html.count("<tr class='") == len(read_samples(run_dir))
    leaderboards = experiment.parents[1] / "leaderboards"
    assert "<a href='samples/exp.html'>samples</a>" in (leaderboards / "index.html").read_text()
    board_samples = (leaderboards / "samples" / "exp.html").read_text()  # the board's page
    assert "../../results/exp/samples/grpo__arithmetic__seed0.html" in board_samples


EXTERNAL = re.compile(
    r"""(?:src|href|action)\s*=\s*["']?\s*(?:https?:)?//|@import|url\(\s*["']?https?:""", re.I
)

CHECK = """<script>
window.addEventListener('load', () => {
  const shown = [...document.querySelectorAll('tbody tr')].filter(r => !r.hidden).length;
  const imgs = [...document.images].map(i => [i.naturalWidth, i.naturalHeight]);
  const svgs = [...document.querySelectorAll('svg')].map(s => s.getBoundingClientRect().width);
  document.body.setAttribute('data-check', JSON.stringify({shown, imgs, svgs,
    rows: document.querySelectorAll('tbody tr').length}));
});
</script>"""


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def browse(page: Path, screenshot: Path) -> dict:
    """Open ``page`` (a copy with a checking script beside it, so relative links resolve
    the same) in headless Chromium: what the script measured after load, and a
    screenshot."""
    probe = page.with_name(f"_probe_{page.name}")
    probe.write_text(page.read_text().replace("</body>", CHECK + "</body>"))
    flags = [
        chromium(),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--allow-file-access-from-files",
        "--virtual-time-budget=3000",
    ]
    try:
        dom = subprocess.run(
            [*flags, "--dump-dom", probe.as_uri()],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        ).stdout
        subprocess.run(
            [*flags, "--window-size=1280,1600", f"--screenshot={screenshot}", page.as_uri()],
            capture_output=True,
            timeout=120,
            check=True,
        )
    finally:
        probe.unlink()
    found = re.search(r"data-check=\"([^\"]*)\"", dom)
    assert found, f"the page's script did not run: {dom[:500]}"
    return json.loads(found.group(1).replace("&quot;", '"'))


def assert_non_blank_png(path: Path) -> None:
    import numpy as np
    from matplotlib.image import imread

    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    pixels = imread(path)
    assert pixels.shape[0] > 100 and pixels.shape[1] > 100
    assert len(np.unique(pixels.reshape(-1, pixels.shape[-1]), axis=0)) > 10, "a blank page"


@pytest.mark.slow
@pytest.mark.skipif(
    chromium() is None,
    reason="no chromium binary (Debian: apt-get install "
    "chromium, ~80 MB download, 290 MB installed; not in scripts/setup.sh)",
)
def test_pages_load_offline_in_a_headless_browser_with_plots_and_tables(experiment, tmp_path):
    leaderboards = experiment.parents[1] / "leaderboards"
    pages = {
        "run": experiment / "samples" / "grpo__arithmetic__seed0.html",
        "index": experiment / "samples" / "index.html",
        "leaderboard": leaderboards / "index.html",
        "leaderboard samples": leaderboards / "samples" / "exp.html",
    }
    for name, page in pages.items():
        html = page.read_text()
        assert EXTERNAL.findall(html) == [], f"{name} refers to a network resource"
        assert "<script src" not in html and "<link" not in html
        check = browse(page, tmp_path / f"{name}.png")
        assert_non_blank_png(tmp_path / f"{name}.png")
        assert check["rows"] > 0 and check["shown"] > 0, (name, check)
        assert all(w > 0 and h > 0 for w, h in check["imgs"]), (name, check)
        if name == "run":  # the curves, and the step selector showing the last step only
            assert check["svgs"] and check["svgs"][0] > 0
            last = max(r["step"] for r in read_samples(experiment / "runs" / page.stem))
            expected = sum(r["step"] == last for r in read_samples(experiment / "runs" / page.stem))
            assert check["shown"] == expected < check["rows"]
        elif name != "leaderboard samples":  # the reward plot, loaded from the file system
            assert check["imgs"], (name, check)
