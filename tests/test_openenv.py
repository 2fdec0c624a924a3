"""The OpenEnv adapter (zoo/envs/tool/openenv_env.py) against a real OpenEnv server: openenv-core's
own app (tests/openenv_sums_server.py), run by uvicorn on 127.0.0.1 in a process the tests
start. Checked: seeded prompts and splits, episodes over WebSocket sessions (observations,
per-turn and final rewards), a refused action as the end of an episode, the errors a user
meets (no server, a wrong field name, a reset that ignores its seed), and one RL step of
the tiny model on it through the loop."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from zoo.core.config import ConfigError
from zoo.envs import get_env, is_multi_turn
from zoo.envs.tool.openenv_env import HELDOUT_SEED_BASE

SERVER = Path(__file__).with_name("openenv_sums_server.py")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def url(tmp_path_factory):
    port = free_port()
    log = tmp_path_factory.mktemp("openenv") / "server.log"
    with log.open("w") as out:
        server = subprocess.Popen([sys.executable, str(SERVER), str(port)], stdout=out, stderr=out)
    address = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):  # up to 30 s for the server to answer
            try:
                urllib.request.urlopen(f"{address}/health", timeout=1).close()
                break
            except OSError:
                if server.poll() is not None:
                    pytest.fail(f"the OpenEnv server exited: {log.read_text()[-2000:]}")
                time.sleep(0.1)
        else:
            pytest.fail(f"the OpenEnv server did not answer: {log.read_text()[-2000:]}")
        yield address
    finally:
        server.terminate()
        server.wait(timeout=10)


@pytest.fixture(scope="module")
def env(url):
    return get_env("openenv", url=url, eval_size=8)


def total(prompt_text: str) -> int:
    a, b = prompt_text.removesuffix("=").split("+")
    return int(a) + int(b)


def test_prompts_come_from_seeded_resets_with_disjoint_splits(env, url):
    assert is_multi_turn(env) and env.turn_limit() == 4
    held = env.eval_prompts()
    assert [p.answer["seed"] for p in held] == [HELDOUT_SEED_BASE + i for i in range(8)]
    assert held == get_env("openenv", url=url, eval_size=8).eval_prompts()  # fixed split
    train = env.train_prompts(0, 16, seed=3)
    assert train == env.train_prompts(0, 16, seed=3)  # a pure function of (index, seed)
    assert env.train_prompt(5, 3) == train[5]
    assert train != env.train_prompts(0, 16, seed=4)
    assert all(p.answer["seed"] < HELDOUT_SEED_BASE for p in train)
    assert all(p.text.endswith("=") and "+" in p.text for p in held + train)


def test_an_episode_shows_the_servers_observations_and_rewards(env):
    p = env.eval_prompts()[0]
    episode = env.start(p)
    wrong = episode.step("0")
    assert (wrong.done, wrong.observation, wrong.reward) == (False, f"\nagain: {p.text}", -0.1)
    right = episode.step(f" {total(p.text)} ")
    assert (right.done, right.reward) == (True, 1.0)
    with pytest.raises(RuntimeError, match="after the episode ended"):
        episode.step("1")
    twice_wrong = env.start(p)
    assert not twice_wrong.step("1").done
    assert twice_wrong.step("2") == type(wrong)(done=True, reward=0.0)
    assert env.score(p, str(total(p.text))) == 1.0 and env.score(p, "7") == 0.0


def test_a_turn_of_many_episodes_runs_their_sessions_together(env):
    held = env.eval_prompts()
    episodes = [env.start(p) for p in held]
    answers = [str(total(p.text)) if i % 2 else "0" for i, p in enumerate(held)]
    replies = env.step_batch(episodes, answers)
    assert [r.done for r in replies] == [i % 2 == 1 for i in range(8)]
    assert [r.reward for r in replies] == [1.0 if i % 2 else -0.1 for i in range(8)]
    cut = [e for e, r in zip(episodes, replies, strict=True) if not r.done]
    assert all(e.client is not None for e in cut)
    assert [e.final_reward() for e in cut] == [0.0] * 4  # cut by a limit: closed
    assert all(e.client is None for e in cut)


def test_a_refused_action_ends_the_episode_with_the_servers_message(env):
    reply = env.start(env.eval_prompts()[1]).step("12!")
    assert (reply.done, reply.reward) == (True, 0.0)
    assert "no '!' here" in reply.info["openenv_error"]


def test_a_users_mistakes_fail_with_a_message(url):
    with pytest.raises(ConfigError, match="url must be"):
        get_env("openenv")
    with pytest.raises(RuntimeError, match="is the server running"):
        get_env("openenv", url=f"http://127.0.0.1:{free_port()}").eval_prompts()
    with pytest.raises(RuntimeError, match=r"no text field 'question' \(its fields: .*prompt"):
        get_env("openenv", url=url, text_field="question").eval_prompts()
    env = get_env("openenv", url=url)
    p = env.eval_prompts()[0]
    moved = type(p)(text="1+1=", answer=p.answer, index=p.index, split=p.split)
    with pytest.raises(RuntimeError, match="must be a function of its seed"):
        env.start(moved).step("2")


def test_one_rl_step_of_the_tiny_model_on_the_server(loop_for, tiny_path, url):
    """The loop end to end: episodes sampled by vLLM turn by turn against the server, the
    observation's bytes masked out, and a trainer step taken on them."""
    from transformers import AutoTokenizer

    from zoo.run.run_config import RunConfig
    from zoo.services.conversation import Conversation

    cfg = RunConfig.from_flat(
        env="openenv",
        env_config={"url": url, "eval_size": 8},
        prompts_per_step=4,
        group_size=4,
        steps=1,
        seed=1,
        eval_samples=0,
    )
    loop = loop_for(cfg)
    tokenizer = AutoTokenizer.from_pretrained(tiny_path)
    loop.s.observe = Conversation(tokenizer)
    seen: dict = {}
    sample = loop.sample_groups
    loop.sample_groups = lambda n: seen.setdefault("groups", sample(n))
    record = loop.step()
    _, groups = seen["groups"]
    rows = [c for g in groups for c in g]
    assert {c.turns for c in rows} <= {1, 2} and any(c.turns == 2 for c in rows)
    for c in rows:
        shown = bytes(t for t, m in zip(c.token_ids, c.assistant_mask, strict=True) if m == 0)
        if c.turns == 2:  # the server's observation, masked out of the loss
            assert shown.decode() == f"\nagain: {bytes(c.prompt_ids).decode()}"
            assert c.turn_rewards[0] == -0.1
        else:
            assert shown == b""
        assert c.reward in (0.0, 1.0)
    assert record["turns_mean"] == sum(c.turns for c in rows) / len(rows)
    assert record["kept_groups"] > 0 and loop.s.trainer.version == 1  # a trainer step ran
