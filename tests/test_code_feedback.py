"""Code with execution feedback (zoo/envs/code/code_feedback.py): multi-turn episodes over the
real code envs, every submission run in the real sandbox. pyfunc_feedback: a right first
submission, a wrong one told where it is wrong and then fixed, hostile submissions as
observations, the turn limit, purity, and a reward that a forgery of the feedback probe
cannot reach; humaneval_feedback and mbpp_feedback: the failing assert is shown."""

from __future__ import annotations

import ast
import re
import textwrap

import pytest
from test_code_envs import mbpp_files  # noqa: F401 (the same local MBPP data)

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


# --- humaneval, mbpp -------------------------------------------------------------------


def test_humaneval_feedback_shows_the_failing_assert_and_rewards_a_fix():
    env = get_env("humaneval_feedback", eval_size=64, **FAST)
    p = next(p for p in env.eval_prompts() if p.answer["task_id"] == "HumanEval/0")
    episode = env.start(p)
    reply = episode.step("    return True\n")
    assert not reply.done and reply.observation.startswith("\nTests failed:\nassert candidate(")
    assert reply.observation.endswith("== False\nAssertionError\n")
    reply = episode.step("    return (\n")
    assert not reply.done and "SyntaxError" in reply.observation and not reply.tool_ok
    reply = episode.step(env.reference_answer(p))  # the third and last turn
    assert (reply.done, reply.reward) == (True, 1.0)


def test_mbpp_feedback_shows_the_failing_assert(mbpp_files):  # noqa: F811
    env = get_env("mbpp_feedback", max_turns=2, **mbpp_files)
    p = next(p for p in env.eval_prompts() if p.answer["task_id"] == 12)
    episode = env.start(p)
    reply = episode.step("def square(x):\n    return x * abs(x)")
    assert reply.observation == "\nTests failed:\nassert square(-2) == 4\nAssertionError\n"
    reply = episode.step("def square(x):\n    return x * abs(x)")
    assert (reply.done, reply.reward) == (True, 0.0)


# --- what a failed submission is shown, and what it cannot make the feedback show ------


def check_asserts(test_src: str) -> list[str]:
    """The source of each assert of HumanEval's ``check``, in order."""
    tree = ast.parse(test_src)
    check = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "check")
    asserts = sorted(
        (n for n in ast.walk(check) if isinstance(n, ast.Assert)), key=lambda n: n.lineno
    )
    return [ast.get_source_segment(test_src, n) for n in asserts]


@pytest.fixture(scope="module")
def humaneval_0():
    env = get_env("humaneval_feedback", **FAST)
    p = next(p for p in env.eval_prompts() if p.answer["task_id"] == "HumanEval/0")
    return env, p, check_asserts(p.answer["test"])


def fenced(code: str) -> str:
    return f"```python\n{textwrap.dedent(code)}```\n"


def assert_only_the_first_assert(observation: str, asserts: list[str], error: str) -> None:
    assert observation == f"\nTests failed:\n{asserts[0]}\n{error}\n"
    # No input of another assert is in it: neither its arguments nor its threshold.
    for other in asserts[1:]:
        numbers, threshold = map(ast.unparse, ast.parse(other).body[0].test.left.args)
        assert f"{numbers}, {threshold}" not in observation, other
        assert f", {threshold})" not in observation, other


RECORDER = """
    seen = []
    def has_close_elements(numbers, threshold):
        seen.append((numbers, threshold))
        raise ValueError(repr(seen))
"""
DYING_RECORDER = """
    import os
    seen = []
    def has_close_elements(numbers, threshold):
        seen.append((numbers, threshold))
        if len(seen) > 7:  # the counting pass is over: write what it saw, die
            os.write(2, ("SyntaxError: " + repr(seen) + "\\n").encode())
            os._exit(1)
        raise ValueError("not yet")
"""


@pytest.mark.parametrize("attack", [RECORDER, DYING_RECORDER], ids=["raises", "dies"])
def test_an_observation_never_carries_the_inputs_the_submission_recorded(humaneval_0, attack):
    """The submission records the arguments of every call (the counting pass calls it on
    all 7 of HumanEval/0's hidden inputs) and then puts them in its exception's message, or
    writes them to its stderr and dies. Both texts hold every input (control); the
    observation shows the first failing assert, the one the tests' process recorded, and
    the class of the exception it caught: nothing the submission wrote."""
    env, p, asserts = humaneval_0
    assert len(asserts) == 7
    text = fenced(attack)
    scored = env.base.score_verdicts([p], [text])[0]
    leaked = scored.verdict.tests.stderr + scored.verdict.candidate.stderr
    assert "0.05" in leaked and "5.9" in leaked and "[1.1, 2.2, 3.1, 4.1, 5.1]" in leaked
    reply = env.start(p).step(text)
    assert not reply.done
    assert_only_the_first_assert(reply.observation, asserts, "ValueError")


def test_a_forged_traceback_line_cannot_pick_the_assert_shown(humaneval_0):
    """The submission's message imitates the tests' traceback, naming the line of the
    last (hidden) assert; when the shown line was read from the tests' stderr, the last
    ``File "<tests>", line N`` there was this forged one (control), and the feedback showed
    that assert with its expected value."""
    env, p, asserts = humaneval_0
    probe = fenced("def has_close_elements(numbers, threshold):\n    return 0\n")
    tests = env.base._job(p, probe).tests
    line = tests.splitlines().index("    " + asserts[-1]) + 1
    forger = fenced(
        f"""
        def has_close_elements(numbers, threshold):
            raise ValueError('Traceback (most recent call last):\\n  File "<tests>", line {line}, '
                             'in check\\n    {asserts[-1][:20]}\\nAssertionError')
        """
    )
    scored = env.base.score_verdicts([p], [forger])[0]
    assert re.findall(r'File "<tests>", line (\d+)', scored.verdict.tests.stderr)[-1] == str(line)
    reply = env.start(p).step(forger)
    assert_only_the_first_assert(reply.observation, asserts, "ValueError")
    assert asserts[-1] not in reply.observation


def test_the_first_failing_assert_is_the_one_shown_with_the_tests_exception_class(humaneval_0):
    """Answering by the threshold alone (above 0.1) is right on HumanEval/0's first three
    asserts and wrong on the fourth: the fourth is shown. A syntax error is the compiler's
    message, with its line; a process that ended is ``CandidateGone``; an exception outside
    any assert shows the tests' line that raised it."""
    env, p, asserts = humaneval_0
    by_threshold = "def has_close_elements(numbers, threshold):\n    return threshold > 0.1\n"
    reply = env.start(p).step(fenced(by_threshold))
    assert reply.observation == f"\nTests failed:\n{asserts[3]}\nAssertionError\n"
    reply = env.start(p).step("    return (\n")
    line = len(p.answer["prompt"].splitlines()) + 1
    syntax = f"SyntaxError: '(' was never closed (line {line})"
    assert reply.observation == f"\nTests failed:\n{asserts[0]}\n{syntax}\n"
    reply = env.start(p).step("    import os; os._exit(3)\n")
    assert reply.observation == f"\nTests failed:\n{asserts[0]}\nCandidateGone\n"
    # HumanEval/32 calls the function outside an assert: that line of the tests is shown.
    p32 = next(p for p in env.eval_prompts() if p.answer["task_id"] == "HumanEval/32")
    reply = env.start(p32).step("    raise ValueError('no root')\n")
    assert reply.observation == (
        "\nTests failed:\nsolution = candidate(copy.deepcopy(coeffs))\nValueError\n"
    )


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
    budget = episode_budget(RunConfig(env="pyfunc_feedback", max_response_len=per_turn), env)
    assert budget == 2 * longest
    dapo = get_algorithm("dapo")
    lengths = torch.tensor([[longest, 59, 1]])
    assert torch.equal(dapo.shape_rewards(torch.ones(1, 3), lengths, budget), torch.ones(1, 3))
    assert dapo.shape_rewards(torch.ones(1, 3), lengths, 72)[0, 1] < 1  # the old limit
