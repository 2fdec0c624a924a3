"""``tool_arithmetic`` with Qwen3's native tool calls (``tool_format="qwen3"``): the
calculator's schema in the chat template's ``tools``, ``<tool_call>`` JSON in the turn, the
result as a ``tool`` message (``<tool_response>``). The tokenizer is the Qwen3 stand-in of
tests/test_conversation.py (Qwen3's template byte for byte, byte-level pieces); the last test
plays a whole episode with transformers' generator on the tiny model fine-tuned to make the
call and copy its result (tests/memorize.py)."""

from __future__ import annotations

import json
import time

import pytest
from memorize import memorize
from test_conversation import QWEN3_TEMPLATE, make_tokenizer
from transformers import Qwen3ForCausalLM

from zoo.core.config import ConfigError, parse_overrides
from zoo.envs import get_env
from zoo.envs.tool.qwen3_calls import ParsedCall, parse_tool_call
from zoo.envs.tool.tool_arithmetic import (
    CALCULATOR,
    ToolCall,
    calculator_call,
    read_calculator_call,
)
from zoo.run.episodes import rollout_episodes
from zoo.run.wiring import prompt_encoder
from zoo.services.conversation import Conversation, chat_prompt_ids, observation_ids
from zoo.services.generation.hf import HFGenerator
from zoo.services.sampling import SamplingConfig


@pytest.fixture(scope="module")
def env():
    return get_env("tool_arithmetic", **parse_overrides(["tool_format=qwen3", "eval_size=8"]))


@pytest.fixture(scope="module")
def qwen3():
    return make_tokenizer(QWEN3_TEMPLATE)


def template(tokenizer, messages: list[dict]) -> list[int]:
    ids = tokenizer.apply_chat_template(
        messages, tools=[CALCULATOR], tokenize=True, add_generation_prompt=True, return_dict=False
    )
    return list(ids)


@pytest.mark.parametrize("expression", ["47*86", "(12 + 3) * 4 % 7", "1/0"])
def test_a_call_round_trips(expression):
    call = calculator_call(expression)
    assert call == (
        '<tool_call>\n{"name": "calculator", "arguments": {"expression": "'
        + expression
        + '"}}\n</tool_call>'
    )
    assert parse_tool_call(call) == ParsedCall("calculator", {"expression": expression})
    assert read_calculator_call(call) == ToolCall(expression)
    # after reasoning and words, as Qwen3 writes it
    assert read_calculator_call(
        f"<think>\nI multiply.\n</think>\n\nLet me compute.\n{call}"
    ) == ToolCall(expression)
    assert read_calculator_call("<think>\nno <tool_call> here\n</think>\n\n4042") is None
    assert read_calculator_call("4042") is None


MALFORMED = {
    "not closed": ("<tool_call>\n{}", "not closed"),
    "not JSON": ('<tool_call>\n{"name": "calculator", "arguments": {\n</tool_call>', "JSON"),
    "not an object": ("<tool_call>\n[1, 2]\n</tool_call>", '"name"'),
    "unknown tool": (
        '<tool_call>\n{"name": "python", "arguments": {"expression": "1"}}\n</tool_call>',
        "unknown tool 'python'",
    ),
    "other arguments": (
        '<tool_call>\n{"name": "calculator", "arguments": {"expr": "1+1"}}\n</tool_call>',
        '{"expression"',
    ),
    "a number": (
        '<tool_call>\n{"name": "calculator", "arguments": {"expression": 7}}\n</tool_call>',
        '{"expression"',
    ),
    "not arithmetic": (calculator_call("__import__('os').getcwd()"), "digits"),
    "two calls": (calculator_call("1+1") + calculator_call("2+2"), "one tool call"),
    "too long": (calculator_call("1+" * 300 + "1"), "over 400"),
}


@pytest.mark.parametrize("name", list(MALFORMED))
def test_a_malformed_call_is_answered_with_an_error_observation(env, name):
    text, why = MALFORMED[name]
    prompt = env.eval_prompts()[0]
    [reply] = env.step_batch([env.start(prompt)], [text])
    assert not reply.done and reply.tool_call and not reply.tool_ok
    assert reply.observation.startswith("error: ") and why in reply.observation
    assert reply.info == {"tool": "refused"}  # never executed


def test_a_call_runs_in_the_sandbox_and_the_final_integer_alone_pays(env):
    prompt = env.eval_prompts()[0]
    a, b = map(int, prompt.meta["expression"].split("*"))
    episode = env.start(prompt)
    [reply] = env.step_batch([episode], [calculator_call(f"{a} * {b}")])
    assert (reply.observation, reply.tool_ok, reply.info) == (str(a * b), True, {"tool": "ran"})
    [reply] = env.step_batch([episode], [f"<think>\nThe tool says {a * b}.\n</think>\n\n{a * b}"])
    assert (reply.done, reply.reward) == (True, 1.0)
    failing = env.start(prompt)
    [reply] = env.step_batch([failing], [calculator_call("1/0")])
    assert reply.observation.startswith("error: ") and reply.info == {"tool": "failed"}
    assert env.score(prompt, f"The answer is {a * b}.") == 0.0
    assert env.score(prompt, f" {a * b}\n") == 1.0
    # a call on the last turn ends the episode unrewarded, as in the calc format
    last = env.start(prompt)
    for _ in range(env.turn_limit()):
        [reply] = env.step_batch([last], [calculator_call("1+1")])
    assert (reply.done, reply.reward, reply.tool_call) == (True, 0.0, True)


def test_the_calc_format_is_unchanged_and_a_bad_format_is_refused():
    calc = get_env("tool_arithmetic", eval_size=8)
    prompt = calc.eval_prompts()[0]
    assert prompt.text.endswith("=") and prompt.meta == {}
    qwen = get_env("tool_arithmetic", eval_size=8, tool_format="qwen3").eval_prompts()[0]
    assert (qwen.answer, qwen.meta["expression"]) == (prompt.answer, prompt.text[:-1])
    with pytest.raises(ConfigError, match="tool_format"):
        get_env("tool_arithmetic", tool_format="hermes")


def test_the_rendered_prompt_lists_the_calculator_schema(env, qwen3):
    prompt = env.eval_prompts()[0]
    ids = chat_prompt_ids(qwen3, prompt)
    assert prompt_encoder(qwen3)(prompt) == ids  # the run's prompt encoder
    assert ids == template(qwen3, prompt.meta["messages"])
    text = qwen3.decode(ids)
    schema = json.dumps(CALCULATOR, ensure_ascii=False)
    assert f"<tools>\n{schema}\n</tools>" in text
    assert text.endswith(f"<|im_start|>user\n{prompt.text}<|im_end|>\n<|im_start|>assistant\n")


@pytest.mark.parametrize("well_formed", [True, False], ids=["value", "error"])
def test_the_observation_is_the_template_rendering_of_the_tool_message(env, qwen3, well_formed):
    prompt = env.eval_prompts()[0]
    call = calculator_call(prompt.meta["expression"]) if well_formed else MALFORMED["not JSON"][0]
    [reply] = env.step_batch([env.start(prompt)], [call])
    between = observation_ids(qwen3, prompt, [call], reply.observation)
    turn = [*qwen3.encode(call, add_special_tokens=False), qwen3.eos_token_id]
    messages = [
        *prompt.meta["messages"],
        {"role": "assistant", "content": call},
        {"role": "tool", "content": reply.observation},
    ]
    assert chat_prompt_ids(qwen3, prompt) + turn + between == template(qwen3, messages)
    assert qwen3.decode(between) == (
        f"\n<|im_start|>user\n<tool_response>\n{reply.observation}\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def test_parsing_a_call_is_linear_in_the_turns_length():
    hostile = [
        "<tool_call>" * 8000,
        "<tool_call>" + "[" * 64000 + "</tool_call>",
        "</think>" * 8000 + "<tool_call>" + " " * 64000,
        "<tool_call>\n" + '{"name": "calculator", "arguments": ' * 2000 + "</tool_call>",
    ]
    for text in hostile:
        start = time.perf_counter()
        call = read_calculator_call(text)
        assert time.perf_counter() - start < 1.0
        assert call is not None and call.expression is None


@pytest.mark.slow  # ~19 s: builds a Qwen3-shaped model and trains it
def test_a_qwen3_tool_episode_end_to_end_on_a_small_model(env, qwen3, tiny_path, tmp_path):
    prompt = env.eval_prompts()[0]
    prompt_ids = chat_prompt_ids(qwen3, prompt)
    (call, result), (answer, _) = env.tool_trace(prompt)
    eot = qwen3.eos_token_id
    messages = [
        *prompt.meta["messages"],
        {"role": "assistant", "content": call},
        {"role": "tool", "content": result},
    ]
    context = template(qwen3, messages)  # the template's: prompt, call, tool response
    played = context + qwen3.encode(answer, add_special_tokens=False) + [eot]
    call_end = len(prompt_ids) + len(qwen3.encode(call, add_special_tokens=False)) + 1
    mask = [0] * len(played)
    for start, end in ((len(prompt_ids), call_end), (len(context), len(played))):
        mask[start:end] = [1] * (end - start)
    # The tiny model, with Qwen3's tokens (<|im_end|> ends its turns) and a context long
    # enough for the tools' system prompt, taught this one episode.
    model = Qwen3ForCausalLM.from_pretrained(tiny_path)
    model.config.update({"eos_token_id": eot, "max_position_embeddings": 2048})
    model.generation_config.eos_token_id = eot
    memorize(model, [(played, mask)]).save_pretrained(tmp_path)
    qwen3.save_pretrained(tmp_path)

    generator = HFGenerator(tmp_path, seed=0)
    [[episode]] = rollout_episodes(
        env,
        generator,
        Conversation(generator.tokenizer),
        [prompt],
        [prompt_ids],
        1,
        SamplingConfig(max_tokens=96),
        token_limit=256,
        greedy=True,
    )
    assert (episode.reward, episode.finish_reason) == (1.0, "stop")
    assert (episode.turns, episode.tool_calls, episode.tool_ok) == (2, 1, 1)
    # Token for token the chat template's rendering of the conversation, env tokens masked.
    assert prompt_ids + episode.token_ids == played
    assert episode.assistant_mask == mask[len(prompt_ids) :]
    assert episode.transcript == call + result + answer and episode.text == answer
