"""The real sanitized MBPP for the slow tests: a local copy, the committed one, or the
Hugging Face cache.

Tests never go online. ``FORGE_ZOO_MBPP_SANITIZED_JSON`` may name Google's
``sanitized-mbpp.json`` (google-research/google-research, ``mbpp/sanitized-mbpp.json``: one
JSON array of the 427 tasks, the same rows and field names as the Hub's ``sanitized``
config) or a JSON-lines file of those rows. Without it, the copy committed at
``tests/data/sanitized-mbpp.json`` (CC BY 4.0; ``tests/data/README.md`` gives its source);
without that, the four ``sanitized`` splits of ``google-research-datasets/mbpp`` in the
Hugging Face cache, and where they are not cached the test skips, saying how to provide
them.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

MBPP_SANITIZED_ENV_VAR = "FORGE_ZOO_MBPP_SANITIZED_JSON"
SANITIZED_SPLITS = ("train", "test", "validation", "prompt")
SANITIZED_TASKS = 427
COMMITTED_COPY = Path(__file__).parent / "data" / "sanitized-mbpp.json"


def _read_rows(path: Path) -> list[dict[str, Any]]:
    text = path.read_text(encoding="utf-8")
    try:
        rows = json.loads(text)  # Google's file: one JSON array
    except json.JSONDecodeError:
        rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    if not isinstance(rows, list):
        raise ValueError(f"{path}: expected a JSON array of tasks or JSON lines")
    return rows


def sanitized_mbpp_rows() -> list[dict[str, Any]]:
    """All 427 sanitized MBPP rows, or ``pytest.skip`` naming the ways to provide them.
    A path that is set but unreadable fails rather than skips: the run asked for the data."""
    local = os.environ.get(MBPP_SANITIZED_ENV_VAR, "").strip()
    if local:
        path = Path(local).expanduser()
        if not path.is_file():
            pytest.fail(f"{MBPP_SANITIZED_ENV_VAR}={local}: no such file")
        rows = _read_rows(path)
    elif COMMITTED_COPY.is_file():
        rows = _read_rows(COMMITTED_COPY)
    else:
        from zoo.envs.data.loading import HubDataUnavailable, load_hf
        from zoo.hub import first_line

        rows = []
        for split in SANITIZED_SPLITS:
            spec = f"google-research-datasets/mbpp:sanitized:{split}"
            try:
                rows += load_hf(spec)
            except HubDataUnavailable as exc:
                pytest.skip(
                    f"the sanitized MBPP is not here: set {MBPP_SANITIZED_ENV_VAR} to Google's "
                    f"sanitized-mbpp.json, or cache {spec} ({first_line(exc)})"
                )
    assert len(rows) == SANITIZED_TASKS, f"expected {SANITIZED_TASKS} tasks, got {len(rows)}"
    return rows


def sanitized_mbpp_file(directory: Path) -> Path:
    """The 427 rows written as JSON lines under ``directory``, for the env's data_files."""
    data = directory / "mbpp-sanitized.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in sanitized_mbpp_rows()))
    return data
