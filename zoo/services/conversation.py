r"""Chat format of multi-turn episodes: the tokens the loop places between assistant turns.

The loop keeps an episode in token space (token in, token out): the text the model wrote
is never re-tokenized. The context of turn t+1 is

    prompt ids + turn-1 ids (ending with the model's end-of-turn token) + observation-1 ids
    + ... + turn-t ids + observation-t ids

so everything the chat template would write between two assistant messages has to come
from ``observation_ids``: what closes the turn after the end-of-turn token, the
observation in the template's format, and the header of the next assistant message. The
end-of-turn token is the tokenizer's ``eos_token``: for Qwen3 ``<|im_end|>``, also the
``eos_token_id`` of its config.json at which generation stops.

Qwen3's template (``tests/chat_templates/qwen3.jinja``, byte-identical to the one Qwen3
checkpoints ship), with the observation sent as a tool response (role ``"tool"``), writes

    ...turn text<|im_end|>                      <- the model's turn
    \n<|im_start|>user\n<tool_response>\n{observation}\n</tool_response><|im_end|>\n
    <|im_start|>assistant\n                    <- observation_ids: these two lines
    ...next turn text

Its ``<think>`` handling matters here. The template keeps the reasoning of the assistant
messages after the last *user query*, and tool responses do not count as queries, so in a
tool episode the earlier turns keep their ``<think>\nR\n</think>\n\n`` (re-rendered as
``<think>\n`` + R without its outer newlines + ``\n</think>\n\n``, which is the form
Qwen3 writes, so the tokens agree). Three rules of the template matter:

- an empty ``<think>\n\n</think>\n\n`` (Qwen3's ``/no_think`` output) is dropped from a
  turn once another message follows it: ``observation_ids`` raises;
- an observation sent as a *user* message would be a new query, and the template then
  drops the reasoning of every earlier turn: that is why observations are tool responses;
- the last assistant message of a conversation always gets a think block, empty if it had
  none. This only concerns a rendering that ends with an assistant message, so the checks
  below never use one: they compare with the context the model saw before its turn.

Tools. A chat env describes its tools in ``prompt.meta["tools"]``: JSON schemas in the
OpenAI function format (``{"type": "function", "function": {"name": ..., "description":
..., "parameters": {...}}}``). Qwen3's template lists them in a system message, with the
instruction to call one by writing ``<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>``
in the assistant text. The env parses those calls from the turn's text itself (nothing
here parses them) and answers with the tool's output as the ``Reply`` observation. The
first prompt must list the same tools: ``chat_prompt_ids`` renders it, and the prompt
encoder of ``zoo/run/wiring.py`` (``encode``) should call it for chat prompts in place of
its own ``apply_chat_template`` call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from zoo.envs import Prompt


class ChatTemplateError(ValueError):
    """The chat template would render the episode differently from the loop's tokens."""


class Conversation:
    """The run's tokenizer as a multi-turn rollout (zoo.run.episodes) uses it: called as
    ``(prompt, turns, observation)`` it gives an observation's token ids
    (``observation_ids``), and ``turn_text(token_ids, finish_reason)`` gives the text of a
    sampled turn and whether it is faithful (``turn_text``)."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer

    def __call__(self, prompt: Prompt, turns: list[str], observation: str) -> list[int]:
        return observation_ids(self.tokenizer, prompt, turns, observation)

    def turn_text(self, token_ids: list[int], finish_reason: str) -> tuple[str, bool]:
        return turn_text(self.tokenizer, token_ids, finish_reason)


def turn_text(tokenizer: Any, token_ids: list[int], finish_reason: str) -> tuple[str, bool]:
    """(text, faithful) of one sampled assistant turn: ``token_ids`` as sampled, ending with
    the end-of-turn token when ``finish_reason`` is "stop" (that token is not part of the
    text), decoded once with nothing skipped or cleaned up.

    Faithful means the text is exactly what the tokens say: re-encoding it gives the same
    ids, or other ids with the same content (the tokenizer's pieces, joined, are equal: the
    same text split into other tokens, which a model may sample). Not faithful: a token the
    decoder drops (an id outside the vocabulary, e.g. the tiny model's padding rows) or an
    incomplete UTF-8 sequence the decoder replaces with U+FFFD (a byte-level token of part
    of a character); the rollout then ends the episode as malformed rather than hand the env
    a text other than the trained tokens."""
    ids = list(token_ids[:-1] if finish_reason == "stop" and token_ids else token_ids)
    text = tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)
    again = list(tokenizer.encode(text, add_special_tokens=False))
    if again == ids:
        return text, True
    pieces = tokenizer.convert_ids_to_tokens(ids)
    faithful = None not in pieces and "".join(pieces) == "".join(
        tokenizer.convert_ids_to_tokens(again)
    )
    return text, faithful


def chat_prompt_ids(tokenizer: Any, prompt: Prompt) -> list[int]:
    """The token ids of a chat prompt's first turn: its messages (and tools, when its meta
    has ``tools``) through the chat template, ending with the assistant header."""
    return _render(tokenizer, prompt, prompt.meta["messages"])


def observation_ids(
    tokenizer: Any, prompt: Prompt, turns: list[str], observation: str
) -> list[int]:
    """Token ids of an env observation placed between two assistant turns.

    Plain prompts (no ``prompt.meta["messages"]``): the tokenizer's encoding of the
    observation, without special tokens. Chat prompts: what the chat template writes after
    the end-of-turn token of ``turns[-1]`` up to the start of the next assistant message,
    with the observation as a tool response. ``turns`` are the assistant texts so far
    (decoded, without the end-of-turn token). Raises ``ChatTemplateError`` when the
    template would render the conversation so far differently from the loop's tokens.
    """
    messages = prompt.meta.get("messages")
    if messages is None:
        return list(tokenizer.encode(observation, add_special_tokens=False))
    if not turns:
        raise ValueError("an observation follows an assistant turn: turns is empty")
    # The observations before the last turn are not at hand; they do not change what the
    # template writes after the last turn (Qwen3's depends only on the roles), and both
    # renderings below use the same stand-ins, so the comparison is unaffected.
    history = list(messages)
    for i, turn in enumerate(turns):
        if i:
            history.append({"role": "tool", "content": ""})
        history.append({"role": "assistant", "content": turn})
    seen = _render(tokenizer, prompt, history[:-1])  # the context of the last turn
    full = _render(tokenizer, prompt, [*history, {"role": "tool", "content": observation}])
    name = _template_name(tokenizer)
    # 1. Appending a turn and an observation must not rewrite what the model already saw
    # (a template that rewrites earlier turns, e.g. drops their reasoning, would train the
    # model on a context it will never be given by the template).
    if full[: len(seen)] != seen:
        at = _first_difference(seen, full)
        raise ChatTemplateError(
            f"the chat template of {name} renders the conversation before the last assistant "
            f"turn differently once the turn and a tool response follow (first different "
            f"token at {at}: {tokenizer.decode(seen[at : at + 8])!r} became "
            f"{tokenizer.decode(full[at : at + 8])!r}); the loop's token-in, token-out episode "
            "would not be what the template gives"
        )
    # 2. The template must write the last turn as the model wrote it, closed by the
    # end-of-turn token that the loop appends; the observation starts after that token.
    eot = tokenizer.eos_token_id
    rest = full[len(seen) :]
    if eot is None or eot not in rest:
        raise ChatTemplateError(
            f"the chat template of {name} does not close an assistant message with the "
            f"tokenizer's end-of-turn token {tokenizer.eos_token!r}, which ends the model's turns"
        )
    end = rest.index(eot)
    written = tokenizer.decode(
        rest[:end], skip_special_tokens=False, clean_up_tokenization_spaces=False
    )
    if written != turns[-1]:
        raise ChatTemplateError(
            f"the chat template of {name} re-renders the last assistant turn: the model "
            f"wrote {turns[-1][-200:]!r}, the template writes {written[-200:]!r} (Qwen3's "
            "drops an empty <think></think> block from turns that are no longer the last "
            "and normalises the newlines around the reasoning)"
        )
    return rest[end + 1 :]


def _render(tokenizer: Any, prompt: Prompt, messages: list[dict[str, Any]]) -> list[int]:
    """``messages`` through the chat template, with the prompt's tools and the next
    assistant message's header, as token ids."""
    tools = prompt.meta.get("tools")
    ids = tokenizer.apply_chat_template(
        messages,
        tools=tools or None,
        add_generation_prompt=True,
        tokenize=True,
        return_dict=False,
    )
    return list(ids)


def _template_name(tokenizer: Any) -> str:
    return repr(getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__)


def _first_difference(a: list[int], b: list[int]) -> int:
    return next(
        (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
    )
