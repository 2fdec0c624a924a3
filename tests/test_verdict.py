"""zoo.envs.verdict and zoo.envs.plain_calls: two sandboxes, plain data between them.

The wire format round-trips every plain type exactly and refuses everything else; a
verdict passes only when the tests' own process finishes; candidates' exceptions, exits,
prints and tampering change nothing on the tests' side; the tests use the trusted
prelude's helpers. The attacks through the real envs are in tests/test_reward_hacking.py.
"""

from __future__ import annotations

import math
import textwrap

import pytest

from zoo.envs import plain_calls, verdict
from zoo.envs.plain_calls import WireError, decode, encode
from zoo.envs.sandbox import execute
from zoo.envs.verdict import TestJob, free_names, run_tests

LIMITS = {"timeout_s": 5.0, "memory_mb": 256}

TESTS = """
def check(candidate):
    assert candidate(2, 3) == 5
    assert candidate(-1, 1) == 0
    assert len([candidate(0, 0)]) == 1

check(add)
"""
CORRECT = "def add(a, b):\n    return a + b\n"
WRONG = "def add(a, b):\n    return a - b\n"


def verdict_of(candidate: str, tests: str = TESTS, serve=("add",), prelude: str = ""):
    job = TestJob(textwrap.dedent(candidate), textwrap.dedent(tests), tuple(serve), prelude)
    return run_tests(job, **LIMITS)


# --- the wire format ---------------------------------------------------------------------

PLAIN_VALUES = [
    None, True, False, 0, -7, 10**5000, -(2**70), 1.5, -0.0, math.inf, -math.inf, 1e-310,
    2 + 3j, "", "héllo \udc80 lone surrogate", b"", b"\x00\xff", [], [1, [2, [3]]], (),
    (1, "a", (None,)), {}, {1: "a", (2, 3): [4], "k": {"n": frozenset({1})}}, set(),
    {1, "x", (2,)}, frozenset({b"b"}),
]  # fmt: skip


@pytest.mark.parametrize("value", PLAIN_VALUES, ids=lambda v: type(v).__name__)
def test_plain_values_round_trip_with_their_exact_types(value):
    back = decode(encode(value))
    assert type(back) is type(value)
    assert back == value
    if type(value) is float:
        assert math.copysign(1, back) == math.copysign(1, value)


def test_nan_round_trips_and_containers_keep_their_element_types():
    assert math.isnan(decode(encode(float("nan"))))
    back = decode(encode([True, 1, 1.0, "1", b"1"]))
    assert [type(v) for v in back] == [bool, int, float, str, bytes]


class LyingInt(int):
    def __eq__(self, other):
        return True

    __hash__ = int.__hash__


class LyingList(list):
    pass


@pytest.mark.parametrize(
    "value",
    [LyingInt(1), LyingList(), object(), (x for x in ()), iter([]), len, [1, object()],
     {1: {2: [LyingInt(3)]}}, NotImplemented, Ellipsis, bytearray(b"x"), range(3)],
    ids=lambda v: type(v).__name__,
)  # fmt: skip
def test_anything_but_plain_data_is_refused(value):
    with pytest.raises(WireError, match="not plain data"):
        encode(value)


def test_nesting_deeper_than_the_limit_is_refused_both_ways():
    deep: list = []
    for _ in range(plain_calls.MAX_DEPTH + 5):
        deep = [deep]
    with pytest.raises(WireError, match="nested deeper"):
        encode(deep)
    crafted = b"l1:" * (plain_calls.MAX_DEPTH + 5) + b"l0:"
    with pytest.raises(WireError, match="nested deeper"):
        decode(crafted)


@pytest.mark.parametrize(
    "data",
    [b"", b"x", b"i12", b"izz;", b"fzz;", b"s5:abc", b"l2:N", b"d1:N", b"NN", b"s-1:",
     b"d1:l0:N", b"c0x1p+0;"],
)  # fmt: skip
def test_malformed_data_is_a_wire_error(data):
    with pytest.raises(WireError):
        decode(data)


def test_rebuilt_exceptions_are_this_side_builtins_or_candidate_errors():
    assert type(plain_calls.rebuild_exception("ValueError", "bad x")) is ValueError
    assert str(plain_calls.rebuild_exception("KeyError", "k")) == "'k'"
    for name in ("SystemExit", "KeyboardInterrupt", "MyError", "__import__", "print"):
        assert type(plain_calls.rebuild_exception(name, "m")) is plain_calls.CandidateError


# --- verdicts ----------------------------------------------------------------------------


def test_correct_candidate_passes_and_wrong_one_fails():
    good = verdict_of(CORRECT)
    assert good.passed and good.status == "ok", good
    bad = verdict_of(WRONG)
    assert not bad.passed and bad.status == "error"
    assert "AssertionError" in bad.tests.stderr


def test_faking_success_by_printing_is_not_a_pass():
    fake = verdict_of(WRONG + "print('ok')\nprint('PASSED', flush=True)\n")
    assert not fake.passed
    assert fake.candidate.stdout.startswith("ok\nPASSED")  # it printed, in its own process
    assert "PASSED" not in fake.tests.stdout
    assert verdict_of(CORRECT).passed


@pytest.mark.parametrize(
    "exit_call", ["import sys; sys.exit(0)", "import os; os._exit(0)", "raise SystemExit(0)"]
)
def test_exiting_early_is_not_a_pass(exit_call):
    early = verdict_of(f"{WRONG}print('ok')\n{exit_call}\n")
    assert not early.passed
    assert early.candidate.status == "ok"  # it did exit with status 0
    during = verdict_of(f"def add(a, b):\n    print('ok', flush=True)\n    {exit_call}\n")
    assert not during.passed


def test_a_guessed_or_found_nonce_is_not_a_pass(monkeypatch):
    known = "0123456789abcdef" * 2
    monkeypatch.setattr(verdict.secrets, "token_hex", lambda n: known[: 2 * n])
    # Look everywhere a candidate could read from for something nonce-shaped.
    candidate = r"""
        import gc, os, re, sys
        seen = [open(sys.argv[0]).read(), " ".join(sys.argv), str(dict(os.environ))]
        seen += [str(o) for o in gc.get_objects() if type(o) in (str, dict)]
        for fd in os.listdir("/proc/self/fd"):
            try:
                seen.append(os.readlink(f"/proc/self/fd/{fd}"))
            except OSError:
                pass
        guesses = set(re.findall(r"[0-9a-f]{32}", "\n".join(seen)))
        print("\n".join(sorted(guesses | {"f" * 32})), flush=True)
        os._exit(0)
    """
    result = verdict_of(candidate)
    assert not result.passed
    assert result.candidate.stdout.splitlines()[-1] == "f" * 32  # it did print its guesses
    assert known not in result.candidate.stdout  # and the nonce was nowhere to be found
    monkeypatch.undo()
    assert verdict_of(CORRECT).passed


HELPER_TESTS = """
def assert_close(a, b):
    assert abs(a - b) < 1e-9, (a, b)

def check(candidate):
    assert all(candidate(a, b) == a + b for a, b in [(2, 3), (-1, 1)])
    assert_close(candidate(0.5, 0.25), 0.75)
    assert isinstance(candidate(1, 2), int)
    print("checked", len([1, 2]))

check(add)
"""
TAMPERING = {
    "globals": "abs = lambda x: 0\nall = lambda it: True\nisinstance = lambda *a: True\n",
    "builtins-module": (
        "import builtins\nbuiltins.abs = lambda x: 0\nbuiltins.all = lambda it: True\n"
        "builtins.isinstance = lambda *a: True\n"
    ),
    "helpers": "def check(candidate):\n    pass\ndef assert_close(a, b):\n    pass\n",
    "stdout": "import sys\nsys.stdout = open('/dev/null', 'w')\n",
    "os-exit": "import os\nos._exit = lambda code: None\n",
}


@pytest.mark.parametrize("hack", TAMPERING.values(), ids=TAMPERING.keys())
def test_tampering_in_the_candidates_process_does_not_reach_the_tests(hack):
    # Control: appended naively after this wrong solution, redefined builtins make the
    # tests "pass" (exit 0).
    if hack in (TAMPERING["globals"], TAMPERING["builtins-module"]):
        naive = execute(WRONG + hack + HELPER_TESTS, **LIMITS)
        assert (naive.status, naive.stdout) == ("ok", "checked 2\n")
    assert not verdict_of(WRONG + hack, HELPER_TESTS).passed
    good = verdict_of(CORRECT + hack, HELPER_TESTS)
    assert good.passed, good
    assert "checked 2" in good.tests.stdout


def test_exceptions_come_back_as_exceptions():
    candidate = """
        class Custom(Exception):
            pass
        def parse(text):
            if text == "custom":
                raise Custom("mine")
            if text == "exit":
                raise SystemExit(0)
            return int(text)
    """
    tests = """
        assert parse("12") == 12
        try:
            parse("x")
        except ValueError as exc:
            assert "invalid literal" in str(exc)
        else:
            raise AssertionError("no ValueError")
        for text in ("custom", "exit"):
            try:
                parse(text)
            except Exception as exc:
                assert type(exc).__name__ == "CandidateError", exc
            else:
                raise AssertionError("no exception")
        try:
            missing(1)
        except NameError:
            print("no such function")
    """
    result = verdict_of(candidate, tests, serve=("parse", "missing"))
    assert result.passed, result.tests.stderr
    assert "no such function" in result.tests.stdout


def test_the_tests_use_the_trusted_prelude_not_the_candidates_helpers():
    # HumanEval/38's shape: the prompt defines encode_cyclic; the candidate writes the
    # decoder. A candidate that redefines the helper as the identity (and decodes by the
    # identity) would pass if the tests used its helper.
    prelude = "def encode(s):\n    return s[1:] + s[:1]\n\ndef decode(s):\n    ...\n"
    cheat = prelude.replace("s[1:] + s[:1]", "s").replace("...", "return s")
    honest = prelude.replace("...", "return s[-1:] + s[:-1]")
    tests = "for s in ('abc', 'hello'):\n    assert decode(encode(s)) == s\n"
    assert not verdict_of(cheat, tests, serve=("decode",), prelude=prelude).passed
    assert verdict_of(honest, tests, serve=("decode",), prelude=prelude).passed


def test_arguments_cross_as_copies():
    candidate = "def clear(items):\n    items.clear()\n    return len(items)\n"
    tests = "data = [1, 2]\nassert clear(data) == 0\nassert data == [1, 2]\n"
    assert verdict_of(candidate, tests, serve=("clear",)).passed


def test_a_candidate_that_hangs_or_floods_reports_its_own_status():
    hang = verdict_of("def add(a, b):\n    while True:\n        pass\n")
    assert (hang.passed, hang.status, hang.candidate.status) == (False, "timeout", "timeout")
    flood = verdict_of("def add(a, b):\n    print('x' * (1 << 22))\n    return a + b\n")
    assert (flood.passed, flood.status) == (False, "killed")
    assert verdict_of(CORRECT).passed


def test_free_names_are_the_functions_the_tests_call():
    tests = "assert similar((3, 4), (4, 5)) == (4,)\nassert isclose(area(1), math.pi)\n"
    assert sorted(free_names(tests, "from math import isclose")) == ["area", "math", "similar"]
    assert free_names("x = 1\nassert f(x) == len([x])\n") == ["f"]
