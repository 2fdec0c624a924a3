"""Resumable checkpoints that survive a kill at any instant.

A checkpoint is the trainer's weights as a Hugging Face checkpoint (usable as
``--model DIR``), plus the optimizer and loop state (and a learned critic's weights and
optimizer, for an algorithm that has one) in ``trainer_state.pt`` and
``checkpoint.json`` (the step, written last). In a run folder:

    checkpoints/step-000040/    one complete checkpoint per folder
    checkpoint -> checkpoints/step-000040     the current one (a relative symbolic link)

A save writes ``checkpoints/step-N.tmp/``, flushes every file and the folder to disk
(fsync), renames it to ``checkpoints/step-N`` (one atomic rename), then makes it current by
renaming a new link over ``checkpoint`` (``os.replace``: atomic too), flushes the run
folder, and only then removes the older step folders. So at every instant ``checkpoint``
names a complete checkpoint: the old one until the link switch, the new one after it.

Loading follows the link; where it is missing or dangling (a kill before the first
switch, a folder copied without its link, the layout of older versions: a plain
``checkpoint/`` folder with ``checkpoint.tmp`` / ``checkpoint.old`` beside it), it takes
the complete checkpoint with the highest step among every candidate folder. The next save
removes whatever a kill left behind.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from zoo.core.config import ConfigError
from zoo.files import UnreadableFile, load_torch, read_json
from zoo.models.titan import load_hf_state_dict
from zoo.run.algorithm_state import algorithm_state, restore_algorithm_state
from zoo.run.runlog import RESUME, StorageError, fsync_path

if TYPE_CHECKING:
    from zoo.run.loop import RLLoop

STATE_FILE = "trainer_state.pt"
MARKER = "checkpoint.json"
"""Written last into a checkpoint folder: its presence (with the state file) marks it whole."""
STEPS = "checkpoints"
STEP_DIR = re.compile(r"step-(\d+)")

SAVE_STAGES = (
    "weights written",
    "state written",
    "marker written",
    "folder renamed",
    "link written",
    "link switched",
    "old removed",
)
"""The points of a save a kill can fall between (tests/test_checkpoint.py kills at each)."""


def reached(stage: str) -> None:
    """Called as a save passes each of SAVE_STAGES; a no-op (tests replace it to kill the
    save there)."""


def save_checkpoint(directory: Path, loop: RLLoop, source_model: Path) -> None:
    """Make a checkpoint of ``loop`` the current one at ``directory`` (the link)."""
    trainer = loop.s.trainer
    root = directory.parent / STEPS
    root.mkdir(exist_ok=True)
    adopt_legacy_folder(directory, root)
    final = root / f"step-{loop.step_index:06d}"
    tmp = final.with_name(final.name + ".tmp")
    for stale in (tmp, final):  # a kill's leftovers, or a re-done step after a resume
        if stale.exists() and stale.resolve() != current(directory):
            shutil.rmtree(stale)
    if final.exists():  # this very step is already current: nothing to do
        return
    try:
        trainer.save_hf(tmp, source_model)
        reached("weights written")
        critic = loop.s.critic  # an algorithm with a learned critic: its weights and AdamW
        torch.save(
            {
                "loop": loop_state(loop),
                "optimizer": trainer.optimizer_state_dict(),
                "version": trainer.version,
                **({"critic": critic.state_dict()} if critic is not None else {}),
            },
            tmp / STATE_FILE,
        )
        reached("state written")
        (tmp / MARKER).write_text(json.dumps({"step": loop.step_index}))
        for f in tmp.iterdir():
            fsync_path(f)
        fsync_path(tmp)
    except Exception as exc:
        # torch.save reports a full disk as a RuntimeError of its zip writer ("unexpected
        # pos"), with no errno: judge by the free space left at the failure.
        full = _disk_refused(exc) or shutil.disk_usage(root).free < LOW_SPACE_BYTES
        shutil.rmtree(tmp, ignore_errors=True)  # a partial folder is of no use: free it
        if not full:
            raise
        before = current(directory)
        kept = f"step {checkpoint_step(before)}" if before is not None else "none yet"
        raise StorageError(
            f"could not write the checkpoint of step {loop.step_index} to {root} ({exc}); "
            f"the previous checkpoint is intact ({kept}). {RESUME}"
        ) from exc
    reached("marker written")
    tmp.rename(final)
    fsync_path(root)
    reached("folder renamed")
    link = directory.with_name(directory.name + ".link")
    if link.is_symlink() or link.exists():
        link.unlink()
    try:
        link.symlink_to(Path(STEPS) / final.name)
    except OSError as exc:  # (a link takes an inode, and a full disk may have none left)
        raise StorageError(
            f"could not link the checkpoint of step {loop.step_index} ({exc.strerror}); the "
            f"previous checkpoint stays current. {RESUME}"
        ) from exc
    reached("link written")
    os.replace(link, directory)
    fsync_path(directory.parent)
    reached("link switched")
    for old in root.iterdir():
        if old != final and DAMAGED not in old.name:  # (set aside by a resume: kept)
            shutil.rmtree(old, ignore_errors=True)
    for leftover in ("tmp", "old"):  # the previous layout's
        shutil.rmtree(directory.with_name(f"{directory.name}.{leftover}"), ignore_errors=True)
    reached("old removed")


LOW_SPACE_BYTES = 64 * 2**20
"""A save that fails with less than this free on its disk failed for want of space."""


def _disk_refused(exc: BaseException | None) -> bool:
    """Whether an error (or one it was raised from) is the disk refusing a write."""
    while exc is not None:
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def adopt_legacy_folder(directory: Path, root: Path) -> None:
    """A plain ``checkpoint/`` folder (older versions, or a run folder copied without
    following links, e.g. by ``shutil.copytree``) becomes a step folder, so the link can
    replace it."""
    if directory.is_dir() and not directory.is_symlink():
        root.mkdir(exist_ok=True)
        step = checkpoint_step(directory)
        target = root / f"step-{step:06d}" if step is not None else None
        if target is None or checkpoint_step(target) == step:  # (a copy made without
            shutil.rmtree(directory)  # links holds the same folder twice)
        else:
            shutil.rmtree(target, ignore_errors=True)
            directory.rename(target)


def checkpoint_step(folder: Path) -> int | None:
    """The step of a complete checkpoint folder, else None."""
    try:
        if not (folder / STATE_FILE).is_file():
            return None
        return int(json.loads((folder / MARKER).read_text())["step"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _candidates(directory: Path) -> list[Path]:
    """Every folder that may hold the run's checkpoint: the link's target, the previous
    layout's folders and every step folder (finished or not)."""
    found = [directory, *(directory.with_name(f"{directory.name}.{s}") for s in ("old", "tmp"))]
    root = directory.parent / STEPS
    if root.is_dir():
        found += [p for p in root.iterdir() if STEP_DIR.fullmatch(p.name.removesuffix(".tmp"))]
    return [p for p in found if p.is_dir()]


def current(directory: Path) -> Path | None:
    """The current complete checkpoint of the run whose link is ``directory``: the link's
    target, or else the complete candidate folder with the highest step."""
    if checkpoint_step(directory) is not None:
        return directory.resolve()
    steps = [(step, p) for p in _candidates(directory) if (step := checkpoint_step(p)) is not None]
    return max(steps)[1].resolve() if steps else None


def has_checkpoint(directory: Path) -> bool:
    return current(directory) is not None


DAMAGED = ".damaged"
"""Suffix a resume gives a checkpoint folder it found damaged and passed over: kept for a
look, out of the way of the saves (whose clean-up leaves it alone)."""


@dataclass
class Found:
    """A checkpoint read whole (``find_checkpoint``), not yet loaded into a loop."""

    folder: Path
    step: int
    state: dict[str, Any]
    weights: dict[str, torch.Tensor]
    passed_over: list[tuple[Path, UnreadableFile]] = field(default_factory=list)
    """The checkpoints found damaged (folder, what is wrong), newest first."""


def read_checkpoint(folder: Path) -> tuple[int, dict[str, Any], dict[str, torch.Tensor]]:
    """(step, trainer state, weights) of a checkpoint folder, every file read whole; an
    UnreadableFile names the first one that is not."""
    marker = read_json(folder / MARKER)
    step = marker.get("step")
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        raise UnreadableFile(folder / MARKER, f"holds no step number ({shown_value(marker)})")
    state = load_state_file(folder / STATE_FILE)
    wanted = ("loop", "optimizer", "version")
    if not isinstance(state, dict) or not all(k in state for k in wanted):
        raise UnreadableFile(folder / STATE_FILE, f"holds no trainer state ({', '.join(wanted)})")
    return step, state, load_hf_state_dict(folder)


def shown_value(value: object, limit: int = 60) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _saved(folder: Path) -> bool:
    """Whether a save got as far as this folder: anything but a step folder still being
    written (``.tmp``, no marker yet), which a kill leaves behind and the next save
    replaces."""
    return not folder.name.endswith(".tmp") or (folder / MARKER).exists()


def find_checkpoint(directory: Path) -> Found | None:
    """The newest checkpoint of the run (link ``directory``) whose files all read whole,
    with the newer ones found damaged. None when no save ever finished (nothing to resume
    from: a run killed before its first checkpoint). Where saves finished but none reads
    whole, an UnreadableFile naming the newest one's damaged file."""
    folders = {p.resolve() for p in _candidates(directory) if _saved(p)}
    if directory.is_symlink() and not directory.exists():  # the link's target is gone
        dangling = UnreadableFile(directory, f"links to {os.readlink(directory)}, which is missing")
    else:
        dangling = None
    if not folders and dangling is None:
        return None

    def order(folder: Path) -> int:  # by the step its marker or its name says
        step = checkpoint_step(folder)
        named = STEP_DIR.fullmatch(folder.name.removesuffix(".tmp"))
        return step if step is not None else int(named.group(1)) if named else -1

    passed_over: list[tuple[Path, UnreadableFile]] = []
    for folder in sorted(folders, key=order, reverse=True):
        try:
            step, state, weights = read_checkpoint(folder)
        except UnreadableFile as exc:
            passed_over.append((folder, exc))
            continue
        return Found(folder, step, state, weights, passed_over)
    first = passed_over[0][1] if passed_over else dangling
    assert first is not None
    others = len(passed_over) - 1
    raise first.advised(
        "no other checkpoint of the run reads whole"
        + (f" ({others} more damaged)" if others > 0 else "")
        + "; nothing was changed: restore the file, or start the run afresh in another --out"
    )


def set_aside_damaged(found: Found) -> list[Path]:
    """Rename the damaged checkpoints newer than the one resumed from to ``<name>.damaged``
    (nothing is deleted): the link and the next saves then pass them by. Returns their new
    paths, one per ``found.passed_over``."""
    moved = []
    for folder, _ in found.passed_over:
        if not folder.exists():
            moved.append(folder)
            continue
        target = folder.with_name(folder.name + DAMAGED)
        n = 1
        while target.exists():
            n += 1
            target = folder.with_name(f"{folder.name}{DAMAGED}-{n}")
        folder.rename(target)
        moved.append(target)
    return moved


def load_checkpoint(directory: Path, loop: RLLoop, found: Found | None = None) -> int:
    """Restore trainer, optimizer, loop and ledger state from the checkpoint ``found``
    (default: ``find_checkpoint(directory)``), push the weights to the generator; returns
    the step it was taken after."""
    found = found or find_checkpoint(directory)
    if found is None:
        raise FileNotFoundError(f"no complete checkpoint at {directory}")
    trainer, state = loop.s.trainer, found.state
    trainer.load_state(found.weights, state["optimizer"], state["version"])
    if loop.s.critic is not None:
        if "critic" not in state:
            raise ConfigError(
                f"{found.folder} holds no critic for algorithm {loop.s.algorithm.name!r}"
            )
        loop.s.critic.load_state(state["critic"])
    restore_loop_state(loop, state["loop"])
    loop.s.sync_weights()
    return loop.step_index


def loop_state(loop: RLLoop) -> dict[str, Any]:
    """What the loop needs, beside the trainer's state, to continue its run exactly: its
    counters, the ledger's totals, an adaptive KL weight and the algorithm's own state."""
    ledger, algorithm = loop.s.ledger, loop.s.algorithm
    return {
        # prompts requested but not yet trained on are requested again after a resume
        "step_index": loop.step_index,
        "samples": loop.samples,
        "cursor": loop.in_flight[0][0] if loop.in_flight else loop.cursor,
        "train_seconds": loop.train_seconds,
        "evals_done": loop.evals_done,
        "ledger": {
            "flops": dict(ledger.flops),
            "tokens": dict(ledger.tokens),
            "seconds": dict(ledger.seconds),
        },
        # the adaptive KL weight of the next step (a plain float: exact on resume)
        **({"kl_coef": algorithm.kl_coef} if algorithm.options.kl_target > 0 else {}),
        # the algorithm's own (a plugin's running baseline, say); none: no key, so a
        # checkpoint of a stateless algorithm holds what it always held
        **({"algorithm": kept} if (kept := algorithm_state(algorithm)) else {}),
    }


def restore_loop_state(loop: RLLoop, state: dict[str, Any]) -> None:
    """Put back what ``loop_state`` saved."""
    for key in ("step_index", "cursor", "samples", "train_seconds", "evals_done"):
        setattr(loop, key, state[key])
    if "kl_coef" in state:
        loop.s.algorithm.set_kl_coef(state["kl_coef"])
    restore_algorithm_state(loop.s.algorithm, state.get("algorithm"))
    ledger = loop.s.ledger
    for name in ("flops", "tokens", "seconds"):
        getattr(ledger, name).update(state["ledger"][name])
    ledger.step_delta()  # the next step's delta starts from the restored totals


def load_state_file(path: Path) -> dict:
    """``trainer_state.pt`` read with ``weights_only=True``: tensors and plain values only
    (what save_checkpoint writes: the loop's counters, with an adaptive KL the next
    step's KL weight (``loop_state``), the optimizer's state dict, the policy version,
    and a learned critic's weights and optimizer state).
    A file that holds other objects is refused, not unpickled: resuming a run folder from
    elsewhere must not run code it carries (zoo.files.load_torch)."""
    try:
        return load_torch(path)
    except UnreadableFile as exc:
        if "unpickling" in exc.problem:
            raise exc.advised("resume only from checkpoints forge-zoo wrote") from None
        raise
