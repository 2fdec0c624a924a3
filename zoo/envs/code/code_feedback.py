"""Code with execution feedback: the code envs as multi-turn episodes (``zoo.envs.episode``).

Each assistant turn is a submission in the single-turn env's own answer format. The env
runs it in the sandbox, through the same code as the single-turn env's scoring; if it
passes, the episode ends with its reward; if not, and turns remain, the model sees a short
account of the first failure and may submit again. At the last turn (``max_turns``) the
episode ends with the reward of that last submission. The reward is always the
single-turn env's reward of ONE submission, the final one, decided by its unforgeable path
(pyfunc: values compared on the host; humaneval / mbpp: the two-process verdict of
``zoo.envs.execution.verdict``); nothing the model printed while being given feedback enters it.
A submission that does not parse, crashes or runs out of time is feedback, never an
exception. Apart from wall-clock timeouts, an episode's replies are a pure function of its
prompt and the submitted texts.

The envs wrap the single-turn one (``base``): the same prompts, the same train stream and
held-out split (so single- and multi-turn results are over the same problems), the same
``score`` (the one-turn grading the warm start's checks use), and its ``stats``.

- ``pyfunc_feedback``: see ``PyFuncFeedback`` for what the model is shown, and why.
- ``humaneval_feedback``, ``mbpp_feedback``: for real models; see ``TestFeedback``.
"""

from __future__ import annotations

import dataclasses
import random
import re
import secrets
from abc import abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

from zoo.core.config import ConfigError
from zoo.envs.base import Prompt
from zoo.envs.code.code_envs import (
    TAG,
    SandboxedCodeEnv,
    Scored,
    tag_fields,
    visible_results,
)
from zoo.envs.code.humaneval import HumanEval, HumanEvalConfig
from zoo.envs.code.mbpp import MBPP, MBPPConfig
from zoo.envs.code.pyfunc import SHOWN_XS, PyFunc, PyFuncConfig
from zoo.envs.episode import Episode, MultiTurnEnv, Reply


class FeedbackEpisode(Episode):
    """One problem, up to the env's turn limit of submissions."""

    def __init__(self, env: CodeFeedbackEnv, prompt: Prompt) -> None:
        self.env, self.prompt = env, prompt
        self.turns = 0
        self.last: str | None = None
        self.done = False

    def step(self, assistant_text: str) -> Reply:
        return self.env.step_batch([self], [assistant_text])[0]

    def advance(self, assistant_text: str) -> bool:
        """Count a submission; True if it is the last one the episode allows."""
        if self.done:
            raise RuntimeError(f"{self.env.name}: step() after the episode ended")
        self.turns += 1
        self.last = assistant_text
        return self.turns >= self.env.turn_limit()

    def final_reward(self) -> float:
        """Cut off by the loop (its token limit) after feedback: the reward of the last
        submission, as if it had been the final one."""
        return 0.0 if self.last is None else self.env.score(self.prompt, self.last)


class CodeFeedbackEnv(MultiTurnEnv):
    """The shared part: wraps a single-turn code env built from this env's config (less
    ``max_turns``); subclasses set ``base_class`` and implement ``answer``."""

    base_class: ClassVar[type[SandboxedCodeEnv]]
    base: SandboxedCodeEnv

    def __init__(self, **overrides: Any) -> None:
        super().__init__(**overrides)
        if self.config.max_turns < 1:
            raise ConfigError(f"{self.name}: max_turns must be >= 1, got {self.config.max_turns}")
        base_fields = {f.name for f in dataclasses.fields(self.base_class.config_class)}
        self.base = self.base_class(
            **{k: v for k, v in dataclasses.asdict(self.config).items() if k in base_fields}
        )

    @abstractmethod
    def answer_batch(
        self, prompts: list[Prompt], texts: list[str], last_turns: list[bool]
    ) -> list[Reply]:
        """The reply to each submission (``last_turns``: no revision may follow it); the
        executions of one turn of every running episode run together, in parallel."""

    def step_batch(self, episodes: list[FeedbackEpisode], texts: list[str]) -> list[Reply]:
        last_turns = [e.advance(t) for e, t in zip(episodes, texts, strict=True)]
        replies = self.answer_batch([e.prompt for e in episodes], texts, last_turns)
        for episode, reply in zip(episodes, replies, strict=True):
            episode.done = reply.done
        return replies

    def start(self, prompt: Prompt) -> Episode:
        return FeedbackEpisode(self, prompt)

    # ---- the single-turn env's, unchanged ----

    def train_prompt(self, index: int, seed: int) -> Prompt:
        return self.base.train_prompt(index, seed)

    def warm_start_prompts(self, start: int, n: int, seed: int) -> list[Prompt]:
        return self.base.warm_start_prompts(start, n, seed)

    def eval_prompts(self) -> list[Prompt]:
        return self.base.eval_prompts()

    def score(self, prompt: Prompt, completion: str) -> float:
        return self.base.score(prompt, completion)

    def score_batch(self, prompts: list[Prompt], completions: list[str]) -> list[float]:
        return self.base.score_batch(prompts, completions)

    def reference_answer(self, prompt: Prompt) -> str | None:
        return self.base.reference_answer(prompt)

    @property
    def stats(self) -> dict[str, Any]:
        """The base env's: counts every submission that was graded (not pyfunc's probes)."""
        return self.base.stats

    def reset_stats(self) -> None:
        self.base.reset_stats()

    def describe(self) -> dict[str, Any]:
        out = self.base.describe()
        out.update(name=self.name, config=dataclasses.asdict(self.config))
        out["reward_values"] = self.reward_values
        out["max_turns"] = self.turn_limit()
        return out


# --- pyfunc -----------------------------------------------------------------------------

CUE = "f(x)="
"""Ends every observation: the prompt's own cue, so the next turn is again an expression."""
MAX_SHOWN_DIGITS = 5
"""A wrong value longer than this is shown as "big" (keeps the observation short)."""
NEAR_MISSES = 4
"""``warm_start_trace`` draws its wrong first submission among this many nearest functions."""


@dataclass
class PyFuncFeedbackConfig(PyFuncConfig):
    max_turns: int = 3
    """Submissions per episode at most (the last one's reward is the episode's)."""


def shown_values(prompt: Prompt) -> list[int]:
    """The values at ``SHOWN_XS`` that pyfunc's prompt shows ("f(0..4)=1,3,5,7,9 f(x)=")."""
    m = re.fullmatch(r"f\(-?\d+\.\.-?\d+\)=(-?\d+(?:,-?\d+)*) f\(x\)=", prompt.text)
    values = [int(v) for v in m[1].split(",")] if m else []
    if len(values) != len(SHOWN_XS):
        raise ValueError(f"not a pyfunc prompt: {prompt.text!r}")
    return values


class PyFuncFeedback(CodeFeedbackEnv):
    """``pyfunc_feedback``: pyfunc (``zoo.envs.code.pyfunc``) in up to ``max_turns`` (3)
    submissions, each one expression in x as in pyfunc.

    After a submission (not the last), the env computes its values at the SHOWN inputs
    x = 0..4 in the sandbox (pyfunc's own job and one-sandbox execution, on those inputs):

    - all five equal the prompt's: the episode ends; reward = pyfunc's score of this
      submission (k/10 over the hidden inputs, computed by pyfunc's scoring);
    - else the model sees one observation, then writes its next submission:
      ``"\\nf(3)=7 not 9\\nf(x)="``: the first shown x (in order 0..4) where the value is
      wrong, the value the submission gave ("error" when it raised or is not an int,
      "big" past 5 characters) and the prompt's value;
      ``"\\nsyntax error\\nf(x)="``: empty, over-long or not one expression (unexecuted);
      ``"\\ntimeout\\nf(x)="`` or ``"\\nerror\\nf(x)="``: the execution did not run to its
      end (time, memory, an exit).

    The last submission always ends the episode with pyfunc's score of it.

    What the feedback reveals, and why this much: only facts about the SHOWN inputs. The
    expected value is in the prompt already, and the wrong value is what the model's own
    expression computes, which it could work out itself; so the feedback carries no
    information about the hidden function beyond the prompt, and none about the hidden
    inputs (the episode's length depends only on the shown values too): the multi-turn
    task cannot be used to probe the hidden tests, and it is no easier than pyfunc to
    solve, only easier to correct (the model is told where it is wrong, and by how much).
    The cost: a submission that is right on 0..4 and wrong elsewhere ends the episode
    with its partial reward and no chance to revise; telling it "wrong elsewhere" would
    leak one bit per turn about the hidden inputs. As in pyfunc, the reward counts the
    hidden inputs only, so a last submission wrong on a shown input can still score 1.
    Observations are at most 25 bytes (the cue included), for the byte-level tiny model's
    256-token context (a prompt, 3 turns of up to 12 tokens and 2 observations take
    about 110).

    Executions: one probe per non-final turn (not counted in ``stats``), plus pyfunc's
    scoring of the final submission (counted). ``Reply.tool_call`` is true on every turn;
    ``tool_ok``: the submission parsed and, on a probed turn, ran to its end.
    """

    name = "pyfunc_feedback"
    tiny_model = "tiny-code-feedback"
    max_observation_tokens = 25  # bytes; see above
    config_class = PyFuncFeedbackConfig
    reward_values = f"{PyFunc.reward_values}, for the final submission"
    base_class = PyFunc
    base: PyFunc

    def answer_batch(
        self, prompts: list[Prompt], texts: list[str], last_turns: list[bool]
    ) -> list[Reply]:
        replies: list[Reply | None] = [None] * len(texts)
        probed = [i for i, last in enumerate(last_turns) if not last]
        shown = self.feedback([prompts[i] for i in probed], [texts[i] for i in probed])
        for i, (observation, ran) in zip(probed, shown, strict=True):
            if observation:
                replies[i] = Reply(observation=observation, tool_call=True, tool_ok=ran)
        final = [i for i, r in enumerate(replies) if r is None]  # last, or right on 0..4
        rewards = self.base.score_batch([prompts[i] for i in final], [texts[i] for i in final])
        for i, reward in zip(final, rewards, strict=True):
            parsed = self.base._job(prompts[i], texts[i]) is not None
            replies[i] = Reply(done=True, reward=reward, tool_call=True, tool_ok=parsed)
        return replies  # type: ignore[return-value]

    def warm_start_trace(
        self, prompt: Prompt, batch: list[Prompt], rng: random.Random
    ) -> list[tuple[str, str, bool]]:
        """A demonstration of one revision, for a warm start (``tiny-code-feedback``), as
        (assistant turn, observation, learn) triples: a near miss, the observation this env
        gives it, then the prompt's reference answer.

        The near miss is the reference answer of another function of ``batch`` (the warm
        start's own train prompts, so no held-out or validation function appears), drawn
        with ``rng`` among the ``NEAR_MISSES`` whose shown values are closest to the
        prompt's (in summed absolute difference), e.g. ``-9*x-12`` for ``-9*x-16``. Its
        values at the shown inputs are that other prompt's shown values, so the observation
        is computed without running anything, and is the one ``feedback`` would give. The
        near miss is context only (``learn`` False): the demonstration teaches the
        correction, not the mistake."""
        expected = shown_values(prompt)
        others = {p.text: p for p in batch if p.text != prompt.text}.values()
        if not others:
            return [(self.reference_answer(prompt), "", True)]

        def distance(other: Prompt) -> int:
            return sum(abs(a - b) for a, b in zip(shown_values(other), expected, strict=True))

        near = sorted(others, key=lambda p: (distance(p), p.text))[:NEAR_MISSES]
        miss = near[rng.randrange(len(near))]
        got = [str(v) for v in shown_values(miss)]
        observation, _ = _shown_feedback(expected, got, "ok")
        return [
            (self.reference_answer(miss), observation, False),
            (self.reference_answer(prompt), "", True),
        ]

    def feedback(self, prompts: list[Prompt], texts: list[str]) -> list[tuple[str, bool]]:
        """Per submission: (observation, whether it ran to its end); the observation is ""
        when its values at the shown inputs are all right. One sandbox each, in parallel."""
        out: list[tuple[str, bool] | None] = [None] * len(texts)
        probes = []  # (index, expected values, tag, tagged job)
        for i, (prompt, text) in enumerate(zip(prompts, texts, strict=True)):
            expected = shown_values(prompt)
            # pyfunc's job for a prompt whose "hidden" inputs are the shown ones: the same
            # parse check, wrapper and int-only output, so the probe runs what scoring runs.
            hidden = [[x, y] for x, y in zip(SHOWN_XS, expected, strict=True)]
            job = self.base._job(dataclasses.replace(prompt, answer={"hidden": hidden}), text)
            if job is None:
                out[i] = (f"\nsyntax error\n{CUE}", False)
                continue
            tag = secrets.token_hex(16)
            probes.append(
                (i, expected, tag, dataclasses.replace(job, tests=job.tests.replace(TAG, tag)))
            )
        verdicts = self.base._verdicts([job for *_, job in probes])
        for (i, expected, tag, _), verdict in zip(probes, verdicts, strict=True):
            got = tag_fields(verdict.tests.stdout, tag) if verdict.passed else None
            out[i] = _shown_feedback(expected, got, verdict.status)
        return out  # type: ignore[return-value]


def _shown_feedback(expected: list[int], got: list[str] | None, status: str) -> tuple[str, bool]:
    """The observation for a probe that printed ``got`` (None: it did not finish)."""
    if got is None or len(got) != len(expected):
        return f"\n{'timeout' if status == 'timeout' else 'error'}\n{CUE}", False
    for x, want, value in zip(SHOWN_XS, expected, got, strict=True):
        if value != str(want):
            # The probe runs the expression in the process that prints its values, so the
            # expression can print its own line after the tag: only an integer (what an
            # expression can compute anyway) is shown, anything else is "error", so no
            # text of its choosing (``f(0)=LEAK not 11``) can pose as the judge's.
            if not _is_int_text(value):
                value = "error"
            elif len(value) > MAX_SHOWN_DIGITS:
                value = "big"
            return f"\nf({x})={value} not {want}\n{CUE}", True
    return "", True


def _is_int_text(value: str) -> bool:
    digits = value[1:] if value.startswith("-") else value
    return digits.isascii() and digits.isdigit()


# --- humaneval, mbpp ----------------------------------------------------------------------

MAX_FEEDBACK_CHARS = 300
"""Each line of a test feedback observation is cut to this many characters."""


class TestFeedback(CodeFeedbackEnv):
    """Execution feedback for the test-based code envs (real models), like a judge with
    public and private tests: the examples the prompt shows are the public tests, and the
    feedback reports on them alone; the hidden tests decide the reward and are never
    described. Each submission is graded by the base env's scoring (the two-process
    verdict; ``stats`` counts every submission): when it passes, or at the last turn, the
    episode ends with its reward. Otherwise the model sees, e.g.::

        Tests failed.
        Examples: 0 of 1 pass.
        assert set(similar_elements((3, 4, 5, 6),(5, 7, 4, 10))) == set((4, 5))
          AssertionError; returned (4,)
        Hidden tests (2): not shown.

    - the visible examples (MBPP: the shown assert; HumanEval: the ``check`` asserts whose
      input the docstring shows with its output, ``shown_tests.split_check``): how many
      pass, and for each that fails its source (already in the prompt), the class name of
      the exception raised there (``AssertionError`` for a false assert; the builtin
      exception the submission raised, as rebuilt on the tests' side; ``CandidateGone``
      when its process died) and the ``repr`` of what the submission returned there;
    - the hidden tests: their number, and when every example passes, that they do not all
      pass (``Examples: 1 of 1 pass.`` / ``The hidden tests (2) do not all pass.``: what
      the episode going on says anyway); never an input, an expected value, or which of
      them failed;
    - or, when the submission does not compile, ``"SyntaxError: <message> (line n)"``
      (``TestVerdict.candidate_syntax_error``: the compiler's, before any of it runs).

    What it is built from: the visible pass's records (``code_envs.visible_results``),
    written by the tests' process after the execution's random tag, which the submission's
    process can neither see nor write to, and the data set's own text; the env lays the
    observation out. What the submission returned is shown as the ``repr`` the tests'
    process made of the plain data it received, on one line (whitespace collapsed, cut),
    and the visible pass runs before any hidden input reaches the submission, so that
    output cannot carry one. Nothing the submission printed or put in an exception's
    message is shown (a message could carry the hidden inputs it was called with, however
    encoded; a printed line could pose as the judge).

    Tasks refused: where the hidden tests give no proof that a table of the examples plus
    one constant answer fails them (``shown_tests.constant_proof``: too few hidden, or all
    expecting one value), feedback would only help copy the table; the env leaves those
    tasks out of its splits (``describe()["refused"]`` lists them) and ``start`` refuses
    them with a ``ConfigError``. Measured on the real data: MBPP 1 of 427 (596, whose
    expected values are not literals), HumanEval 6 of 164 (/4, /32, /35, /38, /50, /113;
    with ``extra_tests=False`` also /34, /40, /54).
    """

    __test__ = False  # not a pytest class
    base: MBPP | HumanEval

    def __init__(self, **overrides: Any) -> None:
        super().__init__(**overrides)
        base = self.base
        base.visible_pass = True
        # The feedback env owns its base: its splits keep the tasks feedback may teach.
        refused = [item for item in base._eval + base._train if base.guessable(item)]
        base._eval = [item for item in base._eval if not base.guessable(item)]
        base._train = [item for item in base._train if not base.guessable(item)]
        base._init_orders()
        self.refused = sorted({str(item["task_id"]) for item in refused})

    def start(self, prompt: Prompt) -> Episode:
        if prompt.answer.get("guessable"):
            raise ConfigError(
                f"{self.name}: task {prompt.answer.get('task_id')} is refused: its hidden tests "
                "give no proof that a table of the shown examples plus one constant answer "
                "fails them, so feedback would only help copy the table; use the single-turn "
                f"env ({self.base.name}) for it"
            )
        return super().start(prompt)

    def describe(self) -> dict[str, Any]:
        out = super().describe()
        out["refused"] = list(self.refused)
        return out

    def answer_batch(
        self, prompts: list[Prompt], texts: list[str], last_turns: list[bool]
    ) -> list[Reply]:
        scored = self.base.score_verdicts(prompts, texts)
        tests = [self.base.feedback_tests(p) for p in prompts]
        return [
            _test_reply(t, s, last) for t, s, last in zip(tests, scored, last_turns, strict=True)
        ]


def _test_reply(tests: tuple[list[str], int], scored: Scored, last_turn: bool) -> Reply:
    verdict, job = scored.verdict, scored.job
    # "Ran": the submission's own process did not die (a wrong answer or an exception
    # raised in a call still counts) and nothing ran out of time or memory.
    ran = verdict is not None and verdict.status in ("ok", "error")
    ran = ran and verdict.candidate.status in ("ok", "stopped")
    if scored.reward >= 1.0 or last_turn:
        return Reply(done=True, reward=scored.reward, tool_call=True, tool_ok=ran)
    if verdict is None or job is None:
        return Reply(observation="\nTests failed: empty submission\n", tool_call=True)
    return Reply(observation=failure_observation(tests, scored), tool_call=True, tool_ok=ran)


def _one_line(text: str) -> str:
    return " ".join(text.split())[:MAX_FEEDBACK_CHARS]


def failure_observation(tests: tuple[list[str], int], scored: Scored) -> str:
    """The observation after a failed submission (``TestFeedback``); ``tests``: the task's
    visible examples (assert sources) and its number of hidden tests."""
    verdict = scored.verdict
    if verdict is None or scored.job is None:
        return "\nTests failed: empty submission\n"
    if verdict.candidate_syntax_error:
        return f"\nTests failed.\n{_one_line(verdict.candidate_syntax_error)}\n"
    examples, hidden = tests
    results = visible_results(verdict, scored.tag)
    passed = sum(getattr(results.get(i), "status", "") == "passed" for i in range(len(examples)))
    lines = ["", "Tests failed."]
    if examples:
        lines.append(f"Examples: {passed} of {len(examples)} pass.")
    for i, source in enumerate(examples):
        result = results.get(i)
        if result is not None and result.status == "passed":
            continue
        lines.append(_one_line(source))
        if result is None:
            # The run ended before this example's record: a timeout or a death there.
            why = "timeout" if verdict.status == "timeout" else "the run ended first"
            lines.append(f"  no result ({why})")
            break
        detail = result.status
        if result.status == "CandidateGone" and verdict.status in ("memory", "killed"):
            detail += f" ({verdict.status})"
        if result.output is not None:
            detail += f"; returned {_one_line(result.output)}"
        lines.append(f"  {detail[:MAX_FEEDBACK_CHARS]}")
    if not hidden:
        pass
    elif not examples:
        lines.append(f"No example runs as a test; the hidden tests ({hidden}) do not all pass.")
    elif passed == len(examples):
        lines.append(f"The hidden tests ({hidden}) do not all pass.")
    else:
        lines.append(f"Hidden tests ({hidden}): not shown.")
    return "\n".join(lines) + "\n"


@dataclass
class HumanEvalFeedbackConfig(HumanEvalConfig):
    max_turns: int = 3
    """Submissions per episode at most (the last one's reward is the episode's)."""


@dataclass
class MBPPFeedbackConfig(MBPPConfig):
    max_turns: int = 3
    """Submissions per episode at most (the last one's reward is the episode's)."""


class HumanEvalFeedback(TestFeedback):
    """``humaneval_feedback``: HumanEval with test feedback (``TestFeedback``)."""

    name = "humaneval_feedback"
    config_class = HumanEvalFeedbackConfig
    reward_values = f"{HumanEval.reward_values}, for the final submission"
    base_class = HumanEval


class MBPPFeedback(TestFeedback):
    """``mbpp_feedback``: MBPP with test feedback (``TestFeedback``)."""

    name = "mbpp_feedback"
    config_class = MBPPFeedbackConfig
    reward_values = f"{MBPP.reward_values}, for the final submission"
    base_class = MBPP
