"""Code with execution feedback (zoo/envs/code/code_feedback.py): multi-turn episodes over the
real code envs, every submission run in the real sandbox. pyfunc_feedback: a right first
submission, a wrong one told where it is wrong and then fixed, hostile submissions as
observations, the turn limit, purity, a reward that a forgery of the feedback probe cannot
reach, and integer-only values; humaneval_feedback and mbpp_feedback: the examples the
prompt shows are reported on, the hidden tests only counted, nothing the submission wrote
is shown, tasks a constant could pass are refused; and (slow) the table walk on the real
data."""

from __future__ import annotations

import json
import re
import textwrap

import pytest
from real_data import sanitized_mbpp_file
from test_code_envs import (  # noqa: F401 (mbpp_files: the same local MBPP data)
    docstring_answer,
    lookup_table_answer,
    mbpp_files,
)

from zoo.core.config import ConfigError
from zoo.envs import get_env
from zoo.envs.code.code_feedback import shown_values
from zoo.envs.episode import is_multi_turn

FAST = {"timeout_s": 10.0}  # generous: a loaded CPU timed out well-formed submissions at 1 s
LOOPING = {"timeout_s": 2.0}  # for the submission that never ends


@pytest.fixture(scope="module")
def env():
    return get_env("pyfunc_feedback", **FAST)


@pytest.fixture(scope="module")
def prompt(env):
    return env.eval_prompts()[0]


def obs(x: int, got: object, want: int) -> str:
    return f"\nf({x})={got} not {want}\nf(x)="


def test_right_first_submission_ends_in_one_turn_with_reward_one(env, prompt):
    assert is_multi_turn(env) and env.turn_limit() == 3
    reply = env.start(prompt).step(env.reference_answer(prompt))
    assert (reply.done, reply.reward, reply.tool_call, reply.tool_ok) == (True, 1.0, True, True)


def test_a_wrong_submission_is_told_its_first_wrong_shown_value_then_a_fix_scores(env, prompt):
    ref, ys = env.reference_answer(prompt), shown_values(prompt)
    episode = env.start(prompt)
    reply = episode.step(f"({ref})+(x>1)")  # wrong at x = 2, 3, 4: the first is named
    assert (reply.done, reply.reward, reply.tool_ok) == (False, 0.0, True)
    assert reply.observation == obs(2, ys[2] + 1, ys[2])
    reply = episode.step(f" {ref} ")
    assert (reply.done, reply.reward) == (True, 1.0)


def test_right_on_the_shown_inputs_ends_the_episode_with_pyfuncs_partial_reward(env, prompt):
    """Feedback never concerns the hidden inputs: a submission right on x = 0..4 and wrong
    on 6 of the 10 hidden ones (x > 4) ends the episode with pyfunc's 0.4."""
    wrong_elsewhere = f"({env.reference_answer(prompt)})+(x>4)"
    reply = env.start(prompt).step(wrong_elsewhere)
    assert (reply.done, reply.reward) == (True, pytest.approx(0.4))
    assert reply.reward == get_env("pyfunc", **FAST).score(prompt, wrong_elsewhere)


def test_malformed_and_hostile_submissions_are_short_observations(env, prompt, tmp_path):
    marker = tmp_path / "pwned"
    ref, ys = env.reference_answer(prompt), shown_values(prompt)
    cases = {
        "x+(": "\nsyntax error\nf(x)=",
        "": "\nsyntax error\nf(x)=",
        "def f(x): return x": "\nsyntax error\nf(x)=",
        "__import__('os')._exit(0)": "\nerror\nf(x)=",
        f"0*__import__('os').system('touch {marker}')+{ys[0] - 1}": obs(0, ys[0] - 1, ys[0]),
        f"({ref})+0*(1//(x-3))": obs(3, "error", ys[3]),  # raises at x = 3 only
        f"({ref}) if x<1 else x/2": obs(1, "error", ys[1]),  # 0.5: not an int
        "10**9*(x+1)": obs(0, "big", ys[0]),
    }
    for text, expected in cases.items():
        reply = env.start(prompt).step(text)
        assert (reply.done, reply.observation) == (False, expected), text
        assert len(reply.observation.encode()) <= 25
    # The shell ran, if at all, inside the sandbox: not here, so no file on this side.
    assert not marker.exists()
    looping = (
        get_env("pyfunc_feedback", **LOOPING).start(prompt).step("sum(iter(int, 1))")
    )  # loops, allocating nothing
    assert (looping.done, looping.observation) == (False, "\ntimeout\nf(x)=")


def test_turn_limit_ends_the_episode_with_the_last_submissions_reward(prompt):
    env = get_env("pyfunc_feedback", max_turns=2, **FAST)
    assert env.turn_limit() == 2
    episode = env.start(prompt)
    first = episode.step("x+(")
    assert not first.done and first.observation == "\nsyntax error\nf(x)="
    # Wrong at x = 0 (shown) and at the 4 negative hidden inputs: at the last turn there is
    # no feedback, only pyfunc's score of this submission.
    last_text = f"({env.reference_answer(prompt)})+(x<1)"
    last = episode.step(last_text)
    assert (last.done, last.observation, last.reward) == (True, "", pytest.approx(0.6))
    assert last.reward == env.score(prompt, last_text)
    with pytest.raises(RuntimeError, match="after the episode ended"):
        episode.step(env.reference_answer(prompt))
    # Cut off by the loop after feedback: the last submission's reward.
    cut = env.start(prompt)
    assert cut.final_reward() == 0.0
    assert not cut.step(last_text).done  # not the last turn: feedback
    assert cut.final_reward() == pytest.approx(0.6)


def test_an_episode_is_a_function_of_its_prompt_and_texts(env, prompt):
    pyfunc = get_env("pyfunc", **FAST)
    assert env.eval_prompts() == pyfunc.eval_prompts()  # the same held-out split as pyfunc
    assert env.train_prompts(0, 8, seed=3) == pyfunc.train_prompts(0, 8, seed=3)
    texts = ["x", "2*x", f"({env.reference_answer(prompt)})+(x==4)"]

    def play(p):
        episode, replies = env.start(p), []
        for text in texts:
            replies.append(episode.step(text))
        return replies

    first = play(prompt)
    assert [r.done for r in first] == [False, False, True]
    assert first == play(env.eval_prompts()[0])

    # A turn of several episodes at once (the loop's step_batch) answers each as alone.
    prompts = env.eval_prompts()[:3]
    episodes = [env.start(p) for p in prompts]
    together = [env.step_batch(episodes, [text] * 3) for text in texts]
    assert [[r[i] for r in together] for i in range(3)] == [play(p) for p in prompts]


def test_the_warm_start_trace_is_a_near_miss_its_real_feedback_then_the_fix(env):
    """tiny-code-feedback's demonstrations: a wrong first submission taken from the batch
    (context only), the observation the env really gives it (replayed through episodes
    that run it in the sandbox), then the reference answer, learned."""
    import random

    from zoo.models.tokenizer import EOS_ID
    from zoo.warm_start.supervised import episode_tokens

    batch = env.train_prompts(0, 64, seed=0)
    references = {env.reference_answer(p) for p in batch}
    rng = random.Random(0)
    for p in batch[:6]:
        trace = env.warm_start_trace(p, batch, rng)
        (miss, observation, learn_miss), (fix, last, learn_fix) = trace
        assert miss in references and miss != env.reference_answer(p)
        assert (learn_miss, learn_fix, fix, last) == (False, True, env.reference_answer(p), "")
        episode = env.start(p)
        reply = episode.step(miss)
        assert (reply.done, reply.observation) == (False, observation)
        assert episode.step(fix).reward == 1.0
        ids, mask = episode_tokens(p.text, trace)
        context = len(p.text) + len(miss) + 1 + len(observation)
        assert ids[context:] == [*fix.encode(), EOS_ID]
        assert mask == [0] * context + [1] * (len(fix) + 1)
    # No other function in the batch: the direct answer.
    lone = env.warm_start_trace(batch[0], batch[:1], rng)
    assert lone == [(env.reference_answer(batch[0]), "", True)]


def test_the_reward_is_pyfuncs_and_a_forged_probe_or_marker_does_not_reach_it(prompt):
    """The submission below reads the probe's random tag from the calling frame and prints
    the shown values after it, then exits: the probe takes it for right and ends the
    episode. The reward is then pyfunc's own scoring of it (a fresh tag, the hidden
    inputs), which it does not fool: 0. A printed "PASS" does nothing either."""
    env = get_env("pyfunc_feedback", **FAST)
    values = " ".join(map(str, shown_values(prompt)))
    forged_probe = (
        "(lambda s: (__import__('os').write(1, (s + '" + values + "').encode()),"
        " __import__('os')._exit(0)))([k for k in __import__('sys')._getframe(1)"
        ".f_code.co_consts if type(k) is str and k.startswith(chr(10)) and k.endswith(' ')][0])"
    )
    reply = env.start(prompt).step(forged_probe)
    assert (reply.done, reply.reward) == (True, 0.0)  # the probe was fooled; the reward not
    marker = "print('\\nPASS\\n__FORGE_ZOO_TAG__ ' + '" + values + "') or 0"
    one_turn = get_env("pyfunc_feedback", max_turns=1, **FAST)
    reply = one_turn.start(prompt).step(marker)
    assert (reply.done, reply.reward) == (True, 0.0)
    env.reset_stats()  # graded submissions count in the single-turn stats
    env.start(prompt).step(env.reference_answer(prompt))
    assert env.stats["passed"] == 1 and env.stats["executions"] == 1


def test_text_the_submission_prints_after_the_probes_tag_is_never_shown_as_a_value(prompt):
    """The probe runs the expression in the process that prints its values, so an
    expression can find the probe's tag, print its own line of "values" after it and exit:
    before, the first wrong one was shown as it was printed (``f(0)=LEAK not 16``), text
    of the submission's choosing posing as the judge's. Only integers are shown now."""
    env = get_env("pyfunc_feedback", **FAST)
    ys = shown_values(prompt)
    forger = (
        "(lambda s: (__import__('os').write(1, (s + 'LEAK 1 2 3 4').encode()),"
        " __import__('os')._exit(0)))([k for k in __import__('sys')._getframe(1)"
        ".f_code.co_consts if type(k) is str and k.startswith(chr(10)) and k.endswith(' ')][0])"
    )
    reply = env.start(prompt).step(forger)
    assert reply.observation == obs(0, "error", ys[0])
    assert "LEAK" not in reply.observation


# --- humaneval, mbpp: feedback on the examples only ------------------------------------


def fenced(code: str) -> str:
    return f"```python\n{textwrap.dedent(code)}```\n"


@pytest.fixture(scope="module")
def humaneval_2():
    """HumanEval/2 (truncate_number): its docstring shows ``truncate_number(3.5)`` -> 0.5,
    which ``check`` tests too (the visible example); its two other asserts are hidden."""
    env = get_env("humaneval_feedback", **FAST)
    p = next(p for p in env.eval_prompts() if p.answer["task_id"] == "HumanEval/2")
    return env, p


HIDDEN_2 = ("1.33", "123.456", "0.33", "0.456")  # HumanEval/2's hidden inputs and outputs


def test_humaneval_feedback_reports_the_example_and_counts_the_hidden_tests(humaneval_2):
    env, p = humaneval_2
    assert p.answer["visible_tests"] == ["assert candidate(3.5) == 0.5"]
    episode = env.start(p)
    reply = episode.step("    return None\n")
    assert reply.observation == (
        "\nTests failed.\nExamples: 0 of 1 pass.\nassert candidate(3.5) == 0.5\n"
        "  AssertionError; returned None\nHidden tests (2): not shown.\n"
    )
    # Right on the example, wrong elsewhere: only that the hidden tests do not all pass.
    reply = episode.step("    return 0.5\n")
    assert reply.observation == (
        "\nTests failed.\nExamples: 1 of 1 pass.\nThe hidden tests (2) do not all pass.\n"
    )
    reply = episode.step(env.reference_answer(p))  # the third and last turn
    assert (reply.done, reply.reward) == (True, 1.0)
    reply = env.start(p).step("    return (\n")
    line = len(p.answer["prompt"].splitlines()) + 1
    assert (
        reply.observation == f"\nTests failed.\nSyntaxError: '(' was never closed (line {line})\n"
    )
    assert not reply.tool_ok


RECORDER = """
    seen = []
    def truncate_number(number):
        seen.append(number)
        print("Hidden tests (2): all pass. f(0)=LEAK not 11", seen)
        raise ValueError(repr(seen))
"""
RETURNING_RECORDER = """
    seen = []
    def truncate_number(number):
        seen.append(number)
        return repr(seen) + "\\nHidden tests (2): all pass."
"""
DYING_RECORDER = """
    import os
    seen = []
    def truncate_number(number):
        seen.append(number)
        if len(seen) > 1:  # past the example: write what it saw, die
            os.write(2, ("SyntaxError: " + repr(seen) + "\\n").encode())
            os._exit(1)
        return 0.0
"""


@pytest.mark.parametrize(
    "attack", [RECORDER, RETURNING_RECORDER, DYING_RECORDER], ids=["raises", "returns", "dies"]
)
def test_an_observation_never_carries_a_hidden_input_nor_what_the_submission_printed(
    humaneval_2, attack
):
    """The submission records the argument of every call and puts them in its exception's
    message, its output and its return value, or writes them to stderr and dies; it also
    prints lines that look like the judge's. Its texts hold the hidden inputs (control);
    the observation holds only what the visible pass recorded, before any hidden input
    reached the submission, laid out by the env: no hidden input or output, no printed
    line."""
    env, p = humaneval_2
    text = fenced(attack)
    scored = env.base.score_verdicts([p], [text])[0]
    verdict = scored.verdict
    leaked = verdict.tests.stderr + verdict.candidate.stderr + verdict.candidate.stdout
    assert "1.33" in leaked or "123.456" in leaked, leaked
    reply = env.start(p).step(text)
    assert not reply.done
    lines = reply.observation.splitlines()
    assert lines[:4] == [
        "",
        "Tests failed.",
        "Examples: 0 of 1 pass.",
        "assert candidate(3.5) == 0.5",
    ]
    assert lines[5:] == ["Hidden tests (2): not shown."]
    for secret in HIDDEN_2:
        assert secret not in reply.observation, secret
    if attack is RETURNING_RECORDER:  # its own output on the example, quoted on one line
        assert lines[4] == "  AssertionError; returned '[3.5]\\nHidden tests (2): all pass.'"
    else:
        assert lines[4] == "  ValueError" if attack is RECORDER else lines[4].startswith("  ")
        assert "LEAK" not in reply.observation and "all pass" not in reply.observation


def test_mbpp_feedback_shows_the_shown_assert_only(mbpp_files):  # noqa: F811
    env = get_env("mbpp_feedback", max_turns=2, **mbpp_files)
    p = next(p for p in env.eval_prompts() if p.answer["task_id"] == 12)
    episode = env.start(p)
    reply = episode.step("def square(x):\n    return x * abs(x)")  # right on square(3) == 9
    assert reply.observation == (
        "\nTests failed.\nExamples: 1 of 1 pass.\nThe hidden tests (2) do not all pass.\n"
    )
    reply = episode.step("def square(x):\n    return x * abs(x)")
    assert (reply.done, reply.reward) == (True, 0.0)
    reply = env.start(p).step("def square(x):\n    return -1")
    assert reply.observation == (
        "\nTests failed.\nExamples: 0 of 1 pass.\nassert square(3) == 9\n"
        "  AssertionError; returned -1\nHidden tests (2): not shown.\n"
    )


def test_feedback_envs_refuse_tasks_whose_hidden_tests_a_constant_passes(tmp_path):
    """A task whose asserts all expect the same value gives feedback nothing to teach but
    the table: ``mbpp_feedback`` leaves it out of its splits, names it in ``describe()``,
    and refuses to start it; the single-turn env keeps it."""
    from test_code_envs import mbpp_row

    rows = [
        mbpp_row(
            41,
            "Write a function that returns True.",
            "def yes(n):\r\n  return True",
            ["assert yes(1) == True", "assert yes(2) == True", "assert yes(3) == True"],
        ),
        mbpp_row(
            42,
            "Write a function to square a number.",
            "def square(x):\r\n  return x * x",
            ["assert square(3) == 9", "assert square(-2) == 4", "assert square(0) == 0"],
        ),
    ]
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    files = {"data_files": str(data), "eval_files": str(data), "eval_size": 0, **FAST}
    single = get_env("mbpp", **files)
    assert sorted(p.answer["task_id"] for p in single.eval_prompts()) == [41, 42]
    env = get_env("mbpp_feedback", **files)
    assert [p.answer["task_id"] for p in env.eval_prompts()] == [42]
    assert env.describe()["refused"] == ["41"]
    refused = next(p for p in single.eval_prompts() if p.answer["task_id"] == 41)
    with pytest.raises(ConfigError, match="task 41 is refused"):
        env.start(refused)
    humaneval = get_env("humaneval_feedback", **FAST)
    assert humaneval.describe()["refused"] == [
        "HumanEval/113",
        "HumanEval/32",
        "HumanEval/35",
        "HumanEval/38",
        "HumanEval/4",
        "HumanEval/50",
    ]
    assert len(humaneval.eval_prompts()) == 164 - 6


# --- the tiny-code-feedback preset (its shipped start weights) -------------------------


@pytest.mark.slow
def test_tiny_code_feedback_preset_revises_and_its_revisions_pay(env):
    """The preset's greedy episodes on held-out functions take more than one submission
    sometimes, and the episode's reward beats the same model's first submissions alone
    (the env with one turn): it uses the feedback, so RL has revisions to improve."""
    from transformers import Qwen3ForCausalLM

    from zoo.models.tiny import TINY_PRESETS, tiny_model_path
    from zoo.warm_start.greedy import greedy_episodes

    path = tiny_model_path(TINY_PRESETS["tiny-code-feedback"])
    model = Qwen3ForCausalLM.from_pretrained(path).eval()
    held = env.eval_prompts()[:200]
    episodes = greedy_episodes(model, env, held, 12)
    first = greedy_episodes(model, get_env("pyfunc_feedback", max_turns=1, **FAST), held, 12)
    assert 1.0 < episodes["turns"] < 3.0
    assert first["turns"] == 1.0
    assert episodes["reward"] > first["reward"] + 0.02


def test_dapo_overlong_punishment_spares_every_episode_its_turns_allow(env):
    """pyfunc_feedback's observations are longer than its answers, so the default episode
    token limit counts them (``max_observation_tokens``): at 12 tokens a turn, DAPO's length
    shaping leaves the longest episode 3 turns allow unpunished. At the old limit (2 x 3 x 12
    = 72) it punished 3-submission episodes, which pushed DAPO's runs to shorter, wrong
    submissions."""
    import torch

    from zoo.algorithms import get_algorithm
    from zoo.envs.code.code_feedback import _shown_feedback
    from zoo.run.episodes import episode_budget
    from zoo.run.run_config import RunConfig

    # The bound holds for every function and the longest wrong value at every shown x.
    longest_observation = 0
    every = env.eval_prompts() + env.train_prompts(0, 239, seed=0)
    for p in every + env.warm_start_prompts(0, 400, seed=0):
        want = shown_values(p)
        for x in range(5):
            for wrong in ("-1234", "big", "error", "x"):
                got = [str(v) for v in want[:x]] + [wrong] * (5 - x)
                observation = _shown_feedback(want, got, "ok")[0]
                longest_observation = max(longest_observation, len(observation.encode()))
    assert longest_observation == env.max_observation_tokens == 25
    turns, per_turn = env.turn_limit(), 12
    longest = turns * per_turn + (turns - 1) * env.max_observation_tokens
    budget = episode_budget(
        RunConfig.from_flat(env="pyfunc_feedback", max_response_len=per_turn), env
    )
    assert budget == 2 * longest
    dapo = get_algorithm("dapo")
    lengths = torch.tensor([[longest, 59, 1]])
    assert torch.equal(dapo.shape_rewards(torch.ones(1, 3), lengths, budget), torch.ones(1, 3))
    assert dapo.shape_rewards(torch.ones(1, 3), lengths, 72)[0, 1] < 1  # the old limit


# --- the table walk on the real data (issue 57) -----------------------------------------


def walk(env, prompts, first, revise) -> list[float]:
    """Each prompt's episode played by the table walk: ``first(prompt)`` on turn 1, then
    ``revise(prompt, everything shown so far)`` on each later turn; the episodes' rewards."""
    episodes = [env.start(p) for p in prompts]
    texts = [first(p) for p in prompts]
    seen = [p.text for p in prompts]
    rewards = [0.0] * len(prompts)
    running = list(range(len(prompts)))
    while running:
        replies = env.step_batch([episodes[i] for i in running], [texts[i] for i in running])
        still = []
        for i, reply in zip(running, replies, strict=True):
            if reply.done:
                rewards[i] = reply.reward
            else:
                seen[i] += reply.observation
                texts[i] = revise(prompts[i], seen[i])
                still.append(i)
        running = still
    return rewards


def humaneval_table(p, seen: str) -> str:
    """A body for HumanEval's prompt: the expected value of every assert shown so far for
    its input, else the docstring examples' output for theirs, else None."""
    table = lookup_table_answer(seen, default="_FZ_MISS", rename={"candidate": "_fz_table"})
    nested = "".join(f"    {line}\n" for line in table.splitlines())
    lookup = (
        "    _hit = _fz_table(*_fz_args)\n    if _hit is not _FZ_MISS:\n        return _hit\n"
        if table
        else ""
    )
    return (
        "    _fz_args = tuple(locals().values())\n    _FZ_MISS = object()\n"
        f"{nested}{lookup}{docstring_answer('None')}"
    )


def pyfunc_table(p, seen: str) -> str:
    """The shown values at 0..4 (and any value an observation names), 0 elsewhere."""
    table = dict(enumerate(shown_values(p)))
    for x, want in re.findall(r"f\((-?\d+)\)=\S+ not (-?\d+)", seen):
        table[int(x)] = int(want)
    return f"{table!r}.get(x, 0)"


@pytest.mark.recheck  # ~2-6 minutes of sandboxed verdicts: scripts/check-all.sh
@pytest.mark.slow  # ~3 turns x (427 + 164 + 500) episodes: a few minutes on 2 busy cores
def test_real_data_the_feedback_table_walk_is_paid_on_at_most_1_percent(tmp_path):
    """Issue 57's walk: turn 1 answers the examples the prompt shows (a table of them,
    None elsewhere), each later turn returns every expected value the prompt and the
    observations showed, up to the turn limit (3). With the failing hidden assert shown
    after each turn it was paid on 397 of 427 MBPP tasks and 38 of 164 HumanEval ones
    (this test on the code before the fix: 396 and 24). Now the feedback reports the
    examples only, so the walk holds nothing the prompt did not show; refused tasks count
    as unpaid (the env never starts them). Measured: mbpp_feedback 0 of 427 (1 refused),
    humaneval_feedback 0 of 164 (6 refused), pyfunc_feedback 0 of 500; the bound is 1%."""
    data = sanitized_mbpp_file(tmp_path)
    mbpp = get_env("mbpp_feedback", data_files=str(data), eval_files=str(data), eval_size=0)
    humaneval = get_env("humaneval_feedback")
    pyfunc = get_env("pyfunc_feedback")
    figures = {}
    for env, total, first, revise in (
        (mbpp, 427, lambda p: lookup_table_answer(p.text), lambda p, s: lookup_table_answer(s)),
        (humaneval, 164, lambda p: docstring_answer("None"), humaneval_table),
        (pyfunc, 500, lambda p: "0", pyfunc_table),
    ):
        prompts = env.eval_prompts()
        assert len(prompts) + len(getattr(env, "refused", [])) == total
        rewards = walk(env, prompts, first, revise)
        paid = [
            p.answer.get("task_id", p.text)
            for p, r in zip(prompts, rewards, strict=True)
            if r >= 1.0
        ]
        figures[env.name] = (len(paid), total, paid)
    print(f"\ntable walk paid: {figures}")
    for name, (paid, total, ids) in figures.items():
        assert paid <= 0.01 * total, (name, ids)
