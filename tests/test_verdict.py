"""zoo.envs.execution.verdict and zoo.envs.execution.plain_calls: two sandboxes, plain data
between them.

The wire format round-trips every plain type exactly and refuses everything else; a
verdict passes only when the tests' own process finishes; candidates' exceptions, exits,
prints and tampering change nothing on the tests' side; the tests use the trusted
prelude's helpers. The attacks through the real envs are in tests/test_reward_hacking.py.
"""

from __future__ import annotations

import collections
import decimal
import enum
import fractions
import math
import re
import textwrap

import pytest

from zoo.envs.execution import plain_calls, verdict
from zoo.envs.execution.plain_calls import WireError, decode, encode
from zoo.envs.execution.sandbox import execute
from zoo.envs.execution.verdict import TestJob, free_names, run_tests

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
    None,
    True,
    False,
    0,
    -7,
    10**5000,
    -(2**70),
    1.5,
    -0.0,
    math.inf,
    -math.inf,
    1e-310,
    2 + 3j,
    "",
    "héllo \udc80 lone surrogate",
    b"",
    b"\x00\xff",
    [],
    [1, [2, [3]]],
    (),
    (1, "a", (None,)),
    {},
    {1: "a", (2, 3): [4], "k": {"n": frozenset({1})}},
    set(),
    {1, "x", (2,)},
    frozenset({b"b"}),
]


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
    [
        LyingInt(1),
        LyingList(),
        object(),
        (x for x in ()),
        iter([]),
        len,
        [1, object()],
        {1: {2: [LyingInt(3)]}},
        NotImplemented,
        Ellipsis,
        bytearray(b"x"),
        range(3),
    ],
    ids=lambda v: type(v).__name__,
)
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
    [
        b"",
        b"x",
        b"i12",
        b"izz;",
        b"fzz;",
        b"s5:abc",
        b"l2:N",
        b"d1:N",
        b"NN",
        b"s-1:",
        b"d1:l0:N",
        b"c0x1p+0;",
    ],
)
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


# --- the values layer: what crosses besides plain data ------------------------------------


def round_trip(value):
    """``value`` lowered as the candidate's side does, sent, and rebuilt as the tests' side
    does (on the host: the same functions the sandboxes run)."""
    objects = []

    def opaque(obj):
        objects.append(obj)
        return (verdict.MARK, "object", len(objects) - 1, type(obj).__name__)

    wire = encode(verdict.lower(value, opaque))
    return verdict.rebuild(decode(wire), lambda index, name: ("opaque", index, name))


Point = collections.namedtuple("Point", ["x", "y"])


class Colour(enum.IntEnum):
    RED = 1


class Honest(str):
    pass


@pytest.mark.parametrize(
    "value",
    [
        collections.Counter("abracadabra"),
        collections.Counter({"z": 0, "n": -2}),
        collections.OrderedDict([("b", 1), ("a", 2)]),
        collections.defaultdict(list, {1: [2]}),
        collections.deque([1, 2, 3], maxlen=2),
        collections.deque(),
        Point(1, (2, 3)),
        fractions.Fraction(-3, 4),
        decimal.Decimal("0.10"),
        [Point(1, 2), {Point(0, 0)}],
        {Point(1, 2): collections.Counter("aa")},
    ],
    ids=lambda v: type(v).__name__,
)
def test_standard_library_values_cross_as_themselves(value):
    back = round_trip(value)
    assert type(back).__name__ == type(value).__name__
    assert back == value and repr(back) == repr(value)
    if isinstance(value, collections.OrderedDict):
        assert list(back) == ["b", "a"]  # order kept: OrderedDicts compare in order
    if isinstance(value, collections.defaultdict):
        assert back.default_factory is list and back["new"] == []
    if isinstance(value, collections.deque):
        assert back.maxlen == value.maxlen


def test_the_tests_compare_them_as_beside_the_code():
    assert round_trip(collections.Counter("aab")) == {"a": 2, "b": 1}
    assert round_trip(Point(1, 2)) == (1, 2) and round_trip(Point(1, 2)).y == 2
    assert round_trip(collections.OrderedDict(a=1)) == {"a": 1}
    assert round_trip(collections.deque([1])) != [1]  # as beside the code: not equal
    factory = round_trip(collections.defaultdict(lambda: 7))  # a lambda cannot cross
    assert factory.default_factory is None


def test_subclasses_of_plain_types_cross_as_their_plain_value_whatever_they_override():
    for value, plain in [
        (Colour.RED, 1),
        (Honest("hi"), "hi"),
        (LyingInt(3), 3),
        (LyingList([1, LyingInt(2)]), [1, 2]),
    ]:
        back = round_trip(value)
        assert type(back) is type(plain) and back == plain
    assert round_trip(LyingInt(3)) != 4  # its __eq__ stayed behind


def test_other_objects_stay_behind_and_tuples_that_look_like_markers_are_plain():
    match = re.search("a", "cat")
    assert round_trip(match) == ("opaque", 0, "Match")
    assert round_trip([len, object()]) == [
        ("opaque", 0, "builtin_function_or_method"),
        ("opaque", 1, "object"),
    ]
    looks_like = (verdict.MARK, "Counter", {"a": 1})
    assert round_trip(looks_like) == looks_like and type(round_trip(looks_like)) is tuple


def test_iterators_ranges_and_dict_views_cross_as_their_items_and_kind():
    """MBPP/2 and /7 read the answer through ``set(...)``: a generator or a ``filter`` there
    is a correct answer (it scored 0 as an opaque object). The tests get an iterator of
    their own over the items, which like the generator equals nothing else and reads once."""
    gen = round_trip(x * x for x in range(4))
    assert type(gen) is type(iter([])) and gen != [0, 1, 4, 9]
    assert list(gen) == [0, 1, 4, 9] and list(gen) == []  # read once, as a generator is
    assert set(round_trip(filter(None, [0, 2, 0, 3]))) == {2, 3}
    assert sorted(round_trip(zip("ab", (1, 2), strict=True))) == [("a", 1), ("b", 2)]
    assert round_trip(range(2, 9, 3)) == range(2, 9, 3)
    d = {"a": 1, "b": 2}
    assert round_trip(d.keys()) == {"a", "b"} and round_trip(d.items()) == {("a", 1), ("b", 2)}
    assert sorted(round_trip(d.values())) == [1, 2]
    assert round_trip(iter([re.search("a", "a")])) != []  # items cross as any value does


@pytest.mark.parametrize(
    "forged",
    [
        ("Counter",),
        ("Counter", [1]),
        ("namedtuple", "P", ("x",), (1, 2)),
        ("namedtuple", "not a name", ("x",), (1,)),
        ("Fraction", 1, 0),
        ("Decimal", "one"),
        ("deque", (1,), -1),
        ("defaultdict", "eval", {}),
        ("object", "0", "x"),
        ("exec", "x"),
        ("items", ((1, 2, 3),)),
        ("range", 1, 2),
        ("iterator", [1]),
        (),
    ],
    ids=repr,
)
def test_a_malformed_marker_is_a_wire_error_never_an_object(forged):
    with pytest.raises(WireError):
        verdict.rebuild((verdict.MARK, *forged), lambda index, name: None)


MATCHES = """
import re
from collections import Counter, namedtuple
Pair = namedtuple("Pair", "even odd")
calls = []
def starts_with_vowel(s):
    calls.append(s)
    return re.search("^[aeiou]", s)
def asked():
    return len(calls)
def truth_of(obj):
    return obj.group(0)
def freq(s):
    return Counter(s)
def pair(n):
    return Pair(n, n + 1)
def kind(value):
    return type(value).__name__
"""
MATCH_TESTS = """
m = starts_with_vowel("apple")
assert m and not starts_with_vowel("pear")
assert m is not None and starts_with_vowel("pear") is None
assert m == m and m != True and m != starts_with_vowel("apple")  # equal only to itself
assert truth_of(m) == "a"  # back to the candidate as its own object
assert freq("aab") == {"a": 2, "b": 1} and pair(2) == (2, 3) and pair(2).odd == 3
assert kind(freq("aab")) == "Counter" and kind(pair(1)) == "Pair"  # arguments cross too
print("calls", asked())
"""


def test_truth_is_asked_of_the_candidate_only_when_the_tests_need_it():
    serve = ("starts_with_vowel", "asked", "truth_of", "freq", "pair", "kind")
    result = verdict_of(MATCHES, MATCH_TESTS, serve=serve)
    assert result.passed, result.tests.stderr
    assert "calls 4" in result.tests.stdout  # four calls of the function, none for the truths
    wrong = MATCHES.replace('"^[aeiou]"', '"^[a-z]"')
    assert not verdict_of(wrong, MATCH_TESTS, serve=serve).passed


LIARS = """
import __main__
MARK = __main__.MARK  # the values layer's marker, as shipped into this process
class Truthy:
    def __bool__(self): return True
    def __eq__(self, other): return True
    __hash__ = object.__hash__
def truthy():
    return Truthy()
def marker_shaped():
    return (MARK, "Counter", {"a": 99})
FORGED = {
    "forged_object": (MARK, "object", 10**6, "Match"),
    "forged_counter": (MARK, "Counter", {"a": 99}),
    "malformed": (MARK, "Counter", [1]),
}
def hijack():
    # From now on the candidate's own dispatcher answers: raw markers, past the lowering
    # that would have escaped them, and "yes" to every question of truth.
    def forged(request, *payload):
        return "yes" if request == "bool" else FORGED[payload[0]]
    globals()["__fz_call__"] = forged
    return 0
"""


def test_objects_and_forged_markers_answer_nothing_but_what_plain_data_could():
    tests = """
        MARK = __import__("__main__").MARK
        t = truthy()
        assert t and t != True and t != 1 and t is not True
        assert marker_shaped() == (MARK, "Counter", {"a": 99})  # escaped: a plain tuple
        assert hijack() == 0
        obj = forged_object()
        assert obj != True and obj is not True
        try:
            bool(obj)
        except Exception as exc:
            assert type(exc).__name__ == "CandidateGone", exc
        else:
            raise AssertionError("a non-bool truth value was taken")
        counter = forged_counter()  # a real Counter of the tests' own: honest semantics
        assert counter == {"a": 99} and counter != {"a": 1}
        try:
            malformed()
        except Exception as exc:
            assert type(exc).__name__ == "CandidateGone", exc
        else:
            raise AssertionError("a malformed marker was taken")
        print("held")
    """
    serve = ("truthy", "marker_shaped", "hijack", "forged_object", "forged_counter", "malformed")
    result = verdict_of(LIARS, tests, serve=serve)
    assert result.passed, result.tests.stderr
    assert "held" in result.tests.stdout


def test_a_candidate_that_does_not_compile_is_reported_by_the_tests_compiler():
    result = verdict_of("def add(a, b):\n    return (a +\n")
    assert not result.passed
    assert result.candidate_syntax_error == "SyntaxError: '(' was never closed (line 2)"
    # Printing a lookalike and dying is not a syntax error: nothing is reported.
    fake = "import sys\nsys.stderr.write('SyntaxError: [1, 2]')\nsys.exit(1)\n"
    assert verdict_of(fake).candidate_syntax_error == ""
    assert verdict_of(WRONG).candidate_syntax_error == ""


def test_served_builtins_come_from_the_reference_never_from_the_tests_or_their_prelude():
    tests = "assert sum(10, 15) == 6\nassert len([1]) == 1\n"
    reference = "import math\ndef sum(a, b):\n    return 6\n"
    assert verdict.served_builtins(tests, reference) == ("sum",)
    assert verdict.served_builtins(tests, "def add(a, b):\n    return a + b\n") == ()
    assert verdict.served_builtins(tests, reference, "from math import fsum as sum") == ()
    assert verdict.served_builtins("def sum(*a):\n    return 0\n" + tests, reference) == ()
    assert verdict.served_builtins(tests, "def sum(:\n") == ()  # unparsable reference
    # An imported builtin name is the library's, not the solution's.
    assert verdict.served_builtins("assert pow(2, 3) == 8.0\n", "from math import pow\n") == ()
    assert verdict.served_builtins(tests, "sum = lambda a, b: 6\n") == ("sum",)
