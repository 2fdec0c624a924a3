"""The tokens between assistant turns of a multi-turn episode (zoo/services/conversation.py).

The Qwen3 tokenizer is built here: the byte-level tokenizer plus Qwen3's special and added
tokens (``<|im_start|>``, ``<|im_end|>`` as the end-of-turn token, ``<think>``,
``<tool_call>``, ``<tool_response>`` and their closing tags) and Qwen3's chat template,
``tests/chat_templates/qwen3.jinja``: a byte-identical copy of the template Qwen3
checkpoints ship (as stored by TRL, whose CI checks it against the Hub; the last test
compares the two when TRL is installed). Byte-level pieces have no BPE merges, so these
tests check the template's structure, not the merges of Qwen's 151k vocabulary.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from zoo.envs import Prompt
from zoo.services.conversation import ChatTemplateError, chat_prompt_ids, observation_ids

QWEN3_TEMPLATE = (Path(__file__).parent / "chat_templates" / "qwen3.jinja").read_text()
QWEN3_ADDED = [
    "<think>",
    "</think>",
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
]

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "calculator",
            "description": "Evaluate an arithmetic expression.",
            "parameters": {
                "type": "object",
                "properties": {"expression": {"type": "string"}},
                "required": ["expression"],
            },
        },
    }
]


def tool_call(expression: str) -> str:
    call = {"name": "calculator", "arguments": {"expression": expression}}
    return f"<tool_call>\n{json.dumps(call)}\n</tool_call>"


# Qwen3 in thinking mode (the template's default): every turn starts with its reasoning.
TOOL_EPISODE = [
    ("<think>\nI need 17*23; the tool is safer.\n</think>\n\n" + tool_call("17*23"), "391"),
    ("<think>\nNow add 9.\n</think>\n\n" + tool_call("391+9"), "400"),
    ("<think>\nThe tool says 400.\n</think>\n\nThe answer is \\boxed{400}.", None),
]
QWEN3_BETWEEN_TURNS = (
    "\n<|im_start|>user\n<tool_response>\n{}\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
)


def make_tokenizer(chat_template: str | None, eos: str = "<|im_end|>"):
    from tokenizers import AddedToken
    from transformers import PreTrainedTokenizerFast

    from zoo.models.tokenizer import build_byte_tokenizer

    tok = build_byte_tokenizer()
    tok.add_special_tokens(["<|im_start|>", "<|im_end|>"])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in QWEN3_ADDED])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token=eos, pad_token="<|endoftext|>", chat_template=chat_template
    )


@pytest.fixture(scope="module")
def qwen3():
    return make_tokenizer(QWEN3_TEMPLATE)


def chat_prompt(tools: list | None = TOOLS) -> Prompt:
    meta = {"prompt_format": "chat", "messages": [{"role": "user", "content": "What is 17*23+9?"}]}
    if tools:
        meta["tools"] = tools
    return Prompt(text="What is 17*23+9?", answer=400, index=0, split="train", meta=meta)


def assemble(tokenizer, prompt: Prompt, episode) -> tuple[list[int], list[int]]:
    """A chat episode's ids and loss mask the way the loop builds them: the first prompt, then
    each turn's ids with the end-of-turn token (mask 1), then the observation's ids (mask 0)."""
    ids = chat_prompt_ids(tokenizer, prompt)
    mask = [0] * len(ids)
    turns: list[str] = []
    for text, observation in episode:
        turn = [*tokenizer.encode(text, add_special_tokens=False), tokenizer.eos_token_id]
        ids, mask, turns = ids + turn, mask + [1] * len(turn), [*turns, text]
        if observation is not None:
            between = observation_ids(tokenizer, prompt, turns, observation)
            ids, mask = ids + between, mask + [0] * len(between)
    return ids, mask


def spans(ids: list[int], mask: list[int]) -> list[list[int]]:
    """The runs of ids where mask is 1."""
    out: list[list[int]] = []
    for i, (token, m) in enumerate(zip(ids, mask, strict=True)):
        if m and (i == 0 or not mask[i - 1]):
            out.append([])
        if m:
            out[-1].append(token)
    return out


def template_messages(prompt: Prompt, episode) -> list[dict]:
    messages = list(prompt.meta["messages"])
    for text, observation in episode:
        messages.append({"role": "assistant", "content": text})
        if observation is not None:
            messages.append({"role": "tool", "content": observation})
    return messages


@pytest.mark.parametrize("tools", [TOOLS, None], ids=["tools", "no-tools"])
def test_a_qwen3_tool_episode_is_token_for_token_the_chat_template(qwen3, tools):
    prompt = chat_prompt(tools)
    ids, _ = assemble(qwen3, prompt, TOOL_EPISODE)
    full = qwen3.apply_chat_template(
        template_messages(prompt, TOOL_EPISODE), tools=tools, tokenize=True, return_dict=False
    )
    # The template closes the final assistant message with "<|im_end|>\n": the loop stops at
    # the model's <|im_end|>, so the template's rendering is the episode plus one "\n".
    assert full[: len(ids)] == ids
    assert qwen3.decode(full[len(ids) :]) == "\n"
    # The system prompt lists the tools; with none there is no system message at all.
    assert ("# Tools" in qwen3.decode(ids)) == bool(tools)


def test_the_loss_mask_covers_exactly_the_assistant_turns_and_their_end_of_turn(qwen3):
    prompt = chat_prompt()
    ids, mask = assemble(qwen3, prompt, TOOL_EPISODE)
    decoded = [qwen3.decode(span) for span in spans(ids, mask)]
    assert decoded == [text + "<|im_end|>" for text, _ in TOOL_EPISODE]
    # Everything else is the template's: the prompt, then each observation in its wrapping.
    unmasked = qwen3.decode([t for t, m in zip(ids, mask, strict=True) if not m])
    between = "".join(QWEN3_BETWEEN_TURNS.format(obs) for _, obs in TOOL_EPISODE[:-1])
    assert unmasked == qwen3.decode(chat_prompt_ids(qwen3, prompt)) + between


def test_qwen3_puts_the_observation_in_a_tool_response_user_message(qwen3):
    prompt = chat_prompt()
    text, observation = TOOL_EPISODE[0]
    between = observation_ids(qwen3, prompt, [text], observation)
    assert qwen3.decode(between) == QWEN3_BETWEEN_TURNS.format("391")
    # The same after a second turn: the stand-ins for earlier observations change nothing.
    turns = [TOOL_EPISODE[0][0], TOOL_EPISODE[1][0]]
    between = observation_ids(qwen3, prompt, turns, "400")
    assert qwen3.decode(between) == QWEN3_BETWEEN_TURNS.format("400")


def test_a_turn_without_reasoning_is_kept_as_written(qwen3):
    """A non-final turn with no think block is rendered as written (only the final message
    of a conversation gets an empty think block), so a tool call without reasoning works."""
    prompt = chat_prompt()
    episode = [(tool_call("17*23+9"), "400"), TOOL_EPISODE[-1]]
    ids, _ = assemble(qwen3, prompt, episode)
    full = qwen3.apply_chat_template(
        template_messages(prompt, episode), tools=TOOLS, tokenize=True, return_dict=False
    )
    assert full[: len(ids)] == ids


def test_qwen3_drops_an_empty_think_block_of_an_earlier_turn_and_that_raises(qwen3):
    """Qwen3's /no_think output starts with an empty think block, which the template drops
    once the turn is not the last: the loop's tokens would differ from the template's."""
    text = "<think>\n\n</think>\n\n" + tool_call("17*23+9")
    with pytest.raises(ChatTemplateError, match="re-renders the last assistant turn"):
        observation_ids(qwen3, chat_prompt(), [text], "400")


def test_plain_prompts_get_the_observation_bytes_alone():
    from zoo.models.tokenizer import hf_byte_tokenizer

    tokenizer = hf_byte_tokenizer()
    prompt = Prompt(text="2+2=", answer=4, index=0, split="train", meta={"prompt_format": "plain"})
    observation = "wrong, try again: é\n"
    # One id per byte and nothing added: no special token, no template.
    assert observation_ids(tokenizer, prompt, ["5"], observation) == list(observation.encode())


# Toy templates that break token in, token out; ChatML otherwise.
FORGETS_ASSISTANTS = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n"
    "{% if m.role != 'assistant' or loop.last %}{{ m.content }}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
CHATML = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
COUNTS_MESSAGES = "<|im_start|>system\n{{ messages | length }} messages<|im_end|>\n" + CHATML


@pytest.mark.parametrize(
    ("template", "message"),
    [
        (FORGETS_ASSISTANTS, "re-renders the last assistant turn"),
        (COUNTS_MESSAGES, "renders the conversation before the last assistant turn differently"),
    ],
    ids=["drops-assistant-content", "rewrites-the-system-prompt"],
)
def test_a_template_that_rewrites_the_conversation_raises(template, message):
    tokenizer = make_tokenizer(template)
    tokenizer.name_or_path = "toy/rewriting-template"
    with pytest.raises(ChatTemplateError, match=message) as error:
        observation_ids(tokenizer, chat_prompt(None), ["The answer is 4."], "ok")
    assert "'toy/rewriting-template'" in str(error.value)  # names the model


def test_plain_chatml_passes_the_same_checks():
    tokenizer = make_tokenizer(CHATML)
    between = observation_ids(tokenizer, chat_prompt(None), ["I call.", "Again."], "ok")
    assert tokenizer.decode(between) == "\n<|im_start|>tool\nok<|im_end|>\n<|im_start|>assistant\n"


def test_a_template_without_the_end_of_turn_token_raises():
    tokenizer = make_tokenizer(CHATML.replace("<|im_end|>", "<|end|>"))
    with pytest.raises(ChatTemplateError, match="end-of-turn token"):
        observation_ids(tokenizer, chat_prompt(None), ["The answer is 4."], "ok")


def test_the_qwen3_template_here_is_the_one_trl_stores():
    trl = pytest.importorskip("trl")
    stored = Path(trl.__file__).parent / "chat_templates" / "qwen3.jinja"
    assert stored.read_text() == QWEN3_TEMPLATE
