"""The plugin contract (issue 60, item 3): an algorithm declares the inputs its advantages
take (checked when the class is created), describes itself in one card whose fields keep
their old names, overrides only the listed hooks, and no plugin imports another."""

from __future__ import annotations

import ast
import dataclasses
import warnings
from pathlib import Path

import pytest
import torch

from zoo.algorithms import ADVANTAGE_INPUTS, ALGORITHMS, AdvantageInputs, Algorithm, Card
from zoo.algorithms.base import HOOKS, RUN_API
from zoo.algorithms.grpo import GRPO
from zoo.core.types import LossOutput, TrainBatch

ALGORITHMS_DIR = Path(__file__).resolve().parents[1] / "zoo" / "algorithms"


def test_the_vocabulary_is_the_fields_of_advantage_inputs():
    assert {f.name for f in dataclasses.fields(AdvantageInputs)} == ADVANTAGE_INPUTS
    assert {"lengths", "turn_rewards", "greedy_rewards", "turn_states"} == ADVANTAGE_INPUTS
    with pytest.raises(dataclasses.FrozenInstanceError):
        AdvantageInputs().lengths = torch.ones(1)  # type: ignore[misc]


@pytest.mark.parametrize("name", ALGORITHMS.names())
def test_every_builtin_declares_its_inputs_and_card_in_its_own_module(name):
    cls = ALGORITHMS.load(name)
    assert cls.inputs <= ADVANTAGE_INPUTS and isinstance(cls.inputs, frozenset)
    assert isinstance(cls.card, Card) and cls.card.paper
    # the old names read the card, on the class and on an instance
    algo = cls()
    for field in ("paper", "family", "clip_style", "sequence_level", "mechanism"):
        assert getattr(cls, field) == getattr(cls.card, field) == getattr(algo, field)


def test_the_run_flags_follow_the_declared_inputs():
    flags = {
        name: (a.uses_turn_rewards, a.uses_turn_states, a.needs_greedy_baseline)
        for name in ALGORITHMS.names()
        for a in [ALGORITHMS.load(name)()]
    }
    assert flags.pop("gigpo") == (True, True, False)
    assert flags.pop("remax") == (False, False, True)
    assert set(flags.values()) == {(False, False, False)}


class _Loss(Algorithm):
    """A minimal loss, for classes built in the tests below."""

    name = "test_contract"
    config_class = dataclasses.make_dataclass("NoConfig", [])

    def loss(self, batch: TrainBatch) -> LossOutput:
        return LossOutput(-(batch.logprobs * batch.mask).sum())


def test_an_unknown_input_fails_naming_the_valid_ones():
    with pytest.raises(TypeError, match=r"unknown inputs greedy_reward.*greedy_rewards, lengths"):

        class Typo(_Loss):
            inputs = frozenset({"greedy_reward"})

            def advantages(self, rewards, greedy_reward):
                return rewards


def test_a_declared_input_advantages_cannot_take_fails_with_the_fix():
    with pytest.raises(TypeError, match=r"declares turn_rewards.*inputs = frozenset\(\)"):

        class Missing(_Loss):
            inputs = frozenset({"turn_rewards"})

            def advantages(self, rewards):
                return rewards


def test_a_parameter_not_declared_fails_with_the_fix():
    with pytest.raises(TypeError, match=r'takes lengths.*frozenset\(\{"greedy_rewards", "lengths"'):

        class Undeclared(_Loss):
            inputs = frozenset({"greedy_rewards"})

            def advantages(self, rewards, greedy_rewards, lengths=None):
                return rewards


def test_a_subclass_that_changes_the_signature_inherits_a_checked_declaration():
    with pytest.raises(TypeError, match=r"declares lengths"):

        class Narrowed(GRPO):
            inputs = GRPO.inputs  # stated, but advantages() no longer takes lengths

            def advantages(self, rewards):
                return rewards


def test_an_undeclared_legacy_override_keeps_working_with_a_deprecation_warning():
    with pytest.warns(DeprecationWarning, match=r"declare inputs = frozenset\(\)"):

        class Legacy(GRPO):
            def advantages(self, rewards):
                return rewards * 2

    assert Legacy.inputs == frozenset()
    rewards = torch.tensor([[1.0, 3.0]])
    assert Legacy().group_advantages(rewards, torch.ones(1, 2)).tolist() == [[2.0, 6.0]]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # same inputs as inherited: nothing to say

        class SameAsBase(GRPO):
            def advantages(self, rewards, lengths=None):
                return -super().advantages(rewards, lengths)

    assert SameAsBase.inputs == {"lengths"}


def test_only_declared_inputs_are_passed():
    seen = {}

    class Greedy(_Loss):
        inputs = frozenset({"greedy_rewards"})

        def advantages(self, rewards, **given):
            seen.update(given)
            return rewards - given["greedy_rewards"][:, None]

    rewards = torch.tensor([[1.0, 3.0]])
    out = Greedy().group_advantages(rewards, torch.ones(1, 2), greedy_rewards=torch.tensor([2.0]))
    assert out.tolist() == [[-1.0, 1.0]] and set(seen) == {"greedy_rewards"}
    with pytest.raises(ValueError, match="greedy_rewards"):
        Greedy().group_advantages(rewards, torch.ones(1, 2))


def test_the_run_api_cannot_be_overridden():
    assert len(HOOKS) <= 12 and not set(HOOKS) & set(RUN_API)
    assert all(hasattr(Algorithm, name) for name in (*HOOKS, *RUN_API))
    with pytest.raises(TypeError, match=r"overrides needs_greedy_baseline.*hooks"):

        class Sneaky(_Loss):
            @property
            def needs_greedy_baseline(self) -> bool:
                return True


def test_a_plugin_setting_card_fields_one_by_one_gets_a_card():
    class OldStyle(_Loss):
        paper = "Someone, Something, arXiv 0000.00000"
        clip_style = "cap"
        mechanism = {"capped_acting_frac": 0.0}  # noqa: RUF012

    assert OldStyle.card == Card(
        paper="Someone, Something, arXiv 0000.00000",
        clip_style="cap",
        mechanism={"capped_acting_frac": 0.0},
    )
    assert OldStyle.family == "other" and OldStyle.acting_shares() == ["capped_acting_frac"]
    algo = OldStyle()
    algo.token_selection = "picked_frac"  # an instance's change replaces its own card only
    assert algo.card.token_selection == "picked_frac" and OldStyle.token_selection == ""
    with pytest.raises(TypeError, match="both card and family"):

        class Both(_Loss):
            card = Card(paper="x")
            family = "y"


def test_no_plugin_imports_another():
    plugins = {p.stem for p in ALGORITHMS_DIR.glob("*.py")} - {
        "__init__",
        "base",
        "conformance",
        "options",
    }
    for name in sorted(plugins):
        tree = ast.parse((ALGORITHMS_DIR / f"{name}.py").read_text())
        imported = {
            node.module
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module
        } | {a.name for node in ast.walk(tree) if isinstance(node, ast.Import) for a in node.names}
        siblings = {m for m in imported if m.startswith("zoo.algorithms.")} - {
            "zoo.algorithms.base"
        }
        # grpo_twin is GRPO under another name (its whole point): the one allowed subclass
        allowed = {"zoo.algorithms.grpo"} if name == "controls" else set()
        assert siblings <= allowed, f"{name}.py imports {sorted(siblings - allowed)}"
