"""The refactor guard (tests/golden_metrics.py): a short run of every built-in algorithm on
the local placement and of GRPO on the Monarch placement gives exactly the metrics.jsonl
(timings left out) recorded for this machine's CPU class, or, on a class with no golden
file, exactly what the code of the last commit that recorded a golden gives here."""

from __future__ import annotations

import json
import re
import warnings

import pytest
from golden_metrics import (
    BUILT_INS,
    CI_GUARDED,
    CONTROLS,
    added_fields,
    differences,
    golden_path,
    goldens,
    last_golden_commit,
    machine,
    produce,
    produce_at,
    recorded_built_ins,
    same_code,
    tree_of,
    unguarded,
)
from harness_cli import run_harness


def test_every_built_in_algorithm_has_a_golden_run(tmp_path):
    listed = run_harness("list", "algorithms", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    built_in = re.findall(r"^(\w+)\s+\[built-in\]", listed.stdout, flags=re.MULTILINE)
    assert sorted(built_in) == sorted(BUILT_INS + CONTROLS)
    assert goldens(), "no tests/golden/metrics-*.json: record one with golden_metrics.py --write"
    held = set()
    for path in goldens():
        recorded = json.loads(path.read_text())
        assert golden_path(recorded["machine"]) == path  # named after the class it holds
        runs = set(recorded["runs"])
        assert "grpo/monarch" in runs
        local = runs - {"grpo/monarch"}
        # a golden may predate newer built-ins, never hold a run that is not one
        assert local <= {f"{a}/local" for a in BUILT_INS}, sorted(local)
        held |= local
    # every built-in is guarded on at least one CPU class
    assert sorted(held) == sorted(f"{a}/local" for a in BUILT_INS)


def test_a_golden_older_than_a_built_in_compares_what_it_holds(tmp_path):
    older = {"grpo/local": [], "dapo/local": [], "grpo/monarch": []}
    newer = {**older, "gpg/local": []}
    paths = []
    for name, runs in (("a", older), ("b", newer)):
        paths.append(tmp_path / f"metrics-{name}.json")
        paths[-1].write_text(json.dumps({"machine": {}, "runs": runs}))
    # the code of a commit with both goldens runs what both hold, in BUILT_INS order
    assert recorded_built_ins(paths) == [a for a in BUILT_INS if a in ("grpo", "dapo")]
    assert recorded_built_ins([]) == []
    assert set(unguarded(older)) == set(BUILT_INS) - {"grpo", "dapo"}
    assert unguarded({f"{a}/local": [] for a in BUILT_INS}) == []


def test_the_comparison_is_exact_and_names_the_run_step_and_field():
    record = {"step": 1, "loss": 0.5, "response_tokens": 40, "reward_mean": 0.25}
    golden = {"grpo/local": [record]}
    # a loss moved in its 16th digit (a clip bound moved by 1e-6 moves it about this much)
    moved = {"grpo/local": [{**record, "loss": 0.5000000000000001, "response_tokens": 41}]}
    assert differences(golden, moved) == [
        "grpo/local step 1 loss: golden 0.5, now 0.5000000000000001",
        "grpo/local step 1 response_tokens: golden 40, now 41",
    ]
    assert differences(golden, {"grpo/local": [record]}) == []
    assert differences(golden, {}) == ["grpo/local: missing"]
    # a metric added since the golden changes none of its numbers: reported, not a failure;
    # one the golden holds that is gone is a failure
    added = {"grpo/local": [{**record, "new_frac": 0.5}]}
    assert differences(golden, added) == []
    assert added_fields(golden, added) == ["grpo/local: new_frac"]
    gone = {"grpo/local": [{k: v for k, v in record.items() if k != "loss"}]}
    assert differences(golden, gone) == ["grpo/local step 1 loss: only in the golden run"]


@pytest.mark.slow
@pytest.mark.parametrize(
    "algorithms",
    [
        pytest.param(CI_GUARDED, id="ci"),
        pytest.param(
            [a for a in BUILT_INS if a not in CI_GUARDED], id="the-rest", marks=pytest.mark.extra
        ),
    ],
)
def test_the_runs_give_the_golden_metrics_of_this_cpu_class(tmp_path, tiny_model_path, algorithms):
    """Exact equality with this class's golden file, or with the reference commit's code
    run here, for ``algorithms`` and GRPO on Monarch. Runs on every machine: it never
    skips."""
    path = golden_path(machine())
    if path.exists():
        reference = json.loads(path.read_text())["runs"]
        reference = {
            run: records
            for run, records in reference.items()
            if run == "grpo/monarch" or run.split("/")[0] in algorithms
        }
        source = str(path.relative_to(path.parents[2]))
    else:
        commit = last_golden_commit()
        reference = produce_at(commit, tmp_path / "reference", algorithms)
        source = f"commit {commit[:10]} run here"
        if same_code(commit):
            source += " (the same code: this checks determinism only)"
            warnings.warn(f"no golden for {machine()}; {source}", stacklevel=1)
    if missing := [a for a in unguarded(reference) if a in algorithms]:
        warnings.warn(f"not in {source}, so unguarded here: {', '.join(missing)}", stacklevel=1)
    runs = produce(tmp_path / "head", algorithms=algorithms)
    if added := added_fields(reference, runs):
        warnings.warn(f"fields added since {source}: {'; '.join(added)}", stacklevel=1)
    found = differences(reference, runs)
    assert found == [], f"differs from {source}:\n" + "\n".join(found)


def test_the_fallback_reference_is_a_commit_whose_tree_holds_a_golden(tmp_path):
    """Where no golden matches this machine, the guard runs the code of the last commit that
    recorded one: its tree (extracted without .git) holds the harness, the shipped start
    weights and that golden file."""
    commit = last_golden_commit()
    tree = tree_of(commit, tmp_path / "tree")
    assert (tree / "harness" / "cli.py").is_file()
    assert (tree / "zoo" / "models" / "start_weights" / "manifest.json").is_file()
    assert list((tree / "tests" / "golden").glob("metrics-*.json"))
    assert not (tree / ".git").exists()
