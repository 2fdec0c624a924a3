"""The tool_arithmetic env, through the real sandbox: its splits, tool calls answered with
their value, direct answers, malformed calls answered with an error observation (never an
exception, never run in this process), the turn limit, the warm-start trace replayed to
reward 1; and (slow) the tiny-tool preset built and played greedily."""

from __future__ import annotations

import builtins
import re

import pytest

from zoo.envs import get_env, is_multi_turn, list_envs
from zoo.envs.tool.tool_arithmetic import ERROR_OBSERVATION, MAX_EXPRESSION_CHARS

PROBLEM = re.compile(r"^([0-9]{2})\*([0-9]{2})=$")


@pytest.fixture(scope="module")
def env():
    return get_env("tool_arithmetic")


def product(text: str) -> int:
    """The answer of "a*b=", computed here from the prompt text."""
    m = PROBLEM.match(text)
    assert m, text
    return int(m[1]) * int(m[2])


def test_registered_and_multi_turn(env):
    assert "tool_arithmetic" in list_envs()
    assert is_multi_turn(env)
    assert env.turn_limit() == 3
    assert get_env("tool_arithmetic", max_turns=5).turn_limit() == 5


def test_heldout_is_fixed_large_and_disjoint_from_train(env):
    held = env.eval_prompts()
    assert len(held) >= 500
    assert len({p.text for p in held}) == len(held)
    assert [p.text for p in held] == [p.text for p in get_env("tool_arithmetic").eval_prompts()]
    assert all(p.answer == product(p.text) for p in held)
    held_texts = {p.text for p in held}
    for seed in (0, 1, 1_000_003):
        train = env.train_prompts(0, 2000, seed=seed)
        assert not held_texts & {p.text for p in train}
        assert all(p.answer == product(p.text) for p in train)
    # Pure function of (index, seed); different seeds give different streams.
    assert env.train_prompt(17, seed=4) == env.train_prompt(17, seed=4)
    assert env.train_prompts(0, 20, seed=0) != env.train_prompts(0, 20, seed=1)


def test_a_correct_tool_call_then_the_answer(env):
    for p in env.eval_prompts()[:3]:
        episode = env.start(p)
        reply = episode.step("calc:" + p.text.removesuffix("="))
        assert not reply.done and reply.tool_call and reply.tool_ok
        assert reply.observation == f"={product(p.text)}\n"
        final = episode.step(f" {product(p.text)}\n")
        assert final.done and final.reward == 1.0 and not final.tool_call


def test_a_wrong_answer_after_the_tool_scores_zero(env):
    p = env.eval_prompts()[0]
    episode = env.start(p)
    assert episode.step("calc:" + p.text.removesuffix("=")).tool_ok
    assert episode.step(str(product(p.text) + 1)).reward == 0.0


def test_direct_answers_are_scored(env):
    prompts = env.eval_prompts()[:20]
    for p in prompts:
        answer = product(p.text)
        assert env.score(p, str(answer)) == 1.0
        assert env.score(p, str(answer + 1)) == 0.0
        assert env.score(p, "calc:" + p.text[:-1]) == 0.0  # a call is not an answer
        right, wrong = env.start(p).step(str(answer)), env.start(p).step(str(answer - 10))
        assert right.done and right.reward == 1.0 and not right.tool_call
        assert wrong.done and wrong.reward == 0.0
    garbage = env.start(prompts[0]).step("hello")
    assert garbage.done and garbage.reward == 0.0


MALFORMED = {
    "garbage": "calc:hello",
    "empty": "calc:",
    "injection": "calc:__import__('os').system('id')",
    "huge": "calc:" + "9" * (MAX_EXPRESSION_CHARS + 1),
    "long sum": "calc:" + "1+" * 500 + "1",
    "power": "calc:9**9**9**9",
    "division by zero": "calc:47/0",
    "modulo by zero": "calc:7%(3-3)",
    "syntax": "calc:4+*5",
}


@pytest.mark.parametrize("name", MALFORMED)
def test_a_malformed_call_is_an_error_observation(env, name):
    p = env.eval_prompts()[0]
    episode = env.start(p)
    reply = episode.step(MALFORMED[name])
    assert reply.tool_call and not reply.tool_ok and not reply.done
    assert reply.observation == ERROR_OBSERVATION
    # The episode goes on: the model may still call correctly and answer.
    assert episode.step("calc:" + p.text[:-1]).observation == f"={product(p.text)}\n"
    assert episode.step(str(product(p.text))).reward == 1.0


def test_tool_calls_never_run_in_this_process(env, monkeypatch):
    """Refused calls never execute; accepted ones run in the sandbox: with eval, exec and
    compile broken in this process, the values still come back."""
    p = env.eval_prompts()[0]

    def forbidden(*args, **kwargs):
        raise AssertionError("evaluated in-process")

    for name in ("eval", "exec", "compile"):
        monkeypatch.setattr(builtins, name, forbidden)
    texts = ["calc:" + p.text[:-1], MALFORMED["injection"], MALFORMED["division by zero"]]
    ok, injection, zero = env.step_batch([env.start(p) for _ in texts], texts)
    assert ok.tool_ok and ok.observation == f"={product(p.text)}\n"
    assert injection.info["tool"] == "refused"  # never reached the sandbox at all
    assert zero.info["tool"] == "failed"  # ran in the sandbox, and raised there


def test_a_batch_gives_the_replies_of_single_steps(env):
    prompts = env.train_prompts(0, 70, seed=0)  # more than one sandboxed chunk
    texts = ["calc:" + p.text[:-1] for p in prompts]
    texts[3], texts[40], texts[41] = MALFORMED["division by zero"], "calc:7/2", "12"
    batch = env.step_batch([env.start(p) for p in prompts], texts)
    for i in (0, 3, 40, 41, 69):
        assert batch[i] == env.start(prompts[i]).step(texts[i])
    assert batch[40].observation == "=3.5\n"
    assert batch[69].observation == f"={product(prompts[69].text)}\n"


def test_the_turn_limit(env):
    p = env.eval_prompts()[0]
    call = "calc:" + p.text[:-1]
    episode = env.start(p)
    assert not episode.step(call).done
    assert not episode.step(call).done
    last = episode.step(call)  # the third turn is the last: a call there ends the episode
    assert last.done and last.reward == 0.0 and last.tool_call
    with pytest.raises(RuntimeError):
        episode.step(str(product(p.text)))
    assert episode.final_reward() == 0.0
    one_turn = get_env("tool_arithmetic", max_turns=1).start(p).step(call)
    assert one_turn.done and one_turn.reward == 0.0


def test_the_warm_start_trace_replays_to_reward_one(env):
    for p in env.eval_prompts()[:3] + env.train_prompts(0, 3, seed=0):
        trace = env.tool_trace(p)
        assert trace[0][0].startswith("calc:") and trace[-1][1] == ""
        episode = env.start(p)
        for turn, observation in trace[:-1]:
            reply = episode.step(turn)
            assert reply.tool_ok and reply.observation == observation
        final = episode.step(trace[-1][0])
        assert final.done and final.reward == 1.0
        assert env.score(p, env.reference_answer(p)) == 1.0


def test_warm_start_tokens_mask_the_prompt_and_observations(env):
    """The warm start trains on assistant tokens and EOS only, laid out as the loop lays
    them out: prompt, turn, EOS, observation bytes, turn, EOS."""
    from zoo.models.tokenizer import EOS_ID
    from zoo.warm_start.supervised import episode_tokens

    p = next(p for p in env.eval_prompts() if len(str(p.answer)) == 4)
    expr, answer = p.text[:-1], str(p.answer)
    ids, mask = episode_tokens(p.text, env.tool_trace(p))
    assert ids == [
        *p.text.encode(),
        *f"calc:{expr}".encode(),
        EOS_ID,
        *f"={answer}\n".encode(),
        *answer.encode(),
        EOS_ID,
    ]
    assert mask == [0] * 6 + [1] * 11 + [0] * 6 + [1] * 5


# --- the tiny-tool preset (its shipped start weights) ----------------------------------


def test_the_preset_leaves_the_other_keys_alone():
    from zoo.models.presets import MODEL_PRESETS, model_shape
    from zoo.models.tiny import TINY_PRESETS, TinyRecipe

    # The keys of the checkpoints built before tiny-tool (and its recipe fields) existed.
    assert TINY_PRESETS["tiny"].key() == TinyRecipe().key() == "8bc1c0f9bbb0"
    # tiny-code's key moved once on purpose: its recipe now warm-starts on pyfunc's own
    # warm-start split (data="warm_start"), disjoint from the functions RL trains on.
    assert TINY_PRESETS["tiny-code"].key() == "97e35d73e783"
    assert TINY_PRESETS["tiny-tool"].key() not in ("8bc1c0f9bbb0", "97e35d73e783")
    assert TINY_PRESETS["tiny-tool"].key() == "f2a3acebf6e9"  # built before warm_start_trace
    keys = {recipe.key() for recipe in TINY_PRESETS.values()}
    assert len(keys) == len(TINY_PRESETS)
    assert "tiny-tool" in MODEL_PRESETS
    assert model_shape("tiny-tool") == model_shape("tiny")


@pytest.mark.slow
def test_tiny_tool_preset_uses_the_tool_sometimes(env):
    import json

    from transformers import Qwen3ForCausalLM

    from zoo.models.tiny import TINY_PRESETS, tiny_model_path
    from zoo.warm_start.greedy import greedy_episodes

    path = tiny_model_path(TINY_PRESETS["tiny-tool"])
    info = json.loads((path / "forge_zoo_recipe.json").read_text())
    assert 0.0 < info["validation_tool_rate"] < 1.0
    model = Qwen3ForCausalLM.from_pretrained(path).eval()
    held = greedy_episodes(model, env, env.eval_prompts()[:200], 16)
    assert 0.0 < held["tool_rate"] < 1.0  # sometimes: room to learn to use it more
    assert held["reward"] > held["direct_reward"]  # and the tool helps
