"""``tool_arithmetic``: two-digit products with a calculator tool, over several turns.

Prompt: ``47*86=`` (a, b of ``digits`` digits; 2: 10..99). Each assistant turn is either

- a final answer, the integer alone (``4042``): the episode ends with reward 1 for the
  exact integer (surrounding whitespace ignored), else 0; any turn that is not a tool call
  is read as the final answer, so garbage ends the episode with reward 0;
- a tool call, ``calc:<expression>`` (``calc:47*86``): the env evaluates the expression in
  the sandbox and answers with the observation ``=4042\\n``, after which the model writes
  its next turn. A malformed call (not arithmetic, too long, division by zero, a sandbox
  error or timeout) is answered ``=error\\n``: an observation, never an exception.

For the tiny byte-level model a correct tool episode is, in tokens,
``47*86=`` ``calc:47*86`` EOS ``=4042\\n`` ``4042`` EOS (``tool_trace`` gives its turns).
The tiny model cannot multiply two-digit numbers in its head (few direct answers are
right) but can copy the operands into a call and the result into an answer, so using the
tool well is what RL has to learn. A tool call takes up to 10 bytes plus EOS: use
``--max-response-len 16`` (per turn) with ``--model tiny-tool``, so that DAPO's overlong
punishment (its last L/4 tokens) starts after the longest call.

Tool calls. The expression is model output, so it is treated as hostile: it must match
``EXPRESSION`` (digits, ``+ - * / % ( )`` and spaces, at most ``MAX_EXPRESSION_CHARS``
characters, no ``**``) or it is refused without running; one that matches still runs only
in the sandbox (``zoo.envs.execution.sandbox``), never in this process. Without names,
exponentiation or calls, and with bounded length, every expression that matches is small
and quick, so the calls of a batch (``step_batch``: every episode's turn of one loop step)
run together in one sandboxed program per ``CHUNK`` expressions, the chunks in parallel; a
chunk whose execution fails is rerun one expression per sandbox, so an expression's result
never depends on its batchmates. The episode is a pure function of the prompt and the turns it
receives (up to a sandbox timeout on an overloaded machine).

Qwen3's native tool calls (``tool_format="qwen3"``; the default, ``"calc"``, is the format
above). The prompt is a chat prompt: the user message ``What is 47*86? ...`` and the
calculator's JSON schema (``CALCULATOR``) in ``meta["tools"]``, which the chat template
lists in its system message (Qwen3's: a ``<tools>`` block) when the run renders the prompt
(zoo.services.conversation.chat_prompt_ids). A tool call is Qwen3's

    <tool_call>
    {"name": "calculator", "arguments": {"expression": "47*86"}}
    </tool_call>

anywhere in the turn's answer (the text after its reasoning, ``</think>``, if any), one call
per turn (read by zoo.envs.tool.qwen3_calls); the observation is the value alone
(``4042``), or ``error: <why>`` for a call that cannot run: not closed, not JSON, another
tool, other arguments, an expression ``valid_expression`` refuses, or one that fails in
the sandbox. The run's chat template
writes the observation as a ``tool`` message (Qwen3's: ``<tool_response>`` in a user turn,
zoo.services.conversation.observation_ids). A turn without ``<tool_call>`` is the final
answer: the integer alone after the reasoning, reward 1 if it is the product, else 0. The
expressions run as in the ``calc`` format (the same checks, the same sandbox).

Splits: the held-out split is ``eval_size`` problems drawn once with a constant seed; the
train stream is seeded and index-addressable and skips held-out problems.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from zoo.core.config import ConfigError
from zoo.envs.answers import exact_integer_reward
from zoo.envs.base import Prompt
from zoo.envs.episode import Episode, MultiTurnEnv, Reply
from zoo.envs.execution.pool import default_workers, require_sandbox, shared_pool
from zoo.envs.execution.sandbox import ExecResult
from zoo.envs.tool.qwen3_calls import (
    CALL_CLOSE,
    CALL_OPEN,
    answer_text,
    format_tool_call,
    parse_tool_call,
)

EVAL_SEED = "tool-arithmetic-heldout-v1"
TOOL_PREFIX = "calc:"
MAX_EXPRESSION_CHARS = 40
EXPRESSION = re.compile(r"[0-9+\-*/%() ]+")
"""What a tool call may contain. No letters, so no names, attributes or calls: nothing but
integer arithmetic can be written; ``**`` is refused too (``9**9**9`` is 27 characters)."""
ERROR_OBSERVATION = "=error\n"
TOOL_FORMATS = ("calc", "qwen3")
TOOL_NAME = "calculator"
CALCULATOR = {
    "type": "function",
    "function": {
        "name": TOOL_NAME,
        "description": "Evaluate an integer arithmetic expression: digits, + - * / % ( ) "
        "and spaces, at most 40 characters.",
        "parameters": {
            "type": "object",
            "properties": {"expression": {"type": "string", "description": "for example 47*86"}},
            "required": ["expression"],
        },
    },
}
"""The calculator's JSON schema (OpenAI function format) for chat templates' ``tools``."""
CHUNK = 64
"""Expressions per sandboxed program (one process start, ~0.1-0.4 s, serves them all)."""

# The program run in the sandbox: one line per expression, its value or "!". Builtins are
# emptied as a second wall behind the regex (the sandbox is the first).
_PROGRAM = """\
for _e in {exprs!r}:
    try:
        _v = eval(_e, {{"__builtins__": {{}}}}, {{}})
        print(repr(_v) if type(_v) in (int, float) else "!")
    except Exception:
        print("!")
"""


@dataclass
class ToolArithmeticConfig:
    digits: int = 2
    """Operands have exactly this many digits (2: 10..99)."""
    eval_size: int = 500
    """Held-out problems (>= 500 keeps binomial noise near +-2 points)."""
    max_turns: int = 3
    """Assistant turns per episode at most (a call, its answer, one spare)."""
    timeout_s: float = 5.0
    """Wall-clock limit of one sandboxed program (a chunk of expressions)."""
    memory_mb: int = 128
    sandbox_workers: int = 0
    """Sandboxes at a time (0: min(8, CPU count)); pools are shared per size."""
    tool_format: str = "calc"
    """How the tool is offered and called: "calc" (plain prompt ``47*86=``, calls
    ``calc:47*86``) or "qwen3" (a chat prompt with the calculator's schema as the chat
    template's ``tools``, calls in ``<tool_call>`` JSON, results as tool messages; needs a
    model whose tokenizer has a chat template)."""


def tool_expression(text: str) -> str | None:
    """The expression of a tool-call turn (``calc:47*86`` -> ``47*86``), or None when the
    turn is not a tool call (then it is a final answer)."""
    text = text.strip()
    return text[len(TOOL_PREFIX) :].strip() if text.startswith(TOOL_PREFIX) else None


@dataclass(frozen=True)
class ToolCall:
    """A turn read as a tool call: the expression to run, or None with why it cannot run."""

    expression: str | None
    error: str = ""


def calculator_call(expression: str) -> str:
    """A qwen3-format call of the calculator, as the model writes it."""
    return format_tool_call(TOOL_NAME, {"expression": expression})


def read_calculator_call(text: str) -> ToolCall | None:
    """The qwen3-format calculator call of turn ``text``, None when it has none (a final
    answer), or a ``ToolCall`` without expression saying what is wrong with it."""
    call = parse_tool_call(text)
    if call is None:
        return None
    if call.error:
        return ToolCall(None, call.error)
    if call.name != TOOL_NAME:
        return ToolCall(None, f"error: unknown tool {call.name[:40]!r}; the tool is {TOOL_NAME}")
    expression = call.arguments.get("expression")
    if set(call.arguments) != {"expression"} or not isinstance(expression, str):
        return ToolCall(None, f'error: {TOOL_NAME} takes {{"expression": "<arithmetic>"}}')
    if not valid_expression(expression.strip()):
        why = f"digits, + - * / % ( ) and spaces only, at most {MAX_EXPRESSION_CHARS} characters"
        return ToolCall(None, f"error: the expression may hold {why}")
    return ToolCall(expression.strip())


def valid_expression(expr: str) -> bool:
    """Whether a tool call's expression may run (in the sandbox) at all."""
    return (
        0 < len(expr) <= MAX_EXPRESSION_CHARS
        and EXPRESSION.fullmatch(expr) is not None
        and "**" not in expr
    )


class ToolArithmeticEpisode(Episode):
    """One problem: tool calls answered with their value, ended by an answer or the limit."""

    def __init__(self, env: ToolArithmetic, prompt: Prompt) -> None:
        self.env, self.prompt = env, prompt
        self.turns = 0
        self.done = False

    def step(self, assistant_text: str) -> Reply:
        return self.env.step_batch([self], [assistant_text])[0]

    def _reply(self, text: str, call: ToolCall | None, value: str | None, info: dict) -> Reply:
        """The reply to turn ``text``, read as ``call`` (None: a final answer); ``value`` is
        the tool's result (None: error)."""
        if self.done:
            raise RuntimeError("step() after the episode ended")
        self.turns += 1
        if call is None:  # a final answer
            self.done = True
            return Reply(done=True, reward=self.env.score(self.prompt, text), info=info)
        ok = value is not None
        if self.turns >= self.env.turn_limit():  # no turn left to answer in
            self.done = True
            return Reply(done=True, reward=0.0, tool_call=True, tool_ok=ok, info=info)
        if self.env.config.tool_format == "qwen3":
            observation = value if ok else call.error or "error: the expression failed to run"
        else:
            observation = f"={value}\n" if ok else ERROR_OBSERVATION
        return Reply(observation=observation, tool_call=True, tool_ok=ok, info=info)


class ToolArithmetic(MultiTurnEnv):
    """``tool_arithmetic``: "47*86=" answered directly ("4042") or through the calculator
    ("calc:47*86" -> "=4042\\n" -> "4042"); details in the module docstring."""

    name = "tool_arithmetic"
    tiny_model = "tiny-tool"
    config_class = ToolArithmeticConfig
    reward_values = "1 (exact integer final answer) or 0"

    def __init__(self, **overrides: Any) -> None:
        super().__init__(**overrides)
        cfg = self.config
        if not 1 <= cfg.digits <= 4:
            raise ConfigError(f"tool_arithmetic: need 1 <= digits <= 4, got {cfg.digits}")
        span = 9 * 10 ** (cfg.digits - 1)
        if not 1 <= cfg.eval_size <= span * span // 4:
            raise ConfigError(
                f"tool_arithmetic: eval_size must be in 1..{span * span // 4} (a quarter of "
                f"all problems), got {cfg.eval_size}"
            )
        if cfg.max_turns < 1 or cfg.timeout_s <= 0 or cfg.memory_mb < 32:
            raise ConfigError(
                "tool_arithmetic: need max_turns >= 1, timeout_s > 0, memory_mb >= 32"
            )
        if cfg.tool_format not in TOOL_FORMATS:
            raise ConfigError(
                f"tool_arithmetic: tool_format must be one of {', '.join(TOOL_FORMATS)}, got "
                f"{cfg.tool_format!r}"
            )
        require_sandbox(self.name)
        self.workers = cfg.sandbox_workers or default_workers()

    # ---- problems and splits ----

    def _draw(self, rng: random.Random) -> tuple[int, int]:
        lo, hi = 10 ** (self.config.digits - 1), 10**self.config.digits - 1
        return rng.randint(lo, hi), rng.randint(lo, hi)

    def _prompt(self, problem: tuple[int, int], index: int, split: str) -> Prompt:
        a, b = problem
        if self.config.tool_format == "calc":
            return Prompt(text=f"{a}*{b}=", answer=a * b, index=index, split=split)
        text = (
            f"What is {a}*{b}? You may use the {TOOL_NAME} tool. Give the final answer as "
            "the integer alone."
        )
        meta = {
            "prompt_format": "chat",
            "messages": [{"role": "user", "content": text}],
            "tools": [CALCULATOR],
            "expression": f"{a}*{b}",
        }
        return Prompt(text=text, answer=a * b, index=index, split=split, meta=meta)

    @cached_property
    def _heldout(self) -> list[tuple[int, int]]:
        rng = random.Random(EVAL_SEED)  # a constant seed: the same split in every run
        problems: dict[tuple[int, int], None] = {}
        while len(problems) < self.config.eval_size:
            problems.setdefault(self._draw(rng), None)
        return list(problems)

    @cached_property
    def _heldout_set(self) -> set[tuple[int, int]]:
        return set(self._heldout)

    def train_prompt(self, index: int, seed: int) -> Prompt:
        rng = random.Random(f"tool_arithmetic:{seed}:{index}")  # (string seeds: stable)
        problem = self._draw(rng)
        while problem in self._heldout_set:  # redraw: train never serves a held-out one
            problem = self._draw(rng)
        return self._prompt(problem, index, "train")

    def eval_prompts(self) -> list[Prompt]:
        return [self._prompt(p, i, "eval") for i, p in enumerate(self._heldout)]

    # ---- answers ----

    def reference_answer(self, prompt: Prompt) -> str:
        return str(prompt.answer)

    def score(self, prompt: Prompt, completion: str) -> float:
        if self.config.tool_format == "qwen3":  # (the answer after the reasoning)
            completion = answer_text(completion)
        return exact_integer_reward(completion, prompt.answer, max_chars=20)

    def tool_trace(self, prompt: Prompt) -> list[tuple[str, str]]:
        """The turns of a correct tool episode, as (assistant turn, observation) pairs; the
        last turn (the answer) ends the episode and has no observation ("")."""
        if self.config.tool_format == "qwen3":
            call = calculator_call(prompt.meta["expression"])
            return [(call, str(prompt.answer)), (str(prompt.answer), "")]
        expr = prompt.text.removesuffix("=")
        return [(f"{TOOL_PREFIX}{expr}", f"={prompt.answer}\n"), (str(prompt.answer), "")]

    def read_call(self, text: str) -> ToolCall | None:
        """Turn ``text`` as a tool call in the env's format, or None for a final answer."""
        if self.config.tool_format == "qwen3":
            return read_calculator_call(text)
        expr = tool_expression(text)
        if expr is None:
            return None
        return ToolCall(expr) if valid_expression(expr) else ToolCall(None)

    def warm_start_trace(
        self, prompt: Prompt, batch: list[Prompt], rng: random.Random
    ) -> list[tuple[str, str, bool]]:
        """The ``tiny-tool`` warm start's demonstration: the tool trace, every turn learned
        (``batch`` and ``rng`` are not needed here)."""
        return [(turn, observation, True) for turn, observation in self.tool_trace(prompt)]

    # ---- episodes ----

    def start(self, prompt: Prompt) -> ToolArithmeticEpisode:
        return ToolArithmeticEpisode(self, prompt)

    def step_batch(self, episodes: list[ToolArithmeticEpisode], texts: list[str]) -> list[Reply]:
        """``episode.step(text)`` for many episodes at once (one turn each): their tool
        calls run together in the sandbox. Same replies as stepping them one by one."""
        calls = [self.read_call(t) for t in texts]
        runnable = list(dict.fromkeys(c.expression for c in calls if c and c.expression))
        values = dict(zip(runnable, self.evaluate(runnable), strict=True))
        replies = []
        for episode, text, call in zip(episodes, texts, calls, strict=True):
            value = None
            if call is None:
                info = {}
            elif call.expression is not None:
                value = values[call.expression]
                info = {"tool": "ran" if value is not None else "failed"}
            else:
                info = {"tool": "refused"}  # malformed, not arithmetic or too long: never run
            replies.append(episode._reply(text, call, value, info))
        return replies

    def evaluate(self, exprs: list[str]) -> list[str | None]:
        """Each expression's value as Python writes it (``4042``, ``3.5``), or None for an
        error, computed in the sandbox; the expressions must be ``valid_expression``s."""
        if not all(valid_expression(e) for e in exprs):
            raise ValueError("evaluate: only valid expressions may run")
        chunks = [exprs[i : i + CHUNK] for i in range(0, len(exprs), CHUNK)]
        results = self._run([_PROGRAM.format(exprs=c) for c in chunks])
        out: list[str | None] = []
        for chunk, result in zip(chunks, results, strict=True):
            lines = result.stdout.splitlines()
            if len(chunk) > 1 and (result.status != "ok" or len(lines) != len(chunk)):
                # One sandbox each, so one expression's failure is its own.
                singles = self._run([_PROGRAM.format(exprs=[e]) for e in chunk])
                out.extend(_value(r, r.stdout.splitlines()) for r in singles)
                continue
            out.extend(_value(result, [line]) for line in lines[: len(chunk)] or [""])
        return out

    def _run(self, programs: list[str]) -> list[ExecResult]:
        cfg = self.config
        return shared_pool(self.workers).map(
            programs, timeout_s=cfg.timeout_s, memory_mb=cfg.memory_mb
        )

    def describe(self) -> dict[str, Any]:
        out = super().describe()
        if self.config.tool_format == "qwen3":
            out["tool"] = (
                f'{CALL_OPEN}{{"name": "{TOOL_NAME}", "arguments": '
                f'{{"expression": ...}}}}{CALL_CLOSE} -> a tool message: <value> '
                "or error: <why>"
            )
        else:
            out["tool"] = f"{TOOL_PREFIX}<expression> -> =<value>\\n or {ERROR_OBSERVATION!r}"
        return out


def _value(result: ExecResult, lines: list[str]) -> str | None:
    """The value on an expression's output line, or None (error, or the sandbox failed)."""
    if result.status != "ok" or len(lines) != 1 or lines[0] in ("", "!"):
        return None
    return lines[0]
