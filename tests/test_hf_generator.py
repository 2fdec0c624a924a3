"""The transformers generation backend against the vLLM one on the tiny model."""

from __future__ import annotations

import pytest

from zoo.envs import get_env
from zoo.services.generation.hf import HFGenerator
from zoo.services.sampling import SamplingConfig


@pytest.fixture(scope="module")
def hf_generator(tiny_path):
    return HFGenerator(tiny_path, seed=0)


def heldout_prompt_ids(count: int) -> list[list[int]]:
    return [list(p.text.encode()) for p in get_env("arithmetic").eval_prompts()[:count]]


def test_greedy_continuations_and_logprobs_match_vllm(hf_generator, generator):
    prompts = heldout_prompt_ids(64)
    sampling = SamplingConfig(max_tokens=6)
    ours = hf_generator.generate(prompts, n=1, sampling=sampling, greedy=True)
    theirs = generator.generate(prompts, n=1, sampling=sampling, greedy=True)
    for (a,), (b,) in zip(ours, theirs, strict=True):
        assert a.token_ids == b.token_ids and a.text == b.text
        assert a.finish_reason == b.finish_reason
        assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs, strict=True)) < 1e-3


def test_sampled_completions_are_well_formed(hf_generator, tiny_path):
    prompts = heldout_prompt_ids(8)
    groups = hf_generator.generate(prompts, n=4, sampling=SamplingConfig(max_tokens=6),
                                   seeds=[1] * 8)  # fmt: skip
    assert [len(g) for g in groups] == [4] * 8
    for prompt, group in zip(prompts, groups, strict=True):
        for c in group:
            assert c.prompt_ids == prompt and len(c.logprobs) == len(c.token_ids) <= 6
            assert c.finish_reason == ("stop" if c.token_ids[-1] == 256 else "length")
            assert all(lp <= 0 for lp in c.logprobs) and c.policy_version == 0
    again = hf_generator.generate(prompts, n=4, sampling=SamplingConfig(max_tokens=6),
                                  seeds=[1] * 8)  # fmt: skip
    assert [[c.token_ids for c in g] for g in groups] == [[c.token_ids for c in g] for g in again]
