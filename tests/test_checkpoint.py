"""Crash-safe checkpoints (zoo/run/checkpoint.py): a save killed at any of its stages
leaves a complete current checkpoint, and the run resumes to the numbers of an
uninterrupted one; leftovers of older layouts and of kills are recovered from."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from harness.runner import execute_run, read_metrics
from zoo.run import checkpoint
from zoo.run.checkpoint import SAVE_STAGES, checkpoint_step, current, has_checkpoint
from zoo.run.run_config import RunConfig
from zoo.run.runlog import is_timing_key


class Killed(BaseException):
    """Stands for SIGKILL: nothing catches it, nothing after it in the save runs."""


def without_timing(records: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if not is_timing_key(k)} for r in records]


SMALL = RunConfig(prompts_per_step=4, steps=3, eval_every=3, checkpoint_every=1, eval_samples=0,
                  env_config={"eval_size": 50})  # fmt: skip


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
