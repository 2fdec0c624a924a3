"""Ablations: `compare --vary`, the grid it expands to, rows named by their overrides, and
`--set aggregation=...` on any algorithm."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import torch
from harness_cli import REPO, run_harness

from harness.experiment import expand, parse_vary, run_name, variants, with_variant
from zoo.algorithms import get_algorithm
from zoo.algorithms.conformance import run_conformance
from zoo.core.config import ConfigError
from zoo.core.types import TrainBatch
from zoo.run.run_config import RunConfig
from zoo.run.runlog import git_state


def test_the_grid_is_every_combination_in_flag_order():
    vary = parse_vary(["eps=0.2,0.28", "aggregation=seq_mean,token_mean"])
    assert vary == [("eps", ["0.2", "0.28"]), ("aggregation", ["seq_mean", "token_mean"])]
    assert variants(vary) == [
        {"eps": "0.2", "aggregation": "seq_mean"},
        {"eps": "0.2", "aggregation": "token_mean"},
        {"eps": "0.28", "aggregation": "seq_mean"},
        {"eps": "0.28", "aggregation": "token_mean"},
    ]
    assert variants([]) == [{}]


def test_one_at_a_time_moves_one_key_from_the_first_values():
    vary = parse_vary(["eps=0.2,0.28,0.3", "beta=0.04,0"])
    assert variants(vary, one_at_a_time=True) == [
        {"eps": "0.2", "beta": "0.04"},
        {"eps": "0.28", "beta": "0.04"},
        {"eps": "0.3", "beta": "0.04"},
        {"eps": "0.2", "beta": "0"},
    ]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("eps", "KEY=V1,V2"),
        ("eps=", "KEY=V1,V2"),
        ("eps=0.2,,0.3", "no empty value"),
        ("=0.2", "KEY=V1,V2"),
        ("seed=1,2", "--seeds"),
        ("algorithm=grpo,dapo", "spans algorithms"),
        ("eps=0.2,0.2", "twice"),
        ("eps=../x,0.2", "clean run name"),
        ("eps=a/b", "clean run name"),
    ],
)
def test_malformed_vary_specs_are_refused_with_the_reason(spec, message):
    with pytest.raises(ConfigError, match=message):
        parse_vary([spec])


def test_a_key_given_twice_is_refused():
    with pytest.raises(ConfigError, match="given twice"):
        parse_vary(["eps=0.1", "eps=0.2"])


def test_run_settings_set_the_run_and_the_rest_go_to_the_algorithm():
    base = RunConfig.from_flat(algorithm="grpo", algorithm_config={"beta": "0"})
    cfg = with_variant(base, {"lr": "1e-4", "eps": "0.28"})
    assert cfg.optimizer.lr == 1e-4 and isinstance(cfg.optimizer.lr, float)
    assert cfg.run.algorithm_config == {"beta": "0", "eps": "0.28"}  # --set values kept
    assert cfg.run.variant == "grpo@lr=1e-4,eps=0.28"
    assert run_name(cfg) == "grpo@lr=1e-4,eps=0.28__arithmetic__seed0"
    assert with_variant(base, {}) is base and run_name(base) == "grpo__arithmetic__seed0"
    with pytest.raises(ConfigError, match="lr"):
        with_variant(base, {"lr": "fast"})


def test_expand_runs_every_setting_on_the_same_seeds():
    grid = variants(parse_vary(["eps=0.1,0.3"]))
    cfgs = expand(RunConfig.from_flat(), ["grpo", "custom"], ["arithmetic"], 2, grid)
    names = [run_name(c) for c in cfgs]
    assert len(set(names)) == len(names) == 2 * 2 * 2
    seeds = {}
    for c in cfgs:
        seeds.setdefault(c.run.variant, []).append(c.run.seed)
    assert seeds == {f"{a}@eps={e}": [0, 1] for a in ("grpo", "custom") for e in ("0.1", "0.3")}


def uneven_batch() -> TrainBatch:
    """Two responses of 1 and 3 tokens: seq_mean and token_mean weigh them differently."""
    lp = torch.tensor([[-1.0, 0.0, 0.0], [-0.5, -0.2, -0.3]], requires_grad=True)
    return TrainBatch(
        logprobs=lp,
        old_logprobs=lp.detach().clone(),
        ref_logprobs=None,
        advantages=torch.tensor([1.0, -1.0]),
        mask=torch.tensor([[1.0, 0, 0], [1, 1, 1]]),
    )


def test_aggregation_is_an_override_of_any_algorithm():
    # On-policy the ratio is 1, so GRPO's per-token loss is -A on every response token:
    # seq_mean = (1/2)(-1 + 1) = 0; token_mean = (-1 + 3) / 4 = 0.5; fixed (L_max 3) =
    # (-1 + 3) / (2 * 3).
    expected = {"seq_mean": 0.0, "token_mean": 0.5, "fixed": 2 / 6}
    for mode, value in expected.items():
        algo = get_algorithm("grpo", beta=0.0, aggregation=mode)
        assert algo.aggregation == mode
        batch = uneven_batch()
        batch.max_response_len = 3
        assert float(algo.loss(batch).loss.detach()) == pytest.approx(value, abs=1e-7)
    assert get_algorithm("grpo").aggregation == "seq_mean"  # the class is untouched
    with pytest.raises(ConfigError, match="valid: seq_mean, token_mean, fixed"):
        get_algorithm("grpo", aggregation="sum")


def test_an_overridden_aggregation_still_passes_the_conformance_suite():
    from zoo.algorithms import ALGORITHMS

    for name in ("grpo", "dapo"):
        results = run_conformance(ALGORITHMS.load(name), {"aggregation": "seq_mean"})
        assert [r.name for r in results if r.passed is False] == [], name


SMALL = [
    "--prompts-per-step",
    "16",
    "--eval-points",
    "2",
    "--eval-samples",
    "0",
    "--checkpoint-every",
    "0",
    "--budget",
    "2.5e10",
    "--seeds",
    "1",
    "--quiet",
]


@pytest.mark.slow  # ~90 s: three tiny runs, the leaderboard and a reproduction
def test_compare_vary_runs_an_ablation_with_rows_named_by_their_overrides(
    tiny_model_path, tmp_path: Path
):
    result = run_harness(
        "compare",
        "grpo",
        "--vary",
        "eps=0.05,0.2",
        "--vary",
        "aggregation=seq_mean,token_mean",
        "--vary-one-at-a-time",
        *SMALL,
        "--out",
        "results/abl",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    out = tmp_path / "results" / "abl"
    rows = [
        "grpo@eps=0.05,aggregation=seq_mean",
        "grpo@eps=0.2,aggregation=seq_mean",
        "grpo@eps=0.05,aggregation=token_mean",
    ]
    assert sorted(p.name for p in (out / "runs").iterdir()) == sorted(
        f"{r}__arithmetic__seed0" for r in rows
    )
    summary = pd.read_csv(out / "tables" / "summary.csv")
    assert sorted(summary["algorithm"]) == sorted(rows)
    config = json.loads(
        (out / "runs" / f"{rows[1]}__arithmetic__seed0" / "config.json").read_text()
    )
    assert config["run"]["algorithm"] == "grpo" and config["run"]["variant"] == rows[1]
    assert config["run"]["algorithm_config"] == {"eps": "0.2", "aggregation": "seq_mean"}

    def clipped(row: str) -> float:
        lines = (out / "runs" / f"{row}__arithmetic__seed0" / "metrics.jsonl").read_text()
        steps = [json.loads(x) for x in lines.splitlines()]
        return sum(r.get("clip_low_frac", 0) + r.get("clip_high_frac", 0) for r in steps)

    # the narrower clip acts on more tokens: the override reached the loss
    assert clipped(rows[0]) > clipped(rows[1])
    # the off-policy table found each row's mechanism through its plugin (grpo)
    assert "mechanism_acted_steps" in pd.read_csv(out / "tables" / "off_policy.csv")

    dirty = ["--allow-dirty"] if git_state(REPO).dirty else []  # CI's clone is clean
    boards = run_harness(
        "leaderboard", "--results", "results", "--out", "boards", *dirty, cwd=tmp_path
    )
    assert boards.returncode == 0, boards.stderr[-3000:]
    ids = [r["id"] for r in json.loads((tmp_path / "boards" / "leaderboard.json").read_text())]
    row_id = f"tiny__arithmetic__{rows[2]}__abl"
    assert row_id in ids, ids
    again = run_harness("reproduce", row_id, "--leaderboards", "boards", cwd=tmp_path)
    assert again.returncode == 0 and "MATCH" in again.stdout, again.stdout + again.stderr[-2000:]


def test_a_vary_key_no_algorithm_knows_fails_before_any_work(tmp_path: Path):
    result = run_harness(
        "compare", "grpo", "dapo", "--vary", "eps=0.1,0.2", *SMALL, cwd=tmp_path, timeout=120
    )
    assert result.returncode == 2
    assert "eps" in result.stderr and "valid fields" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "results").exists()
