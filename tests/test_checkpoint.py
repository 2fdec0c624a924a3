"""Crash-safe checkpoints (zoo/run/checkpoint.py): a save killed at any of its stages
leaves a complete current checkpoint, and the run resumes to the numbers of an
uninterrupted one; leftovers of older layouts and of kills are recovered from. An
algorithm's own state (``Algorithm.state_dict``, a plugin's running baseline) is saved
with it and restored on resume."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from harness.runner import execute_run, read_metrics
from zoo.algorithms import ALGORITHMS, Algorithm, get_algorithm
from zoo.algorithms.conformance import run_conformance
from zoo.core.config import ConfigError
from zoo.core.losses import aggregate, clipped_objective, log_ratio, ratio_metrics
from zoo.core.types import LossOutput, TrainBatch
from zoo.run import checkpoint
from zoo.run.algorithm_state import algorithm_state
from zoo.run.checkpoint import (
    SAVE_STAGES,
    checkpoint_step,
    current,
    has_checkpoint,
    load_state_file,
    restore_loop_state,
)
from zoo.run.run_config import RunConfig
from zoo.run.runlog import is_timing_key


class Killed(BaseException):
    """Stands for SIGKILL: nothing catches it, nothing after it in the save runs."""


def without_timing(records: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if not is_timing_key(k)} for r in records]


SMALL = RunConfig.from_flat(
    prompts_per_step=4,
    steps=3,
    eval_every=3,
    checkpoint_every=1,
    eval_samples=0,
    env_config={"eval_size": 50},
)


def kill_at(stage: str, save_number: int):
    seen = []

    def reached(s: str) -> None:
        seen.append(s)
        if s == stage and seen.count(stage) == save_number:
            raise Killed(stage)

    return reached


def test_a_save_killed_at_each_stage_resumes_to_the_uninterrupted_metrics(
    loop_for, tmp_path, monkeypatch
):
    def run(out: Path, resume: bool = False) -> None:
        execute_run(SMALL, out, loop_for(SMALL).s, command="test", resume=resume)

    run(tmp_path / "whole")
    expected = without_timing(read_metrics(tmp_path / "whole"))
    assert len(expected) == 4  # step 0 and 3 steps
    for stage in SAVE_STAGES:
        out = tmp_path / stage.replace(" ", "-")
        monkeypatch.setattr(checkpoint, "reached", kill_at(stage, save_number=2))
        with pytest.raises(Killed):
            run(out)
        monkeypatch.setattr(checkpoint, "reached", lambda s: None)
        # a complete checkpoint is current: step 1 until the link switched, then step 2
        assert checkpoint_step(current(out / "checkpoint")) == (
            2 if SAVE_STAGES.index(stage) >= SAVE_STAGES.index("link switched") else 1
        ), stage
        run(out, resume=True)
        assert without_timing(read_metrics(out)) == expected, stage
        assert checkpoint_step(out / "checkpoint") == 3
        assert [p.name for p in (out / "checkpoints").iterdir()] == ["step-000003"]
        assert not (out / "checkpoint.link").exists()


def fake_checkpoint(folder: Path, step: int, whole: bool = True) -> Path:
    folder.mkdir(parents=True)
    torch.save({"step": step}, folder / checkpoint.STATE_FILE)
    if whole:
        (folder / checkpoint.MARKER).write_text(json.dumps({"step": step}))
    return folder


def test_loading_recovers_from_the_older_layouts_leftovers(tmp_path):
    link = tmp_path / "checkpoint"
    # a kill between the old layout's two renames: only .old and .tmp are left
    fake_checkpoint(tmp_path / "checkpoint.old", 10)
    fake_checkpoint(tmp_path / "checkpoint.tmp", 20)
    assert has_checkpoint(link) and current(link) == (tmp_path / "checkpoint.tmp").resolve()
    # an incomplete newer step folder (no marker) is passed over
    fake_checkpoint(tmp_path / "checkpoints" / "step-000030", 30, whole=False)
    assert checkpoint_step(current(link)) == 20
    # a dangling link (its folder gone) falls back as well
    link.symlink_to(Path("checkpoints") / "step-000099")
    assert checkpoint_step(current(link)) == 20
    assert not has_checkpoint(tmp_path / "elsewhere" / "checkpoint")


def test_an_old_plain_checkpoint_folder_is_adopted_as_a_step_folder(tmp_path):
    fake_checkpoint(tmp_path / "checkpoint", 7)
    checkpoint.adopt_legacy_folder(tmp_path / "checkpoint", tmp_path / "checkpoints")
    assert not (tmp_path / "checkpoint").exists()
    assert checkpoint_step(tmp_path / "checkpoints" / "step-000007") == 7


def test_a_run_folder_copied_without_its_link_saves_again(tmp_path):
    """shutil.copytree turns the link into a plain folder beside the same step folder."""
    fake_checkpoint(tmp_path / "checkpoints" / "step-000005", 5)
    fake_checkpoint(tmp_path / "checkpoint", 5)
    checkpoint.adopt_legacy_folder(tmp_path / "checkpoint", tmp_path / "checkpoints")
    assert not (tmp_path / "checkpoint").exists()
    assert checkpoint_step(tmp_path / "checkpoints" / "step-000005") == 5


# --- an algorithm's own state (Algorithm.state_dict) ----------------------------------------


@dataclass
class MovingBaselineConfig:
    eps: float = 0.2
    """Symmetric clip range on the token ratio (test plugin)."""
    decay: float = 0.5
    """Weight of the old mean in each update of the running baseline (test plugin)."""
    prior: float = 1.0
    """The baseline before any reward was seen: away from the tiny model's rewards, so
    that a baseline reset on resume would change the advantages (test plugin)."""


class MovingBaseline(Algorithm):
    """REINFORCE with PPO's clip whose baseline is a running mean of the rewards of every
    sampling round so far, across steps: state that must survive a resume."""

    name = "moving_baseline"
    config_class = MovingBaselineConfig
    aggregation = "token_mean"
    inputs = frozenset()
    mechanism = {"clip_low_acting_frac": 0.0, "clip_high_acting_frac": 0.0}  # noqa: RUF012

    def __init__(self, **overrides: Any) -> None:
        super().__init__(**overrides)
        self.mean = self.config.prior
        self.rounds = 0

    def advantages(self, rewards: torch.Tensor) -> torch.Tensor:
        advantages = rewards - self.mean  # before this round updates it
        decay = self.config.decay
        self.mean = decay * self.mean + (1 - decay) * float(rewards.double().mean())
        self.rounds += 1
        return advantages

    def advantage_metrics(self) -> dict[str, float]:
        return {"running_baseline": self.mean}

    def state_dict(self) -> dict[str, Any]:
        return {"mean": self.mean, "rounds": self.rounds}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.mean, self.rounds = state["mean"], state["rounds"]

    def loss(self, batch: TrainBatch) -> LossOutput:
        ratio, adv, eps = torch.exp(log_ratio(batch)), batch.token_advantages, self.config.eps
        per_token = -clipped_objective(ratio, adv, 1 - eps, 1 + eps)
        metrics = ratio_metrics(ratio, batch, 1 - eps, 1 + eps, adv)
        return LossOutput(aggregate(per_token, batch, self.aggregation), metrics)


def test_a_plugins_state_is_checkpointed_and_a_resume_continues_bit_for_bit(
    loop_for, tmp_path, monkeypatch
):
    monkeypatch.setitem(ALGORITHMS._loaded, MovingBaseline.name, MovingBaseline)
    assert not [r for r in run_conformance(MovingBaseline) if r.passed is False]
    cfg = SMALL.replace(algorithm=MovingBaseline.name)

    def run(out: Path, resume: bool = False) -> None:
        execute_run(cfg, out, loop_for(cfg).s, command="test", resume=resume)

    run(tmp_path / "whole")
    whole = without_timing(read_metrics(tmp_path / "whole"))
    baselines = [r["running_baseline"] for r in whole[1:]]
    assert len(set(baselines)) == 3 and 1.0 not in baselines  # it moved every step

    out = tmp_path / "resumed"
    monkeypatch.setattr(checkpoint, "reached", kill_at("old removed", save_number=2))
    with pytest.raises(Killed):
        run(out)
    monkeypatch.setattr(checkpoint, "reached", lambda s: None)
    state = load_state_file(current(out / "checkpoint") / checkpoint.STATE_FILE)
    assert state["loop"]["step_index"] == 2
    assert state["loop"]["algorithm"] == {"mean": baselines[1], "rounds": 2}
    run(out, resume=True)  # step 3 starts from the saved baseline, not from the prior
    assert without_timing(read_metrics(out)) == whole


def test_a_checkpoint_without_the_state_an_algorithm_keeps_is_refused():
    holder = SimpleNamespace(s=SimpleNamespace(algorithm=MovingBaseline()))
    counters = {"step_index": 2, "cursor": 8, "samples": 64, "train_seconds": 1.0}
    with pytest.raises(ConfigError, match=r"holds no state of algorithm 'moving_baseline'"):
        restore_loop_state(holder, {**counters, "evals_done": 1})
    # a stateless algorithm keeps none, and refuses state a checkpoint would hand it
    grpo = get_algorithm("grpo")
    assert algorithm_state(grpo) == {}
    with pytest.raises(ConfigError, match="keeps no state"):
        grpo.load_state_dict({"mean": 0.5})


def test_state_a_resume_could_not_read_back_fails_the_save_naming_where():
    plugin = MovingBaseline()
    plugin.mean = {"by_prompt": {3: 0.5}}
    where = r"state_dict\(\)\['mean'\]\['by_prompt'\]"
    with pytest.raises(ConfigError, match=where + " has the key 3"):
        algorithm_state(plugin)
    plugin.mean = [0.5, {0.5}]
    with pytest.raises(ConfigError, match=r"state_dict\(\)\['mean'\]\[1\] holds a set"):
        algorithm_state(plugin)
    plugin.mean = [torch.tensor([0.5]), (1, "a", None, True)]
    assert algorithm_state(plugin)["mean"] == plugin.mean
