"""Parsing model output on the host takes time linear in its length.

Completions are untrusted, and everything the host reads out of them (a code block, an
answer tag, a tool call, an integer, the code handed to the sandbox) runs in the training
process, outside any sandbox timeout. A pattern that backtracks makes a 64k-character
completion cost seconds: the old fence pattern took 5 s on a fence and 64k spaces, the old
answer-tag pattern 3 s on 8k unclosed tags. Each parser meets inputs of ``N`` = 64k
characters built to make such patterns backtrack; the bound of 1 s is generous (the
parsers take milliseconds) and guards against quadratic blow-up, not for speed.

The scanners replaced patterns, so they are also checked against those patterns (kept
here as the reference) on many short random inputs: normal output parses as before.
"""

from __future__ import annotations

import random
import re
import threading
import time
from collections.abc import Callable

import pytest

from zoo.envs import get_env
from zoo.envs.code.code_envs import fenced_code
from zoo.envs.math.math_datasets import gsm8k_reference, last_boxed
from zoo.envs.math.math_grading import MathGrader
from zoo.envs.math.reasoning_gym_envs import MAX_ANSWER_CHARS, extract_answer
from zoo.envs.tool.tool_arithmetic import tool_expression, valid_expression

N = 64_000
BOUND_S = 1.0


def fill(piece: str) -> str:
    """``piece`` repeated to at least ``N`` characters."""
    return piece * -(-N // len(piece))


def seconds(parse: Callable[[str], object], text: str) -> float:
    start = time.perf_counter()
    parse(text)
    return time.perf_counter() - start


def assert_linear(parse: Callable[[str], object], texts: dict[str, str]) -> None:
    assert all(len(t) >= N for t in texts.values())
    slow = {name: seconds(parse, text) for name, text in texts.items()}
    slow = {name: round(s, 3) for name, s in slow.items() if s >= BOUND_S}
    assert not slow, f"over {BOUND_S} s on {N}-character inputs: {slow}"


# --- code blocks ------------------------------------------------------------------------

FENCE_INPUTS = {
    "a fence and spaces": "```" + " " * N,  # the old pattern: 5 s
    "a fence and tabs": "```" + "\t" * N,
    "a fence, blanks, a language, blanks": "```" + fill(" ") + "py" + fill("\t"),
    "openers only": fill("```"),
    "openers and blanks": fill("``` \t"),
    "nested fences": "```python\n" + fill("x = 1\n```py\n"),
    "an unclosed block of blank lines": "```\n" + fill("\n \t "),
    "near-closers": "```python\n" + fill("\n" + " " * 60 + "``x"),
    "many blocks": fill("```\nx\n```\n"),
}


def test_fenced_code_is_linear_on_pathological_input():
    assert_linear(fenced_code, FENCE_INPUTS)


def test_code_envs_build_their_jobs_in_linear_time(tmp_path):
    """What the code envs do with a completion on the host before it reaches the sandbox:
    humaneval's fence and entry-point check, mbpp's fence, pyfunc's syntax check."""
    humaneval = get_env("humaneval", eval_size=64)
    prompt = humaneval.eval_prompts()[0]
    entry = prompt.answer["entry_point"]
    texts = {
        **FENCE_INPUTS,
        "async and blanks": "```python\nasync" + fill(" \t\n"),
        "def and blanks": f"```python\ndef {entry}" + " " * N,
        "many defs": "```python\n" + fill(f"async def {entry} \n"),
    }
    assert_linear(lambda text: humaneval._job(prompt, text), texts)
    data = tmp_path / "mbpp.jsonl"
    data.write_text(
        '{"task_id": 1, "text": "Add.", "code": "def add(a, b):\\n  return a + b", '
        '"test_list": ["assert add(1, 2) == 3", "assert add(0, 0) == 0"]}\n'
    )
    mbpp = get_env("mbpp", data_files=str(data), eval_files=str(data))
    [prompt] = mbpp.eval_prompts()
    assert_linear(lambda text: mbpp._job(prompt, text), texts)
    pyfunc = get_env("pyfunc")
    prompt = pyfunc.eval_prompts()[0]
    assert_linear(lambda text: pyfunc._job(prompt, text), {"(": "(" * N, "x+": "x+" * N})


# --- answer tags (reasoning-gym envs) ------------------------------------------------------

TAG_INPUTS = {
    "unclosed tags": fill("<answer>"),  # the old pattern: 3 s
    "unclosed tags with text": fill("<answer>x"),
    "closing tags only": fill("</answer>"),
    "an opener and spaces": "<answer>" + " " * N,
    "nested openers, one closer": fill("<answer>") + "</answer>",
    "almost tags": fill("<answer</answer"),
    "many pairs": fill("<answer>1</answer>"),
}


def test_extract_answer_is_linear_on_pathological_input():
    assert_linear(extract_answer, TAG_INPUTS)


@pytest.mark.parametrize("name", ["countdown", "basic_arithmetic", "chain_sum", "gsm_symbolic"])
def test_reasoning_gym_scoring_is_linear(name):
    """The whole score: the tag, then the scorer on the answer (reasoning-gym's own for
    three of them, string and number parsing; countdown's AST whitelist). Completions over
    ``MAX_ANSWER_CHARS`` score 0 unread, so the longest answers a scorer sees are of that
    length; they are tried too."""
    env = get_env(name, eval_size=5)
    prompt = env.eval_prompts()[0]
    m = MAX_ANSWER_CHARS - 20
    answers = {
        "digits and spaces": "1 " * (m // 2),
        "digits": "9" * m,
        "dots": "1." * (m // 2),
        "parentheses": "(" * m,
        "signs": "-" * (m - 1) + "1",
        "a sum": "1+" * (m // 2) + "1",
        "commas": "1," * (m // 2),
    }
    assert_linear(lambda text: env.score(prompt, text), TAG_INPUTS)
    for kind, answer in answers.items():
        text = f"<answer>{answer}</answer>"
        assert len(text) <= MAX_ANSWER_CHARS
        assert seconds(lambda text: env.score(prompt, text), text) < BOUND_S, kind


# --- tool calls and integers ---------------------------------------------------------------


def test_tool_calls_and_integer_answers_are_linear():
    def tool_call(text: str) -> bool:
        expr = tool_expression(text)
        return expr is not None and valid_expression(expr)

    assert_linear(
        tool_call,
        {
            "a prefix and spaces": "calc:" + " " * N + "1",
            "digits": "calc:" + "1" * N,
            "operators": "calc:" + fill("1*("),
            "prefixes": fill("calc:"),
        },
    )
    tool = get_env("tool_arithmetic")
    arithmetic = get_env("arithmetic")
    integers = {"digits": "1" * N, "signs": "-" * N, "spaces": " " * N + "1", "mixed": fill("1 -")}
    for env in (tool, arithmetic):
        prompt = env.eval_prompts()[0]
        assert_linear(lambda text, env=env, prompt=prompt: env.score(prompt, text), integers)
    # A whole turn of a batch of episodes: long calls are refused before anything runs.
    prompt = tool.eval_prompts()[0]
    texts = ["calc:" + fill("1 "), "calc:" + "1" * N, "1" * N]
    start = time.perf_counter()
    replies = tool.step_batch([tool.start(prompt) for _ in texts], texts)
    assert time.perf_counter() - start < BOUND_S
    assert [r.info.get("tool") for r in replies] == ["refused", "refused", None]


# --- math ----------------------------------------------------------------------------------


def test_math_data_parsers_are_linear():
    """gsm8k's ``####`` and MATH's ``\\boxed{}`` read data set rows, not completions, but
    they are linear all the same (the old ``####`` pattern was quadratic over blanks)."""
    assert_linear(
        gsm8k_reference,
        {"blanks then text": "#### 1" + " " * N + "x", "markers": fill("####")},
    )
    assert_linear(
        last_boxed,
        {"openers": fill("\\boxed{"), "braces": "\\boxed{" + "{" * N, "closed": "}" * N},
    )


def test_math_verify_runs_in_the_grader_under_its_timeout():
    """Completions of gsm8k and math are read by math-verify, whose plain-expression
    pattern is quadratic on digits and blanks: 21 s in-process for "1 " x 32k here. It
    never runs on the host: the grading worker is killed at the grader's timeout, so the
    host waits at most that long (plus the kill) and the outcome is "timeout"."""
    grader = MathGrader(timeout_s=1.0)
    try:
        assert grader.grade("1", "1") == "correct"  # start the worker outside the timed part
        outcome: list[str] = []
        thread = threading.Thread(target=lambda: outcome.append(grader.grade("1", fill("1 "))))
        start = time.monotonic()
        thread.start()
        thread.join(30)
        assert outcome == ["timeout"]
        assert time.monotonic() - start < 1.0 + 2.0
        assert grader.grade("2", "so \\boxed{2}") == "correct"  # a fresh worker goes on
    finally:
        grader.close()


# --- the scanners parse what the old patterns parsed ----------------------------------------

OLD_FENCE = re.compile(r"```[ \t]*(?:python3?|py)?[ \t]*\n(.*?)(?:\n[ \t]*```|\Z)", re.DOTALL)
OLD_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
OLD_GSM8K_ANSWER = re.compile(r"####\s*(.+?)\s*$", re.DOTALL)


def old_fenced_code(text: str) -> str | None:
    m = OLD_FENCE.search(text)
    return m[1] if m else None


def old_extract_answer(text: str) -> str:
    matches = OLD_ANSWER_TAG.findall(text)
    return (matches[-1] if matches else text).strip()


def old_gsm8k_reference(text: str) -> str | None:
    m = OLD_GSM8K_ANSWER.search(text)
    value = m[1].replace(",", "").strip() if m else ""
    return value or None


PIECES = {
    "fence": [
        "```",
        "`",
        "```py\n",
        "\n```",
        " ",
        "\t",
        "\n",
        "\r",
        "python",
        "python3",
        "py",
        "p",
        "3",
        "x",
        "def f():",
    ],
    "tag": ["<answer>", "</answer>", "<answer", "answer>", "<", ">", "/", "a", " ", "\n"],
    "gsm8k": ["####", "#", " ", "\n", "\t", "1", ",", "x", "\u00a0", "\u2028"],
}
PARSERS = {
    "fence": (fenced_code, old_fenced_code),
    "tag": (extract_answer, old_extract_answer),
    "gsm8k": (gsm8k_reference, old_gsm8k_reference),
}


@pytest.mark.parametrize("kind", PARSERS)
def test_scanners_agree_with_the_patterns_they_replace(kind):
    rng = random.Random(kind)
    new, old = PARSERS[kind]
    for _ in range(20_000):
        text = "".join(rng.choice(PIECES[kind]) for _ in range(rng.randint(0, 12)))
        assert new(text) == old(text), repr(text)
    examples = {
        "fence": "Sure:\n```python\ndef f():\n    return 1\n```\nand ```py\nx\n```",
        "tag": "think <answer> 12 </answer> wait <answer>13</answer> done",
        "gsm8k": "Natalia sold 48/2 = 24 clips.\n#### 1,072",
    }
    assert old(examples[kind]) not in (None, "")
    assert new(examples[kind]) == old(examples[kind])
