"""Held-out evaluation (zoo/services/evaluation.py, RLLoop.evaluate): the unbiased pass@k
estimator against its closed form, and the loop's sampled metrics on the tiny model."""

from __future__ import annotations

import math
from itertools import combinations

import pytest

from zoo.core.config import ConfigError
from zoo.services.evaluation import pass_at_k, sampled_metrics


@pytest.mark.parametrize("n", [1, 2, 5, 8, 20])
def test_pass_at_k_equals_the_closed_form(n):
    for c in range(n + 1):
        for k in range(1, n + 1):
            closed = 1 - math.comb(n - c, k) / math.comb(n, k)
            assert pass_at_k(n, c, k) == pytest.approx(closed, abs=1e-12)
        assert pass_at_k(n, c, 1) == pytest.approx(c / n)


def test_pass_at_k_is_the_share_of_k_subsets_holding_a_correct_sample():
    # Enumerate every k-subset of 6 samples, 2 of them correct: the estimator's meaning.
    samples = [1, 0, 0, 1, 0, 0]
    for k in range(1, 7):
        subsets = list(combinations(samples, k))
        assert pass_at_k(6, 2, k) == pytest.approx(sum(any(s) for s in subsets) / len(subsets))


@pytest.mark.parametrize(("n", "c", "k"), [(4, 5, 1), (4, 1, 5), (4, 1, 0), (-1, 0, 1)])
def test_pass_at_k_refuses_impossible_counts(n, c, k):
    with pytest.raises(ValueError, match="pass@k"):
        pass_at_k(n, c, k)


def test_sampled_metrics_by_hand():
    # prompt 1: 2 of 4 right (one at 0.5 does not count); prompt 2: none right
    rewards = [[1.0, 0.5, 1.0, 0.0], [0.0, 0.0, 0.1, 0.0]]
    m = sampled_metrics(rewards, ks=(1, 4, 8))
    assert m["eval_pass_at_1"] == pytest.approx((2 / 4 + 0) / 2)
    assert m["eval_pass_at_4"] == pytest.approx((1 + 0) / 2)
    assert "eval_pass_at_8" not in m  # k > n is not reported
    assert m["eval_mean_at_4"] == pytest.approx((2.5 + 0.1) / 8)
    with pytest.raises(ValueError):
        sampled_metrics([[1.0], [1.0, 0.0]])


def test_evaluate_reports_greedy_and_sampled_metrics_with_fixed_seeds(loop_for):
    from zoo.run.run_config import RunConfig

    loop = loop_for(RunConfig.from_flat(prompts_per_step=8, eval_samples=8, seed=3))
    first, again = loop.evaluate(), loop.evaluate()
    keys = {"eval_reward", "eval_pass_at_1", "eval_pass_at_4", "eval_pass_at_8", "eval_mean_at_8"}
    assert keys <= set(first)
    same = {k: first[k] for k in keys}
    assert same == {k: again[k] for k in keys}  # the same seeds at every checkpoint
    # arithmetic's rewards are 0 or 1, so pass@1 is the mean sampled reward
    assert first["eval_pass_at_1"] == pytest.approx(first["eval_mean_at_8"])
    assert 0 < first["eval_pass_at_1"] < first["eval_pass_at_4"] < first["eval_pass_at_8"] < 1
    other_seed = loop_for(
        RunConfig.from_flat(prompts_per_step=8, eval_samples=8, seed=4)
    ).evaluate()
    assert other_seed["eval_pass_at_1"] != first["eval_pass_at_1"]
    assert other_seed["eval_reward"] == first["eval_reward"]  # greedy: no randomness
    greedy_only = loop_for(RunConfig.from_flat(prompts_per_step=8, eval_samples=0)).evaluate()
    assert set(greedy_only) == {"eval_reward", "eval_seconds"}


def test_sampled_evaluation_only_at_the_last_points_gives_the_same_numbers_there(loop_for):
    """sampled_eval_points=2: the last two evaluations (steps 4 and 5 of 0, 2, 4, 5) carry
    pass@k equal to a run that samples at every evaluation (0); the earlier ones greedy
    only. (The default, 3, is this with the last three.)"""
    from zoo.run.run_config import RunConfig

    def evals(cfg: RunConfig) -> dict[int, dict]:
        records: list[dict] = []
        loop_for(cfg).run(records.append)
        return {r["step"]: r for r in records if "eval_reward" in r}

    base = RunConfig.from_flat(
        steps=5,
        eval_every=2,
        prompts_per_step=4,
        eval_samples=4,
        seed=5,
        sampled_eval_points=0,
        checkpoint_every=0,
        env_config={"eval_size": 16},
    )
    every = evals(base)
    last_two = evals(base.replace(sampled_eval_points=2))
    assert sorted(every) == sorted(last_two) == [0, 2, 4, 5]
    for step in (0, 2):
        assert "eval_pass_at_1" in every[step] and "eval_pass_at_1" not in last_two[step]
        assert last_two[step]["eval_reward"] == every[step]["eval_reward"]
    for step in (4, 5):
        for key in ("eval_reward", "eval_pass_at_1", "eval_pass_at_4", "eval_mean_at_4"):
            assert last_two[step][key] == every[step][key], (step, key)


def test_sampled_points_of_a_budgeted_run_are_the_last_of_its_k_points(loop_for):
    """Budget mode: points 0..K by the highest one the spend has crossed."""
    from zoo.run.run_config import RunConfig

    loop = loop_for(
        RunConfig.from_flat(
            budget_samples=800,
            eval_points=8,
            sampled_eval_points=3,
            prompts_per_step=4,
            eval_samples=4,
        )
    )
    due = []
    for done in range(9):
        loop.evals_done = done
        due.append(loop.sampled_eval_due(step=done))
    assert due == [False] * 6 + [True] * 3
    with pytest.raises(ConfigError, match="sampled_eval_points"):
        RunConfig.from_flat(sampled_eval_points=-1).validate()


@pytest.mark.slow
@pytest.mark.parametrize("task", ["arithmetic", "pyfunc"])
def test_warm_start_selects_on_its_own_validation_split_never_the_held_out_one(
    task, tmp_path, monkeypatch
):
    """The tiny models' warm start stops on validation accuracy: the prompts it evaluates
    are train-stream problems it never trains on, and none is held out."""
    from zoo.models.tiny import TinyRecipe
    from zoo.warm_start import build

    recipe = TinyRecipe(
        task=task,
        max_steps=20,
        eval_every=10,
        batch_size=64,
        validation_size=100,
        target_accuracy=2.0,
    )
    evaluated, trained = [], set()
    real_loss = build.sft_loss

    def spy_loss(model, pairs):
        trained.update(prompt for prompt, _ in pairs)
        return real_loss(model, pairs)

    monkeypatch.setattr(build, "sft_loss", spy_loss)

    def spy_accuracy(model, env, prompts, max_new_tokens):
        evaluated.extend(prompts)
        return 0.0

    monkeypatch.setattr(build, "greedy_accuracy", spy_accuracy)
    info = build.build_tiny_model(recipe, tmp_path / "model", quiet=True)
    env, _, _ = build.warm_start_task(recipe)
    held_out = {p.text for p in env.eval_prompts()}
    texts = {p.text for p in evaluated}
    assert len(info["history"]) == 2 and len(evaluated) == 200  # two evaluations of 100
    assert all(p.split == "train" for p in evaluated)
    assert not texts & held_out and not texts & trained and trained


def test_eval_overlap_is_refused_where_nothing_can_overlap(loop_for):
    """eval_overlap on needs the Monarch placement in sync mode (RunConfig.validate), a
    single-turn env and generators that take requests without waiting (the loop)."""
    from zoo.run.episodes import EpisodeRollouts
    from zoo.run.loop import check_eval_overlap
    from zoo.run.run_config import RunConfig

    for placement, mode in (("local", "sync"), ("monarch", "async")):
        cfg = RunConfig.from_flat(eval_overlap="on", placement=placement, mode=mode)
        with pytest.raises(
            ConfigError, match=f"eval_overlap on needs .*got placement '{placement}', mode '{mode}'"
        ):
            cfg.validate()
    RunConfig.from_flat(eval_overlap="on", placement="monarch").validate()  # what it needs
    with pytest.raises(ConfigError, match=r"unknown eval_overlap 'yes'; valid: off, on"):
        RunConfig.from_flat(eval_overlap="yes").validate()
    loop = loop_for(RunConfig.from_flat(prompts_per_step=8))
    with pytest.raises(ConfigError, match="HFGenerator does not"):
        check_eval_overlap(loop.rollouts, loop.s)
    episodes = EpisodeRollouts(loop.s, loop.sampling, token_limit=16)
    with pytest.raises(ConfigError, match=r"needs a single-turn env; .* plays multi-turn"):
        check_eval_overlap(episodes, loop.s)


def test_a_record_names_its_non_finite_figures():
    # The loop stops at a step with one (and never defers that step's evaluation).
    from zoo.run.loop import non_finite

    record = {"step": 3, "loss": float("nan"), "kl": float("inf"), "reward": 0.5, "kind": "x"}
    assert non_finite(record) == ["loss", "kl"]
    assert non_finite({"step": 3, "reward": 0.5}) == []
