"""The RL loop in-process on the tiny model, with the session's vLLM engine: every
built-in trains, dynamic sampling refills the batch and charges every generated token."""

from __future__ import annotations

import json
import math

import pytest

from zoo.algorithms import get_algorithm, list_algorithms
from zoo.run.run_config import RunConfig
from zoo.run.runlog import RunWriter

BUILTINS = [
    "cispo",
    "custom",
    "dapo",
    "dr_grpo",
    "grpo",
    "gspo",
    "sapo",
    "rloo",
    "reinforce_pp",
    "opo",
]


def test_every_builtin_is_registered():
    assert set(BUILTINS) <= set(list_algorithms())


@pytest.mark.parametrize("name", BUILTINS)
def test_every_builtin_trains_without_nan_and_logs_its_loss_metrics(name, loop_for, tmp_path):
    cfg = RunConfig.from_flat(algorithm=name, steps=2, prompts_per_step=16, eval_every=2, seed=3)
    loop = loop_for(cfg)
    writer = RunWriter(tmp_path)
    loop.run(writer.log)
    writer.close()
    records = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [0, 1, 2]
    for r in records[1:]:
        assert {"loss", "ratio_mean", "grad_norm", "entropy_sampled"} <= set(r)
        assert all(math.isfinite(v) for v in r.values() if isinstance(v, float))
        assert r["policy_version"] == r["step"]
    uses_reference = get_algorithm(name).needs_reference  # beta > 0: grpo, custom, reinforce_pp
    assert (records[1]["reference_flops"] > 0) == uses_reference
    assert 0 <= records[-1]["eval_reward"] <= 1


def test_dapo_dynamic_sampling_refills_and_charges_every_generated_token(loop_for):
    # G = 2 makes all-equal groups (both right or both wrong) common: many are dropped.
    cfg = RunConfig.from_flat(algorithm="dapo", steps=1, prompts_per_step=16, group_size=2, seed=1)
    loop = loop_for(cfg)
    services = loop.s
    generated: list[int] = []
    generate = services.generator.generate

    def counting_generate(*args, **kwargs):
        groups = generate(*args, **kwargs)
        generated.extend(len(c.token_ids) for g in groups for c in g)
        return groups

    services.generator.generate = counting_generate
    try:
        record = loop.step()
    finally:
        del services.generator.generate
    rounds = record["sampling_rounds"]
    assert rounds > 1, "expected dropped groups to force a refill"
    assert record["kept_groups"] == 16 or rounds == cfg.sampling.max_sampling_rounds
    assert loop.samples == rounds * 16 * 2  # dropped samples count too
    delta = services.ledger.step_delta()
    assert delta["generate_tokens"] == sum(generated)
    assert delta["generate_flops"] > 0 and record["response_tokens"] < sum(generated)


def test_beta_zero_algorithms_never_build_or_run_the_reference(loop_for):
    cfg = RunConfig.from_flat(algorithm="dapo", steps=1, prompts_per_step=8)
    loop = loop_for(cfg)
    services = loop.s
    assert services.reference is None
    loop.step()
    assert services.ledger.flops["reference"] == 0


def test_a_samples_budget_stops_the_run_once_spent_and_evaluates_at_its_points(loop_for, tmp_path):
    cfg = RunConfig.from_flat(
        algorithm="dr_grpo", prompts_per_step=16, budget_samples=300, eval_points=2
    )
    loop = loop_for(cfg)
    records = loop.run(lambda record: None)
    assert [r["samples"] for r in records] == [0, 128, 256, 384]  # stops once >= 300
    assert [r["step"] for r in records if "eval_reward" in r] == [0, 2, 3]  # 150 and 300


def test_several_budgets_are_a_config_error():
    from zoo.core.config import ConfigError

    with pytest.raises(ConfigError, match="one budget"):
        RunConfig.from_flat(budget_flops=1e12, budget_samples=100).validate()
