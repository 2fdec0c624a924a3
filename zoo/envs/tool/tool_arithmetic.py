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

EVAL_SEED = "tool-arithmetic-heldout-v1"
TOOL_PREFIX = "calc:"
MAX_EXPRESSION_CHARS = 40
EXPRESSION = re.compile(r"[0-9+\-*/%() ]+")
"""What a tool call may contain. No letters, so no names, attributes or calls: nothing but
integer arithmetic can be written; ``**`` is refused too (``9**9**9`` is 27 characters)."""
ERROR_OBSERVATION = "=error\n"
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


def tool_expression(text: str) -> str | None:
    """The expression of a tool-call turn (``calc:47*86`` -> ``47*86``), or None when the
    turn is not a tool call (then it is a final answer)."""
    text = text.strip()
    return text[len(TOOL_PREFIX) :].strip() if text.startswith(TOOL_PREFIX) else None


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

    def _reply(self, text: str, expr: str | None, value: str | None, info: dict) -> Reply:
        """The reply to turn ``text``; ``value`` is the tool's result (None: error)."""
        if self.done:
            raise RuntimeError("step() after the episode ended")
        self.turns += 1
        if expr is None:  # a final answer
            self.done = True
            return Reply(done=True, reward=self.env.score(self.prompt, text), info=info)
        ok = value is not None
        if self.turns >= self.env.turn_limit():  # no turn left to answer in
            self.done = True
            return Reply(done=True, reward=0.0, tool_call=True, tool_ok=ok, info=info)
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
        require_sandbox(self.name)
        self.workers = cfg.sandbox_workers or default_workers()

    # ---- problems and splits ----

    def _draw(self, rng: random.Random) -> tuple[int, int]:
        lo, hi = 10 ** (self.config.digits - 1), 10**self.config.digits - 1
        return rng.randint(lo, hi), rng.randint(lo, hi)

    @staticmethod
    def _prompt(problem: tuple[int, int], index: int, split: str) -> Prompt:
        a, b = problem
        return Prompt(text=f"{a}*{b}=", answer=a * b, index=index, split=split)

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
        return exact_integer_reward(completion, prompt.answer, max_chars=20)

    def tool_trace(self, prompt: Prompt) -> list[tuple[str, str]]:
        """The turns of a correct tool episode, as (assistant turn, observation) pairs; the
        last turn (the answer) ends the episode and has no observation ("")."""
        expr = prompt.text.removesuffix("=")
        return [(f"{TOOL_PREFIX}{expr}", f"={prompt.answer}\n"), (str(prompt.answer), "")]

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
        exprs = [tool_expression(t) for t in texts]
        runnable = list(dict.fromkeys(e for e in exprs if e is not None and valid_expression(e)))
        values = dict(zip(runnable, self.evaluate(runnable), strict=True))
        replies = []
        for episode, text, expr in zip(episodes, texts, exprs, strict=True):
            if expr is None:
                info = {}
            elif expr in values:
                info = {"tool": "ran" if values[expr] is not None else "failed"}
            else:
                info = {"tool": "refused"}  # not arithmetic or too long: never executed
            replies.append(episode._reply(text, expr, values.get(expr), info))
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
        out["tool"] = f"{TOOL_PREFIX}<expression> -> =<value>\\n or {ERROR_OBSERVATION!r}"
        return out


def _value(result: ExecResult, lines: list[str]) -> str | None:
    """The value on an expression's output line, or None (error, or the sandbox failed)."""
    if result.status != "ok" or len(lines) != 1 or lines[0] in ("", "!"):
        return None
    return lines[0]
