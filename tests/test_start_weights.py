"""The tiny presets start from weights that ship with the project (zoo/models/start_weights),
checked by sha256 when loaded, never rebuilt by a run; `harness warm-start` reruns a
preset's recipe on purpose and says whether this CPU reproduces the shipped bytes."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil

import pytest
from harness_cli import REPO, run_harness

from zoo.core.config import ConfigError
from zoo.models import tiny
from zoo.run.runlog import cpu_model, cpu_vector_flags


def test_every_preset_ships_weights_of_its_own_recipe_that_hash_as_recorded():
    manifest = tiny.read_manifest()
    assert sorted(manifest) == sorted(tiny.TINY_PRESETS)
    for name, recipe in tiny.TINY_PRESETS.items():
        path = tiny.tiny_model_path(recipe)
        assert path == tiny.SHIPPED / name
        weights = (path / "model.safetensors").read_bytes()
        assert hashlib.sha256(weights).hexdigest() == manifest[name]["sha256"]
        assert manifest[name]["recipe_key"] == recipe.key()
        assert {"cpu", "cpu_vector_flags", "torch", "torch_threads"} <= set(
            manifest[name]["built_on"]
        )
        # the shipped folder is a whole Hugging Face checkpoint, nothing fetched or built
        assert {"config.json", "tokenizer.json"} <= {p.name for p in path.iterdir()}


def test_each_shipped_file_stays_small():
    for path in tiny.SHIPPED.rglob("*"):
        assert path.stat().st_size < 4 * 2**20, path  # git holds them; a few MB in all


@pytest.fixture
def shipped_copy(tmp_path, monkeypatch):
    """The shipped folder copied to tmp_path, and zoo.models.tiny pointed at the copy."""
    copy = tmp_path / "start_weights"
    shutil.copytree(tiny.SHIPPED, copy)
    monkeypatch.setattr(tiny, "SHIPPED", copy)
    monkeypatch.setattr(tiny, "MANIFEST", copy / "manifest.json")
    return copy


def test_modified_weights_are_refused_naming_both_hashes(shipped_copy):
    weights = shipped_copy / "tiny" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1  # one bit of the last parameter
    weights.write_bytes(bytes(data))
    with pytest.raises(ConfigError) as err:
        tiny.tiny_model_path(tiny.TINY_PRESETS["tiny"])
    recorded = tiny.read_manifest()["tiny"]["sha256"]
    assert recorded[:12] in str(err.value)
    assert hashlib.sha256(bytes(data)).hexdigest()[:12] in str(err.value)


def test_a_changed_recipe_is_an_error_that_says_how_to_rebuild(shipped_copy, monkeypatch):
    changed = dataclasses.replace(tiny.TINY_PRESETS["tiny"], target_accuracy=0.3)
    monkeypatch.setitem(tiny.TINY_PRESETS, "tiny", changed)
    with pytest.raises(ConfigError, match="warm-start tiny"):
        tiny.tiny_model_path(changed)
    assert not list(shipped_copy.glob("tiny/.building-*"))  # nothing was built


def test_a_recipe_that_is_no_preset_is_refused():
    with pytest.raises(ConfigError, match="none of the presets"):
        tiny.tiny_model_path(tiny.TinyRecipe(seed=7))


def test_a_run_records_the_shipped_weights_hash(tmp_path):
    """The sha256 a run records (config.json) is of the shipped file; the runs hash folders
    (name, size and bytes of each *.safetensors: zoo/run/runlog.py)."""
    from zoo.run.runlog import weights_sha256

    path = tiny.tiny_model_path()
    copy = tmp_path / "tiny"
    shutil.copytree(path, copy)
    assert weights_sha256(copy) == weights_sha256(path)
    (copy / "model.safetensors").write_bytes(b"")
    assert weights_sha256(copy) != weights_sha256(path)


@pytest.mark.slow
def test_warm_start_check_rebuilds_the_recipe_and_compares_with_the_shipped_bytes(tmp_path):
    """On the CPU class that built the shipped weights the recipe gives the same bytes
    (exit 0); on another class it may not (exit 1), and the output says which."""
    result = run_harness("warm-start", "tiny", "--check", "--quiet", cwd=tmp_path, timeout=900)
    built_on = tiny.read_manifest()["tiny"]["built_on"]
    assert tiny.read_manifest()["tiny"]["sha256"][:12] in result.stdout, result.stderr
    same_class = (built_on["cpu"], built_on["cpu_vector_flags"]) == (
        cpu_model(),
        cpu_vector_flags(),
    )
    if same_class:
        assert result.returncode == 0, result.stdout + result.stderr
        assert "the same bytes" in result.stdout
    else:
        assert result.returncode in (0, 1), result.stderr
    assert list(tmp_path.iterdir()) == []  # --check leaves nothing behind
    assert "Writing model shards" not in result.stderr  # transformers' bar, under --quiet


def test_the_committed_boards_mark_which_rows_started_from_the_shipped_weights():
    """The committed tiny boards have rows from the shipped start, and leaderboard.json
    marks exactly those as shipped (the others were made before the weights shipped)."""
    from zoo.run.runlog import weights_sha256

    rows = json.loads((REPO / "leaderboards" / "leaderboard.json").read_text())
    shipped = weights_sha256(tiny.tiny_model_path())
    tiny_rows = [r for r in rows if r["model"] == "tiny"]
    assert any(r["start_weights_sha256"] == [shipped] for r in tiny_rows)
    for row in tiny_rows:
        assert row["start_weights_shipped"] == (row["start_weights_sha256"] == [shipped])
