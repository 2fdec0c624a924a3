"""The math environments: reasoning-gym tasks (countdown, basic_arithmetic, chain_sum,
gsm_symbolic) and the data-set envs (gsm8k, math) with math-verify grading.

The data-set tests build small files in the data sets' real formats (jsonl and parquet,
and a Hugging Face cache directory) and go through the real loading code."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from zoo.core.config import ConfigError
from zoo.envs import Prompt, get_env, list_envs
from zoo.envs.math import reasoning_gym_envs as rge
from zoo.envs.math.math_datasets import last_boxed
from zoo.envs.math.math_grading import MathGrader

RG_ENVS = ["countdown", "basic_arithmetic", "chain_sum", "gsm_symbolic"]
SMALL_EVAL = {"countdown": 30, "basic_arithmetic": 200, "chain_sum": 200, "gsm_symbolic": 200}
WRONG_NUMBER_REWARD = {"basic_arithmetic": 0.0, "chain_sum": 0.0, "gsm_symbolic": 0.01}


def test_math_envs_are_registered():
    names = list_envs()
    for name in [*RG_ENVS, "gsm8k", "math", "arithmetic"]:
        assert name in names


# ---------------------------------------------------------------- reasoning-gym envs


@pytest.fixture(scope="module", params=RG_ENVS)
def rg_env(request):
    return get_env(request.param, eval_size=SMALL_EVAL[request.param])


def sample(env, n=30):
    return env.eval_prompts()[:n] + env.train_prompts(0, n, seed=3)


def test_reference_answers_score_one(rg_env):
    for p in sample(rg_env):
        assert rg_env.score(p, p.answer) == 1.0
        assert rg_env.score(p, f"Let me think.\n<answer> {p.answer} </answer>") == 1.0
        assert rg_env.score(p, f"<answer>0</answer> no wait <answer>{p.answer}</answer>") == 1.0


def test_wrong_answers_score_low(rg_env):
    for p in sample(rg_env):
        if rg_env.name == "countdown":
            numbers = p.meta["entry"]["metadata"]["numbers"]
            assert rg_env.score(p, " + ".join(map(str, numbers))) in (0.0, 1.0)
            assert rg_env.score(p, "1 + 1") == 0.0  # numbers not given
            assert rg_env.score(p, p.answer + " + 1") == 0.0  # 1 extra, wrong value
        else:
            wrong = str(int(float(p.answer)) + 1)
            assert rg_env.score(p, wrong) == WRONG_NUMBER_REWARD[rg_env.name]
            assert rg_env.score(p, f"<answer>{wrong}</answer>") == WRONG_NUMBER_REWARD[rg_env.name]


@pytest.mark.parametrize(
    "text", ["", " ", "abc", "<answer></answer>", "<answer>", "\x00", "²", "x" * 20_000, "💥"]
)
def test_malformed_output_scores_zero(rg_env, text):
    for p in sample(rg_env, 5):
        assert rg_env.score(p, text) == 0.0


def test_rewards_stay_in_range(rg_env):
    texts = ["1", "-1", "1/0", "9**9**9", "(1).__class__", "1e999", "1,000", "+01.00", "nan"]
    for p in sample(rg_env, 10):
        for t in texts:
            assert -1.0 <= rg_env.score(p, t) <= 1.0


@pytest.mark.parametrize("name", RG_ENVS)
def test_rg_held_out_split_is_fixed_distinct_and_indexed(name):
    size = SMALL_EVAL[name]
    first = get_env(name, eval_size=size).eval_prompts()
    rge._EVAL_CACHE.clear()  # rebuild from scratch, as a new run would
    second = get_env(name, eval_size=size).eval_prompts()
    assert [(p.text, p.answer) for p in first] == [(p.text, p.answer) for p in second]
    assert len(first) == size
    env = get_env(name, eval_size=size)
    assert len({env._key(p.meta["entry"]) for p in first}) == size
    assert [p.index for p in first] == list(range(size))
    assert all(p.split == "eval" for p in first)


@pytest.mark.parametrize("name", RG_ENVS)
def test_rg_train_prompts_are_a_pure_function_of_index_and_seed(name):
    e1 = get_env(name, eval_size=SMALL_EVAL[name])
    e2 = get_env(name, eval_size=SMALL_EVAL[name])
    indices = [0, 5, 1, 12345, 2**40, 7]
    first = [(e1.train_prompt(i, 9).text, e1.train_prompt(i, 9).answer) for i in indices]
    again = {i: (e2.train_prompt(i, 9).text, e2.train_prompt(i, 9).answer) for i in indices[::-1]}
    assert first == [again[i] for i in indices]
    batch = e1.train_prompts(3, 4, seed=9)
    assert [p.text for p in batch] == [e2.train_prompt(i, 9).text for i in range(3, 7)]
    assert [(p.index, p.split) for p in batch] == [(i, "train") for i in range(3, 7)]
    # Another seed gives another stream (not a shifted copy of this one).
    seed0 = [e1.train_prompt(i, 0).text for i in range(20)]
    seed1 = [e1.train_prompt(i, 1).text for i in range(20)]
    assert len(set(seed0) & set(seed1)) <= 2
    assert len(set(seed0)) >= 18


def test_train_draws_skip_held_out_problems_in_a_small_problem_space():
    # 1-digit, 2-term chain sums: 10 * 10 * 2 = 200 problems, 60 of them held out.
    options = {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}
    env = get_env("chain_sum", eval_size=60, options=options)
    held_out = {p.text for p in env.eval_prompts()}
    assert len(held_out) == 60
    train = {p.text for p in env.train_prompts(0, 400, seed=0)}
    assert len(train) > 100
    assert not held_out & train


def test_rg_config_errors():
    with pytest.raises(ConfigError, match="min_numbers"):
        get_env("countdown", options={"no_such_option": 1})
    with pytest.raises(ConfigError, match="seed"):
        get_env("chain_sum", options={"seed": 3})
    with pytest.raises(ConfigError, match="invalid options"):
        get_env("chain_sum", options={"min_terms": 5, "max_terms": 2})
    with pytest.raises(ConfigError, match="plain, chat"):
        get_env("chain_sum", prompt_format="markdown")
    with pytest.raises(ConfigError, match="eval_size"):
        get_env("chain_sum", eval_size=0)


def test_options_reach_the_generator_and_the_scorer():
    env = get_env("countdown", eval_size=5, options={"min_numbers": 3, "max_numbers": 3})
    for p in env.train_prompts(0, 10, seed=0):
        assert len(p.meta["entry"]["metadata"]["numbers"]) == 3
        assert env.score(p, p.answer) == 1.0
    env = get_env("chain_sum", eval_size=5, options="{'max_terms': 2, 'max_digits': 1}")
    for p in env.train_prompts(0, 10, seed=0):
        assert p.meta["entry"]["metadata"]["num_terms"] == 2


# ---------------------------------------------------------------- countdown's scorer


def countdown_prompt(numbers, target):
    entry = {"question": "q", "answer": "", "metadata": {"numbers": numbers, "target": target}}
    return Prompt(text="q", answer="", index=0, split="eval", meta={"entry": entry})


@pytest.fixture(scope="module")
def countdown():
    return get_env("countdown", eval_size=5)


def test_countdown_scores_valid_expressions_exactly(countdown):
    p = countdown_prompt([3, 3, 8, 8], 24)
    # 8 / (3 - 8/3) = 24 exactly; in floating point it is 23.999999999999993.
    assert 8 / (3 - 8 / 3) != 24
    assert countdown.score(p, "8 / (3 - 8 / 3)") == 1.0
    assert countdown.score(p, "<answer>8/(3-8/3)</answer>") == 1.0
    assert countdown.score(p, "8 * 3 + 3 - 8") == 0.0  # 19
    assert countdown.score(p, "8 * 3") == 0.0  # not all numbers used
    assert countdown.score(p, "8 * 3 * (8 - 8 + 3 - 3 + 1)") == 0.0  # 1 is not given
    assert countdown.score(p, "8 + 8 + 8 + 3 - 3") == 0.0  # 8 used three times
    assert countdown.score(p, "(3 + 3) / (8 - 8) + 24") == 0.0  # division by zero
    assert countdown.score(countdown_prompt([2, 5], 3), "-2 + 5") == 1.0  # unary minus
    lenient = get_env("countdown", eval_size=5, use_all_numbers=False)
    assert lenient.score(p, "8 * 3") == 1.0
    assert lenient.score(p, "8 / (3 - 8 / 3)") == 1.0  # all of them is fine too
    assert lenient.score(p, "8 * 8 * 8 / 8 / 8 * 3") == 0.0  # 8 used 5 times
    plus_only = get_env("countdown", eval_size=5, options={"operators": ("+", "-")})
    assert plus_only.score(countdown_prompt([4, 6], 24), "4 * 6") == 0.0
    assert plus_only.score(countdown_prompt([4, 6], 10), "4 + 6") == 1.0


@pytest.mark.parametrize(
    "text",
    [
        "2 ** 3",
        "8 // 3",
        "24.0",
        "1e2",
        "0x18",
        "1_0",
        "8 * 3;",
        "8 * 3 = 24",
        "(1).__class__",
        "[8, 3]",
        "lambda: 24",
        "abs(-24)",
        "9**9**9**9**9",
        "(" * 300 + "24" + ")" * 300,
        "-" * 5000 + "24",
    ],
)
def test_countdown_rejects_everything_but_arithmetic(countdown, text):
    start = time.monotonic()
    assert countdown.score(countdown_prompt([24, 1], 24), text) == 0.0
    assert time.monotonic() - start < 1.0


def test_countdown_never_evaluates_model_output(countdown, tmp_path, monkeypatch):
    import builtins

    import reasoning_gym.games.countdown as rg_countdown

    def forbidden(*args, **kwargs):
        raise AssertionError("model output reached an evaluator")

    monkeypatch.setattr(rg_countdown, "parse_expr", forbidden)
    monkeypatch.setattr(builtins, "eval", forbidden)
    monkeypatch.setattr(builtins, "exec", forbidden)
    marker = tmp_path / "pwned"
    attacks = [
        f"__import__('os').system('touch {marker}')",
        f"__import__('os').system('echo x > {marker}')",
        f"<answer>__import__('pathlib').Path('{marker}').touch()</answer>",
        "(1).__class__",
        "().__class__.__base__.__subclasses__()",
        f"open('{marker}', 'w')",
    ]
    for p in [countdown_prompt([1, 2], 3), *countdown.eval_prompts()[:3]]:
        for attack in attacks:
            assert countdown.score(p, attack) == 0.0
        assert countdown.score(p, p.answer or "1 + 2") == 1.0  # the env still works
    assert not marker.exists()


# ---------------------------------------------------------------- prompt formats


def test_prompt_formats_plain_and_chat():
    plain = get_env("chain_sum", eval_size=5)
    chat = get_env("chain_sum", eval_size=5, prompt_format="chat")
    p, c = plain.train_prompt(0, 0), chat.train_prompt(0, 0)
    assert p.text == c.text and p.text.endswith(rge.ANSWER_INSTRUCTION)
    assert p.meta["prompt_format"] == "plain" and "messages" not in p.meta
    assert c.meta["prompt_format"] == "chat"
    assert c.meta["messages"] == [{"role": "user", "content": c.text}]
    assert chat.describe()["config"]["prompt_format"] == "chat"
    assert plain.describe()["config"]["prompt_format"] == "plain"
    json.dumps(chat.describe())  # goes into config.json
    bare = get_env("chain_sum", eval_size=5, instruction="")
    assert bare.train_prompt(0, 0).text == p.meta["entry"]["question"]


# ---------------------------------------------------------------- gsm8k and math data

GSM8K_ROWS = [
    {
        "question": f"Natalia sold clips to {n} of her friends, and then she sold half as many "
        f"clips in May. How many clips did Natalia sell altogether in April and May?",
        "answer": f"Natalia sold {n}/2 = <<{n}/2={n // 2}>>{n // 2} clips in May.\n"
        f"Natalia sold {n}+{n // 2} = <<{n}+{n // 2}={n + n // 2}>>{n + n // 2} clips.\n"
        f"#### {n + n // 2:,}",
    }
    for n in range(1000, 2000, 20)  # 50 rows; answers of 4 digits, with a thousands comma
]
GSM8K_TEST = [
    {
        "question": f"Janet has {n} ducks and buys 3 more. How many ducks does she have?",
        "answer": f"{n}+3 = <<{n}+3={n + 3}>>{n + 3}\n#### {n + 3}",
    }
    for n in range(12)
]
MATH_ROWS = [
    ("What is $\\frac{28}{6}$ in lowest terms?", "\\frac{14}{3}", "Prealgebra"),
    (
        "Convert the point $(0,3)$ in rectangular coordinates to polar coordinates.",
        "\\left( 3, \\frac{\\pi}{2} \\right)",
        "Precalculus",
    ),
    ("Simplify $(p+1) - (q+1)$.", "p - q", "Algebra"),
    ("Which option is right? (A) 1 (B) 2 (C) 3", "\\text{(C)}", "Algebra"),
    ("What is $\\sqrt{8}/2$?", "\\sqrt{2}", "Algebra"),
    ("How many positive divisors does 6 have?", "4", "Number Theory"),
] + [(f"Compute ${k} \\cdot 7$.", str(7 * k), "Prealgebra") for k in range(2, 26)]


def math_row(i, problem, answer, subject):
    return {
        "problem": problem,
        "solution": f"Some work. So the answer is $\\boxed{{{answer}}}$.",
        "answer": answer,
        "subject": subject,
        "level": 1 + i % 5,
        "unique_id": f"test/{subject.lower().replace(' ', '_')}/{i}.json",
    }


def write_jsonl(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def write_parquet(path: Path, rows) -> Path:
    import pandas as pd

    pd.DataFrame(rows).to_parquet(path)
    return path


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("math-data")
    math_rows = [math_row(i, *r) for i, r in enumerate(MATH_ROWS)]
    # The original MATH format (as in its train split): no "answer" field; the answer is the
    # last \boxed{} of the solution.
    original = [
        {
            "problem": f"What is ${k}+{k}$?",
            "level": "Level 1",
            "type": "Prealgebra",
            "solution": f"${k}+{k}=\\boxed{{{2 * k}}}$.",
        }
        for k in range(10)
    ]
    return {
        "gsm8k_train": write_jsonl(d / "gsm8k-train.jsonl", GSM8K_ROWS),
        "gsm8k_test": write_parquet(d / "gsm8k-test.parquet", GSM8K_TEST),
        "math_train": write_jsonl(d / "math-train.jsonl", math_rows[6:]),
        "math_test": write_parquet(d / "math500-test.parquet", math_rows[:6]),
        "math_original": write_parquet(d / "math-original-train.parquet", original),
        "dir": d,
    }


@pytest.fixture(scope="module")
def gsm8k(data):
    return get_env("gsm8k", data_files=str(data["gsm8k_train"]), eval_files=str(data["gsm8k_test"]))


@pytest.fixture(scope="module")
def math_env(data):
    return get_env("math", data_files=str(data["math_train"]), eval_files=str(data["math_test"]))


def test_gsm8k_loads_the_real_format(gsm8k):
    assert gsm8k.describe()["sizes"] == {"train": 50, "eval": 12}
    answers = {p.answer for p in gsm8k.train_prompts(0, 50, seed=0)}
    assert answers == {str(n + n // 2) for n in range(1000, 2000, 20)}  # "#### 1,530" -> "1530"
    assert {p.answer for p in gsm8k.eval_prompts()} == {str(n + 3) for n in range(12)}
    p = gsm8k.eval_prompts()[0]
    assert p.text.startswith("Janet has") and p.text.endswith("\\boxed{}.")


def test_gsm8k_scores_correct_wrong_and_malformed(gsm8k):
    gsm8k.reset_stats()
    for p in gsm8k.train_prompts(0, 5, seed=1):
        n = int(p.answer)
        good = [f"\\boxed{{{n}}}", f"So she sold {n:,} clips.\n\\boxed{{{n:,}}}", f"#### {n}"]
        assert gsm8k.score_batch([p] * 3, good) == [1.0, 1.0, 1.0]
        bad = [f"\\boxed{{{n + 1}}}", f"\\boxed{{{n / 10}}}"]
        assert gsm8k.score_batch([p] * 2, bad) == [0.0, 0.0]
        malformed = ["", "I don't know.", "\\boxed{", "}}}{{{\\frac", "\x00\x01"]
        assert gsm8k.score_batch([p] * 5, malformed) == [0.0] * 5
    stats = gsm8k.stats
    assert stats["correct"] == 15 and stats["wrong"] == 10
    assert stats["parse_failures"] >= 10  # "", "I don't know." at least
    assert sum(stats.values()) == 50 and stats["timeouts"] == stats["errors"] == 0


def test_math_scores_latex_answers(math_env):
    by_answer = {p.answer: p for p in math_env.eval_prompts()}
    cases = {
        "\\frac{14}{3}": ("The answer is $\\boxed{\\dfrac{14}{3}}$.", "$\\boxed{4.6667}$"),
        "\\left( 3, \\frac{\\pi}{2} \\right)": (
            "\\boxed{(3,\\frac{\\pi}{2})}",
            "\\boxed{(3, \\pi)}",
        ),
        "p - q": ("\\boxed{-q+p}", "\\boxed{p+q}"),
        "\\text{(C)}": ("\\boxed{C}", "\\boxed{B}"),
        "\\sqrt{2}": ("\\boxed{2^{1/2}}", "\\boxed{2}"),
        "4": ("\\boxed{4}", "\\boxed{6}"),
    }
    assert set(by_answer) == set(cases)
    math_env.reset_stats()
    for answer, (right, wrong) in cases.items():
        p = by_answer[answer]
        assert math_env.score(p, right) == 1.0, answer
        assert math_env.score(p, wrong) == 0.0, answer
        assert math_env.score(p, "no idea") == 0.0
    assert math_env.stats["correct"] == 6 and math_env.stats["wrong"] == 6
    assert math_env.stats["parse_failures"] == 6
    p = by_answer["4"]
    assert p.meta["subject"] == "Number Theory" and p.meta["unique_id"].startswith("test/")


def test_math_rows_without_answer_use_the_last_boxed_of_the_solution(data):
    env = get_env("math", data_files=str(data["math_original"]), eval_files=str(data["math_test"]))
    prompts = env.train_prompts(0, 10, seed=0)
    assert sorted(int(p.answer) for p in prompts) == [2 * k for k in range(10)]
    assert prompts[0].meta["type"] == "Prealgebra"
    assert env.score(prompts[0], f"\\boxed{{{prompts[0].answer}}}") == 1.0
    assert last_boxed("a \\boxed{\\frac{1}{2}} b \\boxed{x^{2}} c") == "x^{2}"
    assert last_boxed("\\boxed{unclosed") is None and last_boxed("none") is None


def test_dataset_held_out_split_is_fixed_across_instances(data):
    a = get_env("gsm8k", data_files=str(data["gsm8k_train"]), eval_files=str(data["gsm8k_test"]))
    b = get_env("gsm8k", data_files=str(data["gsm8k_train"]), eval_files=str(data["gsm8k_test"]))
    assert [(p.text, p.answer) for p in a.eval_prompts()] == [
        (p.text, p.answer) for p in b.eval_prompts()
    ]
    assert [p.index for p in a.eval_prompts()] == list(range(12))
    small = get_env(
        "gsm8k",
        data_files=str(data["gsm8k_train"]),
        eval_files=str(data["gsm8k_test"]),
        eval_size=5,
    )
    assert [p.text for p in small.eval_prompts()] == [p.text for p in a.eval_prompts()[:5]]
    # No eval file: eval_size rows are split off the train file, fixed, never trained on.
    c1 = get_env("gsm8k", data_files=str(data["gsm8k_train"]), eval_size=10)
    c2 = get_env("gsm8k", data_files=str(data["gsm8k_train"]), eval_size=10)
    held = [p.text for p in c1.eval_prompts()]
    assert held == [p.text for p in c2.eval_prompts()] and len(set(held)) == 10
    train = {p.text for p in c1.train_prompts(0, 80, seed=0)}
    assert len(train) == 40 and not train & set(held)
    with pytest.raises(ConfigError, match="eval_size"):
        get_env("gsm8k", data_files=str(data["gsm8k_train"]), eval_size=50)


def test_dataset_train_order_is_seeded_and_a_pure_function_of_index(data):
    e1 = get_env("gsm8k", data_files=str(data["gsm8k_train"]), eval_files=str(data["gsm8k_test"]))
    e2 = get_env("gsm8k", data_files=str(data["gsm8k_train"]), eval_files=str(data["gsm8k_test"]))
    indices = [0, 49, 50, 7, 1000, 3]
    first = [e1.train_prompt(i, 4).text for i in indices]
    assert first == [e2.train_prompt(i, 4).text for i in indices[::-1]][::-1]
    epoch0 = [e1.train_prompt(i, 4).text for i in range(50)]
    epoch1 = [e1.train_prompt(i, 4).text for i in range(50, 100)]
    assert len(set(epoch0)) == 50 and set(epoch0) == set(epoch1) and epoch0 != epoch1
    other_seed = [e1.train_prompt(i, 5).text for i in range(50)]
    assert other_seed != epoch0
    assert [p.index for p in e1.train_prompts(10, 3, seed=4)] == [10, 11, 12]


def test_parquet_train_and_jsonl_eval_and_csv_also_load(data, tmp_path):
    csv = tmp_path / "train.csv"
    import pandas as pd

    pd.DataFrame(GSM8K_ROWS).to_csv(csv, index=False)
    env = get_env("gsm8k", data_files=str(csv), eval_files=str(data["gsm8k_test"]), eval_size=3)
    assert env.describe()["sizes"] == {"train": 50, "eval": 3}
    env = get_env("math", data_files=str(data["math_test"]), eval_files=str(data["math_train"]))
    assert env.describe()["sizes"] == {"train": 6, "eval": 24}


def test_bad_rows_are_config_errors_naming_the_row(tmp_path):
    rows = [*GSM8K_ROWS[:3], {"question": "q", "answer": "no final line"}]
    path = write_jsonl(tmp_path / "bad.jsonl", rows)
    with pytest.raises(ConfigError, match=r"row 3 of .*bad\.jsonl.*####"):
        get_env("gsm8k", data_files=str(path), eval_size=1)
    path = write_jsonl(tmp_path / "wrong-columns.jsonl", [{"text": "q", "label": 1}] * 3)
    with pytest.raises(ConfigError, match=r"row 0.*problem"):
        get_env("math", data_files=str(path), eval_size=1)
    garbage = tmp_path / "garbage.parquet"
    garbage.write_text("this is not parquet")
    with pytest.raises(ConfigError, match=r"could not read .*garbage\.parquet"):
        get_env("math", data_files=str(garbage), eval_size=1)


@pytest.fixture
def empty_hf_cache(tmp_path, monkeypatch):
    import datasets

    cache = tmp_path / "hf-datasets-cache"
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", cache)
    return cache


def test_missing_data_error_names_where_it_looked(empty_hf_cache, tmp_path):
    start = time.monotonic()
    with pytest.raises(ConfigError) as err:
        get_env("gsm8k")
    message = str(err.value)
    for part in ("openai/gsm8k", str(empty_hf_cache), "offline", "data_files=", "####"):
        assert part in message, part
    assert time.monotonic() - start < 20  # offline: no network retries
    missing = tmp_path / "nowhere" / "train.jsonl"
    with pytest.raises(ConfigError) as err:
        get_env("math", data_files=str(missing))
    assert str(missing) in str(err.value) and "data_files=" in str(err.value)
    with pytest.raises(ConfigError) as err:
        get_env("math", hf_train=f"{tmp_path}/no-such-dir:train", hf_eval="")
    assert "no-such-dir" in str(err.value) and "hf_train" in str(err.value)


def test_loads_from_the_hugging_face_cache_offline(empty_hf_cache, data):
    """Fill a datasets cache the way an online ``load_dataset("openai/gsm8k", "main")``
    leaves it, then load through the real offline path."""
    from datasets.packaged_modules.json.json import Json

    test_jsonl = write_jsonl(data["dir"] / "gsm8k-test.jsonl", GSM8K_TEST)
    builder = Json(
        cache_dir=str(empty_hf_cache),
        dataset_name="gsm8k",
        config_name="main",
        repo_id="openai/gsm8k",
        hash="0123456789abcdef",
        data_files={"train": str(data["gsm8k_train"]), "test": str(test_jsonl)},
    )
    builder.download_and_prepare()
    built = next((empty_hf_cache / "openai___gsm8k").iterdir())
    built.rename(built.with_name("main"))  # the hub's cache names the config dir "main"
    env = get_env("gsm8k")
    assert env.describe()["sizes"] == {"train": 50, "eval": 12}
    assert env.describe()["sources"]["train"] == "Hugging Face openai/gsm8k:main:train"
    p = env.eval_prompts()[0]
    assert env.score(p, f"\\boxed{{{p.answer}}}") == 1.0


def test_loads_from_a_local_dataset_directory(data, tmp_path):
    d = tmp_path / "my-gsm8k"
    d.mkdir()
    write_jsonl(d / "train.jsonl", GSM8K_ROWS)
    write_jsonl(d / "test.jsonl", GSM8K_TEST)
    env = get_env("gsm8k", hf_train=f"{d}:train", hf_eval=f"{d}:test")
    assert env.describe()["sizes"] == {"train": 50, "eval": 12}


# ---------------------------------------------------------------- grading: threads, timeouts


def test_math_verify_own_timeout_fails_off_the_main_thread():
    """Why grading runs in workers: math-verify's signal-based timeout raises in a thread."""
    from math_verify import parse

    errors = []

    def run():
        try:
            parse("$1$")
        except ValueError as exc:
            errors.append(exc)

    t = threading.Thread(target=run)
    t.start()
    t.join(10)
    assert errors and "thread" in str(errors[0])


def test_grading_works_from_a_non_main_thread(gsm8k):
    p = gsm8k.eval_prompts()[0]
    results = []

    def run():
        results.append(gsm8k.score(p, f"\\boxed{{{p.answer}}}"))
        results.append(gsm8k.score_batch([p, p], [f"{p.answer}", "\\boxed{-1}"]))

    t = threading.Thread(target=run)
    t.start()
    t.join(30)
    assert results == [1.0, [1.0, 0.0]]


def test_pathological_input_hits_the_timeout_and_grading_goes_on(data):
    env = get_env(
        "math",
        data_files=str(data["math_train"]),
        eval_files=str(data["math_test"]),
        grading_timeout_s=1.0,
        grading_workers=2,
    )
    p = next(p for p in env.eval_prompts() if p.answer == "4")
    env.grader.grade("1", "\\boxed{1}")  # start a worker outside the timed part
    outcome = []
    t = threading.Thread(target=lambda: outcome.append(env.score(p, "\\boxed{9^{9^{9^{9}}}}")))
    start = time.monotonic()
    t.start()
    t.join(15)
    assert not t.is_alive(), "grading hung"
    assert outcome == [0.0] and env.stats["timeouts"] == 1
    assert time.monotonic() - start < 8
    # The killed worker is replaced; a batch mixing both kinds runs on two workers.
    rewards = env.score_batch([p] * 3, ["\\boxed{4}", "\\boxed{10^{10^{10^{10}}}}", "4"])
    assert rewards == [1.0, 0.0, 1.0] and env.stats["timeouts"] == 2
    assert env.stats["correct"] == 2


def test_grader_outcomes_and_close():
    grader = MathGrader(timeout_s=5.0)
    try:
        assert grader.grade("72", "so \\boxed{72}") == "correct"
        assert grader.grade("72", "\\boxed{71}") == "wrong"
        assert grader.grade("72", "nothing to read here") == "parse_failure"
        assert grader.grade_many([("1", "1"), ("2", "3")]) == ["correct", "wrong"]
    finally:
        grader.close()
    assert all(w.proc is None or w.proc.poll() is not None for w in grader._all)
