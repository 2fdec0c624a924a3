"""Every sample of a run draws its own noise stream (RunConfig.sample_streams "disjoint"),
while runs recorded before the setting keep the consecutive prompt seeds they ran with."""

from __future__ import annotations

import pytest
import torch

from zoo.core.config import ConfigError
from zoo.run.rollout import SEED_SPACE, sampling_seed, stride_for
from zoo.run.run_config import MAX_SAMPLES_PER_PROMPT, RunConfig
from zoo.services.sampling import SamplingConfig


def row_seeds(streams: str, run_seeds: range, prompts: int, group: int, noise: int = 0) -> list:
    """The seeds the generators give each sample: the prompt's seed + the sample's index,
    as torch's generator reads them (the low 32 bits)."""
    return [
        (sampling_seed(s, i, noise, streams, samples=group) + j) % SEED_SPACE
        for s in run_seeds
        for i in range(prompts)
        for j in range(group)
    ]


def test_disjoint_streams_give_every_sample_of_a_run_its_own_seed():
    for noise in (0, 1):
        seeds = row_seeds("disjoint", range(3), 500, 64, noise)
        assert len(set(seeds)) == len(seeds), noise
    for group, prompts in ((1, 300), (3, 300), (8, 300), (65, 300), (MAX_SAMPLES_PER_PROMPT, 8)):
        seeds = row_seeds("disjoint", range(2), prompts, group)
        assert len(set(seeds)) == len(seeds), group
        assert all(0 <= s < SEED_SPACE for s in seeds)
    assert [stride_for(n) for n in (0, 1, 2, 3, 8, 9)] == [1, 1, 2, 4, 8, 16]
    # torch keeps a seed's low 32 bits: why every seed stays below SEED_SPACE
    assert torch.rand(2, generator=torch.Generator().manual_seed(5)).equal(
        torch.rand(2, generator=torch.Generator().manual_seed(SEED_SPACE + 5))
    )
    # what recorded runs did: sample j of prompt i had the seed of sample j - 1 of prompt i + 1
    seeds = row_seeds("consecutive", range(1), 500, 8)
    assert len(set(seeds)) == 500 + 7
    assert sampling_seed(3, 17, streams="consecutive", samples=8) == 3 * 1_000_003 + 17
    with pytest.raises(ValueError, match="valid: disjoint, consecutive"):
        sampling_seed(0, 0, streams="shared", samples=8)


def test_neighbouring_prompts_no_longer_draw_the_same_noise(tiny_generator):
    """The same prompt at two neighbouring prompt indices: under the consecutive seeds its
    sample 1 at index 5 and its sample 0 at index 6 were one completion; disjoint seeds draw
    them apart (at temperature 2 a 24-token completion is never repeated by chance)."""
    prompt = list(b"12+7=")
    sampling = SamplingConfig(max_tokens=24, temperature=2.0)
    rows = {}
    for streams in ("consecutive", "disjoint"):
        seeds = [sampling_seed(0, i, streams=streams, samples=2) for i in (5, 6)]
        groups = tiny_generator.generate([prompt, prompt], n=2, sampling=sampling, seeds=seeds)
        rows[streams] = (groups[0][1].token_ids, groups[1][0].token_ids)
    assert rows["consecutive"][0] == rows["consecutive"][1]
    assert rows["disjoint"][0] != rows["disjoint"][1]


def test_a_config_recorded_before_the_setting_keeps_consecutive_streams():
    assert RunConfig().sampling.sample_streams == "disjoint"
    recorded = RunConfig().to_flat()
    del recorded["sample_streams"]
    assert RunConfig.from_record(recorded).sampling.sample_streams == "consecutive"
    with pytest.raises(ConfigError, match="valid: disjoint, consecutive"):
        RunConfig.from_flat(sample_streams="shared").validate()
