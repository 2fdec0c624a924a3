"""Every placement's services have the methods of zoo.services.protocols, with the same
parameters: the local classes and the Monarch proxies alike (checked on the classes, so
no engine or actor starts)."""

from __future__ import annotations

import inspect

import pytest

from zoo.envs.base import Env
from zoo.placement.remote import (
    RemoteCritic,
    RemoteGenerator,
    RemoteReference,
    RemoteScorer,
    RemoteTrainer,
)
from zoo.services.generation.hf import HFGenerator
from zoo.services.generation.vllm import VLLMGenerator
from zoo.services.protocols import (
    SERVICES,
    AsyncGeneratorService,
    GeneratorService,
    ReferenceService,
    ScorerService,
    TrainerService,
    ValueService,
)
from zoo.services.reference import Reference
from zoo.services.trainer import Trainer
from zoo.services.value import Critic

IMPLEMENTATIONS = [
    (GeneratorService, VLLMGenerator),
    (GeneratorService, HFGenerator),
    (GeneratorService, RemoteGenerator),
    (AsyncGeneratorService, RemoteGenerator),
    (TrainerService, Trainer),
    (TrainerService, RemoteTrainer),
    (ReferenceService, Reference),
    (ReferenceService, RemoteReference),
    (ScorerService, Env),
    (ScorerService, RemoteScorer),
    (ValueService, Critic),
    (ValueService, RemoteCritic),
]


def members(protocol: type) -> tuple[dict[str, inspect.Signature], set[str]]:
    """(methods with their signatures, data attributes) the protocol asks for."""
    methods = {
        name: inspect.signature(value)
        for name, value in vars(protocol).items()
        if inspect.isfunction(value) and not name.startswith("_")
    }
    return methods, set(protocol.__annotations__)


def parameters(signature: inspect.Signature) -> list[tuple[str, inspect._ParameterKind]]:
    return [(p.name, p.kind) for p in signature.parameters.values()]


def test_the_protocols_cover_every_service_field():
    from zoo.run.wiring import Services

    hints = {name: str(value) for name, value in Services.__annotations__.items()}
    for field, protocol in SERVICES.items():
        assert protocol.__name__ in hints[field], field


@pytest.mark.parametrize(
    ("protocol", "cls"), IMPLEMENTATIONS, ids=lambda x: getattr(x, "__name__", str(x))
)
def test_implementation_matches_its_protocol(protocol: type, cls: type):
    methods, attributes = members(protocol)
    for name, wanted in methods.items():
        found = getattr(cls, name, None)
        assert callable(found), f"{cls.__name__} has no method {name}"
        assert parameters(inspect.signature(found)) == parameters(wanted), (
            f"{cls.__name__}.{name}{inspect.signature(found)} differs from "
            f"{protocol.__name__}.{name}{wanted}"
        )
    init = inspect.getsource(cls.__init__) if "__init__" in vars(cls) else ""
    for name in attributes:
        # a class attribute, a property, or set on every instance by __init__
        assert hasattr(cls, name) or f"self.{name} =" in init, (
            f"{cls.__name__} lacks {protocol.__name__}.{name}"
        )


def test_a_method_with_other_parameters_is_caught():
    class Wrong:
        def logprobs(self, rows):
            return rows

    with pytest.raises(AssertionError, match="differs"):
        test_implementation_matches_its_protocol(ReferenceService, Wrong)


def test_only_the_remote_generator_submits():
    """Async mode's ``submit`` is declared (AsyncGeneratorService): the Monarch proxy has it
    with its signature (above); the in-process generators, which cannot overlap sampling
    with training, do not claim it."""
    methods, _ = members(AsyncGeneratorService)
    assert set(methods) == {"submit"}
    for cls in (VLLMGenerator, HFGenerator):
        assert not hasattr(cls, "submit"), cls.__name__
