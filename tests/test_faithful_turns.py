"""The env acts on exactly the decoded text of the trained tokens, or the episode ends as
malformed (zoo.run.episodes, zoo.services.conversation.turn_text).

With real tokenizers: the tiny models' byte-level one and the Qwen3 stand-in of
tests/test_conversation.py (byte-level pieces, Qwen3's special and added tokens). The
rollout test drives the session's vLLM engine with the tiny model fine-tuned to write a
stray byte and an id outside the tokenizer's vocabulary (tests/memorize.py): the env
never sees those turns, and an ordinary episode beside them is unaffected."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from memorize import memorize
from test_conversation import QWEN3_TEMPLATE, make_tokenizer
from transformers import AutoTokenizer, Qwen3ForCausalLM

from zoo.core.config import ConfigError
from zoo.envs import get_env
from zoo.models.titan import load_hf_state_dict
from zoo.run.episodes import MALFORMED, EpisodeRollouts, rollout_episodes
from zoo.services.conversation import Conversation, turn_text
from zoo.services.sampling import SamplingConfig

PADDING_ROW = 300
"""An id of the tiny model's embedding that is no token of its tokenizer (257..319)."""
E_ACUTE = list("é".encode())  # two byte-level tokens: 0xC3 0xA9


@pytest.fixture(scope="module")
def tiny_tokenizer(tiny_path):
    return AutoTokenizer.from_pretrained(tiny_path)


@pytest.fixture(scope="module")
def qwen3():
    return make_tokenizer(QWEN3_TEMPLATE)


def ids(text: str) -> list[int]:
    return list(text.encode())


def test_an_ordinary_turn_is_its_tokens_without_the_end_of_turn_token(tiny_tokenizer, qwen3):
    eos = tiny_tokenizer.eos_token_id
    assert turn_text(tiny_tokenizer, [*ids("calc:47*86"), eos], "stop") == ("calc:47*86", True)
    assert turn_text(tiny_tokenizer, ids("calc:47"), "length") == ("calc:47", True)
    assert turn_text(tiny_tokenizer, [*ids("caf"), *E_ACUTE], "length") == ("café", True)
    # A special token inside a turn is kept (vLLM's text would skip it): the env sees it.
    start = qwen3.convert_tokens_to_ids("<|im_start|>")
    text, faithful = turn_text(qwen3, [*ids("a"), start, *ids("b"), qwen3.eos_token_id], "stop")
    assert (text, faithful) == ("a<|im_start|>b", True)


def test_a_stray_byte_or_a_dropped_id_is_not_faithful(tiny_tokenizer, qwen3):
    for tokenizer in (tiny_tokenizer, qwen3):
        # a lone byte of a multi-byte character: decoded as U+FFFD
        text, faithful = turn_text(tokenizer, [*ids("calc:47*86"), E_ACUTE[0]], "length")
        assert (text, faithful) == ("calc:47*86\ufffd", False)
        text, faithful = turn_text(tokenizer, [*ids("4042"), E_ACUTE[1], 256], "stop")
        assert (text, faithful) == ("4042\ufffd", False)
        # an id the tokenizer does not know: its decode drops it silently
        text, faithful = turn_text(tokenizer, [*ids("calc:47*86"), PADDING_ROW], "length")
        assert (text, faithful) == ("calc:47*86", False)


def test_the_same_text_in_other_tokens_is_faithful(qwen3):
    # "<tool_call>" written byte by byte, where the tokenizer has one token for it: a
    # non-canonical split of the same text, which the env may act on.
    text, faithful = turn_text(qwen3, ids("<tool_call>\n{}"), "length")
    assert qwen3.encode(text, add_special_tokens=False) != ids("<tool_call>\n{}")
    assert (text, faithful) == ("<tool_call>\n{}", True)
    # A U+FFFD the model wrote whole (its three bytes) is text like any other.
    assert turn_text(qwen3, ids("a\ufffd"), "length") == ("a\ufffd", True)


def test_a_rollout_needs_a_conversation_that_decodes_turns(generator):
    env = get_env("tool_arithmetic", eval_size=4)
    prompt = env.eval_prompts()[0]
    with pytest.raises(ConfigError, match="Conversation"):
        rollout_episodes(
            env,
            generator,
            lambda p, turns, text: ids(text),
            [prompt],
            [ids(prompt.text)],
            1,
            SamplingConfig(max_tokens=4),
            32,
            greedy=True,
        )


def test_the_env_never_sees_an_unfaithful_turn_and_an_ordinary_episode_is_unaffected(
    tiny_path, generator, tiny_tokenizer
):
    env = get_env("tool_arithmetic", eval_size=8)
    prompts = env.eval_prompts()[:3]
    eos = tiny_tokenizer.eos_token_id
    stray, dropped, ordinary = prompts
    call = {p.index: ids("calc:" + p.text.removesuffix("=")) for p in prompts}
    turns = {
        stray.index: [call[stray.index] + [E_ACUTE[0], eos]],
        dropped.index: [call[dropped.index] + [PADDING_ROW, eos]],
        ordinary.index: [call[ordinary.index] + [eos], [*ids(str(ordinary.answer)), eos]],
    }
    observation = ids(f"={ordinary.answer}\n")
    sequences = []
    for p in prompts:
        seq, mask = ids(p.text), [0] * len(ids(p.text))
        for k, turn in enumerate(turns[p.index]):
            seq, mask = seq + turn, mask + [1] * len(turn)
            if k + 1 < len(turns[p.index]):
                seq, mask = seq + observation, mask + [0] * len(observation)
        sequences.append((seq, mask))
    model = memorize(Qwen3ForCausalLM.from_pretrained(tiny_path), sequences)

    seen: list[str] = []
    step_batch = env.step_batch
    env.step_batch = lambda episodes, texts: seen.extend(texts) or step_batch(episodes, texts)
    sampled = []
    generate = generator.generate
    generator.generate = lambda *a, **k: sampled.append(generate(*a, **k)) or sampled[-1]
    generator.update_weights(model.state_dict(), version=0)
    try:
        services = SimpleNamespace(
            env=env, generator=generator, observe=Conversation(tiny_tokenizer)
        )
        rollouts = EpisodeRollouts(services, SamplingConfig(max_tokens=16), token_limit=64)
        groups = rollouts.sample(prompts, [ids(p.text) for p in prompts], n=1, greedy=True)
        metrics = rollouts.metrics(groups)
    finally:
        del generator.generate
        generator.update_weights(load_hf_state_dict(tiny_path), version=0)
    a, b, c = (g[0] for g in groups)
    # The first turns were sampled as trained; the generator's own text of the dropped id
    # is "calc:..." alone, which the env would have run as a well-formed call.
    first = [g[0] for g in sampled[0]]
    assert [f.token_ids for f in first] == [turns[p.index][0] for p in prompts]
    assert "\ufffd" not in first[1].text and first[1].text == bytes(call[dropped.index]).decode()
    for episode, p in ((a, stray), (b, dropped)):
        assert episode.finish_reason == MALFORMED and episode.reward == 0.0
        assert episode.token_ids == turns[p.index][0] and episode.assistant_mask == [1] * len(
            episode.token_ids
        )
        assert (episode.turns, episode.tool_calls, episode.turn_rewards) == (1, 0, [0.0])
    assert a.text.endswith("\ufffd") and b.text == bytes(call[dropped.index]).decode()
    # The env saw the ordinary episode's two turns only, exactly as decoded.
    assert seen == [bytes(call[ordinary.index]).decode(), str(ordinary.answer)]
    assert (c.reward, c.finish_reason, c.turns, c.tool_calls, c.tool_ok) == (1.0, "stop", 2, 1, 1)
    assert c.token_ids == sequences[2][0][len(ids(ordinary.text)) :]
    assert metrics["malformed_rate"] == pytest.approx(2 / 3)
