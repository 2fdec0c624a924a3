"""PPO with a learned critic (zoo/algorithms/ppo.py, zoo/services/value.py): GAE and the
returns, the clipped value loss and the explained variance against values worked out by
hand from the papers' formulas (Schulman et al., arXiv 1506.02438 eq. 16 and arXiv
1707.06347), the critic's phases in the ledger, short runs on the tiny model in which the
critic learns, and an exact resume with the critic in the checkpoint."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch
from harness_cli import run_harness

from harness.runner import execute_run, read_metrics
from zoo.algorithms import get_algorithm
from zoo.algorithms.ppo import gae, whiten_tokens
from zoo.core.losses import clipped_value_loss, explained_variance, last_token_rewards
from zoo.core.types import ValueBatch
from zoo.models.presets import ModelShape
from zoo.run import checkpoint
from zoo.run.checkpoint import current, load_state_file
from zoo.run.run_config import RunConfig
from zoo.run.runlog import is_timing_key
from zoo.services.ledger import Ledger

F64 = torch.float64


def t(rows: list[list[float]]) -> torch.Tensor:
    return torch.tensor(rows, dtype=F64)


# --- GAE, by hand -------------------------------------------------------------------------
# gamma = 0.9, lambda = 0.8 (gamma * lambda = 0.72). Four rows over T = 4:
#   row 0: 3 response tokens, the reward 1 on the last; V = 0.5, 0.2, 0.6 (junk on padding)
#     t=2: d = 1 - 0.6 = 0.4                      A = 0.4            G = 1.0
#     t=1: d = 0.9 * 0.6 - 0.2 = 0.34             A = 0.34 + 0.72 * 0.4 = 0.628   G = 0.828
#     t=0: d = 0.9 * 0.2 - 0.5 = -0.32            A = -0.32 + 0.72 * 0.628 = 0.13216
#                                                                     G = 0.63216
#     (check by the lambda-return: G_0 = 0.9 * (0.2 * 0.2 + 0.8 * 0.828) = 0.63216)
#   row 1: 2 tokens, reward -0.5 on the last; V = 0.1, -0.3
#     t=1: d = -0.5 + 0.3 = -0.2                  A = -0.2           G = -0.5
#     t=0: d = 0.9 * -0.3 - 0.1 = -0.37           A = -0.37 - 0.144 = -0.514  G = -0.414
#   row 2: tokens 0 and 2 marked, token 1 not (an observation between turns), reward 1 on
#     token 2; V = 0.3, (7.0), 0.4: the unmarked token is stepped over
#     t=2: A = 1 - 0.4 = 0.6                      G = 1.0
#     t=0: d = 0.9 * 0.4 - 0.3 = 0.06             A = 0.06 + 0.72 * 0.6 = 0.492  G = 0.792
#   row 3: no marked token (a response left out of the loss): all 0

MASK = t([[1, 1, 1, 0], [1, 1, 0, 0], [1, 0, 1, 0], [0, 0, 0, 0]])
REWARDS = t([[0, 0, 1, 0], [0, -0.5, 0, 0], [0, 0, 1, 0], [0, 0, 0, 0]])
VALUES = t([[0.5, 0.2, 0.6, 9.0], [0.1, -0.3, 5.0, 5.0], [0.3, 7.0, 0.4, 3.0], [2, 2, 2, 2]])
HAND_ADVANTAGES = t(
    [[0.13216, 0.628, 0.4, 0], [-0.514, -0.2, 0, 0], [0.492, 0, 0.6, 0], [0, 0, 0, 0]]
)
HAND_RETURNS = t([[0.63216, 0.828, 1.0, 0], [-0.414, -0.5, 0, 0], [0.792, 0, 1.0, 0], [0] * 4])


def test_gae_and_returns_match_the_hand_computed_example():
    advantages, returns = gae(REWARDS, VALUES, MASK, gamma=0.9, lam=0.8)
    torch.testing.assert_close(advantages, HAND_ADVANTAGES, rtol=0, atol=1e-12)
    torch.testing.assert_close(returns, HAND_RETURNS, rtol=0, atol=1e-12)


def test_gae_at_gamma_lambda_one_is_the_return_less_the_value():
    advantages, returns = gae(REWARDS, VALUES, MASK, gamma=1.0, lam=1.0)
    outcome = REWARDS.sum(-1, keepdim=True)
    torch.testing.assert_close(advantages, (outcome - VALUES) * MASK, rtol=0, atol=1e-12)
    torch.testing.assert_close(returns, outcome * MASK, rtol=0, atol=1e-12)


def test_gae_at_lambda_zero_is_the_one_step_td_error():
    advantages, _ = gae(REWARDS, VALUES, MASK, gamma=0.9, lam=0.0)
    # row 0, t=1: 0.9 * 0.6 - 0.2; row 2, t=0: 0.9 * 0.4 - 0.3 (the marked next token)
    assert float(advantages[0, 1]) == pytest.approx(0.34, abs=1e-12)
    assert float(advantages[2, 0]) == pytest.approx(0.06, abs=1e-12)


def test_the_reward_goes_on_each_responses_last_marked_token():
    mask = t([[1, 1, 1, 0], [1, 1, 0, 0], [1, 0, 1, 0], [0, 0, 0, 0]])
    placed = last_token_rewards(torch.tensor([1.0, -0.5, 0.25, 3.0]), mask)
    assert placed.tolist() == [[0, 0, 1, 0], [0, -0.5, 0, 0], [0, 0, 0.25, 0], [0, 0, 0, 0]]


def test_whitening_is_over_the_marked_tokens_of_the_batch():
    values = t([[1.0, 2.0, 3.0, 50.0], [4.0, 0.0, -9.0, -9.0]])
    mask = t([[1, 1, 1, 0], [1, 0, 0, 0]])
    out = whiten_tokens(values, mask)
    # tokens 1, 2, 3, 4: mean 2.5, unbiased std sqrt(5/3)
    std = (5 / 3) ** 0.5
    want = t(
        [
            [-1.5 / (std + 1e-6), -0.5 / (std + 1e-6), 0.5 / (std + 1e-6), 0],
            [1.5 / (std + 1e-6), 0, 0, 0],
        ]
    )
    torch.testing.assert_close(out, want, rtol=0, atol=1e-12)
    assert whiten_tokens(t([[2.0, 2.0, 7.0]]), t([[1, 1, 0]])).abs().max() == 0


def test_token_advantages_whiten_by_default_and_keep_the_returns():
    ppo = get_algorithm("ppo", gamma=0.9, lam=0.8)
    advantages, returns = ppo.token_advantages(REWARDS, VALUES, MASK)
    torch.testing.assert_close(returns, HAND_RETURNS, rtol=0, atol=1e-12)
    torch.testing.assert_close(advantages, whiten_tokens(HAND_ADVANTAGES, MASK), rtol=0, atol=1e-9)
    plain = get_algorithm("ppo", gamma=0.9, lam=0.8, whiten=False)
    torch.testing.assert_close(
        plain.token_advantages(REWARDS, VALUES, MASK)[0], HAND_ADVANTAGES, rtol=0, atol=1e-12
    )


# --- the clipped value loss, by hand --------------------------------------------------------
# clip c = 0.5; tokens (V_old, V, G):
#   (0.5, 0.9, 1.0): |V - V_old| = 0.4 < c: 0.5 * 0.1^2 = 0.005
#   (0.5, 1.2, 0.0): V_clip = 1.0; (1.2)^2 = 1.44 > 1.0^2: 0.72, the plain branch
#   (0.5, 1.2, 1.5): V_clip = 1.0; (0.3)^2 = 0.09 < (0.5)^2 = 0.25: 0.125, the clip binds
#   (0.2, 0.1, 0.3): 0.5 * 0.2^2 = 0.02
# token mean (0.005 + 0.72 + 0.125 + 0.02) / 4 = 0.2175, the clip acting on 1 of 4 tokens;
# d loss / d V = (V - G) / 4 where the plain branch counts, 0 where the clip binds.
# Without the clip binding (c = 10) the third token costs 0.5 * 0.09 = 0.045: 0.1975.

OLD = t([[0.5, 0.5, 0.5, 0.2, -4.0]])
NEW = [[0.9, 1.2, 1.2, 0.1, 8.0]]
TARGET = t([[1.0, 0.0, 1.5, 0.3, 3.0]])
VMASK = t([[1, 1, 1, 1, 0]])


def value_case(clip: float) -> tuple[torch.Tensor, dict, torch.Tensor]:
    v = t(NEW).requires_grad_(True)
    loss, metrics = clipped_value_loss(ValueBatch(v, OLD, TARGET, VMASK), clip)
    loss.backward()
    return loss, metrics, v.grad


def test_the_clipped_value_loss_matches_the_hand_values():
    loss, metrics, grad = value_case(0.5)
    assert float(loss.detach()) == pytest.approx(0.2175, abs=1e-12)
    assert metrics["value_loss"] == pytest.approx(0.2175, abs=1e-12)
    assert metrics["value_clip_acting_frac"] == 0.25
    torch.testing.assert_close(
        grad, t([[-0.1 / 4, 1.2 / 4, 0.0, -0.2 / 4, 0.0]]), rtol=0, atol=1e-12
    )


def test_without_the_clip_binding_the_value_loss_is_half_the_squared_error():
    loss, metrics, grad = value_case(10.0)
    assert float(loss.detach()) == pytest.approx(0.1975, abs=1e-12)
    assert metrics["value_clip_acting_frac"] == 0.0
    torch.testing.assert_close(grad, (t(NEW) - TARGET) * VMASK / 4, rtol=0, atol=1e-12)


def test_the_value_loss_adds_up_over_micro_batches():
    ppo = get_algorithm("ppo")
    g = torch.Generator().manual_seed(3)
    v, old, target = (torch.randn(5, 6, generator=g, dtype=F64) for _ in range(3))
    mask = t([[1] * 6, [1, 1, 0, 0, 0, 0], [0] * 6, [1] * 4 + [0] * 2, [1] * 3 + [0] * 3])
    whole = ppo.value_loss(ValueBatch(v, old, target, mask)).loss
    parts = [
        ppo.value_loss(
            ValueBatch(v[r], old[r], target[r], mask[r], num_tokens=int(mask.sum()))
        ).loss
        for r in (slice(0, 2), slice(2, 3), slice(3, 5))
    ]
    assert float(sum(parts)) == pytest.approx(float(whole), abs=1e-12)


def test_explained_variance_by_hand():
    returns = t([[1, 0, 1, 0, 5]])
    mask = t([[1, 1, 1, 1, 0]])
    # R - V = 0.25, -0.25, 0.25, -0.25: Var 0.0625 against Var(R) = 0.25
    assert explained_variance(t([[0.75, 0.25, 0.75, 0.25, -9]]), returns, mask) == 0.75
    assert explained_variance(t([[0.3] * 5]), returns, mask) == pytest.approx(0.0, abs=1e-15)
    assert explained_variance(returns, returns, mask) == 1.0
    assert explained_variance(t([[1, 1, 0, 0, 0]]), returns, mask) < 0  # worse than constant


def test_ppo_checks_its_settings():
    from zoo.core.config import ConfigError

    for bad in ({"gamma": 1.5}, {"lam": -0.1}, {"value_clip": 0.0}, {"critic_lr": -1.0}):
        with pytest.raises(ConfigError):
            get_algorithm("ppo", **bad)
    assert get_algorithm("ppo").critic_lr(5e-5) == pytest.approx(5e-4)
    assert get_algorithm("ppo", critic_lr=1e-3).critic_lr(5e-5) == 1e-3
    assert not get_algorithm("ppo").needs_reference  # verl's recipe: no KL, no reference
    assert not get_algorithm("grpo").needs_values


# --- the ledger -----------------------------------------------------------------------------


def test_the_critic_has_its_own_phases_and_costs_a_body_pass_without_the_lm_head(tiny_path):
    shape = ModelShape.from_hf_dir(tiny_path)
    ledger = Ledger(shape)
    assert not any(k.startswith("critic") for k in ledger.step_delta())  # never charged
    value = ledger.value_flops(10, 6)
    assert value == ledger.forward_flops(16, head_tokens=0) + 2 * shape.hidden_size * 6
    assert value < ledger.scoring_flops(10, 6)  # no LM head
    ledger.add("critic", value, 16)
    delta = ledger.step_delta()
    assert delta["critic_flops"] == value and delta["critic_tokens"] == 16
    assert "critic_train_flops" not in delta  # (charged by a run's first training)


# --- runs on the tiny model -----------------------------------------------------------------

PPO_RUN = RunConfig.from_flat(
    algorithm="ppo",
    prompts_per_step=4,
    steps=3,
    eval_every=3,
    checkpoint_every=1,
    eval_samples=0,
    env_config={"eval_size": 50},
)
CRITIC_KEYS = (
    "value_loss",
    "value_clip_acting_frac",
    "explained_variance",
    "value_mean",
    "return_mean",
    "critic_grad_norm",
)


class Killed(BaseException):
    """Stands for SIGKILL: nothing catches it."""


def untimed(records: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if not is_timing_key(k)} for r in records]


def test_a_ppo_run_charges_and_logs_the_critic_and_resumes_exactly(loop_for, tmp_path, monkeypatch):
    def run(out: Path, resume: bool = False) -> None:
        execute_run(PPO_RUN, out, loop_for(PPO_RUN).s, command="test", resume=resume)

    run(tmp_path / "whole")
    whole = read_metrics(tmp_path / "whole")
    steps = whole[1:]
    assert len(steps) == 3
    for r in steps:
        assert all(k in r for k in CRITIC_KEYS), sorted(r)
        # the critic's passes: one forward for the values, 3x per pass for its training
        assert r["critic_flops"] > 0 and r["critic_train_flops"] == pytest.approx(
            3 * r["critic_flops"], rel=1e-12
        )
        assert r["critic_tokens"] == r["old_logprobs_tokens"] == r["critic_train_tokens"]
        assert r["critic_flops"] < r["old_logprobs_flops"]  # the same body, no LM head
    assert steps[0]["value_mean"] == 0.0 and steps[0]["explained_variance"] == 0.0  # V = 0
    assert steps[1]["value_mean"] != 0.0  # the critic trained on step 1's returns
    # the budget's FLOPs count the critic's phases like every other
    assert whole[-1]["flops"] == pytest.approx(
        sum(v for r in steps for k, v in r.items() if k.endswith("_flops")), rel=1e-12
    )

    seen: list[str] = []

    def kill_after_second_save(stage: str) -> None:
        seen.append(stage)
        if stage == "old removed" and seen.count(stage) == 2:
            raise Killed(stage)

    out = tmp_path / "resumed"
    monkeypatch.setattr(checkpoint, "reached", kill_after_second_save)
    with pytest.raises(Killed):
        run(out)
    monkeypatch.setattr(checkpoint, "reached", lambda s: None)
    state = load_state_file(current(out / "checkpoint") / checkpoint.STATE_FILE)
    assert state["loop"]["step_index"] == 2
    assert "head.weight" in state["critic"]["weights"] and state["critic"]["optimizer"]["state"]
    run(out, resume=True)
    assert untimed(read_metrics(out)) == untimed(whole)


def test_other_algorithms_build_no_critic_and_log_no_critic_keys(loop_for):
    cfg = PPO_RUN.replace(algorithm="grpo", steps=1, checkpoint_every=0)
    loop = loop_for(cfg)
    assert loop.s.critic is None
    record = loop.step()
    record.update(loop.s.ledger.step_delta())
    assert not [k for k in record if k.startswith(("critic", "value_", "return_"))]
    assert "explained_variance" not in record


def test_kl_in_reward_goes_into_the_per_token_rewards_of_gae(loop_for):
    kl_in_reward = {"beta": 0.05, "kl": "k1", "kl_in_reward": True}
    cfg = PPO_RUN.replace(steps=1, checkpoint_every=0, algorithm_config=kl_in_reward)
    loop = loop_for(cfg)
    assert loop.s.algorithm.needs_reference and loop.s.algorithm.config.beta == 0.0
    record = loop.step()
    assert "kl" in record and "value_loss" in record


def relative_value_loss(record: dict) -> float:
    """The step's value loss over 0.5 Var(R), the loss of values that knew the batch's
    mean reward and nothing else (with gamma = lam = 1 every token's return is R): 1 for
    such a critic, below 1 as its values explain more. The raw loss follows Var(R), which
    moves as the policy learns."""
    return record["value_loss"] / (0.5 * record["reward_std"] ** 2)


def mean_of(records: list[dict], of) -> float:
    return sum(of(r) for r in records) / len(records)


@pytest.mark.slow
@pytest.mark.extra  # CI keeps a PPO run end to end (charged, logged, resumed: default set),
# the critic fitting a batch, PPO on Monarch, and GRPO's learning test
def test_ppo_learns_and_its_critic_learns_on_the_tiny_model(tmp_path):
    """30 steps of 32 prompts on arithmetic (the tiny recipe otherwise; 17 minutes on two
    busy cores). Measured (seed 0, Intel Xeon): held-out reward 0.242 -> 0.324 (step 15)
    -> 0.356; sampled reward by 10-step window 0.143, 0.173, 0.228; explained variance
    0.010, 0.032, 0.031; the relative value loss 1.10 at step 1 (V = 0), then 1.025,
    1.025, 0.999."""
    out = tmp_path / "ppo"
    result = run_harness(
        "run",
        "ppo",
        "--steps",
        "30",
        "--eval-every",
        "15",
        "--prompts-per-step",
        "32",
        "--eval-samples",
        "0",
        "--quiet",
        "--out",
        str(out),
        cwd=tmp_path,
        timeout=5400,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if r["step"] > 0]
    assert len(steps) == 30
    first, last = steps[:10], steps[-10:]
    assert steps[0]["explained_variance"] == 0.0  # V = 0 explains nothing
    ev = (
        mean_of(first, lambda r: r["explained_variance"]),
        mean_of(last, lambda r: r["explained_variance"]),
    )
    assert ev[1] > max(ev[0], 0.0)
    # the value loss falls from its value at V = 0 to that of the batch's mean, and below
    assert relative_value_loss(steps[0]) > 1.05
    assert mean_of(last, relative_value_loss) < mean_of(first, relative_value_loss)
    assert mean_of(last, lambda r: r["reward_mean"]) > mean_of(first, lambda r: r["reward_mean"])
    assert records[-1]["eval_reward"] > records[0]["eval_reward"]


# ~25 s: a local and a Monarch run. CI runs PPO in the refactor guard and Monarch in
# test_placement; this pairing runs in scripts/check-all.sh.
@pytest.mark.slow
@pytest.mark.extra
def test_the_monarch_placement_gives_ppo_the_local_numbers_and_critic(tmp_path, tiny_model_path):
    """The critic as a Monarch actor of its own: the same metrics as the local placement,
    and a checkpoint holding the same critic."""
    outs = {}
    for placement in ("local", "monarch"):
        outs[placement] = out = tmp_path / placement
        result = run_harness(
            "run",
            "ppo",
            "--steps",
            "2",
            "--prompts-per-step",
            "4",
            "--eval-every",
            "2",
            "--eval-samples",
            "0",
            "--checkpoint-every",
            "1",
            "--env-set",
            "eval_size=50",
            "--placement",
            placement,
            "--quiet",
            "--out",
            str(out),
            cwd=tmp_path,
        )
        assert result.returncode == 0, result.stderr[-3000:]
    local, remote = (untimed(read_metrics(outs[p])) for p in ("local", "monarch"))
    assert [r["step"] for r in local] == [0, 1, 2] and "value_loss" in local[2]
    assert local == remote
    a, b = (
        load_state_file(current(outs[p] / "checkpoint") / checkpoint.STATE_FILE)["critic"]
        for p in ("local", "monarch")
    )
    assert sorted(a["weights"]) == sorted(b["weights"])
    assert all(a["weights"][k].equal(b["weights"][k]) for k in a["weights"])


def test_the_critic_fits_a_batch_of_the_tiny_models_responses(tiny_path):
    """The value service on real sequences: trained repeatedly on one batch of arithmetic
    answers whose return is 1 when correct, its loss on that batch falls and its values
    come to explain the returns (in sample: that it can learn at all, in seconds)."""
    from zoo.envs import get_env
    from zoo.services.trainer import Trainer, TrainerConfig
    from zoo.services.value import Critic

    env = get_env("arithmetic")
    prompts = env.train_prompts(0, 8, seed=0)
    rows, rewards = [], []
    for i, p in enumerate(prompts):  # a right and a wrong answer to each problem
        for answer in (p.answer, p.answer + 1 + i % 3):
            rows.append((list(p.text.encode()), [*f"{answer}".encode(), 0]))
            rewards.append(float(answer == p.answer))
    width, length = max(len(r) for _, r in rows), max(len(q) + len(r) for q, r in rows)
    tokens, mask = torch.zeros(len(rows), length, dtype=torch.long), torch.zeros(len(rows), width)
    for i, (q, r) in enumerate(rows):
        tokens[i, : len(q) + len(r)] = torch.tensor(q + r)
        mask[i, : len(r)] = 1.0
    from zoo.services.batch import RolloutBatch

    torch.manual_seed(0)
    trainer = Trainer(tiny_path, TrainerConfig(), max_response_len=width)
    critic = Critic(trainer.model, TrainerConfig.of(lr=1e-3, mini_batches=1))
    batch = RolloutBatch(
        tokens, torch.tensor([len(q) for q, _ in rows]), mask, torch.tensor(rewards), group_size=2
    )
    ppo = get_algorithm("ppo")
    batch.returns = torch.tensor(rewards)[:, None] * mask  # gamma = lam = 1: G_t = R
    first = None
    for _ in range(30):
        batch.values = critic.values(batch)
        metrics = critic.train(batch, ppo.value_loss)
        first = first or metrics
    values = critic.values(batch)
    at_start = 0.5 * float((batch.returns**2 * mask).sum() / mask.sum())
    assert first["value_loss"] == pytest.approx(at_start)  # V = 0 at the start
    assert metrics["value_loss"] < 0.5 * first["value_loss"]
    # a right and a wrong answer share every token before their last digit, so only the
    # value read after that digit (at the end-of-text token) can tell them apart: there
    # it does, and that explains the returns' variance over those tokens
    last = mask.sum(-1).long() - 1
    at_end = values[torch.arange(len(rows)), last]
    right = torch.tensor(rewards) > 0
    assert float(at_end[right].mean() - at_end[~right].mean()) > 0.6
    assert int((at_end[right] > at_end[~right]).sum()) >= 7  # of the 8 pairs
    assert explained_variance(values, batch.returns, mask) > 0.15


def test_the_conformance_suite_checks_a_critics_value_loss():
    from zoo.algorithms.conformance import CHECKS
    from zoo.algorithms.ppo import PPO
    from zoo.core.types import LossOutput

    assert CHECKS["value_loss"](PPO).passed is True
    assert CHECKS["value_loss"](type(get_algorithm("grpo"))).passed is None

    class OwnMean(PPO):  # divides by its micro-batch's own tokens
        def value_loss(self, batch: ValueBatch) -> LossOutput:
            own = dataclasses.replace(batch, num_tokens=int(batch.mask.sum()))
            return super().value_loss(own)

    class ReadsPadding(PPO):  # no mask
        def value_loss(self, batch: ValueBatch) -> LossOutput:
            return LossOutput(0.5 * ((batch.values - batch.returns) ** 2).mean())

    assert CHECKS["value_loss"](OwnMean).passed is False
    assert CHECKS["value_loss"](ReadsPadding).passed is False
