"""The training regime on the real tiny model (zoo/services/trainer.py, zoo/run/loop.py):
several optimizer steps per rollout batch against old log-probs computed once, the
weights of older versions kept for async batches, scoring at the sampling temperature,
and the corrections reaching the update."""

from __future__ import annotations

import dataclasses

import pytest
import test_trainer
import torch

from zoo.algorithms import get_algorithm
from zoo.core.config import ConfigError
from zoo.envs import get_env
from zoo.run.rollout import rollout_batch
from zoo.run.run_config import RunConfig
from zoo.run.runlog import is_timing_key
from zoo.run.wiring import trainer_config_of
from zoo.services.batch import RolloutBatch, response_logprobs
from zoo.services.reference import Reference
from zoo.services.sampling import SamplingConfig
from zoo.services.trainer import Trainer, TrainerConfig, mini_batch_rows, mini_batch_slices

GROUP = 2


def random_batch() -> RolloutBatch:
    """8 rows of random tokens (tests/test_trainer.py), in groups of 2."""
    return dataclasses.replace(test_trainer.random_batch(size=8), group_size=GROUP)


def weights(trainer: Trainer) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in trainer.model.state_dict().items()}


def trainer_with(tiny_path, temperature: float = 1.0, max_policy_age: int = 0, **config) -> Trainer:
    return Trainer(
        tiny_path,
        TrainerConfig.of(lr=1e-3, **config),
        max_response_len=5,
        temperature=temperature,
        max_policy_age=max_policy_age,
    )


LOSS = get_algorithm("grpo", beta=0.0).loss


@pytest.mark.parametrize(("mini_batches", "epochs"), [(2, 1), (2, 2), (4, 1)])
def test_train_is_mini_batches_x_epochs_optimizer_steps_against_one_old_policy(
    tiny_path, mini_batches, epochs
):
    batch = random_batch()
    scheduled = trainer_with(tiny_path, mini_batches=mini_batches, epochs=epochs)
    batch.old_logprobs = scheduled.logprobs(batch)
    metrics = scheduled.train(batch, LOSS)
    assert metrics["updates"] == mini_batches * epochs and scheduled.version == 1

    by_hand = trainer_with(tiny_path)
    rows = batch.size // mini_batches  # whole groups: 8 rows, groups of 2
    for _ in range(epochs):
        for k in range(mini_batches):
            by_hand.step(batch.rows(slice(k * rows, (k + 1) * rows)), LOSS)
    ours, theirs = weights(scheduled), weights(by_hand)
    assert all(torch.equal(ours[k], theirs[k]) for k in ours)


def test_shuffled_mini_batches_draw_a_new_order_each_pass_from_seed_version_and_pass():
    def split(seed=(3, 0, 0), rows=16, count=3):
        return [t.tolist() for t in mini_batch_rows(rows, 4, count, "shuffled", seed)]

    first = split()
    assert sorted(r for rows in first for r in rows) == list(range(16))  # every row once
    assert [len(rows) for rows in first] == [6, 5, 5]  # as even as rows allow
    assert any(len({r // 4 for r in rows}) > 2 for rows in first)  # groups are cut
    assert split() == first  # the same seed, version and pass: the same order (a resume)
    for other in ((4, 0, 0), (3, 1, 0), (3, 0, 1)):  # another seed, version or pass
        assert split(other) != first
    # one mini-batch: the batch as it is (its order changes nothing)
    assert mini_batch_rows(16, 4, 1, "shuffled", (3, 0, 0)) == [slice(0, 16)]
    assert mini_batch_rows(16, 4, 2, "groups", (3, 0, 0)) == mini_batch_slices(16, 4, 2)


def test_a_shuffled_regime_trains_on_those_rows_pass_after_pass(tiny_path):
    batch = random_batch()
    shuffled = trainer_with(
        tiny_path, mini_batches=2, epochs=2, mini_batch_rows="shuffled", shuffle_seed=11
    )
    batch.old_logprobs = shuffled.logprobs(batch)
    shuffled.train(batch, LOSS)
    by_hand = trainer_with(tiny_path)
    for epoch in range(2):
        for rows in mini_batch_rows(batch.size, GROUP, 2, "shuffled", (11, 0, epoch)):
            by_hand.step(batch.rows(rows), LOSS)
    ours, theirs = weights(shuffled), weights(by_hand)
    assert all(torch.equal(ours[k], theirs[k]) for k in ours)
    grouped = trainer_with(tiny_path, mini_batches=2, epochs=2)
    grouped.train(batch, LOSS)
    assert not all(torch.equal(ours[k], v) for k, v in weights(grouped).items())


def test_a_run_shuffles_with_its_own_seed():
    cfg = RunConfig.from_flat(seed=7, mini_batch_rows="shuffled")
    trainer_config = trainer_config_of(cfg)
    assert trainer_config.shuffle_seed == 7
    assert trainer_config.regime.mini_batch_rows == "shuffled"


def test_the_first_update_is_on_policy_and_the_later_ones_are_not(tiny_path):
    batch = random_batch()
    trainer = trainer_with(tiny_path, mini_batches=4)
    batch.old_logprobs = trainer.logprobs(batch)
    metrics = trainer.train(batch, LOSS)
    assert metrics["staleness_kl"] < 1e-9  # the first update: ratio 1
    assert metrics["policy_kl"] > 1e-6 and metrics["ratio_max"] > 1.0  # the later ones moved
    assert metrics["clip_low_frac"] + metrics["clip_high_frac"] > 0  # lr 1e-3: GRPO clips


def test_several_updates_need_old_log_probs(tiny_path):
    with pytest.raises(ValueError, match="old_logprobs"):
        trainer_with(tiny_path, mini_batches=2).train(random_batch(), LOSS)


def test_old_log_probs_come_from_the_weights_that_sampled_each_row(tiny_path):
    batch = random_batch()
    trainer = trainer_with(tiny_path, mini_batches=2, max_policy_age=1)
    at_0 = trainer.logprobs(batch)
    batch.old_logprobs = at_0
    trainer.train(batch, LOSS)  # now version 1
    batch.policy_versions = torch.tensor([0, 0, 1, 1, 0, 0, 1, 1])
    mixed = trainer.logprobs(batch)
    with torch.no_grad():
        at_1 = response_logprobs(trainer.model, batch.tokens, batch.response_start, 5)
    old_rows, new_rows = batch.policy_versions == 0, batch.policy_versions == 1
    assert torch.equal(mixed[old_rows], at_0[old_rows])  # version 0's weights, restored after
    assert torch.allclose(mixed[new_rows], at_1[new_rows], atol=1e-6)
    assert not torch.allclose(at_0, at_1, atol=1e-4)  # the step did change them

    batch.old_logprobs = mixed
    trainer.train(batch, LOSS)  # version 2: version 0 is now two steps back
    with pytest.raises(RuntimeError, match="no weights of policy version 0"):
        trainer.logprobs(batch)
    batch.policy_versions = torch.ones(8, dtype=torch.long)
    assert torch.allclose(trainer.logprobs(batch), at_1, atol=1e-6)


def sampled_batch(generator, temperature: float) -> RolloutBatch:
    prompts = get_env("arithmetic").train_prompts(0, 12, seed=5)
    sampling = SamplingConfig(temperature=temperature, max_tokens=6)
    groups = generator.generate(
        [list(p.text.encode()) for p in prompts], n=4, sampling=sampling, seeds=list(range(12))
    )
    return rollout_batch(groups, torch.zeros(12, 4))


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_trainer_and_sampler_log_probs_agree_at_the_sampling_temperature(
    generator, tiny_path, temperature
):
    batch = sampled_batch(generator, temperature)
    trainer = trainer_with(tiny_path, temperature=temperature)
    gap = ((trainer.logprobs(batch) - batch.sampler_logprobs).abs() * batch.mask).max()
    assert gap < 1e-3
    if temperature != 1.0:  # scoring at T = 1 instead would be far off
        at_1 = trainer_with(tiny_path).logprobs(batch)
        assert ((at_1 - batch.sampler_logprobs).abs() * batch.mask).max() > 0.05


def test_the_reference_scores_at_the_sampling_temperature_too(tiny_path):
    batch = random_batch()
    trainer = trainer_with(tiny_path, temperature=0.7)
    reference = Reference(trainer.model, temperature=0.7)
    assert torch.allclose(reference.logprobs(batch), trainer.logprobs(batch), atol=1e-6)


def test_greedy_temperature_is_refused_with_the_reason():
    with pytest.raises(ConfigError, match="temperature 0 is greedy decoding: the 8 samples"):
        RunConfig.from_flat(temperature=0.0).validate()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"mini_batches": 0}, "mini_batches must be >= 1"),
        ({"epochs": 0}, "epochs must be >= 1"),
        ({"mini_batches": 9, "prompts_per_step": 8}, "at most one mini-batch per group"),
        ({"correction": "icepop"}, "valid: none, tis, mis-token, mis-sequence, bypass"),
        ({"old_logprob_pass": "never"}, "valid: when_needed, always"),
        ({"mini_batch_rows": "random"}, "valid: groups, shuffled"),
        ({"correction_low": 1.5}, "correction_low <= 1"),
        ({"warmup_ratio": 1.0}, "warmup_ratio must be in"),
        ({"warmup_ratio": 0.1, "warmup_steps": 5}, "leave --warmup-steps"),
    ],
)
def test_bad_regime_settings_are_config_errors(change, message):
    with pytest.raises(ConfigError, match=message):
        RunConfig.from_flat(**change).validate()


def test_gspo_and_sapo_differ_from_the_first_step(loop_for):
    """On-policy they are the same update (REINFORCE under seq_mean); from the second
    mini-batch of the first rollout batch on, GSPO's sequence clip and SAPO's gate act."""
    records, finals = {}, {}
    for name in ("gspo", "sapo"):
        loop = loop_for(RunConfig.from_flat(algorithm=name, prompts_per_step=32, seed=2))
        records[name] = loop.step()
        finals[name] = weights(loop.s.trainer)
    gspo, sapo = records["gspo"], records["sapo"]
    assert gspo["reward_mean"] == sapo["reward_mean"]  # the same samples
    assert gspo["grad_norm"] != sapo["grad_norm"]
    assert any(not torch.equal(finals["gspo"][k], finals["sapo"][k]) for k in finals["gspo"])
    assert gspo["seq_clip_low_acting_frac"] + gspo["seq_clip_high_acting_frac"] > 0
    assert sapo["gate_weight_mean"] < 1.0 and sapo["gate_weight_q05"] < 1.0


def test_warm_up_and_decay_follow_the_share_of_a_budget_spent(loop_for):
    """--warmup-ratio and a decay over a samples budget, whose optimizer steps are not
    known ahead: each batch's updates take the lr of the budget's share spent with the
    batch's generation counted: 1/4, 2/4, 3/4, 4/4 of 4 batches of 64 samples."""
    cfg = RunConfig.from_flat(
        algorithm="grpo",
        prompts_per_step=8,
        mini_batches=2,
        lr=1e-3,
        budget_samples=4 * 64,
        warmup_ratio=0.5,
        lr_schedule="linear",
        eval_points=1,
        eval_samples=0,
        env_config={"eval_size": 8},
    )
    assert cfg.schedule_over_budget
    records = loop_for(cfg).run(lambda record: None)
    lrs = [r["lr"] for r in records if r["step"] > 0]
    # warm-up to 1e-3 over the first half (5e-4 at a quarter), then linear to 0
    assert lrs == pytest.approx([5e-4, 1e-3, 5e-4, 0.0]), lrs
    # a FLOPs budget with a decay and no --decay-steps now schedules over the budget too
    assert RunConfig.from_flat(budget_flops=1e12, lr_schedule="cosine").schedule_over_budget
    assert not RunConfig.from_flat(
        lr_schedule="cosine"
    ).schedule_over_budget  # steps: optimizer steps


def test_the_ledger_charges_the_old_log_prob_pass_and_every_epoch(loop_for):
    one = loop_for(
        RunConfig.from_flat(algorithm="dapo", prompts_per_step=16, mini_batches=2, seed=1)
    )
    one.step()
    two = loop_for(
        RunConfig.from_flat(algorithm="dapo", prompts_per_step=16, mini_batches=2, epochs=2, seed=1)
    )
    two.step()
    a, b = one.s.ledger.flops, two.s.ledger.flops
    assert a["old_logprobs"] > 0 and a["old_logprobs"] == b["old_logprobs"]
    assert a["train"] == pytest.approx(3 * a["old_logprobs"])  # backward = 2 x forward
    assert b["train"] == pytest.approx(2 * a["train"])


def test_one_on_policy_update_takes_its_own_forward_as_the_old_policy(loop_for):
    """mini_batches 1 and nothing reading pi_old before training: no old-log-prob pass
    (none charged), and the same numbers as with it (grpo, with its reference, two steps:
    every metric, the mismatch metrics too, and the weights), since the update's forward
    at the weights that sampled the batch is pi_old. Several updates, or a correction,
    still run the pass."""
    records, flops, finals = {}, {}, {}
    for mode in ("when_needed", "always"):
        loop = loop_for(
            RunConfig.from_flat(
                algorithm="grpo", prompts_per_step=16, mini_batches=1, old_logprob_pass=mode, seed=5
            )
        )
        records[mode] = [loop.step(), loop.step()]
        flops[mode], finals[mode] = dict(loop.s.ledger.flops), weights(loop.s.trainer)
    assert flops["when_needed"].get("old_logprobs", 0) == 0 < flops["always"]["old_logprobs"]
    assert flops["when_needed"]["train"] == flops["always"]["train"]
    numbers = {
        m: [{k: v for k, v in r.items() if not is_timing_key(k)} for r in rs]
        for m, rs in records.items()
    }
    assert "mismatch_logprob_max" in numbers["when_needed"][0]
    assert numbers["when_needed"] == numbers["always"]
    assert all(torch.equal(finals["when_needed"][k], v) for k, v in finals["always"].items())
    for change in ({"mini_batches": 2}, {"correction": "tis"}):
        loop = loop_for(RunConfig.from_flat(algorithm="grpo", prompts_per_step=16, **change))
        loop.step()
        assert loop.s.ledger.flops["old_logprobs"] > 0, change
    # a run recorded before the setting existed re-runs as it ran: with the pass
    recorded = RunConfig.from_flat(mini_batches=1).to_flat()
    del recorded["old_logprob_pass"]
    assert RunConfig.from_record(recorded).regime.old_logprob_pass == "always"


@pytest.mark.parametrize("correction", ["none", "tis", "mis-token", "mis-sequence", "bypass"])
def test_each_correction_reports_itself_and_bypass_trains_against_the_sampler(loop_for, correction):
    loop = loop_for(RunConfig.from_flat(prompts_per_step=16, correction=correction, seed=4))
    seen: list[RolloutBatch] = []
    train = loop.s.trainer.train
    loop.s.trainer.train = lambda batch, loss_fn: seen.append(batch) or train(batch, loss_fn)
    record = loop.step()
    assert 0 <= record["mismatch_logprob_mean"] <= record["mismatch_logprob_max"] < 1e-3
    reported = {"is_weight_mean", "is_truncated_frac", "is_masked_frac"} & set(record)
    assert reported == {
        "tis": {"is_weight_mean", "is_truncated_frac"},
        "mis-token": {"is_masked_frac"},
        "mis-sequence": {"is_masked_frac"},
    }.get(correction, set())
    batch = seen[0]
    bypassed = torch.equal(batch.old_logprobs, batch.sampler_logprobs)
    assert bypassed == (correction == "bypass")


def test_a_correction_reaches_the_update(loop_for):
    """Masking every token whose ratio to the sampler is not exactly 1 (the float gap
    between vLLM and the trainer is nonzero almost everywhere) leaves almost no policy
    gradient; the same step without the correction has its usual one."""
    plain = loop_for(RunConfig.from_flat(algorithm="dapo", prompts_per_step=16, seed=4)).step()
    masked = loop_for(
        RunConfig.from_flat(
            algorithm="dapo",
            prompts_per_step=16,
            seed=4,
            correction="mis-token",
            correction_low=1.0,
            correction_high=1.0,
        )
    ).step()
    assert masked["is_masked_frac"] > 0.5
    assert masked["grad_norm"] < 0.5 * plain["grad_norm"]


RARELY_ACTS = {"cispo": "capped_acting_frac", "sapo": "gate_acting_frac"}
"""Built-ins whose mechanism seldom changes a gradient at the tiny model's defaults, with
its acting share: CISPO caps its importance weight at r = 5, and at lr 5e-5 with 4
mini-batches the largest ratios are 2-4 (docs/training.md measures where it starts to
bind, and what that costs); SAPO's gate counts as acting where it keeps less than 0.9 of
a token's gradient, which at tau = 1 takes |r - 1| > 0.65."""


@pytest.mark.parametrize("name", ["cispo", "custom", "dapo", "dr_grpo", "grpo", "gspo", "sapo"])
def test_each_builtins_mechanism_acts_in_a_default_run(loop_for, name):
    """Three steps of a default run (128 prompts x 8 in 4 mini-batches): the mechanism
    the algorithm declares changes some token's or sequence's gradient at every step
    (or, for those in RARELY_ACTS, on under 1% of tokens)."""
    loop = loop_for(RunConfig.from_flat(algorithm=name, seed=1))
    records = [loop.step() for _ in range(3)]
    algorithm = get_algorithm(name)
    assert all(set(algorithm.mechanism) <= set(r) for r in records)
    acted = [algorithm.mechanism_acted(r) for r in records]
    if name in RARELY_ACTS:
        assert all(r[RARELY_ACTS[name]] < 1e-2 for r in records), records
    else:
        assert all(acted), [{k: r[k] for k in algorithm.mechanism} for r in records]
    if name == "sapo":  # its gate still lowers some weight at every step, if by little
        assert all(r["gate_weight_q05"] < 1.0 for r in records)
    assert all(r["updates"] == 4 and r["ratio_max"] > 1.0 for r in records)


def test_the_memory_estimate_counts_the_weights_async_mode_keeps():
    from zoo.models.memory import memory_estimate
    from zoo.models.presets import model_shape

    shape = model_shape("qwen3-1.7b")
    sizes = dict(sequences=64, seq_len=512, micro_batch=8, reference=False, compute_bytes=2)
    extra = (
        memory_estimate(shape, kept_versions=2, **sizes).minimum
        - memory_estimate(shape, **sizes).minimum
    )
    assert extra == 2 * 4 * shape.params  # two float32 copies
