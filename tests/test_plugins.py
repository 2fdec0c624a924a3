"""Third-party plugins for real: packages are pip-installed into a temporary directory
(real dist-info, found through importlib.metadata) and used through `python -m harness`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from harness_cli import REPO, run_harness


def write_package(root: Path, dist: str, module: str, source: str, entry_points: str) -> Path:
    pkg = root / dist
    (pkg / module).mkdir(parents=True)
    (pkg / module / "__init__.py").write_text(textwrap.dedent(source))
    (pkg / "pyproject.toml").write_text(
        textwrap.dedent(f"""
        [build-system]
        requires = ["setuptools>=68"]
        build-backend = "setuptools.build_meta"
        [project]
        name = "{dist}"
        version = "0.0.1"
        [tool.setuptools]
        packages = ["{module}"]
        """)
        + entry_points
    )
    return pkg


def pip_install(target: Path, *packages: Path) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--disable-pip-version-check",
            "--target",
            str(target),
            *map(str, packages),
        ],
        check=True,
        capture_output=True,
    )


@pytest.fixture(scope="module")
def plugin_site(tmp_path_factory) -> Path:
    """A site directory holding the example vanilla_pg package, a broken plugin and one that
    tries to shadow the built-in grpo."""
    root = tmp_path_factory.mktemp("plugins")
    broken = write_package(
        root,
        "zoo-broken",
        "zoo_broken",
        "raise ImportError('this plugin is broken')\n",
        '[project.entry-points."zoo.algorithms"]\nbroken = "zoo_broken:Broken"\n',
    )
    shadow = write_package(
        root,
        "zoo-shadow",
        "zoo_shadow",
        "class Evil:\n    pass\n",
        '[project.entry-points."zoo.algorithms"]\ngrpo = "zoo_shadow:Evil"\n',
    )
    # A GRPO whose loss averages over the micro-batch's own tokens: not additive over
    # micro-batches, so gradient accumulation would weigh tokens differently.
    local_mean = write_package(
        root,
        "zoo-local-mean",
        "zoo_local_mean",
        """
        import torch
        from zoo.algorithms.grpo import GRPO
        from zoo.core.types import LossOutput

        class LocalMean(GRPO):
            name = "local_mean"

            def loss(self, batch):
                ratio = torch.exp(batch.logprobs - batch.old_logprobs)
                per_token = -ratio * batch.token_advantages * batch.mask
                loss = per_token.sum() / batch.mask.sum().clamp(min=1)
                return LossOutput(loss, {"loss": float(loss.detach())})
        """,
        '[project.entry-points."zoo.algorithms"]\nlocal_mean = "zoo_local_mean:LocalMean"\n',
    )
    # A correct GRPO loss fed advantages of the wrong sign: every loss property holds, and
    # a run would train toward the wrong answers.
    flipped = write_package(
        root,
        "zoo-flipped",
        "zoo_flipped",
        """
        from zoo.algorithms.grpo import GRPO

        class Flipped(GRPO):
            name = "flipped"

            def advantages(self, rewards, lengths=None):
                return -super().advantages(rewards, lengths)
        """,
        '[project.entry-points."zoo.algorithms"]\nflipped = "zoo_flipped:Flipped"\n',
    )
    site = root / "site"
    pip_install(site, REPO / "examples" / "zoo-vanilla-pg", broken, shadow, local_mean, flipped)
    assert (site / "zoo_vanilla_pg-0.1.0.dist-info" / "entry_points.txt").exists()
    return site


def harness(site: Path, *args: str, cwd: Path):
    return run_harness(*args, cwd=cwd, extra_path=(site,))


def test_installed_plugin_lists_with_its_distribution_while_a_broken_one_is_reported(
    plugin_site, tmp_path
):
    result = harness(plugin_site, "list", "algorithms", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert any(line.startswith("vanilla_pg") and "[zoo-vanilla-pg]" in line for line in lines)
    assert any(line.startswith("grpo") and "[built-in]" in line for line in lines)
    broken = [line for line in lines if line.startswith("broken")]
    assert broken and "zoo-broken" in broken[0] and "this plugin is broken" in broken[0]
    assert "zoo-shadow" in result.stderr and "'grpo'" in result.stderr


def test_a_broken_plugin_fails_only_the_run_that_asks_for_it(plugin_site, tmp_path):
    result = harness(plugin_site, "run", "broken", cwd=tmp_path)
    assert result.returncode == 2
    assert "zoo-broken" in result.stderr and "this plugin is broken" in result.stderr
    assert not (tmp_path / "results").exists()


def test_a_third_party_cannot_shadow_a_builtin(plugin_site):
    code = "from zoo.algorithms import get_algorithm; print(type(get_algorithm('grpo')).__module__)"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(plugin_site)])}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.strip() == "zoo.algorithms.grpo", out.stderr


def test_example_plugin_trains_through_harness_run(plugin_site, tiny_model_path, tmp_path):
    args = ["--steps", "2", "--prompts-per-step", "16", "--eval-every", "1", "--set", "clip=0.3"]
    result = harness(plugin_site, "run", "vanilla_pg", *args, "--out", "run", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    algorithm = config["algorithm"]
    assert algorithm["name"] == "vanilla_pg" and algorithm["config"]["clip"] == 0.3
    records = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [0, 1, 2]
    assert all("loss" in r and "ratio_mean" in r for r in records[1:])


def test_check_plugin_runs_the_conformance_suite_on_an_installed_plugin(plugin_site, tmp_path):
    result = harness(plugin_site, "check-plugin", "vanilla_pg", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "zoo-vanilla-pg" in result.stdout
    for prop in (
        "reinforce_on_policy",
        "zero_advantages",
        "padding",
        "micro_batching",
        "off_policy",
    ):
        assert any(prop in line and "PASS" in line for line in result.stdout.splitlines())
    assert "declares clip_low_acting_frac, clip_high_acting_frac" in result.stdout
    assert "acted" in result.stdout


def test_a_plugin_that_breaks_the_loss_contract_is_refused_before_it_trains(
    plugin_site, tiny_model_path, tmp_path
):
    args = ["--steps", "1", "--prompts-per-step", "16", "--eval-every", "1", "--eval-samples", "0"]
    refused = harness(plugin_site, "run", "local_mean", *args, "--out", "r", cwd=tmp_path)
    assert refused.returncode == 2, refused.stderr[-2000:]
    assert "micro_batching" in refused.stderr and "fix:" in refused.stderr
    assert "--skip-conformance" in refused.stderr and "Traceback" not in refused.stderr
    assert not (tmp_path / "r").exists()
    forced = harness(
        plugin_site, "run", "local_mean", *args, "--out", "r", "--skip-conformance", cwd=tmp_path
    )
    assert forced.returncode == 0, forced.stderr[-2000:]
    assert (tmp_path / "r" / "metrics.jsonl").exists()


def test_a_flipped_advantage_sign_is_refused_by_check_plugin_and_by_run(
    plugin_site, tiny_model_path, tmp_path
):
    checked = harness(plugin_site, "check-plugin", "flipped", cwd=tmp_path)
    assert checked.returncode == 1, checked.stdout + checked.stderr
    lines = checked.stdout.splitlines()
    failed = [i for i, line in enumerate(lines) if "FAIL" in line]
    assert len(failed) == 1 and "advantages:" in lines[failed[0]], checked.stdout
    assert "a flipped sign?" in lines[failed[0]]
    hint = lines[failed[0] + 1].strip()
    assert hint.startswith("fix: ") and "flipped sign" in hint
    assert "failed: advantages" in lines[-1]
    args = ["--steps", "1", "--prompts-per-step", "16", "--eval-every", "1", "--eval-samples", "0"]
    refused = harness(plugin_site, "run", "flipped", *args, "--out", "r", cwd=tmp_path)
    assert refused.returncode == 2, refused.stderr[-2000:]
    assert "advantages:" in refused.stderr and "Traceback" not in refused.stderr
    assert hint in " ".join(refused.stderr.split())  # the same hint, word for word
    assert not (tmp_path / "r").exists()


def test_check_plugin_of_an_unknown_name_exits_2(plugin_site, tmp_path):
    result = harness(plugin_site, "check-plugin", "no_such_algo", cwd=tmp_path)
    assert result.returncode == 2 and "vanilla_pg" in result.stderr and "grpo" in result.stderr


@pytest.mark.slow  # ~14 s: a two-algorithm compare
def test_example_plugin_compares_against_a_builtin(plugin_site, tiny_model_path, tmp_path):
    args = ["--seeds", "1", "--budget", "1e10", "--prompts-per-step", "16", "--eval-points", "2"]
    names = ("grpo", "vanilla_pg")
    result = harness(plugin_site, "compare", *names, *args, "--out", "exp", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = (tmp_path / "exp" / "tables" / "summary.csv").read_text()
    assert "vanilla_pg" in summary and "grpo" in summary
