"""What a code task's asserts expect of a function that answers one constant.

A policy that copies the prompt's example into a lookup table and returns a guessed
constant (None, 0, False, "", [] ...) for every other input is paid wherever one constant
satisfies every hidden assert: in the sanitized MBPP, with the first assert shown, that was
20 of 427 tasks. This module reads asserts (trusted data set text, parsed here and never
run) and proves, where it can, that no constant answer passes a set of them: two asserts
that apply the same expression to the function's result and require values that cannot
both hold (``f(a) == 1`` and ``f(b) == 2``; ``f(a)`` and ``not f(b)``; ``set(f(a)) ==
{1}`` and ``set(f(b)) == {2}``). The envs use it to choose which assert the prompt shows
(MBPP) and to refuse the feedback variant for tasks where no proof exists.

Only plain forms are read: ``E == K``, ``E is K`` (True, False, None), ``E`` and ``not
E``, ``math.isclose(E, K, ...)`` and ``abs(E - K) < eps``, where ``E`` holds exactly one call
of the task's function and ``K`` is a literal (or ``set``/``sorted``/``tuple``/... of
one). Any other assert is "unknown" and never used in a proof, so a proof holds for every
constant, whatever the unknown asserts do.

Why a proof is sound: the function's result reaches the tests as plain data (or an opaque
object equal only to itself), so the same constant gives the same value of ``E`` at every
call, ``==`` between plain values is transitive, and equal plain values are equally true.
"""

from __future__ import annotations

import ast
import builtins
import functools
import math
from dataclasses import dataclass
from typing import Any

LITERAL_WRAPPERS = {
    "set": set,
    "frozenset": frozenset,
    "sorted": sorted,
    "tuple": tuple,
    "list": list,
    "float": float,
    "int": int,
    "str": str,
}
"""Builtins whose call on a literal is read as its value (``set((4, 5))``)."""

_HOLE = "__fz_result__"


@dataclass(frozen=True)
class Expectation:
    """What one assert requires of the task's function."""

    call: str
    """The call's text, normalised (function name and literal arguments): two asserts
    with equal ``call`` call the function on the same input."""
    shape: str
    """The expression applied to the result (``set(_)``, ``_[0]``), as an AST dump with
    the call replaced by a placeholder: facts about the same shape are comparable."""
    kind: str
    """"eq" (the shaped result equals ``value``), "approx" (is within ``tolerance`` of it)
    or "truth" (its truth value is ``value``)."""
    value: Any
    tolerance: float = 0.0


def _literal(node: ast.expr) -> tuple[bool, Any]:
    """(True, value) for a literal or a wrapper builtin applied to one, else (False, None)."""
    try:
        return True, ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        pass
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in LITERAL_WRAPPERS
        and len(node.args) <= 1
        and not node.keywords
    ):
        if not node.args:
            return True, LITERAL_WRAPPERS[node.func.id]()
        ok, inner = _literal(node.args[0])
        if ok:
            try:
                return True, LITERAL_WRAPPERS[node.func.id](inner)
            except (TypeError, ValueError):
                return False, None
    return False, None


def _calls_of(node: ast.AST, names: frozenset[str]) -> list[ast.Call]:
    return [
        n
        for n in ast.walk(node)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in names
    ]


def _call_key(call: ast.Call) -> str:
    """The input a call passes: literal values where the arguments are literals (so
    ``f(1, 2)`` and ``f(1,2)`` agree), else the arguments' AST."""
    parts = [call.func.id]  # type: ignore[attr-defined]
    for arg in call.args:
        ok, value = _literal(arg)
        parts.append(repr(value) if ok else ast.dump(arg))
    for kw in call.keywords:
        ok, value = _literal(kw.value)
        parts.append(f"{kw.arg}={value!r}" if ok else f"{kw.arg}={ast.dump(kw.value)}")
    return "\x00".join(parts)


def _shaped(expr: ast.expr, names: frozenset[str]) -> tuple[str, str] | None:
    """(call key, shape) when ``expr`` holds exactly one call of the task's functions and
    no other name but builtins (a module's function around the call is not known to be
    pure), else None. The shape is ``expr``'s AST dump with the call's dump cut out."""
    calls = _calls_of(expr, names)
    if len(calls) != 1:
        return None
    call = calls[0]
    inside = {id(n) for n in ast.walk(call)}
    for node in ast.walk(expr):
        if id(node) in inside or not isinstance(node, ast.Name):
            continue
        if node.id not in names and not hasattr(builtins, node.id):
            return None
    return _call_key(call), ast.dump(expr).replace(ast.dump(call), _HOLE, 1)


def _tolerance(call: ast.Call, expected: Any) -> float | None:
    """``math.isclose``'s tolerance for ``expected`` (its keywords, else its defaults)."""
    rel, absolute = 1e-9, 0.0
    for kw in call.keywords:
        ok, value = _literal(kw.value)
        if not ok or not isinstance(value, int | float):
            return None
        if kw.arg == "rel_tol":
            rel = float(value)
        elif kw.arg == "abs_tol":
            absolute = float(value)
        else:
            return None
    return max(rel * abs(expected), absolute)


def expectation(test: ast.expr, names: frozenset[str]) -> Expectation | None:
    """What the assert whose test is ``test`` requires, or None when its form is not read."""
    kind, subject, value, tolerance = "", None, None, 0.0
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        kind, subject, value = "truth", test.operand, False
    elif isinstance(test, ast.Compare) and len(test.ops) == 1:
        op, left, right = test.ops[0], test.left, test.comparators[0]
        if isinstance(op, ast.Eq | ast.Is):
            for side, other in ((left, right), (right, left)):
                ok, literal = _literal(other)
                if ok and _calls_of(side, names) and not _calls_of(other, names):
                    if isinstance(op, ast.Is) and literal not in (True, False, None):
                        break
                    kind, subject, value = "eq", side, literal
                    break
        elif isinstance(op, ast.Lt | ast.LtE) and _is_abs_difference(left, names):
            ok, bound = _literal(right)
            diff = left.args[0]  # type: ignore[attr-defined]
            ok_k, expected = _literal(diff.right)
            if ok and ok_k and _number(bound) and _number(expected):
                kind, subject, value, tolerance = "approx", diff.left, expected, float(bound)
    elif isinstance(test, ast.Call) and _is_isclose(test) and len(test.args) == 2:
        ok, expected = _literal(test.args[1])
        if ok and _number(expected):
            tol = _tolerance(test, expected)
            if tol is not None:
                kind, subject, value, tolerance = "approx", test.args[0], expected, tol
    elif _calls_of(test, names):
        kind, subject, value = "truth", test, True
    if not kind or subject is None:
        return None
    shaped = _shaped(subject, names)
    if shaped is None:
        return None
    if kind == "approx" and not _number(value):
        return None
    return Expectation(shaped[0], shaped[1], kind, value, tolerance)


def _number(value: Any) -> bool:
    return type(value) in (int, float) and math.isfinite(value)


def _is_isclose(call: ast.Call) -> bool:
    func = call.func
    return (isinstance(func, ast.Attribute) and func.attr == "isclose") or (
        isinstance(func, ast.Name) and func.id == "isclose"
    )


def _is_abs_difference(node: ast.expr, names: frozenset[str]) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "abs"
        and len(node.args) == 1
        and isinstance(node.args[0], ast.BinOp)
        and isinstance(node.args[0].op, ast.Sub)
        and bool(_calls_of(node.args[0].left, names))
    )


def statement_expectation(source: str, names: frozenset[str]) -> Expectation | None:
    """``expectation`` of one ``assert`` statement's source (MBPP's ``test_list`` items)."""
    try:
        body = ast.parse(source).body
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None
    if len(body) != 1 or not isinstance(body[0], ast.Assert):
        return None
    return expectation(body[0].test, names)


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except Exception:  # data set literals: a failed comparison proves nothing
        return True


def incompatible(a: Expectation, b: Expectation) -> bool:
    """True when no constant result satisfies both (they apply the same shape)."""
    if a.shape != b.shape:
        return False
    kinds = {a.kind, b.kind}
    if kinds == {"eq"}:
        return not _same(a.value, b.value)
    if kinds == {"truth"}:
        return bool(a.value) != bool(b.value)
    if kinds == {"eq", "truth"}:
        eq, truth = (a, b) if a.kind == "eq" else (b, a)
        try:
            return bool(eq.value) != truth.value
        except Exception:
            return False
    if kinds == {"approx"}:
        gap = abs(a.value - b.value)
        return gap > 2 * (a.tolerance + b.tolerance)
    if kinds == {"approx", "eq"}:
        approx, eq = (a, b) if a.kind == "approx" else (b, a)
        if not _number(eq.value):
            return False
        return abs(approx.value - eq.value) > 2 * approx.tolerance
    return False


def constant_proof(hidden: list[Expectation | None], shown_calls: set[str]) -> bool:
    """True when no function that answers the shown inputs from a table (``shown_calls``)
    and one constant elsewhere can pass every assert of ``hidden``: two of them, on inputs
    the table does not cover, are ``incompatible``."""
    facts = [e for e in hidden if e is not None and e.call not in shown_calls]
    return any(incompatible(a, b) for i, a in enumerate(facts) for b in facts[i + 1 :])


def choose_shown(asserts: list[Expectation | None]) -> int:
    """The index of the assert to show as the example: the first one whose showing leaves a
    ``constant_proof`` among the others; 0 (the data set's first) when none does."""
    for i, shown in enumerate(asserts):
        calls = {shown.call} if shown is not None else set()
        others = asserts[:i] + asserts[i + 1 :]
        if constant_proof(others, calls):
            return i
    return 0


# --- HumanEval: the examples its docstrings show --------------------------------------

EXAMPLE_SEPARATORS = ("==>", "=>", "\u279e", "->", " == ", " = ", " should return ")
"""Between an example's call and its output on one docstring line (``f(1) ==> 2``)."""


def docstring_example_calls(prompt: str, entry_point: str) -> set[str]:
    """The inputs of the examples a HumanEval prompt shows with their outputs, as the
    ``Expectation.call`` keys of calls to ``candidate`` (the name ``check`` uses): a
    ``>>> f(x)`` line followed by its output, or ``f(x) ==> y`` and the like on one line."""
    keys = set()
    lines = [line.strip() for line in prompt.splitlines()]
    for i, line in enumerate(lines):
        source = None
        if line.startswith(">>>") and i + 1 < len(lines) and lines[i + 1]:
            source = line[3:].strip()
        elif entry_point + "(" in line:
            for separator in EXAMPLE_SEPARATORS:
                head, found, _ = line.partition(separator)
                if found and entry_point + "(" in head:
                    source = head[head.index(entry_point + "(") :].strip()
                    break
        if not source:
            continue
        try:
            node = ast.parse(source, mode="eval").body
        except (SyntaxError, ValueError, MemoryError, RecursionError):
            continue
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == entry_point
        ):
            node.func.id = "candidate"
            keys.add(_call_key(node))
    return keys


@dataclass(frozen=True)
class CheckSplit:
    """HumanEval's ``check`` asserts, split into those the prompt shows and the rest."""

    visible: tuple[str, ...]
    """Sources of the asserts whose input a docstring example shows (each one plain:
    ``candidate`` on literals, compared with a literal), in order."""
    hidden: int
    """How many asserts are not visible (asserts in loops count once)."""
    guessable: bool
    """No proof that a table of the examples plus one constant fails the hidden ones."""


@functools.lru_cache(maxsize=1024)
def split_check(test: str, prompt: str, entry_point: str) -> CheckSplit:
    """``CheckSplit`` of a HumanEval problem's ``test`` (its ``check(candidate)``)."""
    examples = docstring_example_calls(prompt, entry_point)
    tree = ast.parse(test)
    checks = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "check"]
    if not checks:
        return CheckSplit((), 0, True)
    names = frozenset({"candidate"})
    asserts = sorted(
        (n for n in ast.walk(checks[-1]) if isinstance(n, ast.Assert)), key=lambda n: n.lineno
    )
    visible, hidden = [], []
    for node in asserts:
        fact = expectation(node.test, names)
        if fact is not None and fact.call in examples:
            visible.append(ast.get_source_segment(test, node) or ast.unparse(node))
        elif _calls_of(node.test, names) or fact is not None:
            hidden.append(fact)
        else:
            # An assert that does not call the function (``assert True, "..."``): no test.
            continue
    return CheckSplit(tuple(visible), len(hidden), not constant_proof(hidden, examples))
