"""The shared KL options (zoo/algorithms/base.py ``SharedOptions``): the adaptive KL
controller of Ziegler et al. (``kl_target``, ``kl_horizon``; zoo/core/losses.py
``adaptive_kl_coef``) against hand-computed updates, its weight logged per step as
``kl_coef`` and resumed exactly from a checkpoint, and KL in the reward for any algorithm
with a KL weight (``kl_in_reward``), which gives reinforce_pp's loss when the rest of the
loss is the same. Each KL convention against its formula on a hand-made batch, with the
alternative that picks another: how the adaptive KL is averaged (``kl_rollout_mean``:
verl's per-response mean), which estimator the reward charges (``kl``: InstructGPT's k1),
and how the reward's KL reaches a token (``kl_reward_credit``: ReMax's own token's)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from harness.runner import execute_run, read_metrics
from zoo.algorithms import get_algorithm
from zoo.algorithms.base import Algorithm
from zoo.algorithms.conformance import run_conformance
from zoo.algorithms.grpo import GRPO
from zoo.core.config import ConfigError
from zoo.core.losses import adaptive_kl_coef
from zoo.core.types import LossOutput, TrainBatch
from zoo.run import checkpoint
from zoo.run.checkpoint import current, load_state_file
from zoo.run.kl_control import kl_controller
from zoo.run.run_config import RunConfig
from zoo.run.runlog import is_timing_key
from zoo.services.batch import RolloutBatch

# --- the controller ----------------------------------------------------------------------


def test_controller_update_against_hand_computed_values():
    # beta 0.1, target 0.1, 64 responses over a horizon of 1000: K_beta = 0.064
    assert adaptive_kl_coef(0.1, 0.15, 0.1, 1000, 64) == pytest.approx(0.1 * 1.0128, rel=1e-15)
    assert adaptive_kl_coef(0.1, 0.5, 0.1, 1000, 64) == pytest.approx(0.1 * 1.0128, rel=1e-15)
    assert adaptive_kl_coef(0.1, 0.09, 0.1, 1000, 64) == pytest.approx(0.1 * 0.9936, rel=1e-15)
    assert adaptive_kl_coef(0.1, 0.0, 0.1, 1000, 64) == pytest.approx(0.1 * 0.9872, rel=1e-15)
    assert adaptive_kl_coef(0.1, 0.1, 0.1, 1000, 64) == 0.1  # on target: unchanged
    # the paper's K_beta = 0.1: 1000 responses over the default horizon 10000
    assert adaptive_kl_coef(2.0, 9.0, 6.0, 10000, 1000) == pytest.approx(2.0 * 1.02, rel=1e-15)
    with pytest.raises(ConfigError):
        adaptive_kl_coef(0.1, 0.1, 0.0, 1000, 64)


def test_options_parse_validate_and_apply_only_where_there_is_a_beta():
    algo = get_algorithm("grpo", kl_target="0.05", kl_horizon="2000")  # as --set passes them
    assert (algo.options.kl_target, algo.options.kl_horizon) == (0.05, 2000)
    assert algo.kl_coef == 0.04 and algo.config.beta == 0.04
    algo.set_kl_coef(0.03)
    assert algo.config.beta == 0.03 and algo.kl_coef == 0.03  # what the loss reads
    assert algo.describe()["config"]["kl_target"] == 0.05
    assert "kl_target" not in get_algorithm("grpo").describe()["config"]  # only when set
    for bad in ({"kl_target": -1.0}, {"kl_horizon": 0}):
        with pytest.raises(ConfigError, match=next(iter(bad))):
            get_algorithm("grpo", **bad)
    with pytest.raises(ConfigError, match="beta > 0"):  # 0 scaled stays 0
        get_algorithm("dapo", kl_target=0.1).check_run(8, 64)
    with pytest.raises(ConfigError, match="beta > 0"):
        get_algorithm("gpg", kl_in_reward=True).check_run(8, 64)
    with pytest.raises(ConfigError, match=r"kl_horizon > 12.8"):  # beta could reach 0
        get_algorithm("grpo", kl_target=0.1, kl_horizon=12).check_run(8, 64)
    get_algorithm("grpo", kl_target=0.1, kl_horizon=13).check_run(8, 64)

    @dataclass
    class NoKL:
        eps: float = 0.2

    class Plugin(Algorithm):
        name = "no_kl"
        config_class = NoKL

        def loss(self, batch: TrainBatch) -> LossOutput:
            raise NotImplementedError

    with pytest.raises(ConfigError, match="no KL coefficient"):
        Plugin(kl_target=0.1)


def test_kl_in_reward_moves_the_kl_from_the_loss_to_the_advantages():
    algo = get_algorithm("grpo", kl_in_reward=True)
    assert algo.kl_in_reward_by_loop and algo.config.beta == 0.0  # the loss adds none
    assert algo.kl_coef == 0.04 and algo.needs_reference
    assert algo.describe()["config"]["beta"] == 0.04
    # reinforce_pp has its own kl_in_reward (its loss applies it): not the loop's
    assert not get_algorithm("reinforce_pp").kl_in_reward_by_loop


def kl_controlled(algo: Algorithm, batch: RolloutBatch) -> dict:
    """KL control's part of a step on ``batch`` for ``algo`` (``apply``: its figures), and
    the weight the next step would train with (``next_value``; None when it does not
    adapt), without moving it."""
    record: dict = {}
    kl = kl_controller(algo)
    measured = kl.apply(batch, record)
    return {**record, "next": None if measured is None else kl.next_value(measured, batch.size)}


def rollout(seed: int) -> RolloutBatch:
    g = torch.Generator().manual_seed(seed)
    lengths = [5, 2, 0, 4]
    mask = torch.tensor([[1.0] * n + [0.0] * (5 - n) for n in lengths], dtype=torch.float64)
    old = -0.1 - 2 * torch.rand(4, 5, generator=g, dtype=torch.float64)
    ref = old + 0.3 * torch.randn(4, 5, generator=g, dtype=torch.float64)
    adv = torch.tensor([0.8, -0.5, 0.0, 1.1], dtype=torch.float64)
    return RolloutBatch(
        torch.zeros(4, 7, dtype=torch.long),
        torch.full((4,), 2),
        mask,
        adv,
        old_logprobs=old,
        ref_logprobs=ref,
    )


def test_kl_in_reward_on_opo_gives_reinforce_pps_loss_and_gradient():
    """OPO's loss is REINFORCE++'s clipped token_mean objective; with the shared
    kl_in_reward (k1, beta 0.02) the loop's KL return in the advantages must give what
    reinforce_pp's own KL in the reward gives, off-policy, value and gradient."""
    batch = rollout(0)
    opo = get_algorithm("opo", kl_in_reward=True, beta=0.02, kl="k1")
    record = kl_controlled(opo, batch)
    assert record["next"] is None and "kl_coef" not in record  # not adaptive
    mask, old, ref = batch.mask, batch.old_logprobs, batch.ref_logprobs
    kl = torch.where(mask > 0, old - ref, 0.0)
    assert record["kl"] == pytest.approx(float(kl.sum() / mask.sum()), rel=1e-12)
    # by hand: A_i - 0.02 * sum_{s >= t} KL_s on response tokens
    want = torch.zeros(4, 5, dtype=torch.float64)
    for i in range(4):
        for t in range(int(mask[i].sum())):
            want[i, t] = [0.8, -0.5, 0.0, 1.1][i] - 0.02 * float(kl[i, t:].sum())
    assert torch.allclose(batch.advantages * mask, want, rtol=0, atol=1e-15)

    g = torch.Generator().manual_seed(1)
    lp0 = old + 0.2 * torch.randn(4, 5, generator=g, dtype=torch.float64)
    outputs = []
    per_response = torch.tensor([0.8, -0.5, 0.0, 1.1], dtype=torch.float64)
    for algo, adv in (
        (opo, batch.advantages),
        (get_algorithm("reinforce_pp", beta=0.02), per_response),
    ):
        lp = lp0.clone().requires_grad_(True)
        ref_in = None if algo.config.beta == 0 else ref
        out = algo.loss(TrainBatch(lp, old, ref_in, adv, mask))
        out.loss.backward()
        outputs.append((float(out.loss.detach()), lp.grad))
    assert outputs[0][0] == pytest.approx(outputs[1][0], rel=1e-12)
    assert torch.allclose(outputs[0][1], outputs[1][1], rtol=1e-12, atol=1e-15)


def test_the_adaptive_step_measures_the_rollout_kl_and_hands_the_weight_on():
    batch = rollout(2)
    algo = get_algorithm("grpo", kl_target=0.01, kl_horizon=20, kl="k3")
    record = kl_controlled(algo, batch)
    d = batch.ref_logprobs - batch.old_logprobs
    k3 = torch.where(batch.mask > 0, torch.exp(d) - d - 1, 0.0)
    measured = float(k3.sum() / batch.mask.sum())
    assert record["kl_rollout"] == pytest.approx(measured, rel=1e-12)
    assert record["kl_coef"] == 0.04 and batch.kl_coef == 0.04  # this step's weight
    error = min(max(measured / 0.01 - 1, -0.2), 0.2)
    assert record["next"] == pytest.approx(0.04 * (1 + error * 4 / 20), rel=1e-15)
    # a trainer in another process (zoo/placement/actors.py) builds its own algorithm
    # and takes the weight from the batch, whatever rows it gets
    remote = get_algorithm("grpo", kl_target=0.01, kl_horizon=20, kl="k3")
    remote.set_kl_coef(batch.rows(slice(0, 2)).kl_coef)
    assert remote.config.beta == algo.config.beta


# --- each KL convention, and the alternative that picks another ----------------------------


def test_seq_mean_measures_the_adaptive_kl_as_verl_does_where_the_token_mean_differs():
    """verl's apply_kl_penalty: each response's token mean of k1, then their mean. The
    default weighs every token the same; on ragged lengths (5, 2, 0, 4) they differ, and
    the next weight follows from the measure chosen."""
    batch = rollout(2)
    mask, d = batch.mask, batch.old_logprobs - batch.ref_logprobs  # k1 = old - ref
    per_response = [float((d[i] * mask[i]).sum() / mask[i].sum()) for i in (0, 1, 3)]
    verl = sum(per_response) / 3  # the empty response has no KL to average
    token = float((d * mask).sum() / mask.sum())
    assert abs(verl - token) > 0.05 * abs(token)
    for mean, want in (("seq_mean", verl), ("token_mean", token)):
        algo = get_algorithm("grpo", kl_target=0.01, kl_horizon=20, kl="k1", kl_rollout_mean=mean)
        record = kl_controlled(algo, rollout(2))
        assert record["kl_rollout"] == pytest.approx(want, rel=1e-12), mean
        assert record["next"] == adaptive_kl_coef(0.04, record["kl_rollout"], 0.01, 20, 4)
    assert "kl_rollout_mean" not in get_algorithm("grpo", kl_target=0.01).describe()["config"]


def kl_in_reward_advantages(**overrides) -> torch.Tensor:
    """The advantages grpo's shared kl_in_reward leaves on ``rollout(0)`` (beta 0.02)."""
    batch = rollout(0)
    kl_controlled(get_algorithm("grpo", kl_in_reward=True, beta=0.02, **overrides), batch)
    return batch.advantages * batch.mask


def by_hand(kl: torch.Tensor, to_go: bool) -> torch.Tensor:
    """A_i - 0.02 * (sum_{s >= t} KL_s, or KL_t) on response tokens of ``rollout(0)``."""
    mask, want = rollout(0).mask, torch.zeros(4, 5, dtype=torch.float64)
    for i, a in enumerate([0.8, -0.5, 0.0, 1.1]):
        for t in range(int(mask[i].sum())):
            want[i, t] = a - 0.02 * float(kl[i, t:].sum() if to_go else kl[i, t])
    return want


def test_kl_in_reward_charges_k3_by_default_and_instructgpts_k1_with_kl_k1():
    batch = rollout(0)
    d = torch.where(batch.mask > 0, batch.ref_logprobs - batch.old_logprobs, 0.0)
    k3, k1 = torch.exp(d) - d - 1, -d
    default = kl_in_reward_advantages()
    torch.testing.assert_close(default, by_hand(k3, to_go=True), rtol=0, atol=1e-15)
    instructgpt = kl_in_reward_advantages(kl="k1")
    torch.testing.assert_close(instructgpt, by_hand(k1, to_go=True), rtol=0, atol=1e-15)
    assert float((default - instructgpt).abs().max()) > 1e-3


def test_kl_reward_credit_token_charges_each_token_its_own_kl_as_remaxs_code():
    batch = rollout(0)
    k1 = torch.where(batch.mask > 0, batch.old_logprobs - batch.ref_logprobs, 0.0)
    own = kl_in_reward_advantages(kl="k1", kl_reward_credit="token")
    torch.testing.assert_close(own, by_hand(k1, to_go=False), rtol=0, atol=1e-15)
    summed = kl_in_reward_advantages(kl="k1")
    assert float((own - summed).abs().max()) > 1e-3
    # the last token of a response has nothing after it: both charge it the same
    assert own[0, 4] == summed[0, 4] and own[3, 3] == summed[3, 3]
    # ReMax's own RLHF setting (the paper's KL in the reward, the authors' per-token credit)
    remax = get_algorithm("remax", beta=0.02, kl_in_reward=True, kl="k1", kl_reward_credit="token")
    batch = rollout(0)
    kl_controlled(remax, batch)
    torch.testing.assert_close(batch.advantages * batch.mask, own, rtol=0, atol=0)


def test_reinforce_pps_own_kl_in_reward_takes_the_credit_option_too():
    """On-policy (r = 1, inside the clip) the loss is -token_mean(A_i - K_it): K the KL
    summed to the end by default, the token's own with kl_reward_credit = token."""
    batch = rollout(0)
    mask, old, ref = batch.mask, batch.old_logprobs, batch.ref_logprobs
    k1 = torch.where(mask > 0, old - ref, 0.0)
    adv = torch.tensor([0.8, -0.5, 0.0, 1.1], dtype=torch.float64)
    for credit, to_go in (("to_go", True), ("token", False)):
        algo = get_algorithm("reinforce_pp", beta=0.02, kl_reward_credit=credit)
        out = algo.loss(TrainBatch(old.clone(), old, ref, adv, mask))
        want = -float((by_hand(k1, to_go) * mask).sum() / mask.sum())
        assert float(out.loss) == pytest.approx(want, rel=1e-12), credit


def test_a_kl_convention_that_would_change_nothing_is_refused():
    with pytest.raises(ConfigError, match="kl_rollout_mean 'median'; valid: token_mean, seq"):
        get_algorithm("grpo", kl_target=0.1, kl_rollout_mean="median")
    with pytest.raises(ConfigError, match="it needs kl_target > 0"):
        get_algorithm("grpo", kl_rollout_mean="seq_mean")
    with pytest.raises(ConfigError, match="it needs kl_in_reward = true"):
        get_algorithm("grpo", kl_reward_credit="token")
    with pytest.raises(ConfigError, match="it needs kl_in_reward = true"):
        get_algorithm("reinforce_pp", kl_in_reward=False, kl_reward_credit="token")
    with pytest.raises(ConfigError, match="GAE"):
        get_algorithm("ppo", beta=0.02, kl_in_reward=True, kl_reward_credit="token")


@pytest.mark.parametrize(
    "overrides",
    [
        {"kl_in_reward": True},
        {"kl_target": 0.05, "kl_horizon": 100},
        {"kl_in_reward": True, "kl_target": 0.05},
        {"kl_in_reward": True, "kl_reward_credit": "token", "kl": "k1"},
        {"kl_target": 0.05, "kl_rollout_mean": "seq_mean"},
    ],
)
def test_the_kl_options_pass_the_conformance_suite(overrides):
    assert not [r for r in run_conformance(GRPO, overrides) if r.passed is False]


# --- a run --------------------------------------------------------------------------------


class Killed(BaseException):
    """Stands for SIGKILL (nothing catches it)."""


def adaptive(**algorithm_config) -> RunConfig:
    # 4 prompts x 8 = 32 responses a step over a horizon of 40: K_beta = 0.8, so beta
    # moves by up to 16% a step; a target far below the KL reached after one update
    return RunConfig.from_flat(
        prompts_per_step=4,
        steps=3,
        eval_every=3,
        checkpoint_every=1,
        eval_samples=0,
        env_config={"eval_size": 50},
        algorithm_config={"kl_target": 1e-4, "kl_horizon": 40, **algorithm_config},
    )


def check_logged_updates(records: list[dict], beta: float) -> None:
    """kl_coef starts at beta and each step's follows from the previous step's measured
    KL by Ziegler et al.'s update (32 responses, horizon 40, target 1e-4)."""
    steps = records[1:]
    assert steps[0]["kl_coef"] == beta
    for prev, now in itertools.pairwise(steps):
        error = min(max(prev["kl_rollout"] / 1e-4 - 1, -0.2), 0.2)
        assert now["kl_coef"] == pytest.approx(prev["kl_coef"] * (1 + error * 32 / 40), 1e-15)
        assert now["kl_coef"] != prev["kl_coef"]
    # step 1 samples with the reference's own weights: KL 0, so beta falls by 16%
    assert steps[0]["kl_rollout"] == 0.0 and steps[1]["kl_coef"] == pytest.approx(0.84 * beta)


def test_an_adaptive_kl_run_logs_kl_coef_and_resumes_exactly(loop_for, tmp_path, monkeypatch):
    cfg = adaptive()

    def run(out: Path, resume: bool = False) -> None:
        execute_run(cfg, out, loop_for(cfg).s, command="test", resume=resume)

    run(tmp_path / "whole")
    whole = read_metrics(tmp_path / "whole")
    assert len(whole) == 4  # step 0 and 3 steps
    check_logged_updates(whole, beta=0.04)

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
    assert state["loop"]["kl_coef"] == whole[3]["kl_coef"]  # step 3's weight, saved exactly
    run(out, resume=True)

    def untimed(records: list[dict]) -> list[dict]:
        return [{k: v for k, v in r.items() if not is_timing_key(k)} for r in records]

    assert untimed(read_metrics(out)) == untimed(whole)


def test_kl_in_reward_with_an_adaptive_weight_runs_on_grpo(loop_for, tmp_path):
    cfg = adaptive(kl_in_reward=True, kl="k1").replace(steps=2, checkpoint_every=0)
    execute_run(cfg, tmp_path / "r", loop_for(cfg).s, command="test")
    records = read_metrics(tmp_path / "r")
    check_logged_updates(records, beta=0.04)
    steps = records[1:]
    assert [r["kl"] for r in steps] == [r["kl_rollout"] for r in steps]  # both k1, old vs ref
    assert steps[0]["kl"] == 0.0 and steps[1]["kl"] != 0.0
