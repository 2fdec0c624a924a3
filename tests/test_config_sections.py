"""RunConfig is made of sections (``cfg.optimizer.lr``), each field declared once and named
flat on the command line and in config.json: the trainer and the critic get the run's
sections themselves, one recipe per model preset gives the defaults, and `--help` groups
the flags under the sections' headings."""

from __future__ import annotations

import dataclasses
import inspect
import json

import pytest
from harness_cli import REPO, committed_configs

from harness.cli import build_parser
from zoo.core.config import ConfigError
from zoo.run.run_config import (
    MODEL_RECIPES,
    PREDATES_REGIME,
    REAL_MODELS,
    RECIPE_FIELDS,
    SECTION_OF,
    SECTIONS,
    RunConfig,
    recipe_of,
    run_defaults,
)
from zoo.run.wiring import critic_config_of, trainer_config_of, trainer_options
from zoo.services.trainer import TrainerConfig


def declared_by(cls: type) -> set[str]:
    """The fields a class declares itself (not those it inherits)."""
    return set(inspect.get_annotations(cls))


def test_every_run_field_is_declared_in_exactly_one_section():
    fields = {f.name for f in RunConfig.flat_fields()}
    owners = {
        name: [title for title, _, cls in SECTIONS if name in declared_by(cls)] for name in fields
    }
    assert {name: where for name, where in owners.items() if len(where) != 1} == {}
    # RunConfig holds the sections, one field each, and nothing else
    assert [f.name for f in dataclasses.fields(RunConfig)] == [attr for _, attr, _ in SECTIONS]
    assert set(SECTION_OF) == fields
    # the trainer's config holds the two sections and what the run resolves, no run field
    assert declared_by(TrainerConfig) & fields == {"decay_steps"}  # (the resolved length)
    assert {f.name for f in dataclasses.fields(TrainerConfig)} >= {"optimizer", "regime"}


def test_the_flat_names_round_trip_and_unknown_ones_are_named():
    flat = {"lr": 3e-5, "steps": 7, "env": "pyfunc", "placement": "monarch", "budget_flops": 1e9}
    cfg = RunConfig.from_flat(flat)
    assert (cfg.optimizer.lr, cfg.budget.steps, cfg.run.env) == (3e-5, 7, "pyfunc")
    assert cfg.placement.placement == "monarch" and cfg.budget.limit == ("flops", 1e9)
    assert RunConfig.from_flat(cfg.to_flat()) == cfg
    assert list(cfg.to_flat()) == [f.name for f in RunConfig.flat_fields()]
    assert cfg.replace(lr=1e-4).optimizer.lr == 1e-4 and cfg.optimizer.lr == 3e-5
    assert cfg.replace(lr=1e-4).run is cfg.run  # (untouched sections are shared)
    assert cfg.flat("mini_batches") == cfg.regime.mini_batches
    for bad in (lambda: RunConfig.from_flat(lr=1e-4, lrr=1), lambda: cfg.replace(lrr=1)):
        with pytest.raises(ConfigError, match="unknown run setting lrr; valid: algorithm, env"):
            bad()


def test_the_trainer_and_critic_get_the_run_sections_themselves():
    cfg = RunConfig.from_flat(
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
    assert trainer.optimizer is cfg.optimizer and trainer.regime is cfg.regime
    assert trainer.decay_steps == 10 * 2 * 3  # unset: the run's optimizer steps
    assert trainer_options(cfg) == {"temperature": 0.7, "max_policy_age": 0}  # sync

    from zoo.algorithms import get_algorithm

    critic = critic_config_of(cfg, get_algorithm("ppo"))
    assert critic.optimizer.lr != cfg.optimizer.lr and critic.regime is cfg.regime
    assert critic.optimizer.adam_beta2 == 0.98 and cfg.optimizer.lr == 3e-5


def test_one_recipe_per_model_preset():
    from zoo.models.presets import TINY_MODELS

    assert set(MODEL_RECIPES) == {*TINY_MODELS, REAL_MODELS}
    for model, recipe in MODEL_RECIPES.items():
        assert set(recipe.settings) <= set(RECIPE_FIELDS), model
        assert run_defaults(model) == recipe.defaults()
    assert run_defaults("tiny") == {n: RunConfig.from_flat().flat(n) for n in RECIPE_FIELDS}
    assert run_defaults("qwen3-1.7b") == run_defaults("/some/folder") == run_defaults(REAL_MODELS)
    assert run_defaults("qwen3-1.7b")["lr"] == 1e-6 and recipe_of("tiny-sum").compare_budget == 4e12


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
        ({"mini_batches": 8, "prompts_per_step": 4}, "at most one mini-batch per group"),
    ],
)
def test_each_section_refuses_its_own_bad_values(overrides, message):
    with pytest.raises(ConfigError, match=message):
        RunConfig.from_flat(overrides).validate()


@pytest.mark.parametrize("command", ["run", "compare", "doctor"])
def test_help_groups_the_flags_under_their_sections(command):
    parser = build_parser()
    sub = next(a for a in parser._subparsers._group_actions if command in a.choices)
    help_text = sub.choices[command].format_help()
    positions = [help_text.find(f"\n{title}:\n") for title, _, _ in SECTIONS]
    assert all(p >= 0 for p in positions), [
        t for (t, _, _), p in zip(SECTIONS, positions, strict=True) if p < 0
    ]
    assert positions == sorted(positions)  # in the sections' order
    # a flag sits under its own section's heading: --lr under optimizer, before the regime
    optimizer, regime = (help_text.find(f"\n{t}:\n") for t in ("optimizer", "training regime"))
    assert optimizer < help_text.find("\n  --lr ") < regime


def test_every_committed_config_json_reads_back_under_its_flat_names():
    """Each run committed under results/ reads back through ``from_record`` (what
    `harness reproduce` and a resume read) with every recorded flat name in its section
    at its recorded value, and validates; a run recorded before mini-batches is refused
    with the reason, as before the sections."""
    listed = committed_configs()
    read = refused = 0
    for path in listed:
        run = json.loads((REPO / path).read_text())["run"]
        if any(name not in run for name in PREDATES_REGIME):
            with pytest.raises(ConfigError, match="recorded by an older forge-zoo"):
                RunConfig.from_record(run)
            refused += 1
            continue
        cfg = RunConfig.from_record(run)
        flat = cfg.to_flat()
        assert {k: flat[k] for k in run} == run, path
        cfg.validate()
        read += 1
    assert read > 0 and read + refused == len(listed)
