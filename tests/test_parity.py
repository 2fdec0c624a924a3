"""Parity with TRL 1.16's GRPOTrainer (benchmarks/parity, docs/parity.md): level a for
grpo (the same inputs into TRL's ``compute_loss`` and forge-zoo's ``loss`` give the same
loss and gradient) and the settings map (every mapped setting holds the same value in the
two configs the benchmark builds). Skipped where TRL is not installed (the ``bench``
extra)."""

from __future__ import annotations

import tempfile

import pytest
import torch

trl = pytest.importorskip("trl", reason="TRL is not installed: pip install -e '.[bench]'")

from benchmarks.parity import levels, settings  # noqa: E402
from benchmarks.parity.shared import SharedBatch  # noqa: E402
from zoo.models.tokenizer import EOS_ID, encode  # noqa: E402

LOSS_TOL = 1e-6
"""|loss difference| allowed, relative to max(1, |loss|): float32 rounding of the same
operations in another order (measured: 0 on the whole batch, ~1e-10 per mini-batch)."""
GRAD_TOL = 1e-6
"""max |d loss / d logprobs difference| allowed, relative to max |gradient|."""


def synthetic_batch(prompts: int = 4, group: int = 8, width: int = 64) -> SharedBatch:
    """A running_sum-shaped batch without sampling (fast): random byte completions of
    random lengths, 0/1 rewards with two all-equal groups, log-probs made up."""
    gen = torch.Generator().manual_seed(3)
    texts = [f"{10 + i}+{20 + i}+{30 + i}=" for i in range(prompts)]
    ids = [encode(t) for t in texts for _ in range(group)]
    rows = prompts * group
    lengths = torch.randint(1, width + 1, (rows,), generator=gen)
    completion = torch.randint(48, 58, (rows, width), generator=gen)
    mask = (torch.arange(width)[None, :] < lengths[:, None]).float()
    completion = torch.where(mask > 0, completion, torch.full_like(completion, EOS_ID))
    rewards = (torch.rand(prompts, group, generator=gen) < 0.4).float()
    rewards[0] = 0.0
    rewards[1] = 1.0
    return SharedBatch(
        [t for t in texts for _ in range(group)], ids, completion, mask, rewards, group, width
    )


def test_grpo_loss_and_gradient_match_trl() -> None:
    """Level a, grpo: TRL's loss (its own ``compute_loss``, log-probs fed in) and
    forge-zoo's, on the whole batch and on TRL's first mini-batch with its normaliser,
    agree within LOSS_TOL / GRAD_TOL; and a different aggregation (dapo's token mean) on
    the same inputs does not: the comparison can tell them apart."""
    batch = synthetic_batch()
    old = -torch.rand(batch.mask.shape, generator=torch.Generator().manual_seed(4)) * 3
    rows = levels.loss_parity("grpo", batch, old)
    assert [r["scope"] for r in rows] == [
        "whole batch, one step",
        "mini-batch 1 of 4, TRL's normaliser",
    ]
    for row in rows:
        scale = max(1.0, abs(row["TRL loss"]))
        assert row["abs loss diff"] <= LOSS_TOL * scale, row
        assert row["max abs grad diff"] <= GRAD_TOL * row["max abs grad"], row
        assert row["max abs grad"] > 0, row  # a gradient to compare
    new, _ = levels.perturbed(old, batch.mask, 0)
    from benchmarks.parity.shared import forge_zoo_advantages

    advantages = forge_zoo_advantages("grpo", batch)
    other, _ = levels.forge_zoo_loss_and_grad(
        "dapo", new, old * batch.mask, None, advantages, batch.mask, batch.max_response_len
    )
    assert abs(other - rows[0]["TRL loss"]) > 100 * LOSS_TOL * max(1.0, abs(other))


@pytest.mark.parametrize("algorithm", settings.ALGORITHMS)
def test_settings_map_rows_equal(algorithm: str) -> None:
    """Every mapped setting holds the same value in forge-zoo's run config and the TRL
    GRPOConfig the benchmark builds; a TRL config built with another learning rate or
    another loss type shows up as a row that differs."""
    rows = settings.settings_map(algorithm)
    unequal = [r for r in rows if not r.equal]
    assert not unequal, unequal
    assert {r.setting for r in rows} >= {
        "learning rate",
        "clip eps low",
        "clip eps high",
        "KL weight beta",
        "advantages",
        "loss aggregation",
        "group size G",
        "max new tokens",
        "temperature",
        "grad clip (global norm)",
        "AdamW eps",
    }
    with tempfile.TemporaryDirectory() as tmp:
        other_loss = "bnpo" if algorithm == "grpo" else "grpo"
        off = settings.trl_config(algorithm, tmp, learning_rate=1e-3, loss_type=other_loss)
    differ = {r.setting for r in settings.settings_map(algorithm, off) if not r.equal}
    assert differ == {"learning rate", "loss aggregation"}


@pytest.mark.slow
def test_grpo_update_matches_trl() -> None:
    """Level b, grpo, on a small sampled batch: one rollout batch's update (4 AdamW steps)
    on each side; measured relative L2 distance ~2e-4 at 8 prompts (float rounding
    through Adam's first steps), so 1e-2 leaves room and still fails on any real
    difference (the update would then differ in direction or size by O(1))."""
    from benchmarks.parity.shared import sample_batch

    row = levels.update_parity("grpo", sample_batch(prompts=8))
    assert row["optimizer steps"] == 4
    assert row["relative L2 distance"] < 1e-2, row


@pytest.mark.slow
@pytest.mark.recheck  # ~3-6 min; level b's own test above keeps the same code in CI
def test_harness_bench_runs_parity(tmp_path) -> None:
    """``harness bench --quick --only parity`` (8 prompts) writes section 9 with level a's
    and level b's rows."""
    from harness_cli import run_harness

    result = run_harness(
        "bench", "--quick", "--only", "parity", "--out", str(tmp_path), cwd=tmp_path, timeout=1800
    )
    assert result.returncode == 0, result.stderr
    report = (tmp_path / "performance.md").read_text()
    assert "## 9. Parity with TRL's GRPOTrainer" in report
    assert "update relative L2 distance" in report and "max abs logprob diff" in report
    assert "paired seeds: equivalent within" in report  # level c, from its committed report


def test_bench_reads_level_c_from_its_report_and_says_when_there_is_none(tmp_path) -> None:
    import json
    import math

    from benchmarks.parity import run

    (missing,) = run.level_c_rows(tmp_path / "a" / "b" / "levels_c.json")
    assert "not run" in missing["check"] and math.isnan(missing["value"])
    committed = json.loads(run.LEVEL_C_REPORT.read_text())
    rows = run.level_c_rows()
    assert [r["algorithm"] for r in rows] == [r["algorithm"] for r in committed["rows"]]
    for row, r in zip(rows, committed["rows"], strict=True):
        assert row["value"] == r["difference"]["mean"] and r["verdict"] in row["check"]
        assert f"{len(r['seeds'])} paired seeds" in row["check"]


@pytest.mark.slow  # ~31 s wall (13 s CPU) on the busy 2-core machine: mostly imports
@pytest.mark.extra  # a benchmark's smoke test; CI keeps level a (default set) and level b
def test_step1_gap_runs_on_a_tiny_setting(tmp_path) -> None:
    """``python -m benchmarks.parity.step1`` on 2 batches of 2 prompts x 8: it writes
    step1_gap.{md,json} with both sides' means, intervals and their paired difference; the
    two sides' rewards lie in [0, 1] and were computed on the same prompts (the train
    stream's indices, fed as the same token ids); the factors swapped on the same samples
    are there."""
    import json

    from benchmarks.parity import step1

    step1.main(["--batches", "2", "--prompts", "2", "--out", str(tmp_path)])
    result = json.loads((tmp_path / "step1_gap.json").read_text())
    assert (tmp_path / "step1_gap.md").read_text().startswith("# Step-1 training reward")
    assert result["command"].startswith("python -m benchmarks.parity.step1")
    assert result["commit"] and result["machine"]
    arms = result["arms"]
    assert set(arms) == {"fz", "trl"}
    for arm in arms.values():
        assert 0.0 <= arm["reward min"] <= arm["reward max"] <= 1.0
        assert 0.0 <= arm["mean"] <= 1.0 and arm["batches"] == 2
        assert arm["low"] <= arm["mean"] <= arm["high"]
        assert len(arm["batch means"]) == 2
    assert arms["fz"]["prompt indices"] == arms["trl"]["prompt indices"] == [[0, 1], [2, 3]]
    diff = result["differences"]["forge-zoo - TRL"]
    assert diff["mean"] == pytest.approx(arms["fz"]["mean"] - arms["trl"]["mean"])
    factors = result["factors on the same samples"]
    assert factors["prompt ids"] == {"prompts": 4, "differing": 0, "special tokens in prompts": 0}
    assert factors["trl: reward call re-scored by env.score_batch"]["rewards differing"] == 0
    for side in ("fz", "trl"):
        assert factors[f"{side}: samples"]["completions"] == 2 * 2 * 8
        assert "difference (other's - own)" in factors[f"{side}: other side's cut and decode"]
        assert "reward correlation, (i, j) ~ (i+1, j-1)" in factors[f"{side}: neighbouring prompts"]


def test_level_c_refuses_a_first_seed_outside_its_seeds(tmp_path, capsys) -> None:
    from benchmarks.parity import run

    out = tmp_path / "out"
    with pytest.raises(SystemExit) as stop:
        run.main(["--levels", "c", "--seeds", "3", "--first-seed", "3", "--out", str(out)])
    assert stop.value.code == 2
    assert "--first-seed 3: must be in 0..2" in capsys.readouterr().err
    assert not out.exists()  # refused before anything was made


@pytest.mark.slow  # ~45-65 s wall (~20 s CPU) on the busy 2-core machine, at nice 15
@pytest.mark.extra  # a benchmark's smoke test; CI keeps level a (default set) and level b
def test_level_c_runs_on_a_tiny_setting(tmp_path) -> None:
    """``python -m benchmarks.parity --levels c`` for grpo on 2 seeds of 2 rollout steps
    (8 optimizer steps) of 4 prompts x 8, 2 evaluation points on 20 held-out problems: one
    file per (side, seed), TRL trained for forge-zoo's optimizer steps and scored where
    forge-zoo was evaluated, both starts scored alike; the report's figures are those of
    the per-run files; a re-run redoes nothing, and one at another setting is refused."""
    import json
    import math
    import statistics

    from benchmarks.parity import run
    from harness import verdicts

    args = ["--levels", "c", "--algorithms", "grpo", "--seeds", "2", "--prompts", "4"]
    args += ["--rollout-steps", "2", "--eval-points", "2", "--eval-prompts", "20"]
    args += ["--out", str(tmp_path)]
    run.main(args)
    runs = tmp_path / "levels_c" / "runs"
    names = sorted(p.name for p in runs.iterdir())
    assert names == [f"{s}__grpo__seed{k}.json" for s in ("fz", "trl") for k in (0, 1)]
    files = {p.name: json.loads(p.read_text()) for p in runs.iterdir()}
    for seed in (0, 1):
        fz, trl = files[f"fz__grpo__seed{seed}.json"], files[f"trl__grpo__seed{seed}.json"]
        for r in (fz, trl):
            assert [c["point"] for c in r["curve"]] == [0, 1, 2]
            assert all(0.0 <= c["reward"] <= 1.0 for c in r["curve"])
            assert r["headline"] == pytest.approx(
                statistics.fmean(c["reward"] for c in r["curve"][1:])
            )
            assert r["seconds_per_optimizer_step"] > 0
        assert fz["rollout_steps"] == 2 and fz["optimizer_steps"] == 8
        assert trl["optimizer_steps"] == fz["optimizer_steps"]
        assert [c["optimizer_steps"] for c in trl["curve"]] == [
            c["optimizer_steps"] for c in fz["curve"]
        ]
        assert trl["curve"][0]["reward"] == fz["curve"][0]["reward"]  # same start, same eval
        assert trl["prompts_used"] == [0, 7]
    result = json.loads((tmp_path / "levels_c.json").read_text())
    assert (tmp_path / "levels_c.md").read_text().startswith("# Parity with TRL 1.16")
    (row,) = result["rows"]
    assert row["algorithm"] == "grpo" and row["seeds"] == [0, 1]
    a = [files[f"fz__grpo__seed{k}.json"]["headline"] for k in (0, 1)]
    b = [files[f"trl__grpo__seed{k}.json"]["headline"] for k in (0, 1)]
    d = [x - y for x, y in zip(a, b, strict=True)]
    assert row["forge-zoo headlines"] == a and row["TRL headlines"] == b
    assert row["forge-zoo"]["mean"] == pytest.approx(statistics.fmean(a))
    assert row["TRL"]["mean"] == pytest.approx(statistics.fmean(b))
    assert row["difference"]["mean"] == pytest.approx(statistics.fmean(d))
    for got, want in (
        (row["p_difference"], verdicts.difference_p(d)),
        (row["p_equivalence"], verdicts.equivalence_p(d, 0.02)),
    ):
        assert (math.isnan(got) and math.isnan(want)) or got == pytest.approx(want)
    assert row["verdict"] in verdicts.VERDICTS and result["level"] == 0.05
    assert row["TRL seconds per optimizer step"] == pytest.approx(
        statistics.fmean(
            files[f"trl__grpo__seed{k}.json"]["seconds_per_optimizer_step"] for k in (0, 1)
        )
    )
    before = {p.name: p.stat().st_mtime_ns for p in runs.iterdir()}
    run.main(args)  # every run is finished: nothing is redone
    assert {p.name: p.stat().st_mtime_ns for p in runs.iterdir()} == before
    with pytest.raises(SystemExit, match="eval_prompts"):
        run.main([*args[:-4], "--eval-prompts", "30", "--out", str(tmp_path)])
    # a second process's share: seed 2 only, the others' files untouched, all three reported
    run.main([*args, "--seeds", "3", "--first-seed", "2"])
    assert {p.name: p.stat().st_mtime_ns for p in runs.iterdir()}.items() >= before.items()
    assert sorted(p.name for p in runs.iterdir() if p.name not in before) == [
        "fz__grpo__seed2.json",
        "trl__grpo__seed2.json",
    ]
    assert json.loads((tmp_path / "levels_c.json").read_text())["rows"][0]["seeds"] == [0, 1, 2]
