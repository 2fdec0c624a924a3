"""running_sum, the reasoning testbed: any chain ending in the exact total pays, nothing
else does; held-out, validation and train never share a problem; the runs that evaluate
on the validation split (harness tune) see it, not the held-out split; each step records
its response lengths by correctness (Dr. GRPO's claim is about them)."""

from __future__ import annotations

import random

import pytest

from zoo.core.config import ConfigError
from zoo.envs import get_env
from zoo.envs.math.running_sum import chain_answer, demonstration
from zoo.run.loop import length_metrics


@pytest.fixture(scope="module")
def env():
    return get_env("running_sum")


def test_every_chain_that_ends_in_the_total_pays_and_nothing_else(env):
    prompt = env.train_prompt(0, seed=3)
    terms, total = prompt.meta["terms"], prompt.answer
    assert prompt.text == "+".join(map(str, terms)) + "=" and total == sum(terms)
    full = chain_answer(terms, merges=())
    assert full.count("=") == len(terms) - 1 and env.reference_answer(prompt) == full
    honest = [full, chain_answer(terms, merges={1}), str(total), f" {total}"]
    for answer in honest:
        assert env.score(prompt, answer) == 1.0, answer
    wrong = [
        str(total + 1),
        full[: full.rfind("=") + 1] + str(total - 10),
        "",
        f"{total}={total + 1}",
        f"{total}0",
        "x" * 5000 + f"={total}",
    ]
    for answer in wrong:
        assert env.score(prompt, answer) == 0.0, answer[:40]


def test_a_merged_step_adds_three_operands_and_keeps_the_total():
    assert chain_answer([34, 17, 58, 21], merges=()) == "34+17=51,51+58=109,109+21=130"
    assert chain_answer([34, 17, 58, 21], merges={1}) == "34+17+58=109,109+21=130"
    assert chain_answer([34, 17, 58, 21], merges={2}) == "34+17=51,51+58+21=130"
    rng = random.Random(0)
    answers = {demonstration([34, 17, 58, 21], rng, 0.5) for _ in range(200)}
    assert len(answers) == 3 and all(a.endswith("=130") for a in answers)  # {1, 2} is {1}


def test_held_out_validation_and_train_are_disjoint(env):
    held_out = {tuple(p.meta["terms"]) for p in env.eval_prompts()}
    validation = {tuple(p.meta["terms"]) for p in env.validation_prompts()}
    assert len(held_out) == 500 and len(validation) == 500
    assert not held_out & validation
    train = {tuple(env.train_prompt(i, seed=s).meta["terms"]) for s in (0, 1) for i in range(5000)}
    assert not train & (held_out | validation)
    lengths = {len(t) for t in held_out}
    assert lengths == {3, 4, 5}  # terms_min..terms_max


def test_splits_are_the_same_lists_in_every_process(env):
    again = get_env("running_sum")
    assert [p.text for p in again.eval_prompts()] == [p.text for p in env.eval_prompts()]
    assert [p.text for p in again.validation_prompts()][:3] == [
        p.text for p in env.validation_prompts()
    ][:3]
    assert env.eval_split("validation")[0].split == "validation"
    assert env.eval_split("heldout")[0].split == "eval"


def test_bad_settings_name_the_setting():
    with pytest.raises(ConfigError, match="terms_min"):
        get_env("running_sum", terms_min=1)
    with pytest.raises(ConfigError, match="digits"):
        get_env("running_sum", digits=0)
    with pytest.raises(ConfigError, match="quarter"):
        get_env("running_sum", digits=1, terms_min=2, terms_max=2)


def test_an_env_without_a_validation_split_refuses_to_be_tuned_on():
    with pytest.raises(ConfigError, match="no validation split"):
        get_env("arithmetic").validation_prompts()


def test_length_metrics_split_by_correctness():
    got = length_metrics([10, 20, 30, 40], [1.0, 0.0, 0.0, 1.0])
    assert got == {
        "response_len_mean": 25.0,
        "response_len_correct_mean": 25.0,
        "response_len_incorrect_mean": 25.0,
    }
    got = length_metrics([10, 20, 60], [0.0, 0.0, 1.0])
    assert got["response_len_incorrect_mean"] == 15.0 and got["response_len_correct_mean"] == 60
    assert "response_len_correct_mean" not in length_metrics([5, 7], [0.0, 0.0])
