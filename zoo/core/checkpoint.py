"""Resumable checkpoints: the trainer's weights as a Hugging Face checkpoint (usable as
``--model DIR``), plus the optimizer and loop state in ``trainer_state.pt``. Written to a
temporary folder and renamed, so a crash mid-write leaves the previous checkpoint whole."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from zoo.core.models import load_hf_state_dict

if TYPE_CHECKING:
    from zoo.core.loop import RLLoop

STATE_FILE = "trainer_state.pt"


def save_checkpoint(directory: Path, loop: RLLoop, source_model: Path) -> None:
    trainer = loop.s.trainer
    tmp = directory.with_name(directory.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    trainer.save_hf(tmp, source_model)
    torch.save(
        {"loop": loop.state(), "optimizer": trainer.optimizer_state_dict(),
         "version": trainer.version},
        tmp / STATE_FILE,
    )  # fmt: skip
    (tmp / "checkpoint.json").write_text(json.dumps({"step": loop.step_index}))
    old = directory.with_name(directory.name + ".old")
    if directory.exists():
        directory.rename(old)
    tmp.rename(directory)
    if old.exists():
        shutil.rmtree(old)


def has_checkpoint(directory: Path) -> bool:
    return (directory / STATE_FILE).exists()


def load_checkpoint(directory: Path, loop: RLLoop) -> int:
    """Restore trainer, optimizer, loop and ledger state, push the weights to the
    generator; returns the step the checkpoint was taken after."""
    trainer = loop.s.trainer
    state = torch.load(directory / STATE_FILE, weights_only=False)
    trainer.load_state(load_hf_state_dict(directory), state["optimizer"], state["version"])
    loop.load_state(state["loop"])
    loop.s.sync_weights()
    return loop.step_index
