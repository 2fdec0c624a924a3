"""The rooms of zoo/envs (docs/architecture.md): the env families (``math``, ``code``,
``tool``) import the contract (``zoo/envs/*.py``), the execution room and the data room,
never a sibling family; the contract, execution and data rooms import no family; no env
class borrows another class's method; every built-in env still loads from the registry.
Every import counts, those inside functions too."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from harness_cli import REPO

from zoo.envs import ENVS

ENVS_DIR = REPO / "zoo" / "envs"
FAMILIES = ("math", "code", "tool")
SHARED_ROOMS = ("execution", "data")


def imported_modules(path: Path) -> set[str]:
    """Every absolute module an import of ``path`` names, and ``module.name`` for each name
    a ``from module import name`` takes (a subpackage imported that way counts)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}: relative import"
            out.add(node.module)
            out |= {f"{node.module}.{a.name}" for a in node.names}
    return out


def family_of(module: str) -> str | None:
    for family in FAMILIES:
        if module == f"zoo.envs.{family}" or module.startswith(f"zoo.envs.{family}."):
            return family
    return None


def py_files(*parts: str) -> list[Path]:
    files = sorted(ENVS_DIR.joinpath(*parts).glob("*.py"))
    assert files, f"no modules in zoo/envs/{'/'.join(parts)}"
    return files


@pytest.mark.parametrize("family", FAMILIES)
def test_a_family_imports_no_sibling_family(family):
    crossings = [
        f"{path.relative_to(REPO)} imports {module}"
        for path in py_files(family)
        for module in sorted(imported_modules(path))
        if family_of(module) not in (None, family)
    ]
    assert crossings == []


def test_the_contract_execution_and_data_rooms_import_no_family():
    # zoo/envs/__init__.py names the built-in envs as strings, which import nothing here.
    contract = [p for p in py_files() if p.name != "__init__.py"]
    shared = [p for room in SHARED_ROOMS for p in py_files(room)]
    crossings = [
        f"{path.relative_to(REPO)} imports {module}"
        for path in [*contract, *shared]
        for module in sorted(imported_modules(path))
        if family_of(module) is not None
    ]
    assert crossings == []


def test_the_rooms_are_the_documented_ones():
    rooms = {p.name for p in ENVS_DIR.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert rooms == {*FAMILIES, *SHARED_ROOMS}
    assert all((ENVS_DIR / room / "__init__.py").is_file() for room in rooms)


def borrowed_methods(source: str) -> list[str]:
    """``name = SomeClass.attribute`` in a class body (``_load = MathDatasetEnv._load``): a
    method taken from another class instead of a function both call."""
    found = []
    for cls in ast.walk(ast.parse(source)):
        if not isinstance(cls, ast.ClassDef):
            continue
        for stmt in cls.body:
            value = stmt.value if isinstance(stmt, ast.Assign | ast.AnnAssign) else None
            if (
                isinstance(value, ast.Attribute)
                and isinstance(value.value, ast.Name)
                and value.value.id[:1].isupper()  # a class, by the naming convention
            ):
                found.append(f"{cls.name}: {ast.unparse(stmt)}")
    return found


def test_no_env_class_borrows_another_class_method():
    borrowed = [
        f"{path.relative_to(REPO)}: {b}"
        for path in sorted(ENVS_DIR.rglob("*.py"))
        for b in borrowed_methods(path.read_text())
    ]
    assert borrowed == []


def test_the_borrowing_check_sees_a_borrowed_method():
    source = "class MBPP(Env):\n    name = 'mbpp'\n    _load = MathDatasetEnv._load\n"
    assert borrowed_methods(source) == ["MBPP: _load = MathDatasetEnv._load"]


def test_every_built_in_env_loads_its_class():
    from zoo.envs.base import Env

    for name in ENVS.names():
        cls = ENVS.load(name)
        assert isinstance(cls, type) and issubclass(cls, Env), name
        assert cls.__module__.startswith(tuple(f"zoo.envs.{f}." for f in FAMILIES)), name
