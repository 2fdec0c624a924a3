"""GiGPO (zoo/algorithms/gigpo.py; Feng et al., arXiv 2505.10978, Sec. 4): advantages
against values typed from the paper's definitions (episode-level group advantage, discounted
return-to-go normalised within its anchor-state step group, A_E + omega * A_S) on a
hand-made batch; the single-turn reduction to GRPO; the ``turn_states`` hook (ids of the
history before each turn, built by zoo.run.episodes, passed only when declared); a real
loop step on multi-turn episodes of the tiny model whose every token's advantage is
recomputed here in plain Python; a resumed run; and ``check-plugin``."""

from __future__ import annotations

import itertools
import statistics
from pathlib import Path

import pytest
import torch
from harness_cli import run_harness
from test_episodes import AskAgain, config, episode_loop, without_timing  # noqa: F401

from harness.runner import execute_run, read_metrics
from zoo.algorithms import get_algorithm
from zoo.algorithms.conformance import CHECKS
from zoo.algorithms.gigpo import GiGPO
from zoo.core.config import ConfigError
from zoo.core.types import Completion, TrainBatch
from zoo.run.episodes import per_turn_states

NAN = float("nan")

# --- the estimator on a hand-made batch --------------------------------------------------

# Two prompts, G = 4 episodes each, K = 3 turns at most, gamma = 0.9.
# Prompt 0: ragged episodes of 3, 2, 3 and 1 turns, with rewards on intermediate turns.
# Turn 0 of every episode starts from the prompt (state 0: a step group of 4); episodes 0
# and 2 made the same first move (state 1 at turn 1: a step group of 2); every other turn
# starts from a history of its own (singleton step groups: A_S = 0).
# Prompt 1: four one-turn episodes, all rewarded 1: every advantage 0.
TURN_REWARDS = [
    [[0.0, 0.5, 1.0], [0.5, 0.0, NAN], [0.0, 0.0, 0.0], [1.0, NAN, NAN]],
    [[1.0, NAN, NAN]] * 4,
]
STATES = [
    [[0, 1, 3], [0, 2, -1], [0, 1, 4], [0, -1, -1]],
    [[0, -1, -1]] * 4,
]
REWARDS = [[1.0, 0.0, 0.0, 1.0], [1.0, 1.0, 1.0, 1.0]]  # each episode's last turn
# Worked by hand from the paper's definitions (F = unbiased std + 1e-6):
#   episode returns R = 1.5, 0.5, 0, 1: mean 0.75, std sqrt(1.25 / 3) = 0.645497
#     A_E = 1.161893, -0.387298, -1.161893, 0.387298
#   returns-to-go, gamma 0.9: episode 0: R_2 = 1, R_1 = 0.5 + 0.9 = 1.4, R_0 = 0.9 * 1.4 = 1.26;
#     episode 1: R_1 = 0, R_0 = 0.5; episode 2: all 0; episode 3: R_0 = 1
#   turn 0 (state 0): 1.26, 0.5, 0, 1: mean 0.69, std sqrt(0.9332 / 3) = 0.557734
#     A_S = 1.021992, -0.340664, -1.237148, 0.555820
#   turn 1 (state 1): 1.4 and 0: mean 0.7, std 0.989949: A_S = +-0.707106
PAPER = [
    [
        [2.183885, 1.868999, 1.161893],
        [-0.727962, -0.387298, 0.0],
        [-2.399041, -1.868999, -1.161893],
        [0.943118, 0.0, 0.0],
    ],
    [[0.0, 0.0, 0.0]] * 4,
]
# norm = "none" (F = 1): A_E = R - 0.75; turn 0: R_0 - 0.69; turn 1: +-0.7
PAPER_NO_STD = [
    [
        [0.75 + 0.57, 0.75 + 0.7, 0.75],
        [-0.25 - 0.19, -0.25, 0.0],
        [-0.75 - 0.69, -0.75 - 0.7, -0.75],
        [0.25 + 0.31, 0.0, 0.0],
    ],
    [[0.0, 0.0, 0.0]] * 4,
]


def advantages(algo, rewards=REWARDS, turn_rewards=TURN_REWARDS, states=STATES):
    """As the loop calls it: (rewards, lengths, per-turn rewards, no baseline, states)."""
    rewards = torch.tensor(rewards, dtype=torch.float64)
    return algo.group_advantages(
        rewards,
        torch.ones(rewards.shape),
        torch.tensor(turn_rewards, dtype=torch.float64),
        None,
        torch.tensor(states),
    )


def test_advantages_match_the_papers_definitions_worked_by_hand():
    got = advantages(get_algorithm("gigpo", gamma=0.9))
    assert got.shape == (2, 4, 3) and got.dtype == torch.float64
    torch.testing.assert_close(got, torch.tensor(PAPER, dtype=torch.float64), rtol=0, atol=2e-6)
    assert (got[1] == 0).all()  # an all-equal group: exact zeros
    got = advantages(get_algorithm("gigpo", gamma=0.9, norm="none"))
    torch.testing.assert_close(got, torch.tensor(PAPER_NO_STD, dtype=torch.float64))


def reference(turn_rewards, states, gamma, omega, std=True):
    """The paper's advantages in plain Python: per group, A_E over episode returns, the
    discounted return-to-go of each turn, A_S within the turns of equal state."""

    def relative(value, peers):
        if len(peers) < 2 or max(peers) == min(peers):
            return 0.0
        centred = value - statistics.fmean(peers)
        return centred / (statistics.stdev(peers) + 1e-6) if std else centred

    out = []
    for rows, ids in zip(turn_rewards, states, strict=True):
        turns = [[r for r in row if r == r] for row in rows]  # NaN: past the episode's end
        returns = [sum(t) for t in turns]
        to_go = [
            [sum(gamma ** (k - t) * r[k] for k in range(t, len(r))) for t in range(len(r))]
            for r in turns
        ]
        by_state: dict[int, list[float]] = {}
        for i, sid in enumerate(ids):
            for t in range(len(turns[i])):
                by_state.setdefault(sid[t], []).append(to_go[i][t])
        out.append(
            [
                [
                    relative(returns[i], returns)
                    + omega * relative(to_go[i][t], by_state[ids[i][t]])
                    if t < len(turns[i])
                    else 0.0
                    for t in range(len(ids[i]))
                ]
                for i in range(len(ids))
            ]
        )
    return out


SETTINGS = [(0.9, 1.0, "std"), (0.5, 0.3, "std"), (1.0, 2.0, "none"), (0.0, 1.0, "std")]


@pytest.mark.parametrize(("gamma", "omega", "norm"), SETTINGS)
def test_advantages_match_a_plain_python_reference(gamma, omega, norm):
    algo = get_algorithm("gigpo", gamma=gamma, omega=omega, norm=norm)
    want = reference(TURN_REWARDS, STATES, gamma, omega, std=norm == "std")
    torch.testing.assert_close(advantages(algo), torch.tensor(want, dtype=torch.float64))


def departures(turn_rewards, states, gamma) -> dict[str, float]:
    """gigpo's step metrics in plain Python: over reached turns, the share in a step group
    of two or more, and the share of those whose A_S differs from A_E by over 1e-3."""
    episode = reference(turn_rewards, states, gamma, 0.0)  # A_E on every turn
    both = reference(turn_rewards, states, gamma, 1.0)  # A_E + A_S
    turns = shared = departs = 0
    for rows, ids, a_e, a in zip(turn_rewards, states, episode, both, strict=True):
        reached = [row[: sum(r == r for r in got)] for row, got in zip(ids, rows, strict=True)]
        flat = [sid for row in reached for sid in row]
        for i, row in enumerate(reached):
            for t, sid in enumerate(row):
                turns += 1
                if flat.count(sid) >= 2:
                    shared += 1
                    departs += abs((a[i][t] - a_e[i][t]) - a_e[i][t]) > 1e-3
    return {"step_group_shared_frac": shared / turns, "step_adv_departs_frac": departs / turns}


def test_the_step_metrics_count_the_turns_whose_step_level_term_departs():
    """On the hand-made batch: 13 turns; 10 in a step group of two or more (the 4 first
    turns of each prompt, the 2 turns of state 1); A_S differs from A_E on the first turns
    of prompt 0 (1.02 against 1.16, ...) and on both turns of state 1 (+-0.71 against
    +-1.16), not on prompt 1's (0 and 0): 6. Read once per step: then reset."""
    algo = get_algorithm("gigpo", gamma=0.9)
    advantages(algo)
    metrics = algo.advantage_metrics()
    assert metrics == pytest.approx(
        {"step_group_shared_frac": 10 / 13, "step_adv_departs_frac": 6 / 13}
    )
    assert metrics == pytest.approx(departures(TURN_REWARDS, STATES, 0.9))
    assert algo.advantage_metrics() == {}
    advantages(algo), advantages(algo)  # two sampling rounds of one step: summed
    assert algo.advantage_metrics() == pytest.approx(metrics)
    # single-turn: A_S = A_E on every turn, all in the one step group of the prompt
    rewards = torch.tensor(SINGLE)
    algo.group_advantages(
        rewards, torch.ones(4, 4), rewards[..., None], None, torch.zeros(4, 4, 1, dtype=torch.long)
    )
    assert algo.advantage_metrics() == {"step_group_shared_frac": 1.0, "step_adv_departs_frac": 0.0}


def test_defaults_are_the_papers():
    algo = get_algorithm("gigpo")
    c = algo.config
    assert (c.gamma, c.omega, c.norm, c.eps, c.beta, c.kl, c.loss) == (
        0.95,
        1.0,
        "std",
        0.2,
        0.01,
        "k3",
        "ppo_clip",
    )
    assert algo.aggregation == "token_mean" and algo.uses_turn_states and algo.uses_turn_rewards
    assert "2505.10978" in algo.paper
    for bad in ({"norm": "mad"}, {"gamma": 1.5}, {"gamma": -0.1}, {"omega": -1.0}):
        with pytest.raises(ConfigError, match="gigpo"):
            get_algorithm("gigpo", **bad)
    with pytest.raises(ConfigError, match="advantage"):  # the paper fixes its estimator
        get_algorithm("gigpo", advantage="rloo")


# --- single-turn envs: GRPO -----------------------------------------------------------------

SINGLE = [[1.0, 0.0, 0.0, 1.0], [0.5, 0.25, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 1.0]]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_single_turn_is_grpo(dtype):
    """One turn from the prompt: the step group is the whole group and R_0 = R, so A_S = A_E
    and A = (1 + omega) A_E: GRPO's advantages (exactly at omega = 0; norm none: Dr. GRPO's),
    and its loss at the same beta and aggregation."""
    rewards, lengths = torch.tensor(SINGLE, dtype=dtype), torch.full((4, 4), 3)
    grpo = get_algorithm("grpo").group_advantages(rewards, lengths)
    at_zero = get_algorithm("gigpo", omega=0.0).group_advantages(rewards, lengths)
    assert at_zero.shape == (4, 4) and torch.equal(at_zero, grpo)
    default = get_algorithm("gigpo").group_advantages(rewards, lengths)
    torch.testing.assert_close(default, 2 * grpo)
    assert (default[2] == 0).all()
    centred = get_algorithm("gigpo", omega=0.0, norm="none").group_advantages(rewards, lengths)
    assert torch.equal(centred, get_algorithm("dr_grpo").group_advantages(rewards, lengths))
    # what the loop passes for a single-turn env: K = 1, every state 0
    passed = get_algorithm("gigpo", omega=0.0).group_advantages(
        rewards, lengths, rewards[..., None], None, torch.zeros(4, 4, 1, dtype=torch.long)
    )
    assert torch.equal(passed, grpo)

    gen = torch.Generator().manual_seed(0)
    old = -torch.rand(16, 5, generator=gen, dtype=torch.float64) - 0.1
    lp = (old + torch.randn(16, 5, generator=gen, dtype=torch.float64) * 0.3).requires_grad_()
    ref = old + 0.05
    mask = torch.ones(16, 5, dtype=torch.float64)
    mask[3, 2:] = 0
    batch = TrainBatch(lp, old, ref, grpo.reshape(-1).double(), mask)
    ours = get_algorithm("gigpo").loss(batch)
    theirs = get_algorithm("grpo", beta=0.01, aggregation="token_mean").loss(batch)
    torch.testing.assert_close(ours.loss, theirs.loss, rtol=0, atol=0)


# --- the hook: the states each turn starts from ----------------------------------------------


def episode(tokens: list[int], mask: list[int], prompt: tuple[int, ...] = (1, 2)) -> Completion:
    turns = 1 + sum(1 for a, b in itertools.pairwise(mask) if a == 0 and b == 1)
    return Completion(
        list(prompt), tokens, [0.0] * len(tokens), "", "stop", 0, mask, 0.0, [0.0] * turns, turns
    )


def test_turn_states_are_equal_exactly_for_equal_histories():
    groups = [
        [
            episode([5, 6, 9, 7], [1, 1, 0, 1]),  # turn 1 after (1, 2, 5, 6, 9)
            episode([5, 6, 9, 8, 8], [1, 1, 0, 1, 1]),  # the same history before turn 1
            episode([5, 9, 7], [1, 0, 1]),  # another first move
            episode([4], [1]),  # one turn
        ],
        [  # another prompt: its ids start again from 0
            episode([5, 6, 9, 7], [1, 1, 0, 1], prompt=(3,)),
            episode([5, 6, 8, 7, 9, 9, 1], [1, 1, 0, 1, 0, 0, 1], prompt=(3,)),
            episode([5, 6, 8, 7, 9, 9, 2], [1, 1, 0, 1, 0, 0, 1], prompt=(3,)),
            episode([5, 6, 9, 7], [1, 1, 0, 1], prompt=(3,)),
        ],
    ]
    assert per_turn_states(groups).tolist() == [
        [[0, 1, -1], [0, 1, -1], [0, 2, -1], [0, -1, -1]],
        [[0, 1, -1], [0, 2, 3], [0, 2, 3], [0, 1, -1]],
    ]


def test_the_hook_is_passed_only_when_declared_and_checked():
    rewards, lengths = torch.tensor(REWARDS), torch.ones(2, 4)
    per_turn, states = torch.tensor(TURN_REWARDS), torch.tensor(STATES)
    grpo = get_algorithm("grpo")
    assert not grpo.uses_turn_states
    assert grpo.group_advantages(rewards, lengths, per_turn, None, states).shape == (2, 4)
    gigpo = get_algorithm("gigpo")
    with pytest.raises(ValueError, match=r"turn_states.*3 turns needs them"):
        gigpo.group_advantages(rewards, lengths, per_turn)
    with pytest.raises(ValueError, match=r"turn_states of shape \(2, 4, 2\).*\(2, 4, 3\)"):
        gigpo.group_advantages(rewards, lengths, per_turn, None, states[..., :2])


# --- the loop, on real multi-turn episodes of the tiny model --------------------------------


class Recorded(GiGPO):
    """GiGPO that keeps what the loop hands its ``advantages``."""

    name = "test_gigpo_recorded"
    seen: list

    def advantages(self, rewards, turn_rewards, turn_states):
        self.seen.append((turn_rewards, turn_states))
        return super().advantages(rewards, turn_rewards, turn_states)


def histories(c: Completion) -> list[tuple[int, ...]]:
    """The tokens before each turn of ``c``: its prompt and everything up to the turn's
    first sampled token (a sampled token right after an observation token)."""
    mask = c.assistant_mask
    starts = [0] + [t for t in range(1, len(mask)) if mask[t] == 1 and mask[t - 1] == 0]
    return [tuple(c.prompt_ids + c.token_ids[:s]) for s in starts]


def test_the_loop_passes_each_turns_state_and_lays_gigpos_advantages_on_its_tokens(
    episode_loop,  # noqa: F811
):
    loop = episode_loop(
        config(algorithm="gigpo", seed=3, env_config={"end_after": 3, "turn_rewards": True})
    )
    algo = loop.s.algorithm = Recorded(gamma=0.8)
    algo.seen = []
    seen: dict = {}
    train, sample = loop.train, loop.sample_groups
    loop.train = lambda batch, shapes: seen.setdefault("batch", batch) and train(batch, shapes)
    loop.sample_groups = lambda n: seen.setdefault("groups", sample(n))
    record = loop.step()
    _, groups = seen["groups"]
    ((turn_rewards, turn_states),) = algo.seen
    assert turn_states.shape == turn_rewards.shape == (4, 4, 3)
    sizes = []
    for g, group in enumerate(groups):
        hist = [histories(c) for c in group]
        assert all(len(h) == c.turns == 3 for h, c in zip(hist, group, strict=True))
        for i in range(4):
            for j in range(4):
                for t in range(3):  # equal ids exactly for equal histories
                    same = bool(turn_states[g, i, t] == turn_states[g, j, t])
                    assert same == (hist[i][t] == hist[j][t])
        sizes += [sum(h[t] == hist[i][t] for h in hist) for i in range(4) for t in (1, 2)]
    assert 1 in sizes and max(sizes) > 1, "no shared and no singleton later turn: checks little"
    states = [[[hash(h) for h in histories(c)] for c in g] for g in groups]
    rewards = [[c.turn_rewards for c in g] for g in groups]
    want = reference(rewards, states, 0.8, 1.0)
    step_metrics = {k: record[k] for k in ("step_group_shared_frac", "step_adv_departs_frac")}
    assert step_metrics == pytest.approx(departures(rewards, states, 0.8))
    batch = seen["batch"]
    for g, group in enumerate(groups):
        for i, c in enumerate(group):
            row, turn = batch.advantages[g * 4 + i], -1
            for t, m in enumerate(c.assistant_mask):
                turn += int(m == 1 and (t == 0 or c.assistant_mask[t - 1] == 0))
                if m:
                    assert float(row[t]) == pytest.approx(want[g][i][turn], abs=1e-5)


class Stop(BaseException):
    """Stands for a crash (nothing catches it)."""


def test_a_resumed_gigpo_run_gives_the_metrics_of_an_uninterrupted_one(
    episode_loop,  # noqa: F811
    tmp_path,
):
    cfg = config(
        algorithm="gigpo",
        steps=2,
        checkpoint_every=1,
        eval_every=2,
        env_config={"end_after": 2, "turn_rewards": True},
    )

    def run(out: Path, resume: bool = False, on_record=None) -> None:
        execute_run(
            cfg, out, episode_loop(cfg).s, command="test", resume=resume, on_record=on_record
        )

    run(tmp_path / "whole")
    expected = without_timing(read_metrics(tmp_path / "whole"))
    assert [r["step"] for r in expected] == [0, 1, 2]

    def crash(record: dict) -> None:
        if record["step"] == 2:
            raise Stop

    with pytest.raises(Stop):
        run(tmp_path / "resumed", on_record=crash)
    run(tmp_path / "resumed", resume=True)
    assert without_timing(read_metrics(tmp_path / "resumed")) == expected


def test_check_plugin_passes(tmp_path):
    result = run_harness("check-plugin", "gigpo", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr[-2000:]
    n = len(CHECKS)
    assert f"{n} of {n} properties hold or do not apply" in result.stdout
