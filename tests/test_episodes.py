"""Multi-turn episodes end to end (zoo.run.episodes) on the tiny model and the session's
vLLM engine, with an env defined here: it answers each turn with the observation "=?\\n"
and ends after ``end_after`` turns with reward 1 if the last turn has text. Checked: the
assistant mask and sampler log-probs token by token, the ledger's charge, the turn and
token limits, an env that raises, a resume mid-run, per-turn rewards reaching an
algorithm that assigns credit per turn, and ReMax's greedy baseline episodes."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer

from harness.runner import execute_run, read_metrics
from zoo.algorithms.grpo import GRPO
from zoo.core.config import ConfigError
from zoo.envs import ENVS, Episode, MultiTurnEnv, Prompt, Reply
from zoo.run.episodes import EpisodeError, rollout_episodes
from zoo.run.rollout import rollout_batch, sampling_seed
from zoo.run.run_config import RunConfig
from zoo.run.runlog import is_timing_key
from zoo.services.conversation import Conversation

OBSERVATION = "=?\n"
CUT_REWARD = 0.5  # final_reward of a cut episode: apart from the env's own 0 and 1


@dataclass
class AskAgainConfig:
    end_after: int = 2
    """The episode ends (done) at this turn."""
    max_turns: int = 4
    fail: bool = False
    """step raises: an env bug."""
    turn_rewards: bool = False
    """Turns before the last get a reward: their text's length mod 2."""
    eval_size: int = 6


class AskAgainEpisode(Episode):
    def __init__(self, config: AskAgainConfig) -> None:
        self.config = config
        self.turn = 0

    def step(self, assistant_text: str) -> Reply:
        self.turn += 1
        if self.config.fail:
            raise ValueError("boom")
        if self.turn >= self.config.end_after:
            return Reply(done=True, reward=float(bool(assistant_text)))
        # every turn but the last counts as a tool call, the odd ones as successful
        reward = float(len(assistant_text) % 2) if self.config.turn_rewards else 0.0
        return Reply(
            observation=OBSERVATION, reward=reward, tool_call=True, tool_ok=self.turn % 2 == 1
        )

    def final_reward(self) -> float:
        return CUT_REWARD


class AskAgain(MultiTurnEnv):
    name = "test_ask_again"
    config_class = AskAgainConfig
    reward_values = "0 or 1"

    def train_prompt(self, index: int, seed: int) -> Prompt:
        return Prompt(f"{index % 40}+{seed % 9}=", None, index, "train")

    def eval_prompts(self) -> list[Prompt]:
        return [Prompt(f"{i}+{i + 1}=", None, i, "eval") for i in range(self.config.eval_size)]

    def score(self, prompt: Prompt, completion: str) -> float:
        return float(bool(completion))

    def start(self, prompt: Prompt) -> Episode:
        return AskAgainEpisode(self.config)


@pytest.fixture
def episode_loop(loop_for, tiny_path, monkeypatch):
    """``episode_loop(cfg)``: ``loop_for`` with the test env registered and the tiny
    tokenizer's observation encoder."""
    monkeypatch.setitem(ENVS._loaded, AskAgain.name, AskAgain)
    tokenizer = AutoTokenizer.from_pretrained(tiny_path)

    def build(cfg: RunConfig):
        loop = loop_for(cfg)
        loop.s.observe = Conversation(tokenizer)
        return loop

    build.tokenizer = tokenizer
    return build


def config(**overrides) -> RunConfig:
    settings = dict(
        env=AskAgain.name,
        prompts_per_step=4,
        group_size=4,
        steps=1,
        seed=5,
        eval_samples=0,
        env_config={},
    )
    return RunConfig.from_flat(**{**settings, **overrides})


def recording(generator, calls: list):
    """Wrap ``generator.generate`` to record every call's arguments and result."""
    generate = generator.generate

    def recorded(prompts, n, sampling, seeds=None, greedy=False):
        out = generate(prompts, n, sampling, seeds=seeds, greedy=greedy)
        calls.append(
            {
                "prompts": prompts,
                "n": n,
                "seeds": seeds,
                "max_tokens": sampling.max_tokens,
                "greedy": greedy,
                "out": out,
            }
        )
        return out

    return recorded


def test_the_assistant_mask_is_one_on_sampled_tokens_only(episode_loop):
    loop = episode_loop(config())
    obs = episode_loop.tokenizer.encode(OBSERVATION, add_special_tokens=False)
    assert len(obs) == 3  # byte-level: one token per byte
    calls: list = []
    loop.s.generator.generate = recording(loop.s.generator, calls)
    try:
        prompts, groups = loop.sample_groups(4)
    finally:
        del loop.s.generator.generate
    # turn 1: one call for the whole batch; turn 2: one call, one sample per episode
    assert [(len(c["prompts"]), c["n"]) for c in calls] == [(4, 4), (16, 1)]
    # the first turn is sampled as a single-turn step samples: per-prompt seeds
    assert calls[0]["seeds"] == [sampling_seed(5, p.index, samples=4) for p in prompts]
    assert len(set(calls[1]["seeds"])) == 16  # a seed per (prompt, member, turn)
    second = {}
    for context, out in zip(calls[1]["prompts"], calls[1]["out"], strict=True):
        second.setdefault(tuple(context), []).append(out[0])
    for i, group in enumerate(groups):
        for j, c in enumerate(group):
            first = calls[0]["out"][i][j]
            t1 = first.token_ids
            assert c.prompt_ids == list(prompts[i].text.encode())
            assert c.token_ids[: len(t1)] == t1
            assert c.token_ids[len(t1) : len(t1) + 3] == obs
            t2 = c.token_ids[len(t1) + 3 :]
            turn2 = [o for o in second[tuple(c.prompt_ids + t1 + obs)] if o.token_ids == t2]
            assert turn2, "the second turn is not what the engine sampled after turn 1"
            assert c.assistant_mask == [1] * len(t1) + [0] * 3 + [1] * len(t2)
            assert c.logprobs == first.logprobs + [0.0] * 3 + turn2[0].logprobs
            assert (c.turns, c.tool_calls, c.tool_ok, c.finish_reason) == (
                2,
                1,
                1,
                turn2[0].finish_reason,
            )
            assert c.reward == float(bool(turn2[0].text)) and c.text == turn2[0].text
            assert c.transcript == first.text + OBSERVATION + turn2[0].text
    batch = rollout_batch(groups, torch.zeros(4, 4))
    for row, c in enumerate(c for g in groups for c in g):
        width = len(c.token_ids)
        assert batch.mask[row, :width].tolist() == [float(m) for m in c.assistant_mask]
        assert batch.mask[row, width:].sum() == 0
        assert batch.sampler_logprobs[row, :width].tolist() == pytest.approx(c.logprobs)


def test_the_ledger_charges_each_episode_once_with_its_env_tokens(episode_loop):
    loop = episode_loop(config())
    ledger = loop.s.ledger
    _, groups = loop.sample_groups(4)
    episodes = [c for g in groups for c in g]
    for c in episodes:  # a request per turn; turn 2's context: prompt, turn 1, observation
        (p1, cached1, r1), (p2, cached2, r2) = c.turn_requests
        assert (p1, p2, r1 + r2) == (len(c.prompt_ids), p1 + r1 + 3, sum(c.assistant_mask))
        assert cached1 == cached2 == 0  # contexts shorter than one KV block: nothing cached
    # each turn charged as the engine ran it (tests/test_prefix_caching.py: with hits)
    expected = sum(
        sum(ledger.generation_flops(p, r, cached_tokens=cached) for p, cached, r in c.turn_requests)
        for c in episodes
    )
    assert ledger.flops["generate"] == expected
    assert ledger.tokens["generate"] == sum(len(c.token_ids) for c in episodes)
    assert ledger.tokens["generate"] - sum(sum(c.assistant_mask) for c in episodes) == 3 * 16
    # turn 2 recomputed the prompt and turn 1: more than one forward over each trajectory
    assert expected > sum(
        ledger.generation_flops(len(c.prompt_ids), len(c.token_ids), sum(c.assistant_mask))
        for c in episodes
    )


def test_remax_gets_a_greedy_episode_of_each_prompt_as_its_baseline(episode_loop):
    """ReMax's baseline in a multi-turn env (Algorithm.needs_greedy_baseline): one episode
    per prompt, every turn greedy, from the prompt ids its samples had; its reward is the
    env's, and it is charged to the ledger's baseline phase as an episode is to generate."""
    loop = episode_loop(config(algorithm="remax"))
    prompts, groups = loop.sample_groups(4)
    encoded = [g[0].prompt_ids for g in groups]
    calls: list = []
    loop.s.generator.generate = recording(loop.s.generator, calls)
    try:
        rewards, lengths = loop.baseline_groups(prompts, groups)
    finally:
        del loop.s.generator.generate
    assert len(calls) >= 2 and all(c["greedy"] and c["n"] == 1 for c in calls)
    assert calls[0]["prompts"] == encoded and calls[0]["seeds"] is None
    # the episodes evaluation would play greedily with these weights
    s = loop.s
    played = rollout_episodes(
        s.env, s.generator, s.observe, prompts, encoded, 1, loop.sampling, loop.budget, greedy=True
    )
    episodes = [g[0] for g in played]
    assert all(c.turns == 2 and c.assistant_mask.count(0) == 3 for c in episodes)
    assert rewards.tolist() == [c.reward for c in episodes]
    assert lengths.tolist() == [len(c.token_ids) for c in episodes]
    ledger = s.ledger
    charge = [
        sum(ledger.generation_flops(p, r, cached_tokens=cached) for p, cached, r in c.turn_requests)
        for c in episodes
    ]
    assert ledger.flops["baseline"] == sum(charge)
    assert ledger.tokens["baseline"] == sum(len(c.token_ids) for c in episodes)
    record = loop.step()  # and a whole step trains with it, on the next prompts
    assert 0.0 <= record["baseline_reward_mean"] <= 1.0
    assert {"turns_mean", "baseline_len_mean", "policy_kl"} <= set(record)


def test_episodes_end_at_the_turn_limit_and_at_the_token_limit(episode_loop):
    loop = episode_loop(config(env_config={"end_after": 99, "max_turns": 3}))
    _, groups = loop.sample_groups(4)
    for c in (c for g in groups for c in g):
        assert (c.turns, c.finish_reason, c.reward) == (3, "length", CUT_REWARD)
        assert c.assistant_mask.count(0) == 2 * 3  # two observations; none after the last turn
        assert c.assistant_mask[-1] == 1

    limit = 14  # a 6-token turn, "=?\n", then at most 5 more tokens
    loop = episode_loop(
        config(env_config={"end_after": 99, "max_turns": 50}, max_episode_tokens=limit)
    )
    _, groups = loop.sample_groups(4)
    for c in (c for g in groups for c in g):
        assert len(c.token_ids) <= limit and c.turns < 50
        assert (c.finish_reason, c.reward) == ("length", CUT_REWARD)
        assert c.assistant_mask[-1] == 1
        # cut when the next observation and one more token no longer fit
        assert len(c.token_ids) + 3 + 1 > limit


def test_an_env_that_raises_stops_the_run_naming_the_env(episode_loop):
    loop = episode_loop(config(env_config={"fail": True}))
    with pytest.raises(EpisodeError, match=r"test_ask_again.*ValueError: boom.*turn 1"):
        loop.step()


def test_settings_a_multi_turn_env_cannot_run_with_are_refused(episode_loop):
    with pytest.raises(ConfigError, match="at least one whole turn"):
        config(max_episode_tokens=3).validate()
    with pytest.raises(ConfigError, match="single-turn"):
        episode_loop(config(env="arithmetic", max_episode_tokens=64))
    loop = episode_loop(config())
    loop.cfg.placement.mode = (
        "async"  # validate refuses async without Monarch first; the env's rule:
    )
    with pytest.raises(ConfigError, match=r"test_ask_again.*sync mode only"):
        type(loop)(loop.cfg, loop.s)


class Stop(BaseException):
    """A crash after step 2's record, before its checkpoint."""


def without_timing(records: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if not is_timing_key(k)} for r in records]


def test_a_resumed_run_gives_the_metrics_of_an_uninterrupted_one(episode_loop, tmp_path):
    cfg = config(steps=2, checkpoint_every=1, eval_every=2, eval_samples=2)

    def run(out: Path, resume: bool = False, on_record=None) -> None:
        execute_run(
            cfg, out, episode_loop(cfg).s, command="test", resume=resume, on_record=on_record
        )

    run(tmp_path / "whole")
    expected = without_timing(read_metrics(tmp_path / "whole"))
    assert [r["step"] for r in expected] == [0, 1, 2]
    for r in expected[1:]:
        assert {"turns_mean", "tool_calls_mean", "tool_success_rate"} <= set(r)
        assert r["turns_mean"] == 2.0 and r["tool_success_rate"] == 1.0
    assert expected[0]["eval_turns_mean"] == 2.0 and "eval_mean_at_2" in expected[0]

    def crash(record: dict) -> None:
        if record["step"] == 2:
            raise Stop

    with pytest.raises(Stop):
        run(tmp_path / "resumed", on_record=crash)
    run(tmp_path / "resumed", resume=True)
    assert without_timing(read_metrics(tmp_path / "resumed")) == expected
    rows = [json.loads(x) for x in (tmp_path / "whole" / "samples.jsonl").read_text().splitlines()]
    assert all(OBSERVATION in r["completion"] for r in rows)


def test_build_services_wires_the_episode_budget_and_the_observation_encoder(
    loop_for, generator, tiny_path, monkeypatch
):
    # loop_for: its teardown puts the tiny model's weights back into the shared engine
    from zoo.run.loop import RLLoop
    from zoo.run.wiring import build_services

    monkeypatch.setitem(ENVS._loaded, AskAgain.name, AskAgain)
    with pytest.raises(ConfigError, match="no room for the prompt"):  # the tiny context: 256
        build_services(config(max_episode_tokens=300), quiet=True, generator=generator)
    cfg = config()
    services = build_services(cfg, quiet=True, generator=generator)
    assert services.observe(Prompt("1+1=", None, 0, "train"), ["2"], OBSERVATION) == list(
        OBSERVATION.encode()
    )
    record = RLLoop(cfg, services).step()
    assert record["turns_mean"] == 2.0 and record["tool_calls_mean"] == 1.0


class TurnReturns(GRPO):
    """Credit per turn: turn k's advantage is its return-to-go (the rewards of turns k, k+1,
    ...) minus the group's mean return-to-go at turn k, over the episodes that reached it."""

    name = "test_turn_returns"
    inputs = frozenset({"turn_rewards"})

    def advantages(self, rewards: torch.Tensor, turn_rewards: torch.Tensor) -> torch.Tensor:
        reached = ~turn_rewards.isnan()
        to_go = turn_rewards.nan_to_num().flip(-1).cumsum(-1).flip(-1)
        baseline = (to_go * reached).sum(1, keepdim=True) / reached.sum(1, keepdim=True)
        return torch.where(reached, to_go - baseline.nan_to_num(), torch.nan)


def test_per_turn_rewards_reach_an_algorithm_that_asks_and_its_advantages_each_turns_tokens(
    episode_loop,
):
    loop = episode_loop(config(env_config={"end_after": 3, "turn_rewards": True}, seed=2))
    loop.s.algorithm = TurnReturns()
    seen: dict = {}
    train = loop.train
    sample = loop.sample_groups
    loop.train = lambda batch, shapes: seen.setdefault("batch", batch) and train(batch, shapes)
    loop.sample_groups = lambda n: seen.setdefault("groups", sample(n))
    loop.step()
    _, groups = seen["groups"]
    batch = seen["batch"]
    rows = [c for g in groups for c in g]
    assert all(c.turns == 3 for c in rows)
    varied = {tuple(c.turn_rewards[:2]) for c in rows}
    assert len(varied) > 1, "the env's per-turn rewards did not vary: nothing is checked"
    for g, group in enumerate(groups):
        # plain Python: returns-to-go per turn, minus the group's mean at that turn
        to_go = [[sum(c.turn_rewards[k:]) for k in range(3)] for c in group]
        for j, c in enumerate(group):
            assert c.turn_rewards[-1] == c.reward
            expected = [to_go[j][k] - sum(r[k] for r in to_go) / len(group) for k in range(3)]
            row = batch.advantages[g * len(group) + j]
            turn, got = 0, {0: set(), 1: set(), 2: set()}
            for t, m in enumerate(c.assistant_mask):
                turn += int(m == 1 and t > 0 and c.assistant_mask[t - 1] == 0)
                if m:
                    got[turn].add(round(float(row[t]), 6))
            assert got == {k: {round(expected[k], 6)} for k in range(3)}


def test_per_turn_advantages_of_the_wrong_shape_and_old_plugins():
    rewards = torch.tensor([[1.0, 0.0]])
    per_turn = torch.tensor([[[0.5, 1.0], [0.0, float("nan")]]])
    assert TurnReturns().group_advantages(rewards, torch.ones(1, 2), per_turn).shape == (1, 2, 2)
    # a single-turn batch passes K = 1: the episode's reward
    assert TurnReturns().group_advantages(rewards, torch.ones(1, 2)).tolist() == [[[0.5], [-0.5]]]
    # an advantages() without turn_rewards gets none and returns [groups, G]
    assert GRPO().group_advantages(rewards, torch.ones(1, 2), per_turn).shape == (1, 2)

    class Wrong(GRPO):
        name = "test_wrong_shape"
        inputs = frozenset({"turn_rewards"})

        def advantages(self, rewards, turn_rewards):
            return rewards[0]

    with pytest.raises(ValueError, match=r"test_wrong_shape.*\(2,\).*\[groups, G, K\]"):
        Wrong().group_advantages(rewards, torch.ones(1, 2), per_turn)
