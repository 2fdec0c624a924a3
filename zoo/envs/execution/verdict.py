"""Test verdicts decided in a process the model-written code never touched.

``run_tests(TestJob(candidate, tests, serve=(...)))`` starts two sandboxes (each one
``zoo.envs.execution.sandbox.execute``, with its namespaces, uid and rlimits) joined by two pipes:

- the candidate's: runs the model-written program (as the module ``__candidate__``, not
  ``__main__``: ``plain_calls.CANDIDATE_MODULE``), then serves calls to
  its top-level functions (``zoo.envs.execution.plain_calls.serve_candidate``, through
  ``candidate_dispatch`` below);
- the tests': runs the trusted ``prelude`` (e.g. HumanEval's prompt, whose helper
  functions the tests use; MBPP's setup code), binds each name in ``serve`` to a proxy
  that calls the candidate's function of that name, runs the hidden ``tests``, and only
  then prints a fresh 128-bit nonce. The verdict is "passed" when the tests' process
  exited 0 with that nonce on its stdout.

What crosses. The pipe carries plain data only (``zoo.envs.execution.plain_calls``: None, bool, int,
float, complex, str, bytes, and lists, tuples, dicts, sets, frozensets of those, by exact
type). The candidate's side lowers each value its function returns to plain data, and the
tests' side rebuilds it with its own classes (``lower``, ``rebuild``):

- plain data crosses as it is;
- the standard library's value types cross as their contents with their kind named:
  ``Counter``, ``OrderedDict``, ``defaultdict`` (its factory when it is a builtin type or
  one of these, else none), ``deque`` (with ``maxlen``), named tuples (type and field
  names), ``Fraction``, ``Decimal``. The tests get a real ``collections.Counter`` etc. of
  their own interpreter, so equality is the standard one: a Counter equals the dict of its
  counts, a named tuple the tuple of its fields, as when the tests ran beside the code;
- another subclass of a plain type crosses as the value of that type (an ``IntEnum``
  member as its int, a ``str`` subclass as its characters), read with the base type's own
  methods, so its overridden ``__eq__``, ``__hash__`` or ``__str__`` stays behind;
- a ``range`` and the dict views (``keys()``, ``values()``, ``items()``) cross as their
  items and are rebuilt as the same kind; an iterator (a generator, ``map``, ``filter``,
  ``zip`` ...) is read to its end in the candidate's process and the tests get an iterator
  of their own over the items, which like the generator equals only itself and reads once
  (MBPP/2 and /7 read answers through ``set(...)``: a generator there is correct);
- anything else (a ``re.Match``, an instance of the candidate's class) stays
  in the candidate's process, and the tests get a ``CandidateObject``: it equals only
  itself and has one property, its truth value, asked of the candidate's process when the
  tests' interpreter needs it (``assert m``, ``not m``, ``if m``), and answered with a bool.

Why no value can forge a pass: the tests only ever hold values built by their own
interpreter from plain data, so whatever the candidate returns is judged as the plain data
it could have returned directly. Which question is put to a ``CandidateObject`` is decided
by the tests' interpreter (it calls ``__bool__`` only where truth is needed), and its answer
is a bool, which the candidate could have returned in the first place; equality,
ordering, ``in`` and hashing are never asked of the candidate, since those would let it
answer "equal" to an expected value it does not know. Arguments cross the other way in the
same way, and a ``CandidateObject`` passed back to the candidate is its own object again.

Builtin names: ``serve`` may name a builtin (MBPP/126's function is ``sum``); the tests'
proxy then shadows the builtin. Which names are served is decided outside the candidate
(``served_builtins``: names the data set's trusted reference program defines), never by
what the candidate happens to define, since that would let it replace ``len`` or ``abs``
in the tests' own checks.

A candidate's exception comes back as the builtin exception of that name, or
``CandidateError``; a dead or misbehaving candidate as ``CandidateGone``. When the
candidate's process was found gone, the tests' process compiles (never runs) the
candidate's source to report a syntax error (``TestVerdict.candidate_syntax_error``):
compiling happens before any of the candidate's code runs, so the report cannot carry
anything the candidate learned from the tests.

What this closes (each has an attack in tests/test_reward_hacking.py): objects or builtin
subclasses whose ``__eq__``, ``__hash__``, ``__str__``, ``__bool__`` lie (they cross as
their plain value or as an opaque object); functions returned as values (opaque: equal
to nothing) and iterators (an iterator of the tests' own: equal to nothing); patching
builtins, ``AssertionError``, or modules the tests use (``math.isclose``): they are
patched in the candidate's interpreter only;
walking frames or the garbage collector for the nonce or the tests: neither is in the
candidate's process; reading the test process's memory (``/proc/<pid>/mem``), ptrace,
signals: the two sandboxes are separate PID namespaces (each sees only its own processes;
without a sandbox, in the explicit unsafe mode, the test process marks itself not
dumpable instead); ``sys.exit(0)`` / ``os._exit(0)`` at import or in a call, atexit
hooks, threads, printing a fake verdict or flooding stdout: the candidate's exit status
and output are not read for the verdict, its death fails the pending call, and output past
the cap kills it.

What it does not protect against: a candidate that computes the right values by
exploiting the task (reading expected outputs shown in the prompt, or hard-coding the
tests' inputs it is called with); kernel exploits and timing side channels, as for any
sandboxed execution. Limits for honest code: an object that is not plain data or one of
the types above answers only for its truth value (a ``numpy`` scalar compared with ``==``
fails); a ``defaultdict`` whose factory is a lambda arrives with no factory; mutation of an
argument in place is not seen by the tests (arguments are copied across).
"""

from __future__ import annotations

import ast
import builtins
import functools
import inspect
import os
import secrets
import symtable
import sys
import threading
import warnings
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zoo.envs.execution import plain_calls
from zoo.envs.execution.plain_calls import (
    MAX_DEPTH,
    CandidateGone,
    Connection,
    WireError,
    _type_name,
)
from zoo.envs.execution.sandbox import ExecResult, SandboxPool, execute, sandbox_info

__all__ = ["TestJob", "TestVerdict", "free_names", "map_tests", "run_tests", "served_builtins"]

PLAIN_CALLS_SOURCE = Path(plain_calls.__file__).read_text()
TESTS_GRACE_S = 0.5
"""The tests' process gets this much longer than the candidate's, so that a candidate
that runs out of time is what the verdict reports."""
CANDIDATE_EXIT_GRACE_S = 0.1
"""Once the tests are done, the candidate's process gets this long to see the end of its
request pipe, flush what it printed and exit; then it is stopped."""
FAILURE_STATUSES = ("timeout", "memory", "killed")
MAX_SYNTAX_ERROR_CHARS = 200
"""``TestVerdict.candidate_syntax_error`` is cut to this many characters."""


@dataclass(frozen=True)
class TestJob:
    """One verdict to decide. ``candidate``: model-written Python (untrusted). ``tests``:
    the hidden tests (trusted), run after ``prelude`` (trusted) with every name in
    ``serve`` bound to the candidate's top-level function of that name."""

    __test__ = False  # not a pytest class

    candidate: str
    tests: str
    serve: tuple[str, ...]
    prelude: str = ""


@dataclass(frozen=True)
class TestVerdict:
    __test__ = False

    passed: bool
    """The tests' process exited 0 and printed this verdict's nonce after the tests."""
    tests: ExecResult
    """The tests' process: its stdout (what the tests printed) and stderr (a failing
    assert's traceback)."""
    candidate: ExecResult
    """The candidate's process: what it printed, and how it ended ("stopped" when it was
    still running once the tests had finished)."""
    candidate_syntax_error: str = ""
    """``"SyntaxError: <message> (line <n>)"`` when the tests found the candidate's
    process gone and its source does not compile (the tests' process compiles it; see the
    module docstring); else ""."""

    @property
    def status(self) -> str:
        """The first of the candidate's and the tests' statuses that is "timeout",
        "memory" or "killed" (tests that catch the failed calls can still pass); else
        "ok" when passed, "error" when not."""
        for result in (self.candidate, self.tests):
            if result.status in FAILURE_STATUSES:
                return result.status
        return "ok" if self.passed else "error"

    @property
    def duration_s(self) -> float:
        return max(self.tests.duration_s, self.candidate.duration_s)


# --- the values layer: shipped into both sandboxes after plain_calls' source ------------
#
# The definitions from here to ``syntax_report`` run inside the sandboxes, in the module
# that plain_calls' source starts (so ``sys``, ``builtins``, ``WireError``, ``MAX_DEPTH``,
# ``Connection``... are that module's); ``VALUES_SOURCE`` is their source text, taken with
# ``inspect.getsource``. Like plain_calls they carry no annotations (the shipped text has
# no ``from __future__ import annotations``, so annotations would be evaluated there) and
# import nothing at start: ``collections``, ``fractions`` and ``decimal`` are looked up in
# ``sys.modules`` (a value of those types means its module is loaded) or imported when a
# value of theirs arrives. The host imports them too, for its tests.

MARK = "\x00forge-zoo value"
"""First item of a tuple that stands for a value that is not plain data:
``(MARK, kind, *payload)``. A plain tuple whose first item is ``MARK`` is sent as the kind
"tuple", so no plain value is ever mistaken for one."""

BUILTIN_FACTORIES = (
    "int",
    "float",
    "complex",
    "str",
    "bytes",
    "bool",
    "list",
    "tuple",
    "dict",
    "set",
    "frozenset",
)
COLLECTIONS_FACTORIES = ("Counter", "OrderedDict", "deque")
"""``defaultdict`` factories that cross by name: these builtin types and collections'."""

MAX_NAMEDTUPLE_TYPES = 256
"""Named-tuple types one tests' process builds at most (each one costs an ``exec``)."""

MAX_ITERATOR_ITEMS = 1_000_000
"""Items of a returned iterator read at most (``_lower_iterable``); past that, the call
fails, as an unbounded generator would have hung the tests."""

_NAMEDTUPLE_TYPES: dict = {}


def _factory(name, load):
    """The factory class called ``name`` in this process; None when it is one of
    collections' and that module is not loaded (and ``load`` is false)."""
    if name in BUILTIN_FACTORIES:
        return vars(builtins)[name]
    module = sys.modules.get("collections") or (__import__("collections") if load else None)
    return getattr(module, name, None)


def _escape(items):
    return (MARK, "tuple", items) if items and type(items[0]) is str and items[0] == MARK else items


def lower(value, opaque, depth=0):
    """``value`` as plain data (module docstring); ``opaque(value)`` gives what stands for
    a value of any other type (or raises ``WireError``)."""
    if depth > MAX_DEPTH:
        raise WireError(f"nested deeper than {MAX_DEPTH} levels")
    kind = type(value)
    # By identity: ``in`` would compare the types with ``==``, which a metaclass can answer.
    if value is None or kind is bool or kind is int or kind is float or kind is str:
        return value
    if kind is complex or kind is bytes:
        return value
    deeper = depth + 1
    if kind is list:
        return [lower(item, opaque, deeper) for item in value]
    if kind is tuple:
        return _escape(tuple(lower(item, opaque, deeper) for item in value))
    if kind is dict:
        return {lower(k, opaque, deeper): lower(v, opaque, deeper) for k, v in value.items()}
    if kind is set or kind is frozenset:
        return kind(lower(item, opaque, deeper) for item in value)
    special = _lower_library(value, kind, opaque, deeper)
    if special is not None:
        return special
    # Any other subclass of a plain type: the value of that type, read with the base
    # type's own methods (the subclass's overrides are never called).
    if issubclass(kind, int):
        return int.__int__(value)
    if issubclass(kind, float):
        return float.__float__(value)
    if issubclass(kind, complex):
        return complex.__complex__(value)
    if issubclass(kind, str):
        return str.__str__(value)
    if issubclass(kind, bytes):
        return bytes.__bytes__(value)
    if issubclass(kind, list):
        return [lower(item, opaque, deeper) for item in list.__iter__(value)]
    if issubclass(kind, tuple):
        return _escape(tuple(lower(item, opaque, deeper) for item in tuple.__iter__(value)))
    if issubclass(kind, dict):
        return _lower_items(value, opaque, deeper)
    if issubclass(kind, (set, frozenset)):
        base = set if issubclass(kind, set) else frozenset
        return base(lower(item, opaque, deeper) for item in base.__iter__(value))
    return _lower_iterable(value, kind, opaque, deeper)


def _lower_iterable(value, kind, opaque, depth):
    """A range, a dict view or an iterator (a generator, ``map``, ``filter``, ``zip``...)
    as its items with its kind named; anything else ``opaque``. An iterator is read to its
    end here, in the candidate's process (at most ``MAX_ITERATOR_ITEMS`` items), and the
    tests get an iterator of their own over those items: like the generator, it equals only
    itself, is true, and reads once (``set(f(x))``, ``list(f(x))``, ``next(f(x))``). What
    the candidate's ``__next__`` answers is data it could have returned in a list."""
    if kind is range:
        return (MARK, "range", value.start, value.stop, value.step)
    views = {type({}.keys()): "keys", type({}.values()): "values", type({}.items()): "items"}
    view = views.get(kind)
    if view is not None:
        return (MARK, view, tuple(lower(item, opaque, depth) for item in value))
    if hasattr(kind, "__next__") and hasattr(kind, "__iter__"):
        items = []
        for item in value:
            if len(items) >= MAX_ITERATOR_ITEMS:
                raise WireError(f"an iterator of more than {MAX_ITERATOR_ITEMS} items")
            items.append(lower(item, opaque, depth))
        return (MARK, "iterator", tuple(items))
    return opaque(value)


def _lower_items(mapping, opaque, depth):
    return {lower(k, opaque, depth): lower(v, opaque, depth) for k, v in dict.items(mapping)}


def _lower_library(value, kind, opaque, depth):
    """``(MARK, kind, ...)`` for a value of one of the standard library's types, else None."""
    collections = sys.modules.get("collections")
    if collections is not None:
        if issubclass(kind, collections.Counter):
            return (MARK, "Counter", _lower_items(value, opaque, depth))
        if issubclass(kind, collections.OrderedDict):
            return (MARK, "OrderedDict", _lower_items(value, opaque, depth))
        if issubclass(kind, collections.defaultdict):
            factory = value.default_factory
            names = BUILTIN_FACTORIES + COLLECTIONS_FACTORIES
            name = next((n for n in names if factory is _factory(n, False)), None)
            return (MARK, "defaultdict", name, _lower_items(value, opaque, depth))
        if issubclass(kind, collections.deque):
            items = tuple(lower(item, opaque, depth) for item in value)
            return (MARK, "deque", items, value.maxlen)
    fields = getattr(kind, "_fields", None) if issubclass(kind, tuple) else None
    if type(fields) is tuple and all(type(f) is str for f in fields):
        items = tuple(lower(item, opaque, depth) for item in tuple.__iter__(value))
        if len(items) == len(fields):
            return (MARK, "namedtuple", _type_name(value).rpartition(".")[2], fields, items)
    fractions = sys.modules.get("fractions")
    if fractions is not None and issubclass(kind, fractions.Fraction):
        return (
            MARK,
            "Fraction",
            lower(value.numerator, opaque, depth),
            lower(value.denominator, opaque, depth),
        )
    decimal = sys.modules.get("decimal")
    if decimal is not None and issubclass(kind, decimal.Decimal):
        return (MARK, "Decimal", decimal.Decimal.__str__(value))
    return None


def rebuild(value, resolve, depth=0):
    """The value ``lower`` made ``value`` from, built with this process's own classes;
    ``resolve(index, type_name)`` gives what an opaque object's marker stands for.
    ``WireError`` on a malformed marker."""
    if depth > MAX_DEPTH:
        raise WireError(f"nested deeper than {MAX_DEPTH} levels")
    kind, deeper = type(value), depth + 1
    if kind is list:
        return [rebuild(item, resolve, deeper) for item in value]
    if kind is tuple:
        if value and type(value[0]) is str and value[0] == MARK:
            try:
                return _rebuild_marked(value[1:], resolve, deeper)
            except WireError:
                raise
            except Exception as exc:
                raise WireError(f"malformed value: {_type_name(exc)}") from None
        return tuple(rebuild(item, resolve, deeper) for item in value)
    if kind is dict:
        return {rebuild(k, resolve, deeper): rebuild(v, resolve, deeper) for k, v in value.items()}
    if kind is set or kind is frozenset:
        return kind(rebuild(item, resolve, deeper) for item in value)
    return value


def _rebuild_marked(marked, resolve, depth):
    kind, payload = (marked[0], marked[1:]) if marked else (None, ())
    shape = tuple(type(p) for p in payload)
    if kind == "tuple" and shape == (tuple,):
        return tuple(rebuild(item, resolve, depth) for item in payload[0])
    if kind == "object" and shape == (int, str):
        return resolve(payload[0], payload[1])
    if kind == "Counter" and shape == (dict,):
        out = __import__("collections").Counter()
        dict.update(out, rebuild(payload[0], resolve, depth))  # the counts as they were
        return out
    if kind == "OrderedDict" and shape == (dict,):
        return __import__("collections").OrderedDict(rebuild(payload[0], resolve, depth))
    if kind == "defaultdict" and shape in ((type(None), dict), (str, dict)):
        name, items = payload
        if name is not None and name not in BUILTIN_FACTORIES + COLLECTIONS_FACTORIES:
            raise WireError("unknown defaultdict factory")
        factory = None if name is None else _factory(name, True)
        return __import__("collections").defaultdict(factory, rebuild(items, resolve, depth))
    if kind == "deque" and shape in ((tuple, type(None)), (tuple, int)):
        items = [rebuild(item, resolve, depth) for item in payload[0]]
        return __import__("collections").deque(items, payload[1])
    if kind == "namedtuple" and shape == (str, tuple, tuple):
        typename, fields, items = payload
        if len(fields) != len(items) or not all(type(f) is str for f in fields):
            raise WireError("malformed named tuple")
        cls = _NAMEDTUPLE_TYPES.get((typename, fields))
        if cls is None:
            if len(_NAMEDTUPLE_TYPES) >= MAX_NAMEDTUPLE_TYPES:
                raise WireError(f"more than {MAX_NAMEDTUPLE_TYPES} named-tuple types")
            cls = __import__("collections").namedtuple(typename, fields, rename=True)
            _NAMEDTUPLE_TYPES[typename, fields] = cls
        return cls._make(rebuild(item, resolve, depth) for item in items)
    if kind == "iterator" and shape == (tuple,):
        return iter([rebuild(item, resolve, depth) for item in payload[0]])
    if kind == "range" and shape == (int, int, int):
        return range(*payload)
    if kind in ("keys", "values", "items") and shape == (tuple,):
        items = [rebuild(item, resolve, depth) for item in payload[0]]
        if kind == "keys":
            return dict.fromkeys(items).keys()
        if kind == "values":
            return dict(enumerate(items)).values()
        if not all(type(pair) is tuple and len(pair) == 2 for pair in items):
            raise WireError("malformed dict items")
        return dict(items).items()
    if kind == "Fraction" and shape == (int, int):
        return __import__("fractions").Fraction(payload[0], payload[1])
    if kind == "Decimal" and shape == (str,):
        return __import__("decimal").Decimal(payload[0])
    raise WireError(f"malformed value of kind {str(kind)[:40]!r}")


def candidate_dispatch(namespace):
    """The candidate's side: ``__fz_call__(request, ...)``, which plain_calls'
    ``serve_candidate`` calls like any function of the candidate's. Requests:
    ``("call", name, args, kwargs)`` calls ``namespace[name]`` and returns its result
    lowered; ``("bool", index)`` returns the truth value of a returned opaque object."""
    objects = []

    def opaque(value):
        objects.append(value)
        return (MARK, "object", len(objects) - 1, _type_name(value))

    def resolve(index, _type):
        if not 0 <= index < len(objects):
            raise WireError("no such object")
        return objects[index]

    def dispatch(request, *payload):
        if request == "call" and len(payload) == 3:
            name, args, kwargs = payload
            function = namespace.get(name) if type(name) is str else None
            if function is None:
                raise NameError(f"name {name!r} is not defined")
            args, kwargs = rebuild(args, resolve), rebuild(kwargs, resolve)
            return lower(function(*args, **kwargs), opaque)
        if request == "bool" and len(payload) == 1 and type(payload[0]) is int:
            return bool(resolve(payload[0], ""))
        raise WireError("unknown request")

    return dispatch


class TestsConnection(Connection):
    """The tests' end of the pipes; remembers whether the candidate was ever gone."""

    __test__ = False
    gone = False

    def call(self, name, args, kwargs):
        try:
            return Connection.call(self, name, args, kwargs)
        except CandidateGone:
            self.gone = True
            raise


class CandidateObject:
    """Stands, on the tests' side, for an object the candidate returned that is not plain
    data: equal only to itself; its truth value is the candidate's ``bool`` of it, a
    request made when the tests' interpreter needs it."""

    __slots__ = ("_connection", "_index", "_type")

    def __init__(self, connection, index, type_name):
        self._connection, self._index, self._type = connection, index, type_name[:100]

    def __bool__(self):
        truth = self._connection.call(DISPATCH, ("bool", self._index), {})
        if type(truth) is not bool:
            raise CandidateGone("the candidate's truth value is not a bool")
        return truth

    def __repr__(self):
        return f"<the candidate's {self._type} object>"


class ServedFunction:
    """Stands, on the tests' side, for one of the candidate's top-level functions."""

    def __init__(self, connection, name):
        self._connection, self.__name__ = connection, name

    def _object(self, index, type_name):
        return CandidateObject(self._connection, index, type_name)

    def __call__(self, *args, **kwargs):
        request = ("call", self.__name__, lower(args, _send_back), lower(kwargs, _send_back))
        value = self._connection.call(DISPATCH, request, {})
        try:
            return rebuild(value, self._object)
        except WireError as exc:
            raise CandidateGone(f"the candidate broke the protocol: {exc}") from None

    def __repr__(self):
        return f"<candidate function {self.__name__}>"


def _send_back(value):
    """What an argument that is not plain data crosses as: a ``CandidateObject`` as the
    candidate's own object again; anything else cannot cross."""
    if type(value) is CandidateObject:
        return (MARK, "object", value._index, "")
    raise WireError(f"a {_type_name(value)} cannot be passed to the candidate")


def syntax_report(source):
    """``"<error class>: <message> (line <n>)"`` when ``source`` does not compile as the
    candidate's process compiles it, else ""; compiling runs none of it."""
    try:
        compile(source, "<candidate>", "exec", dont_inherit=True)
    except SyntaxError as exc:
        return f"{type(exc).__name__}: {exc.msg} (line {exc.lineno})"
    except ValueError as exc:  # null bytes in the source
        return f"SyntaxError: {exc}"
    except BaseException:  # a compiler limit (memory, recursion): no report
        return ""
    return ""


DISPATCH = "__fz_call__"
"""The name under which the candidate's namespace holds ``candidate_dispatch``'s function."""

_SHIPPED: tuple[Any, ...] = (
    _factory,
    _escape,
    lower,
    _lower_items,
    _lower_library,
    _lower_iterable,
    rebuild,
    _rebuild_marked,
    candidate_dispatch,
    TestsConnection,
    CandidateObject,
    ServedFunction,
    _send_back,
    syntax_report,
)
VALUES_SOURCE = "\n".join(
    [
        f"MARK = {MARK!r}",
        f"BUILTIN_FACTORIES = {BUILTIN_FACTORIES!r}",
        f"COLLECTIONS_FACTORIES = {COLLECTIONS_FACTORIES!r}",
        f"MAX_NAMEDTUPLE_TYPES = {MAX_NAMEDTUPLE_TYPES!r}",
        f"MAX_ITERATOR_ITEMS = {MAX_ITERATOR_ITEMS!r}",
        "_NAMEDTUPLE_TYPES = {}",
        f"DISPATCH = {DISPATCH!r}",
        *(inspect.getsource(obj) for obj in _SHIPPED),
    ]
)
"""The values layer's source, run in both sandboxes after plain_calls' (see above)."""


# --- the two programs ---------------------------------------------------------------------


def _candidate_program(source: str, request_fd: int, reply_fd: int) -> str:
    # serve_candidate runs this bootstrap as the candidate's module: the candidate's own
    # source first, in that namespace, then the dispatcher the tests' side calls.
    bootstrap = (
        f"exec(compile({source!r}, '<candidate>', 'exec', dont_inherit=True))\n"
        f"{DISPATCH} = __import__('sys').modules['__main__'].candidate_dispatch(globals())\n"
    )
    return (
        f"{PLAIN_CALLS_SOURCE}\n{VALUES_SOURCE}\n"
        f"serve_candidate({request_fd}, {reply_fd}, {bootstrap!r})\n"
    )


_TESTS_MAIN = """
def _fz_main(request_fd, reply_fd, serve, prelude, tests, nonce, undumpable, candidate):
    import sys
    if undumpable:  # PR_SET_DUMPABLE = 4: no ptrace attach, /proc/<pid>/mem owned by root
        import ctypes
        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)
    connection = TestsConnection(request_fd, reply_fd)
    env = {"__name__": "__main__", "__builtins__": builtins}
    exec(compile(prelude, "<prelude>", "exec", dont_inherit=True, optimize=0), env)
    for name in serve:
        env[name] = ServedFunction(connection, name)
    try:
        exec(compile(tests, "<tests>", "exec", dont_inherit=True, optimize=0), env)
    finally:
        report = syntax_report(candidate) if connection.gone else ""
        if report:
            sys.stdout.flush()
            os.write(1, ("\\n%s syntax %s\\n" % (nonce, report.encode().hex())).encode())
    sys.stdout.flush()
    os.write(1, b"\\n" + nonce.encode() + b"\\n")
    os._exit(0)
"""


def _tests_program(job: TestJob, request_fd: int, reply_fd: int, nonce: str) -> str:
    # In a sandbox the candidate cannot see this process at all (another PID namespace),
    # so the prctl (3-4 ms of ctypes import) is only made where there is no sandbox.
    undumpable = not sandbox_info()["sandboxed"]
    call = (
        f"_fz_main({request_fd}, {reply_fd}, {tuple(job.serve)!r}, {job.prelude!r}, "
        f"{job.tests!r}, {nonce!r}, {undumpable}, {job.candidate!r})"
    )
    return f"{PLAIN_CALLS_SOURCE}\n{VALUES_SOURCE}\n{_TESTS_MAIN}\n{call}\n"


def _syntax_error(stdout: str, nonce: str) -> str:
    """The tests' report of the candidate's syntax error (its line starts with the nonce,
    which only the tests' process knows), or ""."""
    prefix = f"{nonce} syntax "
    for line in stdout.splitlines():
        if line.startswith(prefix):
            try:
                text = bytes.fromhex(line[len(prefix) :]).decode("utf-8", "replace")
            except ValueError:
                return ""
            return " ".join(text.split())[:MAX_SYNTAX_ERROR_CHARS]
    return ""


def run_tests(job: TestJob, *, timeout_s: float, memory_mb: int, **limits: Any) -> TestVerdict:
    """Decide ``job`` in two sandboxes (module docstring). ``timeout_s`` bounds the
    candidate's process (the tests' gets ``TESTS_GRACE_S`` more); ``memory_mb`` and
    ``limits`` (``execute``'s keywords) apply to each process."""
    request_r, request_w = os.pipe()
    reply_r, reply_w = os.pipe()
    stop_r, stop_w = os.pipe()
    nonce = secrets.token_hex(16)
    outcome: dict[str, Any] = {}

    def candidate_side() -> None:
        try:
            outcome["result"] = execute(
                _candidate_program(job.candidate, request_r, reply_w),
                timeout_s=timeout_s,
                memory_mb=memory_mb,
                pass_fds=(request_r, reply_w),
                stop_fd=stop_r,
                **limits,
            )
        except BaseException as exc:  # re-raised in the caller's thread
            outcome["error"] = exc

    thread = threading.Thread(target=candidate_side, name="sandbox-candidate", daemon=True)
    thread.start()
    try:
        tests = execute(
            _tests_program(job, request_w, reply_r, nonce),
            timeout_s=timeout_s + TESTS_GRACE_S,
            memory_mb=memory_mb,
            pass_fds=(request_w, reply_r),
            **limits,
        )
    finally:
        thread.join(CANDIDATE_EXIT_GRACE_S)  # it normally exits on the end-of-file
        os.write(stop_w, b"x")
        thread.join()
        os.close(stop_r)
        os.close(stop_w)
    if "error" in outcome:
        raise outcome["error"]
    passed = tests.status == "ok" and nonce in tests.stdout.splitlines()
    return TestVerdict(
        passed=passed,
        tests=tests,
        candidate=outcome["result"],
        candidate_syntax_error=_syntax_error(tests.stdout, nonce),
    )


def map_tests(pool: SandboxPool, jobs: Iterable[TestJob], **limits: Any) -> list[TestVerdict]:
    """``run_tests`` for each job, through ``pool`` (in parallel, in order)."""
    return pool.run_all(lambda job: run_tests(job, **limits), list(jobs), lambda v: v.duration_s)


# --- which names the tests call ------------------------------------------------------------


def _bound_names(*sources: str) -> set[str]:
    """Every name the sources bind anywhere (assignments, definitions, arguments, imports,
    exception handlers)."""
    bound: set[str] = set()
    for text in sources:
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
                bound.add(node.id)
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                bound.add(node.name)
            elif isinstance(node, ast.arg):
                bound.add(node.arg)
            elif isinstance(node, ast.alias):
                bound.add(node.asname or node.name.split(".")[0])
            elif isinstance(node, ast.ExceptHandler) and node.name:
                bound.add(node.name)
    return bound


def _read_names(source: str) -> list[str]:
    """The names ``source`` reads, each once, in order."""
    names = ast.walk(ast.parse(source))
    loads = (n.id for n in names if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load))
    return list(dict.fromkeys(loads))


def free_names(source: str, *context: str) -> list[str]:
    """Names ``source`` reads that neither it nor the ``context`` sources bind, and that
    are not builtins, each once: the candidate's functions the tests call
    (plus any module they use without importing it)."""
    bound = _bound_names(source, *context) | set(vars(builtins))
    return [name for name in _read_names(source) if name not in bound]


@functools.lru_cache(maxsize=1024)
def served_builtins(tests: str, reference: str, *context: str) -> tuple[str, ...]:
    """Builtin names that ``tests`` reads, that neither it nor the ``context`` sources
    (its prelude) bind, and that ``reference`` defines or assigns at its top level: the
    data set's reference program, trusted. MBPP/126's reference defines ``sum``, and its
    asserts call ``sum(10, 15)``: in the data set's own run the name was the reference's
    function, so the tests must call the candidate's. The candidate's source plays no part: were a
    builtin served because the candidate defines it, a candidate could define ``len`` and
    answer the tests' own ``len(...)`` checks. ``()`` when the reference does not parse."""
    try:
        # The data set's code is what it is: its invalid escapes ("\w" in a plain
        # string) are the reference's, not news for whoever is training.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", (DeprecationWarning, SyntaxWarning))
            top = symtable.symtable(reference, "<reference>", "exec")
    except (SyntaxError, ValueError):
        return ()
    # Defined or assigned there; an imported name (``from math import pow``) is the
    # library's object, not the solution's, so the tests keep the builtin for it.
    defined = {s.get_name() for s in top.get_symbols() if s.is_assigned() and not s.is_imported()}
    bound = _bound_names(tests, *context)
    names = vars(builtins)
    return tuple(n for n in _read_names(tests) if n in names and n in defined and n not in bound)
