"""The import graph of zoo/ and harness/: no cycles, and no module imports a layer above
its own (docs/architecture.md's table). Every import counts, the ones inside functions
too. Imports under ``if TYPE_CHECKING:`` never run, so the layer checks skip them; the
cycle check counts them, because a cycle of names is a cycle of design even when Python
never executes it (and the next runtime import along it would fail)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from harness_cli import REPO, run_harness

# Lowest first. A module may import its own layer and the layers below it. Each layer is a
# folder (a package); only ``zoo`` and ``zoo.core`` are single modules' worth of package.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("contracts", ("zoo", "zoo.core")),
    ("the Hub", ("zoo.hub",)),
    ("plugins", ("zoo.algorithms", "zoo.envs")),
    ("models", ("zoo.models",)),
    ("services", ("zoo.services",)),
    ("placement", ("zoo.placement",)),
    ("run", ("zoo.run",)),
    ("warm start", ("zoo.warm_start",)),
    ("harness", ("harness",)),
]


def module_names() -> dict[str, Path]:
    found = {}
    for path in [*REPO.glob("zoo/**/*.py"), *REPO.glob("harness/**/*.py")]:
        parts = path.relative_to(REPO).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def layer_of(module: str) -> int:
    """Index of the layer whose longest listed prefix matches ``module``."""
    best, best_len = None, -1
    for i, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best_len:
                best, best_len = i, len(prefix)
    assert best is not None, f"{module} is in no layer: add it to LAYERS and the docs"
    return best


def imports_of(path: Path, modules: dict[str, Path], type_only: bool = False) -> set[str]:
    """The modules of ``modules`` that ``path`` imports; with ``type_only``, those it
    imports under ``if TYPE_CHECKING:`` too."""
    tree = ast.parse(path.read_text())
    skipped = set()
    for node in ast.walk(tree):  # the bodies of `if TYPE_CHECKING:`
        if type_only:
            break
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    out = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
            out |= {f"{node.module}.{a.name}" for a in node.names}
    return {m for m in out if m in modules}


def graph(type_only: bool = False) -> dict[str, set[str]]:
    modules = module_names()
    return {name: imports_of(path, modules, type_only) - {name} for name, path in modules.items()}


def test_every_module_has_a_layer_and_no_import_points_upward():
    upward = [
        f"{a} ({LAYERS[layer_of(a)][0]}) imports {b} ({LAYERS[layer_of(b)][0]})"
        for a, targets in graph().items()
        for b in targets
        if layer_of(b) > layer_of(a)
    ]
    assert upward == []


def test_infrastructure_reaches_plugins_only_through_their_registries():
    concrete = [
        f"{a} imports {b}"
        for a, targets in graph().items()
        if a.startswith("zoo.") and not a.startswith(("zoo.algorithms", "zoo.envs"))
        for b in targets
        if b.startswith(("zoo.algorithms.", "zoo.envs."))
    ]
    assert concrete == []


def test_the_import_graph_has_no_cycles():
    """Type-only imports included (``graph(type_only=True)``)."""
    edges = graph(type_only=True)
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    cycles = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(edges[node]):
            if state.get(nxt) == 1:
                cycles.append([*path[path.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for start in sorted(edges):
        if start not in state:
            visit(start, [start])
    assert cycles == []


def test_the_walk_sees_function_level_imports_and_skips_type_checking_ones(tmp_path):
    source = tmp_path / "m.py"
    source.write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import zoo.run.loop\n"
        "def f():\n    from zoo.services import trainer\n"
    )
    modules = module_names()
    assert imports_of(source, modules) == {"zoo.services", "zoo.services.trainer"}
    every = imports_of(source, modules, type_only=True)
    assert every == {"zoo.services", "zoo.services.trainer", "zoo.run.loop"}


def test_every_layer_is_a_folder_of_its_own():
    """The layers show in the tree: zoo/core holds the plugin-facing contracts only."""
    assert {p.name for p in (REPO / "zoo" / "core").glob("*.py")} == {
        "__init__.py",
        "types.py",
        "config.py",
        "registry.py",
        "losses.py",
        "entropy.py",
    }


def test_the_list_of_long_modules_names_each_one_with_its_size():
    """docs/architecture.md, "Modules over 400 lines": every module of zoo/ and harness/
    over 400 lines is listed and no other, each with a count within 10% of its file's."""
    doc = (REPO / "docs" / "architecture.md").read_text()
    section = doc.split("### Modules over 400 lines", 1)[1].split("\n#", 1)[0]
    listed = {
        m[1]: int(m[2])
        for m in re.finditer(r"^- `([\w/.]+\.py)` \((\d+)\)", section, flags=re.MULTILINE)
    }
    sizes = {
        str(path.relative_to(REPO)): len(path.read_text().splitlines())
        for path in module_names().values()
    }
    long = {path for path, lines in sizes.items() if lines > 400}
    assert set(listed) == long, (
        f"unlisted: {sorted(long - set(listed))}; listed but not over 400 lines or gone: "
        f"{sorted(set(listed) - long)}"
    )
    for path, count in listed.items():
        assert abs(count - sizes[path]) <= 0.1 * sizes[path], (path, count, sizes[path])


def test_only_the_warm_start_command_imports_the_warm_start():
    """A run starts from shipped weights and never reaches the supervised warm start: the
    one importer outside zoo.warm_start is the `warm-start` command's module."""
    importers = sorted(
        a
        for a, targets in graph().items()
        if not a.startswith("zoo.warm_start")
        and any(t == "zoo.warm_start" or t.startswith("zoo.warm_start.") for t in targets)
    )
    assert importers == ["harness.commands.warm_start"]


@pytest.mark.slow  # ~1 minute under the import profiler; the static check above is the default's
def test_a_run_does_not_load_the_warm_start(tmp_path):
    """Dynamically: a one-step run of the tiny model never imports zoo.warm_start
    (PYTHONPROFILEIMPORTTIME makes Python list every module it imports on stderr)."""
    result = run_harness(
        "run",
        "grpo",
        "--steps",
        "1",
        "--prompts-per-step",
        "4",
        "--eval-points",
        "1",
        "--eval-samples",
        "4",
        "--quiet",
        "--out",
        "run",
        cwd=tmp_path,
        env={"PYTHONPROFILEIMPORTTIME": "1"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    imported = set(re.findall(r"\|\s+([\w.]+)$", result.stderr, flags=re.MULTILINE))
    assert {"zoo.run.loop", "zoo.models.tiny"} <= imported  # the listing works
    assert not {m for m in imported if m.startswith("zoo.warm_start")}
    assert (tmp_path / "run" / "metrics.jsonl").read_text().strip()
