"""Code environments (humaneval, mbpp, pyfunc): known-correct code scores 1, wrong code 0,
malformed or hostile output 0 within a bounded time; fixed held-out splits and seeded
train streams; MBPP through the real offline loading code; pyfunc's partial credit; the
refusal without a sandbox; the tiny-code preset; and a few GRPO steps end to end.

Code runs in the bubblewrap sandbox (scripts/setup.sh installs it)."""

from __future__ import annotations

import ast
import builtins
import dataclasses
import hashlib
import json
import math
import time
from pathlib import Path

import pytest
from harness_cli import run_harness
from real_data import sanitized_mbpp_file

from zoo.core.config import ConfigError
from zoo.envs import Prompt, get_env, list_envs
from zoo.envs.code.pyfunc import HIDDEN_XS
from zoo.envs.execution import sandbox as sandbox_module
from zoo.envs.execution.pool import CodeEnvUnavailable
from zoo.envs.execution.sandbox import SandboxUnavailable

# Honest code needs no tight limit: at 2 s a canonical HumanEval solution timed out on 2
# cores busy with a board; the two infinite-loop cases pay this once each.
FAST = {"timeout_s": 5.0}


@pytest.fixture(scope="module")
def humaneval():
    return get_env("humaneval", eval_size=64, **FAST)


def test_humaneval_holds_out_the_whole_test_set_by_default_and_says_how_to_train():
    env = get_env("humaneval")
    assert len(env.eval_prompts()) == 164
    with pytest.raises(ConfigError, match="eval_size=64"):
        env.train_prompt(0, seed=0)


@pytest.fixture(scope="module")
def pyfunc():
    return get_env("pyfunc")


def test_code_envs_are_registered_and_describe_their_splits(humaneval, pyfunc, mbpp):
    assert {"humaneval", "mbpp", "pyfunc"} <= set(list_envs())
    for env, sizes in ((humaneval, (100, 64)), (pyfunc, (239, 500)), (mbpp, (6, 3))):
        d = env.describe()
        assert (d["sizes"]["train"], d["sizes"]["eval"]) == sizes
        assert d["sources"]["train"] and d["sources"]["eval"]
        assert d["sandbox"]["sandboxed"] is True
        assert d["reward_values"] == type(env).reward_values


# --- humaneval ---------------------------------------------------------------------------


def test_humaneval_ships_164_problems_and_canonical_solutions_score_one(humaneval):
    prompts = humaneval.eval_prompts()[:3] + humaneval.train_prompts(0, 2, seed=0)
    assert len(humaneval._train) + len(humaneval._eval) == 164
    completions = [humaneval.reference_answer(p) for p in prompts]
    assert humaneval.score_batch(prompts, completions) == [1.0] * 5
    # A chat model's reply: the whole function in a Markdown block, after some prose.
    p = prompts[0]
    reply = f"Sure:\n```python\n{p.answer['prompt']}{completions[0]}```\nDone."
    assert humaneval.score(p, reply) == 1.0


def test_humaneval_wrong_code_scores_zero_with_the_pass_fraction_as_metric(humaneval):
    p = next(
        p
        for p in humaneval.eval_prompts() + humaneval.train_prompts(0, 100, 0)
        if p.answer["task_id"] == "HumanEval/0"
    )
    # check() has 7 asserts, 4 of which expect True.
    details = humaneval.score_details([p, p, p], ["    return True\n", "    return None\n", ""])
    assert details[0] == (0.0, pytest.approx(4 / 7))
    assert details[1] == (0.0, 0.0)
    assert details[2] == (0.0, 0.0)
    assert humaneval.score_details([p], [humaneval.reference_answer(p)]) == [(1.0, 1.0)]


def test_humaneval_malformed_and_hostile_output_scores_zero_quickly(humaneval, tmp_path):
    marker = tmp_path / "pwned"
    p = humaneval.eval_prompts()[0]
    body = humaneval.reference_answer(p)
    hostile = [
        "    return (\n",  # syntax error
        "    while True:\n        pass\n",  # infinite loop
        f"    import os; os.system('touch {marker}'); open('{marker}', 'w')\n" + body,
        "    import sys; sys.exit(0)\n",  # exit 0 before the tests run
        "    import os; os._exit(0)\n",
        "    print('ok'); raise SystemExit(0)\n",
        "    x = bytearray(10**10)\n",  # memory bomb
        "\x00\ufffd garbage",
    ]
    humaneval.reset_stats()
    start = time.monotonic()
    assert humaneval.score_batch([p] * len(hostile), hostile) == [0.0] * len(hostile)
    assert time.monotonic() - start < 15
    assert not marker.exists()
    stats = humaneval.stats
    assert stats["timeouts"] == 1 and stats["executions"] == len(hostile)
    assert stats["executions_per_s"] > 0 and stats["exec_seconds"] > 0


# What docs/envs.md says of HumanEval's docstring examples, checked: a body that knows no
# task. Called, it finds its own function, reads the examples out of its docstring
# (">>> f(x)" over the output, or "f(x) ==> y" and the like), answers an example's output
# for an example's input and the most frequent example output for any other input.
DOCSTRING_ANSWER = """\
    import ast as _a, collections as _c, sys as _s
    _f = _s._getframe()
    _fn = next(v for v in _f.f_globals.values() if getattr(v, "__code__", None) is _f.f_code)
    _lines = [line.strip() for line in (_fn.__doc__ or "").splitlines()]
    _examples = []
    for _i, _line in enumerate(_lines):
        _src = None
        if _line.startswith(">>>") and _i + 1 < len(_lines):
            _src, _out = _line[3:].strip(), _lines[_i + 1]
        elif _fn.__name__ + "(" in _line:
            for _sep in ("==>", "=>", "\u279e", " == ", " = "):
                if _sep in _line:
                    _src, _out = (part.strip() for part in _line.split(_sep, 1))
                    _src = _src[_src.index(_fn.__name__ + "("):]
                    break
        if _src is None:
            continue
        try:
            _args = tuple(_a.literal_eval(x) for x in _a.parse(_src, mode="eval").body.args)
            _examples.append((_args, _a.literal_eval(_out.rstrip("."))))
        except Exception:
            pass
    _args = tuple(v for k, v in _f.f_locals.items() if not k.startswith("_"))
    for _given, _output in _examples:
        if _given == _args:
            return _output
    if _examples:
        return _a.literal_eval(_c.Counter(repr(o) for _, o in _examples).most_common(1)[0][0])
    return None
"""
GUESSED_DEFAULTS = ("None", "0", "1", "-1", "True", "False", "''", "[]", "()", "{}", "set()", "0.0")
"""The constants a policy that copies the shown examples might answer for any other input."""


def docstring_answer(default: str | None) -> str:
    """``DOCSTRING_ANSWER`` answering ``default`` (source) for inputs no example shows; None:
    the most frequent example output, as ``DOCSTRING_ANSWER`` does."""
    if default is None:
        return DOCSTRING_ANSWER
    head, _, _ = DOCSTRING_ANSWER.rpartition("    if _examples:\n")
    return f"{head}    return {default}\n"


# Three batches of all 164 problems, ~40 s on 2 busy cores; CI keeps the default set's
# check that all 164 canonical solutions pass, this runs in scripts/check-all.sh.
@pytest.mark.slow
@pytest.mark.extra
def test_humaneval_docstring_examples_answer_two_problems_as_documented():
    """The data-set weakness the env's docstring and docs/envs.md document: with
    HumanEval's own tests (``extra_tests=False``) the answer from the docstring's examples
    is rewarded on HumanEval/34 and /40 and no other; with the asserts the env adds there
    (the default), on none. It raises the mean pass fraction several times over ``return
    None``'s (measured: 0.34 against 0.06). Should a change of the prompt or the tests
    close or widen the gap, this fails and the documentation is due for the new figures."""
    env = get_env("humaneval", timeout_s=20.0, extra_tests=False)
    prompts = env.eval_prompts()
    examples = env.score_details(prompts, [DOCSTRING_ANSWER] * len(prompts))
    nothing = env.score_details(prompts, ["    return None\n"] * len(prompts))
    rewarded = [p.answer["task_id"] for p, (r, _) in zip(prompts, examples, strict=True) if r]
    assert sorted(rewarded) == ["HumanEval/34", "HumanEval/40"]
    extended = get_env("humaneval", timeout_s=20.0)
    assert extended.score_batch(extended.eval_prompts(), [DOCSTRING_ANSWER] * 164) == [0.0] * 164
    mean = sum(f for _, f in examples) / len(prompts)
    baseline = sum(f for _, f in nothing) / len(prompts)
    assert 0.25 <= mean <= 0.45 and baseline <= 0.1, (mean, baseline)


# --- pyfunc -----------------------------------------------------------------------------


def test_pyfunc_reference_answers_score_one_and_are_short(pyfunc):
    prompts = pyfunc.eval_prompts()[:40] + pyfunc.train_prompts(0, 40, seed=1)
    answers = [pyfunc.reference_answer(p) for p in prompts]
    assert max(len(a) for a in answers) <= 8 and max(len(p.text) for p in prompts) <= 60
    assert pyfunc.score_batch(prompts, answers) == [1.0] * len(prompts)
    # equivalent rewrites score 1 too: the hidden tests judge behaviour, not text
    p = next(p for p in prompts if p.answer["expr"].count("x") == 1 and "%" not in p.text)
    assert pyfunc.score(p, f"  ({pyfunc.reference_answer(p)}) + 0 \n") == 1.0


def test_pyfunc_partial_credit_is_the_exact_fraction_of_hidden_inputs(pyfunc):
    hidden = [[x, x * x] for x in HIDDEN_XS]  # f(x) = x*x; hidden x: 4 negative, 6 positive
    p = Prompt(
        text="f(0)=0 f(1)=1 f(2)=4 f(3)=9 f(4)=16 f(x)=",
        answer={"expr": "x*x", "hidden": hidden},
        index=0,
        split="eval",
    )
    cases = {
        "x*x": 1.0,
        "x*abs(x)": 0.6,  # wrong on the 4 negative inputs
        "x*x if x<8 else 0": 0.7,  # wrong on 8, 9, 12
        "x*x+1//(x+4)*0": 0.9,  # ZeroDivisionError at x=-4 fails that input only
        "x*x/1": 0.0,  # floats are not ints
        "x*x==x*x": 0.0,  # nor are bools
        "-x*x": 0.0,
    }
    got = dict(zip(cases, pyfunc.score_batch([p] * len(cases), list(cases)), strict=True))
    assert got == pytest.approx(cases)


def test_pyfunc_malformed_and_hostile_output_scores_zero_quickly(pyfunc, tmp_path):
    marker = tmp_path / "pwned"
    p = pyfunc.eval_prompts()[0]
    hostile = [
        "",
        "x+",
        "2*x+1)",
        "import os",
        "def f(x): return x",
        f"__import__('os').system('touch {marker}')",
        "__import__('sys').exit(0)",
        "__import__('os')._exit(0)",
        "[x for _ in iter(int, 1)]",  # infinite loop
        "9**9**9",  # a huge computation
        "print('" + "ok\\n" * 5 + "') or x",
        "x" * 5000,
    ]
    start = time.monotonic()
    assert pyfunc.score_batch([p] * len(hostile), hostile) == [0.0] * len(hostile)
    assert time.monotonic() - start < 15
    assert not marker.exists()


def test_pyfunc_runs_duplicate_completions_once_and_counts_executions(pyfunc):
    p = pyfunc.eval_prompts()[1]
    pyfunc.reset_stats()
    ref = pyfunc.reference_answer(p)
    assert pyfunc.score_batch([p] * 6, [ref] * 4 + ["x+", "0"]) == [1.0] * 4 + [0.0, 0.0]
    s = pyfunc.stats
    assert (s["executions"], s["duplicates"], s["rejected"], s["passed"]) == (2, 3, 1, 4)


# --- splits -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["humaneval", "pyfunc", "mbpp"])
def test_held_out_split_is_fixed_and_train_is_a_pure_function_of_index_and_seed(name, mbpp_files):
    config = mbpp_files if name == "mbpp" else {"eval_size": 64} if name == "humaneval" else {}
    a, b = get_env(name, **config), get_env(name, **config)

    def key(p):
        return (p.text, json.dumps(p.answer, sort_keys=True))

    assert [key(p) for p in a.eval_prompts()] == [key(p) for p in b.eval_prompts()]
    assert [p.index for p in a.eval_prompts()] == list(range(len(a.eval_prompts())))
    n = len(a._train)
    indices = [0, 1, n - 1, n, 3 * n + 2, 5]
    first = [key(a.train_prompt(i, 7)) for i in indices]
    again = {i: key(b.train_prompt(i, 7)) for i in reversed(indices)}
    assert first == [again[i] for i in indices]
    epoch = [key(a.train_prompt(i, 7)) for i in range(n)]
    assert len(set(epoch)) == n  # each train problem once per epoch
    assert not {key(p) for p in a.eval_prompts()} & set(epoch)
    assert epoch != [key(a.train_prompt(i, 8)) for i in range(n)]


# --- mbpp --------------------------------------------------------------------------------


def mbpp_row(task_id, text, code, tests, setup="", challenge=()):
    return {
        "task_id": task_id,
        "text": text,
        "code": code,
        "test_list": list(tests),
        "test_setup_code": setup,
        "challenge_test_list": list(challenge),
    }


MBPP_TRAIN = [
    mbpp_row(
        2,
        "Write a function to find the similar elements from the given two tuple lists.",
        "def similar_elements(test_tup1, test_tup2):\r\n  res = tuple(set(test_tup1) & "
        "set(test_tup2))\r\n  return (res) ",
        [
            "assert similar_elements((3, 4, 5, 6),(5, 7, 4, 10)) == (4, 5)",
            "assert similar_elements((1, 2, 3, 4),(5, 4, 3, 7)) == (3, 4)",
            "assert similar_elements((11, 12, 14, 13),(17, 15, 14, 13)) == (13, 14)",
        ],
    ),
    mbpp_row(
        3,
        "Write a python function to identify non-prime numbers.",
        "import math\r\ndef is_not_prime(n):\r\n    result = False\r\n    for i in range(2,"
        "int(math.sqrt(n)) + 1):\r\n        if n % i == 0:\r\n            result = True\r\n"
        "    return result",
        [
            "assert is_not_prime(2) == False",
            "assert is_not_prime(10) == True",
            "assert is_not_prime(35) == True",
        ],
    ),
    mbpp_row(
        4,
        "Write a function to find the largest integers from a given list of numbers "
        "using heap queue algorithm.",
        "import heapq as hq\r\ndef heap_queue_largest(nums,n):\r\n  largest_nums = "
        "hq.nlargest(n, nums)\r\n  return largest_nums",
        [
            "assert heap_queue_largest( [25, 35, 22, 85, 14, 65, 75, 22, 58],3)==[85, 75, 65]",
            "assert heap_queue_largest( [25, 35, 22, 85, 14, 65, 75, 22, 58],2)==[85, 75]",
        ],
    ),
    mbpp_row(
        5,
        "Write a function to find the area of a circle.",
        "def circle_area(r):\r\n  return math.pi * r * r",
        [
            "assert isclose(circle_area(1), 3.14159, rel_tol=1e-4)",
            "assert isclose(circle_area(2), 12.56637, rel_tol=1e-4)",
        ],
        setup="import math\r\nfrom math import isclose",
    ),
    mbpp_row(
        6,
        "Write a python function to add two numbers.",
        "def add(a, b):\r\n  return a + b",
        ["assert add(1, 2) == 3", "assert add(-1, 1) == 0"],
        challenge=["assert add(10**20, 1) == 10**20 + 1"],
    ),
    mbpp_row(
        7,
        "Write a function to reverse a string.",
        "def rev(s):\r\n  return s[::-1]",
        ["assert rev('abc') == 'cba'", "assert rev('') == ''"],
    ),
]
MBPP_TEST = [
    mbpp_row(
        11,
        "Write a python function to remove first and last occurrence of a given "
        "character from the string.",
        "def remove_Occ(s,ch): \r\n    for i in range(len(s)): \r\n        if (s[i] == ch): "
        "\r\n            s = s[0 : i] + s[i + 1:] \r\n            break\r\n    for i in "
        "range(len(s) - 1,-1,-1):  \r\n        if (s[i] == ch): \r\n            s = s[0 : i] "
        "+ s[i + 1:] \r\n            break\r\n    return s ",
        [
            'assert remove_Occ("hello","l") == "heo"',
            'assert remove_Occ("abcda","a") == "bcd"',
            'assert remove_Occ("PHP","P") == "H"',
        ],
    ),
    mbpp_row(
        12,
        "Write a function to square a number.",
        "def square(x):\r\n  return x * x",
        ["assert square(3) == 9", "assert square(-2) == 4", "assert square(0) == 0"],
    ),
    mbpp_row(
        13,
        "Write a function to double a number.",
        "def double(x):\r\n  return 2 * x",
        ["assert double(3) == 6", "assert double(0) == 0", "assert double(-1) == -2"],
    ),
]


@pytest.fixture(scope="module")
def mbpp_files(tmp_path_factory):
    import pandas as pd

    d = tmp_path_factory.mktemp("mbpp-data")
    train = d / "mbpp-train.jsonl"
    train.write_text("".join(json.dumps(r) + "\n" for r in MBPP_TRAIN))
    test = d / "mbpp-test.parquet"
    pd.DataFrame(MBPP_TEST).to_parquet(test)
    return {"data_files": str(train), "eval_files": str(test), **FAST}


@pytest.fixture(scope="module")
def mbpp(mbpp_files):
    return get_env("mbpp", **mbpp_files)


def test_mbpp_loads_the_real_row_format_and_scores_reference_code_one(mbpp):
    prompts = mbpp.eval_prompts() + mbpp.train_prompts(0, 6, seed=0)
    assert sorted(p.answer["task_id"] for p in prompts) == [2, 3, 4, 5, 6, 7, 11, 12, 13]
    p = next(p for p in prompts if p.answer["task_id"] == 11)
    assert p.text.startswith("You are an expert Python programmer, and here is your task: ")
    # the first assert is the example; the other two are hidden
    assert 'assert remove_Occ("hello","l") == "heo"' in p.text
    assert "abcda" not in p.text and "PHP" not in p.text
    assert mbpp.score_batch(prompts, [mbpp.reference_answer(p) for p in prompts]) == [1.0] * 9
    fenced = f"Here you go:\n```python\n{mbpp.reference_answer(p)}\n```\nIt loops twice."
    assert mbpp.score(p, fenced) == 1.0


def test_mbpp_wrong_and_malformed_code_scores_zero_with_pass_fraction(mbpp):
    by_id = {p.answer["task_id"]: p for p in mbpp.eval_prompts() + mbpp.train_prompts(0, 6, 0)}
    p3, p12 = by_id[3], by_id[12]
    details = mbpp.score_details(
        [p3, p12, p12, p12, p12, p12, p12],
        [
            "def is_not_prime(n):\n    return n % 2 == 0",  # passes 1 of 3
            "def square(x):\n    return x * abs(x)",  # passes 2 of 3
            "def square(x):\n    return (",  # syntax error
            "def square(x):\n    while True: pass",  # infinite loop
            "import sys\nsys.exit(0)",
            "import os\nos.system('echo hi')\ndef square(x): return 1",
            "",
        ],
    )
    assert details == [
        (0.0, pytest.approx(1 / 3)),
        (0.0, pytest.approx(2 / 3)),
        (0.0, 0.0),
        (0.0, 0.0),
        (0.0, 0.0),
        (0.0, 0.0),
        (0.0, 0.0),
    ]


def test_mbpp_setup_code_and_challenge_tests(mbpp_files, mbpp):
    by_id = {p.answer["task_id"]: p for p in mbpp.train_prompts(0, 6, 0)}
    # task 5's code and tests use names that only its test_setup_code imports
    assert mbpp.score(by_id[5], mbpp.reference_answer(by_id[5])) == 1.0
    bounded = "def add(a, b):\n    return float(a) + b"  # fails only the challenge test
    assert mbpp.score(by_id[6], bounded) == 1.0
    strict = get_env("mbpp", **mbpp_files, challenge_tests=True)
    assert strict.score(by_id[6], bounded) == 0.0
    assert strict.score(by_id[6], mbpp.reference_answer(by_id[6])) == 1.0


def test_mbpp_without_eval_files_splits_held_out_rows_off_train(mbpp_files):
    env = get_env("mbpp", data_files=mbpp_files["data_files"], eval_size=2)
    assert env.describe()["sizes"] == {"train": 4, "eval": 2}
    held = {p.answer["task_id"] for p in env.eval_prompts()}
    assert not held & {p.answer["task_id"] for p in env.train_prompts(0, 8, seed=0)}
    with pytest.raises(ConfigError, match="eval_size"):
        get_env("mbpp", data_files=mbpp_files["data_files"], eval_size=6)


def test_mbpp_bad_rows_and_missing_data_errors_say_where_it_looked(tmp_path, monkeypatch):
    import datasets

    cache = tmp_path / "hf-datasets-cache"
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", cache)
    start = time.monotonic()
    with pytest.raises(ConfigError) as err:
        get_env("mbpp")
    message = str(err.value)
    for part in (
        "google-research-datasets/mbpp",
        "full",
        str(cache),
        "offline",
        "data_files=",
        "test_list",
    ):
        assert part in message, part
    assert time.monotonic() - start < 20  # offline: no network retries
    missing = tmp_path / "nowhere" / "mbpp.jsonl"
    with pytest.raises(ConfigError, match="data_files=") as err:
        get_env("mbpp", data_files=str(missing))
    assert str(missing) in str(err.value)
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"task_id": 1, "text": "t", "code": "c", "test_list": []}) + "\n")
    with pytest.raises(ConfigError, match=r"row 0 of .*bad\.jsonl.*test_list"):
        get_env("mbpp", data_files=str(bad), eval_size=1)


# --- mbpp: one assert shown, the rest hidden ----------------------------------------------


def candidate_call(node: ast.expr) -> ast.Call | None:
    """The call to the task's own function in one side of an assert, looking through the
    builtins wrapped around it (``set(f(x))``, ``sorted(f(x))``)."""
    while isinstance(node, ast.Call):
        if isinstance(node.func, ast.Name) and not hasattr(builtins, node.func.id):
            return node
        if not node.args:
            return None
        node = node.args[0]
    return None


def lookup_table_answer(text: str, default: str = "None", rename: dict | None = None) -> str:
    """A completion built from ``text`` alone (a prompt, or any lines of asserts): each
    function an ``assert`` line calls returns that line's expected value for that line's
    arguments, and ``default`` (source) for any other; ``rename`` maps a called name to
    the name to define (HumanEval's ``candidate`` to its entry point). It solves nothing:
    it passes the asserts it saw."""
    rename = rename or {}
    cases: dict[str, list[str]] = {}
    for line in text.splitlines():
        try:
            test = ast.parse(line).body[0].test if line.startswith("assert ") else None
        except SyntaxError:
            continue
        if isinstance(test, ast.Compare) and isinstance(test.ops[0], ast.Eq | ast.Is):
            call, expected = candidate_call(test.left), test.comparators[0]
            if call is None:
                call, expected = candidate_call(test.comparators[0]), test.left
        elif isinstance(test, ast.Call) and len(test.args) >= 2:  # isclose(f(x), value, ...)
            call, expected = candidate_call(test.args[0]), test.args[1]
        elif isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            call, expected = candidate_call(test.operand), ast.Constant(False)
        else:  # assert f(x), or a line that is no assert
            call, expected = candidate_call(test) if test else None, ast.Constant(True)
        if call is None:
            continue
        args = ast.unparse(ast.Tuple(call.args, ast.Load()))
        kwargs = ", ".join(f"{k.arg!r}: {ast.unparse(k.value)}" for k in call.keywords)
        cases.setdefault(call.func.id, []).append(
            f"    if (args, kwargs) == ({args}, {{{kwargs}}}):\n"
            f"        return {ast.unparse(expected)}\n"
        )
    return "".join(
        f"def {rename.get(name, name)}(*args, **kwargs):\n{''.join(branches)}    return {default}\n"
        for name, branches in cases.items()
    )


def test_mbpp_shows_the_first_assert_and_a_table_of_it_passes_no_hidden_one(mbpp):
    """A lookup table built from the prompt alone answers the shown assert and nothing
    else: reward 0 and hidden pass fraction 0 on every task (all have 2 or 3 asserts). The
    same table built from all of a task's asserts, which the prompt showed before, scores
    1, so the attack works where it can see the tests; the reference scores 1 with every
    hidden assert passed."""
    prompts = mbpp.eval_prompts() + mbpp.train_prompts(0, 6, seed=0)
    n = len(prompts)
    from_prompt = [lookup_table_answer(p.text) for p in prompts]
    from_all = [lookup_table_answer("\n".join(p.answer["test_list"])) for p in prompts]
    references = [mbpp.reference_answer(p) for p in prompts]
    mbpp.reset_stats()
    completions = from_prompt + from_all + references + [""]  # "": rejected unrun
    scored = mbpp.score_verdicts([*prompts] * 3 + [prompts[0]], completions)
    for p, s in zip(prompts, scored[:n], strict=True):
        asserts = len(p.answer["test_list"])
        assert asserts > 1 and p.text.count("\nassert ") == 1
        assert (s.reward, s.hidden_fraction) == (0.0, 0.0), p.answer["task_id"]
        assert s.fraction == pytest.approx(1 / asserts), p.answer["task_id"]  # the shown one
    honest = [(s.reward, s.fraction, s.hidden_fraction) for s in scored[n:-1]]
    assert honest == [(1.0, 1.0, 1.0)] * (2 * n)
    assert (scored[-1].reward, scored[-1].hidden_fraction) == (0.0, 0.0)
    stats = mbpp.stats
    assert stats["hidden_scored"] == 3 * n + 1 and stats["rejected"] == 1
    assert stats["hidden_pass_fraction_mean"] == pytest.approx(2 * n / (3 * n + 1))
    # score_details keeps its (reward, pass fraction over all asserts) pairs
    assert mbpp.score_details(prompts[:1], from_prompt[:1])[0] == (0.0, scored[0].fraction)


def test_mbpp_partial_hidden_fraction_and_tasks_with_nothing_hidden(mbpp, mbpp_files, tmp_path):
    by_id = {p.answer["task_id"]: p for p in mbpp.eval_prompts()}
    # square: x * abs(x) passes the shown square(3) == 9 and one of the two hidden asserts
    [s] = mbpp.score_verdicts([by_id[12]], ["def square(x):\n    return x * abs(x)"])
    assert (s.reward, s.fraction, s.hidden_fraction) == (0.0, pytest.approx(2 / 3), 0.5)
    # A task with a single assert shows it: nothing is hidden, so no hidden fraction.
    rows = [
        mbpp_row(
            21,
            "Write a function to negate a number.",
            "def neg(x):\r\n  return -x",
            ["assert neg(2) == -2"],
        ),
        mbpp_row(
            22,
            "Write a function to halve a number.",
            "def half(x):\r\n  return x / 2",
            ["assert half(4) == 2", "assert half(1) == 0.5"],
        ),
    ]
    data = tmp_path / "mbpp.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    env = get_env("mbpp", data_files=str(data), eval_files=str(data), **FAST)
    prompts = sorted(env.eval_prompts(), key=lambda p: p.answer["task_id"])
    scored = env.score_verdicts(prompts, [lookup_table_answer(p.text) for p in prompts])
    assert [(s.reward, s.hidden_fraction) for s in scored] == [(1.0, None), (0.0, 0.0)]
    assert env.stats["hidden_scored"] == 1
    for shown in (0, 3):
        with pytest.raises(ConfigError, match="shown_tests must be 1"):
            get_env("mbpp", **{**mbpp_files, "shown_tests": shown})


@pytest.mark.slow
@pytest.mark.recheck  # re-measures a committed figure on real data: scripts/check-all.sh
def test_real_sanitized_mbpp_a_table_of_the_prompt_fails_and_references_pass(tmp_path):
    """All 427 tasks of the sanitized MBPP (its four splits): a local copy of Google's file
    named by ``FORGE_ZOO_MBPP_SANITIZED_JSON``, else the Hugging Face cache, else skipped
    (``tests/real_data.py``). With every assert shown, as before, a table of the prompt
    passed 388 of them. With one shown, the table must score 0 on the hidden asserts of at
    least 95% of the tasks (measured: 415 of 427; the rest are asserts like ``not f(x)``
    or ``f(x) == None`` that its None for unseen inputs answers) and be rewarded on at most
    5%; the reference code passes at least 95% (``tests/test_honest_answers.py`` requires
    all 427) and the table built from all asserts (the control) at least 80%."""
    data = sanitized_mbpp_file(tmp_path)
    env = get_env("mbpp", data_files=str(data), eval_files=str(data), eval_size=0, timeout_s=60.0)
    prompts = env.eval_prompts()
    assert len(prompts) == 427
    assert all(len(p.answer["test_list"]) > 1 for p in prompts)  # every task hides some
    table = env.score_verdicts(prompts, [lookup_table_answer(p.text) for p in prompts])
    references = env.score_batch(prompts, [env.reference_answer(p) for p in prompts])
    seen_all = [lookup_table_answer("\n".join(p.answer["test_list"])) for p in prompts]
    control = env.score_batch(prompts, seen_all)
    hidden_zero = sum(s.hidden_fraction == 0.0 for s in table)
    assert hidden_zero >= 0.95 * len(prompts), hidden_zero
    assert sum(s.reward for s in table) <= 0.05 * len(prompts)
    assert sum(references) >= 0.95 * len(prompts), sum(references)
    assert sum(control) >= 0.80 * len(prompts), sum(control)


# --- isolation required ------------------------------------------------------------------


def test_code_envs_refuse_to_run_without_isolation(monkeypatch):
    monkeypatch.setattr(sandbox_module, "_backend", None)
    monkeypatch.setattr(sandbox_module.shutil, "which", lambda name: None)
    monkeypatch.delenv(sandbox_module.UNSAFE_ENV_VAR, raising=False)
    for name in ("pyfunc", "humaneval"):
        with pytest.raises(CodeEnvUnavailable) as err:
            get_env(name)
        assert isinstance(err.value, ConfigError) and isinstance(err.value, SandboxUnavailable)
        assert "bwrap" in str(err.value) and sandbox_module.UNSAFE_ENV_VAR in str(err.value)


# --- the tiny-code preset, end to end ------------------------------------------------------


def test_tiny_code_preset_leaves_the_tiny_recipe_key_alone():
    from zoo.models.presets import MODEL_PRESETS, model_shape
    from zoo.models.tiny import RECIPE_VERSION, TINY_PRESETS, TinyRecipe

    fields = dataclasses.asdict(TinyRecipe())
    assert fields.pop("task") == "arithmetic"
    assert fields.pop("tool_fraction") == 0.0 and fields.pop("max_tool_rate") == 1.0  # (later)
    assert fields.pop("merge_fraction") == 0.0  # (later: tiny-sum)
    assert fields.pop("data") == "train"  # (later: pyfunc's warm-start split)
    legacy = json.dumps({"v": RECIPE_VERSION, **fields}, sort_keys=True)
    assert TinyRecipe().key() == hashlib.sha256(legacy.encode()).hexdigest()[:12]
    assert TINY_PRESETS["tiny"] == TinyRecipe()
    assert TINY_PRESETS["tiny-code"].key() != TinyRecipe().key()
    assert "tiny-code" in MODEL_PRESETS
    assert model_shape("tiny-code") == model_shape("tiny")


def test_pyfunc_warm_start_train_and_held_out_share_no_function(pyfunc):
    def functions(prompts):
        return {p.answer["expr"] for p in prompts}

    train = functions(pyfunc.train_prompts(0, 239, seed=3))
    warm = functions(pyfunc.warm_start_prompts(0, 400, seed=3))
    held_out = functions(pyfunc.eval_prompts())
    assert (len(train), len(warm), len(held_out)) == (239, 400, 500)  # one epoch each
    assert not train & warm and not train & held_out and not warm & held_out
    assert {p.split for p in pyfunc.warm_start_prompts(0, 5, seed=0)} == {"warm_start"}
    # without a warm-start split the warm start draws from train (the other envs' way)
    shared = get_env("pyfunc", warm_start_size=0)
    assert len(shared._train) == 639
    assert shared.warm_start_prompts(0, 3, seed=1) == shared.train_prompts(0, 3, seed=1)
    with pytest.raises(ConfigError, match=r"warm_start_size must be in 0\.\.638"):
        get_env("pyfunc", warm_start_size=639)


@pytest.fixture(scope="module")
def tiny_code_path(tmp_path_factory):
    import os

    if not os.environ.get("FORGE_ZOO_CACHE"):
        os.environ["FORGE_ZOO_CACHE"] = str(tmp_path_factory.mktemp("forge-zoo-cache"))
    from zoo.models.tiny import TINY_PRESETS, tiny_model_path

    return tiny_model_path(TINY_PRESETS["tiny-code"])


def test_tiny_code_warm_start_reached_its_target_through_the_sandbox(tiny_code_path):
    info = json.loads((tiny_code_path / "forge_zoo_recipe.json").read_text())
    assert info["recipe"]["task"] == "pyfunc"
    assert info["history"][-1]["accuracy"] >= info["recipe"]["target_accuracy"]


@pytest.mark.slow  # ~18 s: trains through the sandbox
def test_tiny_model_trains_on_pyfunc_for_a_few_steps_end_to_end(tiny_code_path, tmp_path):
    result = run_harness(
        "run",
        "grpo",
        "--env",
        "pyfunc",
        "--model",
        "tiny-code",
        "--steps",
        "3",
        "--prompts-per-step",
        "16",
        "--eval-every",
        "3",
        "--max-response-len",
        "9",
        "--env-set",
        "eval_size=50",
        "--out",
        "run",
        "--quiet",
        cwd=tmp_path,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    records = [
        json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().split("\n") if x
    ]
    assert sorted({r["step"] for r in records}) == [0, 1, 2, 3]
    losses = [r["loss"] for r in records if "loss" in r]
    assert len(losses) >= 1 and all(math.isfinite(x) for x in losses)
    evals = [r["eval_reward"] for r in records if "eval_reward" in r]
    assert len(evals) == 2 and all(0.0 <= e <= 1.0 for e in evals)
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert Path(config["model_path"]).name.startswith("tiny-")


# --- a table of the shown examples plus a guessed constant (issue 57) -------------------


def shown_output(text: str) -> str:
    """The source of the expected value of the first ``assert`` line of ``text``: the
    constant a table-copying policy might answer everywhere else."""
    for line in text.splitlines():
        if line.startswith("assert "):
            table = lookup_table_answer(line)
            marker = "        return "
            if marker in table:
                return table.split(marker, 1)[1].split("\n", 1)[0]
    return "None"


def guessed_default_answers(env_name: str, prompts: list[Prompt]) -> list[list[str]]:
    """Per prompt, the completions of the attack: the shown examples' table, and each of
    ``GUESSED_DEFAULTS`` (and, for MBPP, the shown expected value; for HumanEval, the most
    frequent example output) for every other input."""
    out = []
    for p in prompts:
        if env_name == "mbpp":
            defaults = [*GUESSED_DEFAULTS, shown_output(p.text)]
            out.append([lookup_table_answer(p.text, d) for d in defaults])
        else:
            out.append([docstring_answer(d) for d in (*GUESSED_DEFAULTS, None)])
    return out


def paid_by_guessed_defaults(env, env_name: str) -> list:
    """The task ids on which some answer of ``guessed_default_answers`` is rewarded."""
    prompts = env.eval_prompts()
    answers = guessed_default_answers(env_name, prompts)
    flat_prompts = [p for p, a in zip(prompts, answers, strict=True) for _ in a]
    scores = env.score_batch(flat_prompts, [c for a in answers for c in a])
    paid = {p.answer["task_id"] for p, r in zip(flat_prompts, scores, strict=True) if r}
    return sorted(paid, key=str)


def test_mbpp_shows_the_assert_that_leaves_no_constant_answer_for_the_hidden_ones(tmp_path):
    """Shown first, ``is_even(2) == True`` would leave two hidden asserts expecting False,
    which ``return False`` passes; the env shows the first whose hidden rest expects two
    values no constant can both be, here the second, and a table of it plus any guessed
    constant is not rewarded. A task whose asserts all expect one value is marked
    guessable (``mbpp_feedback`` refuses it)."""
    rows = [
        mbpp_row(
            31,
            "Write a function to check if a number is even.",
            "def is_even(n):\r\n  return n % 2 == 0",
            [
                "assert is_even(2) == True",
                "assert is_even(3) == False",
                "assert is_even(5) == False",
            ],
        ),
        mbpp_row(
            32,
            "Write a function that returns True.",
            "def yes(n):\r\n  return True",
            ["assert yes(1) == True", "assert yes(2) == True", "assert yes(3) == True"],
        ),
    ]
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    env = get_env("mbpp", data_files=str(data), eval_files=str(data), eval_size=0, **FAST)
    p31, p32 = sorted(env.eval_prompts(), key=lambda p: p.answer["task_id"])
    assert "assert is_even(3) == False" in p31.text and "is_even(2)" not in p31.text
    assert (p31.answer["shown_index"], p31.answer["guessable"]) == (1, False)
    assert (p32.answer["shown_index"], p32.answer["guessable"]) == (0, True)
    attacks = guessed_default_answers("mbpp", [p31])[0]
    assert env.score_batch([p31] * len(attacks), attacks) == [0.0] * len(attacks)
    assert env.score(p31, env.reference_answer(p31)) == 1.0


def test_the_asserts_humaneval_adds_are_its_canonical_solutions_answers():
    """``EXTRA_TESTS`` (HumanEval/34, /40, /54): the canonical solutions pass them (so a
    correct answer is rewarded with or without them) and a table of the docstring's
    examples plus a guessed constant, rewarded there on HumanEval's own tests, is not."""
    from zoo.envs.code.humaneval import EXTRA_TESTS

    env = get_env("humaneval", **FAST)
    own = get_env("humaneval", extra_tests=False, **FAST)
    tasks = sorted(EXTRA_TESTS)
    prompts = [p for p in env.eval_prompts() if p.answer["task_id"] in EXTRA_TESTS]
    prompts.sort(key=lambda p: p.answer["task_id"])
    assert [p.answer["task_id"] for p in prompts] == tasks
    for p in prompts:
        assert all(a in p.answer["test"] for a in EXTRA_TESTS[p.answer["task_id"]])
        assert not p.answer["guessable"]
    assert env.score_batch(prompts, [env.reference_answer(p) for p in prompts]) == [1.0] * 3
    table = docstring_answer("False")  # /40 and /54: every assert the docstring hides is False
    own_prompts = [p for p in own.eval_prompts() if p.answer["task_id"] in EXTRA_TESTS]
    own_prompts.sort(key=lambda p: p.answer["task_id"])
    assert own.score_batch(own_prompts[1:], [table] * 2) == [1.0, 1.0]  # the hole, before
    assert env.score_batch(prompts[1:], [table] * 2) == [0.0, 0.0]
    assert own.score(own_prompts[0], docstring_answer(None)) == 1.0  # /34: one assert, shown
    assert env.score(prompts[0], docstring_answer(None)) == 0.0


@pytest.mark.recheck  # ~2-6 minutes of sandboxed verdicts: scripts/check-all.sh
@pytest.mark.slow  # ~13 x (427 + 164) verdicts: a few minutes on 2 busy cores
def test_real_data_a_table_of_the_examples_plus_a_guessed_constant_is_paid_on_at_most_1_percent(
    tmp_path,
):
    """Issue 57: with the first MBPP assert shown, the table of it plus a guessed default
    (0 or False rather than None) was rewarded on 20 of 427 tasks. Now the shown assert
    leaves two hidden ones no constant can both satisfy wherever the asserts allow
    (``zoo.envs.code.shown_tests``), and HumanEval gets two asserts where its own tests
    allowed it (/34, /40, /54). Measured over ``GUESSED_DEFAULTS`` and the shown value:
    MBPP 0 of 427, HumanEval 0 of 164 (docs/envs.md; this test on the code before the fix:
    20 of 427 and 3 of 164); the bound is 1% of each."""
    data = sanitized_mbpp_file(tmp_path)
    mbpp = get_env("mbpp", data_files=str(data), eval_files=str(data), eval_size=0)
    humaneval = get_env("humaneval")
    assert len(mbpp.eval_prompts()) == 427 and len(humaneval.eval_prompts()) == 164
    paid_mbpp = paid_by_guessed_defaults(mbpp, "mbpp")
    paid_humaneval = paid_by_guessed_defaults(humaneval, "humaneval")
    print(
        f"\nguessed defaults paid: mbpp {len(paid_mbpp)}/427 {paid_mbpp}, "
        f"humaneval {len(paid_humaneval)}/164 {paid_humaneval}"
    )
    assert len(paid_mbpp) <= 0.01 * 427, paid_mbpp
    assert len(paid_humaneval) <= 0.01 * 164, paid_humaneval
