"""A run is resolved once (zoo/run/plan.py): one ``harness run`` validates its config,
resolves its model and constructs its env exactly once, and everything after the
pre-flight checks (the services, the loop, config.json) reads the plan."""

from __future__ import annotations

import contextlib
import io
import json
from collections import Counter
from pathlib import Path

import pytest

from harness.cli import main
from zoo.envs.base import Env
from zoo.run.plan import RunPlan
from zoo.run.run_config import RunConfig, RunSection

ONE_STEP = [
    "--steps",
    "1",
    "--prompts-per-step",
    "4",
    "--eval-points",
    "1",
    "--eval-samples",
    "4",
    "--generator",
    "hf",
    "--quiet",
]
"""The smallest real run of the tiny model (transformers' generate: no engine to start)."""


def counting(calls: Counter, name: str, method):
    def counted(*args, **kwargs):
        calls[name] += 1
        return method(*args, **kwargs)

    return counted


def test_one_harness_run_validates_resolves_the_model_and_builds_the_env_once(
    tiny_model_path, tmp_path, monkeypatch
):
    calls: Counter = Counter()
    monkeypatch.setattr(RunConfig, "validate", counting(calls, "validate", RunConfig.validate))
    monkeypatch.setattr(
        RunSection, "model_spec", counting(calls, "model_spec", RunSection.model_spec)
    )
    # every env's constructor reaches Env.__init__ once (its config is made there)
    monkeypatch.setattr(Env, "__init__", counting(calls, "env", Env.__init__))
    with contextlib.redirect_stdout(io.StringIO()):
        code = main(["run", "grpo", *ONE_STEP, "--out", str(tmp_path / "run")])
    assert code == 0
    assert dict(calls) == {"validate": 1, "model_spec": 1, "env": 1}
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert Path(config["model_path"]) == Path(tiny_model_path)  # from the plan's spec
    assert (tmp_path / "run" / "complete.json").exists()


def test_a_plan_holds_what_the_run_resolves():
    plan = RunPlan.resolve(
        RunConfig.from_flat(env="tool_arithmetic", max_response_len=10), spec=False
    )
    assert plan.spec is None and plan.env.name == "tool_arithmetic"
    assert plan.algorithm.name == "grpo" and plan.device in ("cpu", "cuda")
    assert plan.budget == ("steps", 150.0)
    assert plan.episode_budget > 10  # a multi-turn episode: turns and observations
    assert plan.with_spec().spec.name == "tiny" and plan.with_spec().env is plan.env


def test_resolving_refuses_what_the_run_would_refuse():
    from zoo.core.config import ConfigError

    with pytest.raises(ConfigError, match="steps must be >= 1"):
        RunPlan.resolve(RunConfig.from_flat(steps=0), spec=False)
    with pytest.raises(ConfigError, match="max_episode_tokens applies to multi-turn envs"):
        RunPlan.resolve(RunConfig.from_flat(max_episode_tokens=100), spec=False)
