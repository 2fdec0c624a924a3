"""Batch-level parity with verl 0.9.1's core_algos (benchmarks/parity/verl_check.py;
docs/parity.md, "verl"). Skips, saying why, when .verl/ holds no verl
(scripts/verl-env.sh installs it there).

The check runs in a subprocess (``python -m benchmarks.parity.verl_check``), so that
.verl/'s antlr4 4.9.3 and dill, which verl's omegaconf needs, never shadow the project's
own packages in this test session. The rows that match must keep matching at the module's
tolerances (advantages 1e-5, loss 1e-6, gradient 1e-8, max |difference| over response
tokens, float32); the rows that differ by a documented convention must keep differing, so
a change on either side shows here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from benchmarks.parity import verl_check as vc

pytestmark = pytest.mark.skipif(not vc.verl_installed(), reason=vc.verl_missing_reason())

MATCHING = (
    "grpo",
    "dr_grpo",
    "dapo",
    "gspo",
    "cispo",
    "sapo",
    "clip_cov (all candidates)",
    "kl_cov",
    "gmpo",
    "rloo",
    "opo",
    "remax",
    "reinforce_pp (whiten=token, beta=0)",
    "reinforce_pp_baseline (whiten=token, beta=0)",
    "ppo (gae)",
)
"""Rows whose advantages, loss and gradient all match."""
LOSS_ONLY = ("gpg", "reinforce_pp", "reinforce_pp (whiten=token)")
"""Rows whose loss matches but whose advantages differ by a documented convention."""


@pytest.fixture(scope="module")
def result(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("verl")
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.parity.verl_check", "--out", str(out)],
        cwd=vc.ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads((Path(out) / "verl_batch.json").read_text())


@pytest.fixture(scope="module")
def rows(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["row"]: r for r in result["rows"]}


def test_every_row_is_classified(rows: dict[str, dict[str, Any]]) -> None:
    assert set(MATCHING) | set(LOSS_ONLY) | {"clip_cov"} == set(rows)
    assert {c.row for c in vc.CASES} == set(rows)


@pytest.mark.parametrize("row", MATCHING)
def test_row_matches(row: str, rows: dict[str, dict[str, Any]]) -> None:
    r = rows[row]
    assert r["adv_diff"] <= vc.ADV_TOL, r
    assert r["loss_diff"] <= vc.LOSS_TOL, r
    assert r["grad_diff"] <= vc.GRAD_TOL, r


@pytest.mark.parametrize("row", LOSS_ONLY)
def test_loss_matches_advantages_differ(row: str, rows: dict[str, dict[str, Any]]) -> None:
    r = rows[row]
    assert r["loss_diff"] <= vc.LOSS_TOL and r["grad_diff"] <= vc.GRAD_TOL, r
    assert r["adv_diff"] > 1e-3, r  # the documented difference is still there


def test_clip_cov_random_draw_differs(rows: dict[str, dict[str, Any]]) -> None:
    # one candidate token detached at random on each side, with different generators
    r = rows["clip_cov"]
    assert r["adv_diff"] <= vc.ADV_TOL, r
    assert r["loss_diff"] > vc.LOSS_TOL or r["grad_diff"] > vc.GRAD_TOL, r


def test_wrong_aggregation_is_caught(result: dict[str, Any]) -> None:
    # grpo's seq_mean against verl's token-mean: the check must see it
    control = result["meta"]["control_grpo_token_mean"]
    assert not control["loss_match"], control
    assert control["loss_diff"] > 100 * vc.LOSS_TOL, control
