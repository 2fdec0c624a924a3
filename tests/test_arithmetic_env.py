"""The arithmetic environment: scoring, a fixed held-out split, a seeded train stream
disjoint from it, and configuration errors."""

from __future__ import annotations

import re

import pytest

from zoo.core.config import ConfigError
from zoo.envs import Prompt, get_env, list_envs

PROBLEM = re.compile(r"^([0-9]+)([+\-*])([0-9]+)=$")


def solve(text: str) -> int:
    """The answer of "a+b=" / "a-b=" / "a*b=", computed here from the prompt text."""
    m = PROBLEM.match(text)
    assert m, text
    a, op, b = int(m[1]), m[2], int(m[3])
    return {"+": a + b, "-": a - b, "*": a * b}[op]


@pytest.fixture(scope="module")
def env():
    return get_env("arithmetic")


def test_arithmetic_is_registered():
    assert "arithmetic" in list_envs()


def test_correct_answers_score_one(env):
    prompts = env.eval_prompts()[:50] + env.train_prompts(0, 50, seed=3)
    assert any(solve(p.text) < 0 for p in prompts)  # negative answers are covered
    for p in prompts:
        answer = solve(p.text)
        assert p.answer == answer
        assert env.score(p, str(answer)) == 1.0
        assert env.score(p, f"  {answer}\n") == 1.0  # surrounding whitespace is ignored


def test_wrong_answers_score_zero(env):
    for p in env.eval_prompts()[:50]:
        answer = solve(p.text)
        for wrong in (answer + 1, answer - 1, -answer if answer else 7, answer * 10):
            assert env.score(p, str(wrong)) == 0.0
        assert env.score(p, f"{answer} {answer}") == 0.0
        assert env.score(p, f"{answer}.5") == 0.0


@pytest.mark.parametrize("text", ["", "abc", "---3", "4 5", "²", " ", "-", "3-", "1e2", "\x00"])
def test_malformed_output_scores_zero_without_raising(env, text):
    for p in env.eval_prompts()[:20]:
        assert env.score(p, text) == 0.0


def test_unicode_digits_are_not_read_as_integers(env):
    p = Prompt(text="1+1=", answer=2, index=0, split="eval")
    assert env.score(p, "2") == 1.0
    for text in ("²", "٢", "２"):  # superscript, Arabic-Indic and full-width two
        assert env.score(p, text) == 0.0


def test_held_out_split_is_identical_across_instances_and_has_500_unique_problems():
    a, b = get_env("arithmetic").eval_prompts(), get_env("arithmetic").eval_prompts()
    assert [(p.text, p.answer) for p in a] == [(p.text, p.answer) for p in b]
    assert len(a) == 500
    assert len({p.text for p in a}) == 500
    assert all(p.split == "eval" for p in a)
    assert [p.index for p in a] == list(range(500))


def test_train_prompts_are_a_pure_function_of_index_and_seed():
    e1, e2 = get_env("arithmetic"), get_env("arithmetic")
    indices = [0, 1, 7, 123, 9999, 4]
    first = [(e1.train_prompt(i, 5).text, e1.train_prompt(i, 5).answer) for i in indices]
    # another instance, another order, repeated calls: same prompts
    again = {
        i: (e2.train_prompt(i, 5).text, e2.train_prompt(i, 5).answer) for i in reversed(indices)
    }
    assert first == [again[i] for i in indices]
    assert [p.text for p in e1.train_prompts(0, 10, seed=5)] == [
        e2.train_prompt(i, 5).text for i in range(10)
    ]
    assert all(
        p.split == "train" and p.index == i for i, p in enumerate(e1.train_prompts(0, 10, seed=5))
    )


def test_train_prompts_differ_across_seeds(env):
    seed0 = [env.train_prompt(i, 0).text for i in range(100)]
    seed1 = [env.train_prompt(i, 1).text for i in range(100)]
    assert sum(a != b for a, b in zip(seed0, seed1, strict=True)) > 90


def test_train_prompts_never_fall_in_the_held_out_set(env):
    held_out = {p.text for p in env.eval_prompts()}
    for seed in (0, 1, 2):
        texts = [p.text for p in env.train_prompts(0, 2000, seed=seed)]
        assert len(set(texts)) > 1000  # a real stream, not a constant
        assert not held_out.intersection(texts)


def test_unknown_env_name_raises_config_error_listing_arithmetic():
    with pytest.raises(ConfigError, match="arithmetic"):
        get_env("no-such-env")


def test_unknown_config_field_raises_config_error_naming_valid_fields():
    with pytest.raises(ConfigError) as err:
        get_env("arithmetic", difficulty=3)
    message = str(err.value)
    for name in ("difficulty", "digits", "ops", "eval_size"):
        assert name in message


def test_config_fields_change_the_problems():
    env3 = get_env("arithmetic", digits=3, ops="*")
    for p in env3.train_prompts(0, 50, seed=0):
        a, op, b = PROBLEM.match(p.text).groups()
        assert op == "*" and len(a) == 3 and len(b) == 3
        assert env3.score(p, str(solve(p.text))) == 1.0
