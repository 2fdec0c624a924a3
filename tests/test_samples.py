"""samples.jsonl: what each step and evaluation kept, the same after a kill and --resume;
its pages in the compare report and the HTML leaderboard, opened offline in headless
Chromium (DOM dumped after the page's script ran, a screenshot under the test's folder);
`harness samples PATH`, which builds the pages on demand (they are not committed)."""

from __future__ import annotations

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
    cfg = RunConfig.from_flat(algorithm="grpo", seed=2, **SMALL)
    loop = loop_for(cfg)
    straight = tmp_path / "straight"
    execute_run(cfg, straight, loop.s, command="test")
    rows = lines(straight)
    train = [r for r in rows if r["kind"] == "train"]
    evals = [r for r in rows if r["kind"] == "eval"]
    assert sorted({r["step"] for r in train}) == [1, 2, 3]
    assert all(
        sum(r["step"] == s for r in train) == SAMPLE_GROUPS * cfg.sampling.group_size
        for s in (1, 2, 3)
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
        group = [r["advantage"] for r in train if r["step"] == s][: cfg.sampling.group_size]
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
    base = RunConfig.from_flat(
        steps=2, prompts_per_step=8, eval_every=1, checkpoint_every=0, env_config={"eval_size": 16}
    )
    cfgs = [base.replace(algorithm=a, seed=s) for a in ("grpo", "dapo") for s in (0, 1)]
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
    assert f"`python -m harness samples {experiment.as_posix()}`" in report  # (not committed)
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


def completions_of(name: str) -> list[str]:
    """What the hand-written run ``name`` wrote: a train and an eval row at steps 1 and 2,
    with characters the page must escape."""
    return [f"{name} wrote <{step}{kind}>" for step in (1, 2) for kind in ("train", "eval")]


def write_small_run(run_dir: Path, samples: bool = True) -> None:
    """A run folder as a run leaves it, written by hand (no training): metrics at steps 0-2
    and, when ``samples``, the rows of ``completions_of`` its name."""
    run_dir.mkdir(parents=True)
    records = [
        {"step": s, "reward_mean": 0.1 * s, "eval_reward": 0.2 * s, "flops": 1e9 * s}
        for s in (0, 1, 2)
    ]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    if samples:
        rows = [
            {
                "step": int(c.split("<")[1][0]),
                "kind": c.split("<")[1][1:-1],
                "index": 0,
                "prompt": "1+1=",
                "completion": c,
                "reference": "2",
                "reward": 0.0,
            }
            for c in completions_of(run_dir.name)
        ]
        (run_dir / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def small_experiment(root: Path) -> Path:
    """results/exp: two runs with samples and one recorded before runs kept them."""
    exp = root / "results" / "exp"
    exp.mkdir(parents=True)
    (exp / "experiment.json").write_text(json.dumps({"command": "test", "runs": {}}))
    for name in ("grpo__arithmetic__seed0", "dapo__arithmetic__seed0"):
        write_small_run(exp / "runs" / name)
    write_small_run(exp / "runs" / "old__arithmetic__seed0", samples=False)
    return exp


def harness(*argv: str | Path) -> int:
    from harness.cli import main

    return main([str(a) for a in argv])


def test_samples_command_writes_a_run_page_holding_its_completions(tmp_path, capsys):
    from html import escape

    exp = small_experiment(tmp_path)
    assert harness("samples", exp / "runs" / "grpo__arithmetic__seed0") == 0
    page = exp / "samples" / "grpo__arithmetic__seed0.html"  # where report.md links it
    assert capsys.readouterr().out == f"wrote {page}\n"
    html = page.read_text()
    assert all(escape(c) in html for c in completions_of("grpo__arithmetic__seed0"))
    assert html.count("<tr class='") == 4 and "<svg id='curves'" in html
    assert sorted(p.name for p in (exp / "samples").iterdir()) == [page.name]  # that run only

    alone = tmp_path / "alone"  # a run outside an experiment: its own samples/, or --out
    write_small_run(alone)
    assert harness("samples", alone) == 0 and (alone / "samples" / "alone.html").is_file()
    assert harness("samples", alone, "--out", tmp_path / "elsewhere") == 0
    html = (tmp_path / "elsewhere" / "alone.html").read_text()
    assert all(escape(c) in html for c in completions_of("alone"))


def test_samples_command_writes_every_run_of_an_experiment_and_the_index(tmp_path, capsys):
    exp = small_experiment(tmp_path)
    (exp / "plots").mkdir()
    (exp / "plots" / "reward_vs_flops.png").write_bytes(b"png")
    assert harness("samples", exp) == 0
    out = capsys.readouterr().out
    assert out == f"wrote {exp / 'samples' / 'index.html'} and the pages of its 2 runs beside it\n"
    names = sorted(p.name for p in (exp / "samples").iterdir())
    assert names == ["dapo__arithmetic__seed0.html", "grpo__arithmetic__seed0.html", "index.html"]
    index = (exp / "samples" / "index.html").read_text()
    assert "href='grpo__arithmetic__seed0.html'" in index and "old__" not in index
    assert "src='../plots/reward_vs_flops.png'" in index

    pages = tmp_path / "pages" / "exp"  # --out: the plot's link still finds the plot
    assert harness("samples", exp, "--out", pages) == 0
    assert "src='../../results/exp/plots/reward_vs_flops.png'" in (pages / "index.html").read_text()
    assert (pages / "dapo__arithmetic__seed0.html").is_file()


@pytest.mark.parametrize(
    ("where", "says"),
    [
        ("missing", "no such folder"),
        ("empty", "neither a run folder"),
        ("exp/runs/old__arithmetic__seed0", "no samples.jsonl"),
        ("old-exp", "none of its runs kept samples.jsonl"),
    ],
)
def test_samples_command_refuses_a_path_without_samples_naming_it(tmp_path, capsys, where, says):
    small_experiment(tmp_path)
    (tmp_path / "empty").mkdir()
    write_small_run(tmp_path / "old-exp" / "runs" / "old__arithmetic__seed0", samples=False)
    path = tmp_path / "results" / where if where.startswith("exp") else tmp_path / where
    assert harness("samples", path) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {path}: {says}") and err.count("\n") == 1, err
    assert not list(tmp_path.rglob("*.html"))


def test_the_report_says_how_to_build_the_pages(tmp_path):
    from harness.analysis import samples_section, shown_folder
    from harness.run_flags import REPO_ROOT

    exp = small_experiment(tmp_path)
    section = "\n".join(samples_section(exp))  # from the runs, before any page exists
    assert f"`python -m harness samples {exp.as_posix()}`" in section
    assert "- [grpo__arithmetic__seed0](samples/grpo__arithmetic__seed0.html)" in section
    assert "old__" not in section and not (exp / "samples").exists()
    assert shown_folder(REPO_ROOT / "results" / "exp") == "results/exp"  # a committed one


def test_no_samples_page_is_committed():
    """The pages are generated (`harness samples`, `analyze`, `leaderboard`): git ignores
    them, and none may be tracked. Skipped outside a git checkout (an sdist, a copy)."""
    repo = Path(__file__).resolve().parents[1]
    if shutil.which("git") is None or not (repo / ".git").exists():
        pytest.skip("not a git checkout")
    listed = subprocess.run(
        ["git", "-C", str(repo), "ls-files", "-z", "--", "*.html"],
        capture_output=True,
        check=True,
    ).stdout.decode()
    pages = [p for p in listed.split("\0") if p and "samples" in Path(p).parent.parts]
    assert pages == [], f"{len(pages)} samples pages are tracked, e.g. {pages[:3]}"
    probe = [  # a committed experiment's, an archived one's, the board's
        "results/tiny-arithmetic-zoo/samples/index.html",
        "results/archive/tune-running-sum-on-policy-eps0.2/samples/index.html",
        "leaderboards/samples/tiny-arithmetic-zoo.html",
    ]
    ignored = subprocess.run(
        ["git", "-C", str(repo), "check-ignore", "--no-index", *probe],
        capture_output=True,
        text=True,
    ).stdout.split()
    assert ignored == probe
