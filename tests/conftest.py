"""Shared fixtures: the tiny model is built once per session (or reused from
$FORGE_ZOO_CACHE when CI provides one), and one in-process vLLM engine serves every
generator test."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tiny_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Directory of the warm-started tiny model (Hugging Face format)."""
    if not os.environ.get("FORGE_ZOO_CACHE"):
        os.environ["FORGE_ZOO_CACHE"] = str(tmp_path_factory.mktemp("forge-zoo-cache"))
    from zoo.core.tiny import tiny_model_path

    return tiny_model_path(quiet=True)


@pytest.fixture(scope="session")
def generator(tiny_path: Path):
    """One vLLM engine for the whole session. Tests that change its weights must restore
    the tiny model's weights (version 0) before they return."""
    from zoo.core.generator import VLLMGenerator

    return VLLMGenerator(tiny_path, seed=0)


@pytest.fixture(scope="session")
def tiny_model_path(tiny_path: Path) -> Path:
    """Alias of ``tiny_path`` (the name tests/test_cli.py asks for). Subprocesses inherit
    $FORGE_ZOO_CACHE from this process, so they reuse the same build."""
    return tiny_path
