"""RunConfig is made of sections, each field declared once: the trainer and the critic are
built from the same sections rather than copies of their fields, and `--help` groups the
flags under the sections' headings."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from harness.cli import build_parser
from zoo.core.config import ConfigError
from zoo.run.run_config import SECTIONS, RunConfig
from zoo.run.wiring import critic_config_of, trainer_config_of, trainer_options
from zoo.services.trainer import OptimizerSection, RegimeSection, TrainerConfig


def declared_by(cls: type) -> set[str]:
    """The fields a class declares itself (not those it inherits)."""
    return set(inspect.get_annotations(cls))


def test_every_run_field_is_declared_in_exactly_one_section():
    fields = {f.name for f in dataclasses.fields(RunConfig)}
    owners = {
        name: [title for title, cls in SECTIONS if name in declared_by(cls)] for name in fields
    }
    assert {name: where for name, where in owners.items() if len(where) != 1} == {}
    assert declared_by(RunConfig) == set()  # RunConfig only composes its sections
    # the trainer's config adds what the run resolves, never a run field again
    assert declared_by(TrainerConfig) & fields == set()
    assert {f.name for f in dataclasses.fields(TrainerConfig)} >= {
        f.name for f in dataclasses.fields(OptimizerSection) + dataclasses.fields(RegimeSection)
    }


def test_the_trainer_and_critic_get_the_run_sections_values():
    cfg = RunConfig(
        lr=3e-5,
        adam_beta2=0.98,
        grad_clip=0.5,
        mini_batches=2,
        epochs=3,
        micro_batch_size=4,
        steps=10,
        temperature=0.7,
        algorithm="ppo",
    )
    trainer = trainer_config_of(cfg)
    for f in dataclasses.fields(OptimizerSection) + dataclasses.fields(RegimeSection):
        if f.name != "decay_steps":
            assert getattr(trainer, f.name) == getattr(cfg, f.name), f.name
    assert trainer.decay_steps == 10 * 2 * 3  # unset: the run's optimizer steps
    assert trainer_options(cfg) == {"temperature": 0.7, "max_policy_age": 0}  # sync

    from zoo.algorithms import get_algorithm

    critic = critic_config_of(cfg, get_algorithm("ppo"))
    assert critic.lr != cfg.lr and critic.mini_batches == 2 and critic.adam_beta2 == 0.98


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"lr": 0.0}, "lr must be > 0"),
        ({"mini_batches": 0}, "mini_batches must be >= 1"),
        ({"group_size": 1}, "group_size must be >= 2"),
        ({"eval_points": 0}, "eval_points must be >= 1"),
        ({"correction_cap": 0.5}, "correction_cap >= 1"),
        ({"mode": "async"}, "needs --placement monarch"),
        ({"checkpoint_every": -1}, "checkpoint_every must be >= 0"),
        ({"mini_batches": 8, "prompts_per_step": 4}, "a mini-batch holds whole groups"),
    ],
)
def test_each_section_refuses_its_own_bad_values(overrides, message):
    with pytest.raises(ConfigError, match=message):
        RunConfig(**overrides).validate()


@pytest.mark.parametrize("command", ["run", "compare", "doctor"])
def test_help_groups_the_flags_under_their_sections(command):
    parser = build_parser()
    sub = next(a for a in parser._subparsers._group_actions if command in a.choices)
    help_text = sub.choices[command].format_help()
    positions = [help_text.find(f"\n{title}:\n") for title, _ in SECTIONS]
    assert all(p >= 0 for p in positions), [
        t for (t, _), p in zip(SECTIONS, positions, strict=True) if p < 0
    ]
    assert positions == sorted(positions)  # in the sections' order
    # a flag sits under its own section's heading: --lr under optimizer, before the regime
    optimizer, regime = (help_text.find(f"\n{t}:\n") for t in ("optimizer", "training regime"))
    assert optimizer < help_text.find("\n  --lr ") < regime
