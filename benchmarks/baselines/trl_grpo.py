"""The framework baseline: seconds per optimizer step of TRL's ``GRPOTrainer`` (trl 1.16).

The trainer is set up for the same step as forge-zoo's loop and ``bare_grpo``: every
optimizer step generates ``prompts_per_step x group_size`` completions with transformers'
``generate`` (no vLLM, CPU, float32), scores them, and trains on all of them in one
forward/backward (no gradient accumulation, ``num_iterations=1``, ``beta=0`` so no reference
model). In TRL's terms a "batch" counts completions, not prompts, so
``per_device_train_batch_size = generation_batch_size = prompts_per_step * group_size``.

Two TRL defaults differ from plain ``transformers.TrainingArguments`` and matter here:
``gradient_checkpointing`` is on by default (``GRPOConfig().gradient_checkpointing is True``
in 1.16), which recomputes activations in the backward pass, so it is a parameter; and
``bf16`` defaults to True whenever fp16 is off, so it is switched off explicitly. TRL's
default ``loss_type`` is "dapo" (token mean over the whole batch); "grpo" (token mean per
sequence, then mean over sequences) is set to match the other two loops; the cost is the same.
"""

from __future__ import annotations

import logging
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import torch


@contextmanager
def _quiet_imports() -> Iterator[None]:
    """TRL imports vLLM's helpers when vLLM is installed, and vLLM logs about its Triton
    backend and versions; none of it is used here. Quiet only while importing: the levels
    are restored, so a vLLM engine in the same process (forge-zoo's) still logs."""
    with suppress(ImportError):
        import vllm.logger  # noqa: F401  (configures the "vllm" logger, so it can be quieted)
    loggers = [logging.getLogger(name) for name in ("vllm", "trl")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)


def trl_grpo_step_seconds(
    model_path: str | Path,
    prompts: list[str],
    answers: list[Any],
    rewards_fn: Callable[[list[str], list[Any]], list[float]],
    *,
    group_size: int = 8,
    prompts_per_step: int = 128,
    max_new_tokens: int = 6,
    steps: int = 3,
    warmup: int = 1,
    gradient_checkpointing: bool,
    lr: float = 2e-4,
    seed: int = 0,
) -> dict[str, Any]:
    """Train ``warmup + steps`` optimizer steps with TRL's GRPOTrainer and time them.

    ``prompts`` are plain-text prompts (not chat); ``answers[i]`` goes with ``prompts[i]``;
    ``rewards_fn(completions, answers)`` scores completion texts against their prompts'
    answers. At least ``prompts_per_step`` prompts are needed (TRL drops a partial batch);
    fewer than ``prompts_per_step * (warmup + steps)`` means prompts repeat across epochs.

    Returns ``step_seconds`` (median wall seconds per optimizer step after the warm-up:
    generation, rewards, forward/backward and optimizer), ``steps`` (how many were timed),
    ``gradient_checkpointing`` (as run), ``default_gradient_checkpointing`` (TRL's default,
    True in 1.16) and ``completions_per_step`` (size of each reward call, one per step).
    """
    if len(prompts) != len(answers):
        raise ValueError(f"{len(prompts)} prompts but {len(answers)} answers")
    if len(prompts) < prompts_per_step:
        raise ValueError(f"need at least prompts_per_step={prompts_per_step} prompts")

    with _quiet_imports():
        from datasets import Dataset
        from transformers import (
            AutoModelForCausalLM,
            AutoTokenizer,
            TrainerCallback,
            TrainerControl,
            TrainerState,
            TrainingArguments,
        )
        from transformers.trainer_callback import PrinterCallback
        from trl import GRPOConfig, GRPOTrainer

    completions_per_step: list[int] = []

    def reward(completions: list[str], answer: list[Any], **_: Any) -> list[float]:
        completions_per_step.append(len(completions))
        return rewards_fn(completions, answer)

    class StepClock(TrainerCallback):
        """Wall time at the start of training and at the end of every optimizer step."""

        def __init__(self) -> None:
            self.marks: list[float] = []

        def on_train_begin(
            self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw
        ) -> None:
            self.marks.append(time.perf_counter())

        def on_step_end(
            self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw
        ) -> None:
            self.marks.append(time.perf_counter())

    completions = prompts_per_step * group_size
    clock = StepClock()
    with tempfile.TemporaryDirectory(prefix="trl-grpo-") as out_dir:
        config = GRPOConfig(
            output_dir=out_dir,
            # One generation batch = one optimizer step = one forward/backward.
            num_generations=group_size,
            per_device_train_batch_size=completions,
            generation_batch_size=completions,
            gradient_accumulation_steps=1,
            num_iterations=1,
            max_steps=warmup + steps,
            max_completion_length=max_new_tokens,
            temperature=1.0,
            beta=0.0,
            loss_type="grpo",
            learning_rate=lr,
            lr_scheduler_type="constant",  # TrainingArguments' default decays linearly
            max_grad_norm=1.0,
            gradient_checkpointing=gradient_checkpointing,
            use_vllm=False,
            use_cpu=True,
            bf16=False,
            fp16=False,
            report_to="none",
            logging_strategy="no",
            save_strategy="no",
            disable_tqdm=True,
            seed=seed,
        )
        model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
        trainer = GRPOTrainer(
            model=model,
            reward_funcs=reward,
            args=config,
            train_dataset=Dataset.from_dict({"prompt": list(prompts), "answer": list(answers)}),
            processing_class=AutoTokenizer.from_pretrained(model_path),
            callbacks=[clock],
        )
        trainer.remove_callback(PrinterCallback)  # it prints the end-of-training metrics dict
        trainer.train()

    durations = [b - a for a, b in zip(clock.marks, clock.marks[1:], strict=False)]
    timed = durations[warmup:]
    if not timed:
        raise RuntimeError(f"no timed steps: {len(durations)} ran, warmup={warmup}")
    return {
        "step_seconds": statistics.median(timed),
        "steps": len(timed),
        "gradient_checkpointing": gradient_checkpointing,
        "default_gradient_checkpointing": bool(GRPOConfig.gradient_checkpointing),
        "completions_per_step": completions_per_step,
    }
