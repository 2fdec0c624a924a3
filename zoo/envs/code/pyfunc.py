"""``pyfunc``: write a Python expression in ``x`` for a hidden integer function, from its
values at x = 0..4. Procedural, short, and learnable by the tiny model.

Prompt: ``f(0..4)=1,3,5,7,9 f(x)=`` (the values at x = 0, 1, 2, 3, 4); a reference answer:
``2*x+1``. The
hidden function is one of these families (canonical answers are at most 8 characters):

- ``const``: ``b`` (b in -20..20 here and below, unless said otherwise);
- ``linear``: ``a*x+b`` (a in -9..9 but 0; written ``x``, ``-x+3``, ``4*x-20``);
- ``quadratic``: ``a*x*x+b`` (a in -3..3 but 0, b in -9..9);
- ``mod``: ``x%m+b`` (m in 2..4);
- ``floordiv``: ``x//m+b`` (m in 2..4);

deduplicated by the values shown (a function whose shown values equal an earlier one's is
dropped), 1139 functions in all.

Scoring: the completion (stripped; it must parse as one Python expression, checked on the
host with ``ast.parse`` and nothing else, or it is rejected unexecuted) becomes
``def f(x): return (<completion>)``, which runs in the sandbox on the hidden inputs
``HIDDEN_XS`` (none of them shown); each value is written out only if it is a Python
``int``, and compared OUTSIDE the sandbox, on the host, with the expected values, which
never enter the sandbox (so one sandbox per completion suffices: see ``_verdicts``).
Reward = the fraction of hidden inputs on which the value is right, in steps of
1/len(HIDDEN_XS) (0.1): 1.0 for an equivalent function, 0.0 for a wrong, malformed,
crashing (an exception at one input only fails that input) or timed-out one (any
execution that does not run to its end scores 0). ``env.stats`` as for every code env
(``zoo.envs.code.code_envs``); the pass fraction there equals the reward.

Splits: held-out = ``eval_size`` functions drawn once with a constant seed from the
families in ``families``; warm start = ``warm_start_size`` of the others, drawn the same
way, which only the ``tiny-code`` presets' supervised warm start sees (its data and its
own validation); train = the rest in a seeded order, a fresh permutation per epoch. The
three never share a function, so RL's training reward is earned on functions the warm
start never saw (when the warm start trained on RL's functions, RL's training reward
rose 0.68 -> 0.78 while held-out rose 0.19 -> 0.22: memorised, not learned).

With the tiny model (``--model tiny-code``, warm-started on this format), use
``--max-response-len 12``: answers take up to 8 characters plus the end-of-text token
(9 tokens), and DAPO's overlong punishment (its last L_max / 4 tokens) must start after
them, so that no correct answer is punished (12 - 12 / 4 = 9).
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from zoo.core.config import ConfigError
from zoo.envs.base import EpochShuffle, Prompt, split_off
from zoo.envs.code.code_envs import (
    TAG,
    SandboxConfig,
    SandboxedCodeEnv,
    SplitMixin,
    tag_fields,
    wall_timeout,
)
from zoo.envs.execution.verdict import TestJob, TestVerdict

SHOWN_XS = (0, 1, 2, 3, 4)
HIDDEN_XS = (-4, -3, -2, -1, 5, 6, 7, 8, 9, 12)
FAMILIES = ("const", "linear", "quadratic", "mod", "floordiv")
MAX_COMPLETION_CHARS = 2000
"""Longer completions are rejected before parsing (the tiny model writes <= 8)."""


def _offset(b: int) -> str:
    return f"+{b}" if b > 0 else f"-{-b}" if b < 0 else ""


def _coef(a: int, term: str) -> str:
    return term if a == 1 else f"-{term}" if a == -1 else f"{a}*{term}"


def _family(name: str) -> list[tuple[str, Callable[[int], int]]]:
    bs, small_bs = range(-20, 21), range(-9, 10)
    if name == "const":
        return [(str(b), lambda x, b=b: b) for b in bs]
    if name == "linear":
        return [
            (_coef(a, "x") + _offset(b), lambda x, a=a, b=b: a * x + b)
            for a in range(-9, 10)
            if a
            for b in bs
        ]
    if name == "quadratic":
        return [
            (_coef(a, "x*x") + _offset(b), lambda x, a=a, b=b: a * x * x + b)
            for a in range(-3, 4)
            if a
            for b in small_bs
        ]
    if name == "mod":
        return [
            (f"x%{m}" + _offset(b), lambda x, m=m, b=b: x % m + b) for m in (2, 3, 4) for b in bs
        ]
    if name == "floordiv":
        return [
            (f"x//{m}" + _offset(b), lambda x, m=m, b=b: x // m + b) for m in (2, 3, 4) for b in bs
        ]
    raise ConfigError(f"pyfunc: unknown family {name!r}; valid: {', '.join(FAMILIES)}")


@dataclass
class PyFuncConfig(SandboxConfig):
    families: str = ",".join(FAMILIES)
    """Comma-separated function families (const, linear, quadratic, mod, floordiv)."""
    eval_size: int = 500
    """Held-out functions (>= 500 keeps the binomial noise of an accuracy near +-2 points;
    each evaluation runs up to this many sandboxed executions per completion drawn)."""
    warm_start_size: int = 400
    """Functions set apart for the tiny-code presets' warm start (never served by the
    train stream or the held-out split); 0: none (the warm start draws from train)."""
    timeout_s: float = 2.0
    memory_mb: int = 256


class PyFunc(SandboxedCodeEnv, SplitMixin):
    """``pyfunc``: from the values at x = 0..4 of a hidden integer function
    ("f(0..4)=1,3,5,7,9 f(x)="), write a Python expression in x ("2*x+1"); procedural,
    ~1140 functions of 5 families (details in the module docstring).

    Rewards: k/10 for the k of the 10 hidden inputs where the expression's value, computed
    in the sandbox, is right: 1.0 for an equivalent function, 0.0 for a wrong, malformed or
    timed-out one. Splits: ``eval_size`` (500) held-out functions, ``warm_start_size``
    (400) for the tiny-code warm start alone; train = the other 239 in a seeded order.
    With ``--model tiny-code`` use ``--max-response-len 12``.
    """

    name = "pyfunc"
    tiny_model = "tiny-code"
    config_class = PyFuncConfig
    reward_values = "k/10 for k of the 10 hidden inputs right (1: all, 0: none or malformed)"

    def __init__(self, **overrides: Any) -> None:
        super().__init__(**overrides)
        cfg = self.config
        names = [f.strip() for f in cfg.families.split(",") if f.strip()]
        if not names:
            raise ConfigError(f"pyfunc: families is empty; valid: {', '.join(FAMILIES)}")
        seen: dict[tuple[int, ...], tuple[str, tuple[int, ...]]] = {}
        for name in dict.fromkeys(names):
            for expr, fn in _family(name):
                shown = tuple(fn(x) for x in SHOWN_XS)
                seen.setdefault(shown, (expr, tuple(fn(x) for x in HIDDEN_XS)))
        functions = [(expr, shown, hidden) for shown, (expr, hidden) in seen.items()]
        if not 1 <= cfg.eval_size <= len(functions) // 2:
            raise ConfigError(
                f"pyfunc: eval_size must be in 1..{len(functions) // 2} for families "
                f"{cfg.families!r} ({len(functions)} functions), got {cfg.eval_size}"
            )
        rest, self._eval = split_off(functions, cfg.eval_size, self.name)
        if not 0 <= cfg.warm_start_size < len(rest):
            raise ConfigError(
                f"pyfunc: warm_start_size must be in 0..{len(rest) - 1} (the {len(rest)} "
                f"functions not held out, one left to train on), got {cfg.warm_start_size}"
            )
        self._train, self._warm = split_off(rest, cfg.warm_start_size, f"{self.name}:warm-start")
        self._init_orders()
        self._warm_stream = EpochShuffle(f"{self.name}:warm-start", len(self._warm) or 1)

    @staticmethod
    def _prompt(function: tuple, index: int, split: str) -> Prompt:
        expr, shown, hidden = function
        text = f"f({SHOWN_XS[0]}..{SHOWN_XS[-1]})={','.join(map(str, shown))} f(x)="
        answer = {"expr": expr, "hidden": [[x, y] for x, y in zip(HIDDEN_XS, hidden, strict=True)]}
        return Prompt(text=text, answer=answer, index=index, split=split)

    def train_prompt(self, index: int, seed: int) -> Prompt:
        return self._prompt(self._train_item(index, seed), index, "train")

    def warm_start_prompts(self, start: int, n: int, seed: int) -> list[Prompt]:
        if not self._warm:
            return self.train_prompts(start, n, seed)  # warm_start_size 0: none set apart
        return [
            self._prompt(self._warm[self._warm_stream(i, seed)], i, "warm_start")
            for i in range(start, start + n)
        ]

    @cached_property
    def _eval_prompts(self) -> list[Prompt]:
        return [self._prompt(f, i, "eval") for i, f in enumerate(self._eval)]

    def eval_prompts(self) -> list[Prompt]:
        return list(self._eval_prompts)

    def reference_answer(self, prompt: Prompt) -> str:
        return prompt.answer["expr"]

    def _job(self, prompt: Prompt, completion: str) -> TestJob | None:
        expr = completion.strip()
        if not expr or len(expr) > MAX_COMPLETION_CHARS:
            return None
        try:  # syntax only: parsing builds a tree and runs nothing
            ast.parse(expr, mode="eval")
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return None
        candidate = f"def f(x):\n    return (\n{expr}\n    )\n"
        xs = [x for x, _ in prompt.answer["hidden"]]
        tests = (
            "_fz_out = []\n"
            f"for _fz_x in {xs!r}:\n"
            "    try:\n"
            "        _fz_v = f(_fz_x)\n"
            "        _fz_out.append(repr(_fz_v) if type(_fz_v) is int else '!')\n"
            "    except Exception:\n"
            "        _fz_out.append('!')\n"
            f"print('\\n{TAG} ' + ' '.join(_fz_out))\n"
        )
        return TestJob(candidate, tests, serve=("f",))

    def _verdicts(self, jobs: list[TestJob]) -> list[TestVerdict]:
        """One sandbox per completion: ``f`` and the loop that prints its values run
        together, and the values are judged here, on the host, against expected values
        that never enter the sandbox. Whatever the expression does to its own process
        (lying objects, patched builtins, a forged line), the reward is a function of the
        text it printed, and printing the right values is solving the task. So the
        second process of ``zoo.envs.execution.verdict`` would add nothing here but its cost (about
        half of pyfunc's scoring throughput)."""
        cfg = self.config
        programs = [f"{job.candidate}\n{job.tests}" for job in jobs]
        results = self.pool.map(
            programs, timeout_s=wall_timeout(cfg), cpu_s=cfg.timeout_s, memory_mb=cfg.memory_mb
        )
        return [TestVerdict(passed=r.status == "ok", tests=r, candidate=r) for r in results]

    def _grade(self, prompt: Prompt, verdict: TestVerdict, tag: str) -> tuple[float, float]:
        hidden = prompt.answer["hidden"]
        fields = tag_fields(verdict.tests.stdout, tag) if verdict.passed else None
        if fields is None or len(fields) != len(hidden):
            return 0.0, 0.0
        right = sum(got == str(y) for got, (_, y) in zip(fields, hidden, strict=True))
        reward = right / len(hidden)
        return reward, reward

    def describe(self) -> dict[str, Any]:
        out = super().describe()
        source = f"procedural: families {self.config.families}, shown x {list(SHOWN_XS)}"
        out["sources"] = {"train": source, "eval": f"{source} (constant seed)"}
        out["sizes"] = {
            "train": len(self._train),
            "eval": len(self._eval),
            "warm_start": len(self._warm),
        }
        out["hidden_xs"] = list(HIDDEN_XS)
        return out
