"""Prefix caching in the vLLM generator (zoo.services.generation.vllm), on tool_arithmetic
with the tiny-tool model: a multi-turn batch's later turns take the first KV blocks of
their context from the cache, and the run's ledger charges exactly what the engine
computed (its own per-request and engine-wide counts of computed prompt tokens and
generated tokens); the samples are those of an engine without the cache, token for token
and log-prob for log-prob; samples of one prompt share its blocks; a weight update
empties the cache."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from zoo.envs import get_env
from zoo.models.tiny import TINY_PRESETS, tiny_model_path
from zoo.models.titan import load_hf_state_dict
from zoo.run.episodes import rollout_episodes
from zoo.run.loop import RLLoop
from zoo.run.rollout import sampling_seed
from zoo.run.run_config import RunConfig
from zoo.run.wiring import build_services
from zoo.services.conversation import Conversation
from zoo.services.generation.vllm import VLLMGenerator
from zoo.services.ledger import Ledger
from zoo.services.sampling import SamplingConfig

BLOCK = 32
"""KV block size of these engines: the CPU backend's smallest (its default, 128, is longer
than any of tiny-tool's episodes, which would then never hit the cache)."""
TURN = 40
"""Tokens per turn (the EOS ignored), so that a second turn's context spans whole blocks."""


@pytest.fixture(scope="module")
def tool_path(tiny_path):  # (tiny_path sets the cache folder the presets are built in)
    return tiny_model_path(TINY_PRESETS["tiny-tool"])


@pytest.fixture(scope="module")
def cached(tool_path):
    """An engine with prefix caching (the default) and its Prometheus counters on."""
    return VLLMGenerator(tool_path, seed=0, block_size=BLOCK, disable_log_stats=False)


def engine_counts(engine: VLLMGenerator) -> dict[str, float]:
    """The engine's own totals: finished requests, generated tokens, and prompt tokens by
    where their keys and values came from (computed, or the prefix cache)."""
    counts: dict[str, float] = {}
    for metric in engine.llm.get_metrics():
        name = metric.name.removeprefix("vllm:")
        if name == "prompt_tokens_by_source":
            name = f"prompt_{metric.labels['source']}"
        if name in (
            "request_success",
            "generation_tokens",
            "prompt_local_compute",
            "prompt_local_cache_hit",
        ):
            counts[name] = counts.get(name, 0) + metric.value
    return counts


def recording_requests(engine: VLLMGenerator, outputs: list) -> None:
    """Keep every ``RequestOutput`` the engine returns (undone by ``del engine.llm.generate``)."""
    generate = engine.llm.generate

    def recorded(*args, **kwargs):
        out = generate(*args, **kwargs)
        outputs.extend(out)
        return out

    engine.llm.generate = recorded


def test_the_ledger_charges_what_the_engine_computed_on_a_multi_turn_batch(cached):
    cfg = RunConfig.from_flat(
        env="tool_arithmetic",
        model="tiny-tool",
        prompts_per_step=4,
        group_size=4,
        steps=1,
        seed=3,
        max_response_len=TURN,
        max_episode_tokens=4 * TURN,
        eval_samples=0,
    )
    loop = RLLoop(cfg, build_services(cfg, quiet=True, generator=cached))
    loop.sampling.ignore_eos = True  # (the episodes' sampling: the loop's own object)
    outputs: list = []
    recording_requests(cached, outputs)
    before = engine_counts(cached)
    try:
        _, groups = loop.sample_groups(4)
    finally:
        del cached.llm.generate
    engine = {k: v - before.get(k, 0) for k, v in engine_counts(cached).items()}
    episodes = [c for g in groups for c in g]
    assert max(c.turns for c in episodes) >= 2
    # every request the engine ran, as it reports them one by one and in total
    prompt = [len(o.prompt_token_ids) for o in outputs]
    hits = [o.num_cached_tokens for o in outputs]
    sampled = [len(o.outputs[0].token_ids) for o in outputs]
    assert len(outputs) == engine["request_success"] == sum(c.turns for c in episodes)
    assert sum(p - h for p, h in zip(prompt, hits, strict=True)) == engine["prompt_local_compute"]
    assert sum(hits) == engine["prompt_local_cache_hit"] > 0  # later turns hit the cache
    assert all(h % BLOCK == 0 and h < p for p, h in zip(prompt, hits, strict=True))
    assert sum(sampled) == engine["generation_tokens"]
    # the ledger charged those tokens: each request's computed prompt tokens and all but
    # its last sampled token fed back, converted to FLOPs as the ledger converts tokens
    ledger = loop.s.ledger
    shape = Ledger(ledger.shape)
    engine_flops = sum(
        shape.generation_flops(p, r, cached_tokens=h)
        for p, h, r in zip(prompt, hits, sampled, strict=True)
    )
    assert ledger.flops["generate"] == pytest.approx(engine_flops, rel=1e-12)
    assert {tuple(r) for c in episodes for r in c.turn_requests} == set(
        zip(prompt, hits, sampled, strict=True)
    )
    # between one forward over each trajectory and every turn recomputing its context
    least = sum(
        shape.generation_flops(len(c.prompt_ids), len(c.token_ids), c.assistant_tokens)
        for c in episodes
    )
    uncached = sum(shape.generation_flops(p, r) for p, r in zip(prompt, sampled, strict=True))
    assert least < ledger.flops["generate"] < uncached


def rollout(engine: VLLMGenerator, tool_path, greedy: bool = False):
    """16 episodes of tool_arithmetic (4 prompts x 4, or 16 prompts greedily), turns of
    ``TURN`` tokens."""
    env = get_env("tool_arithmetic")
    tokenizer = AutoTokenizer.from_pretrained(tool_path)
    prompts = env.train_prompts(0, 16 if greedy else 4, 11)
    encoded = [list(p.text.encode()) for p in prompts]
    seeds = None if greedy else [sampling_seed(11, p.index, samples=4) for p in prompts]
    sampling = SamplingConfig(temperature=1.0, max_tokens=TURN, ignore_eos=True)
    groups = rollout_episodes(
        env,
        engine,
        Conversation(tokenizer),
        prompts,
        encoded,
        1 if greedy else 4,
        sampling,
        4 * TURN,
        seeds,
        greedy,
    )
    return [c for g in groups for c in g]


def test_samples_are_the_same_without_the_cache(cached, tool_path):
    plain = VLLMGenerator(tool_path, seed=0, block_size=BLOCK, prefix_caching=False)
    for greedy in (False, True):
        ours, theirs = rollout(cached, tool_path, greedy), rollout(plain, tool_path, greedy)
        assert sum(h for c in ours for _, h, _ in c.turn_requests) > 0
        assert all(h == 0 for c in theirs for _, h, _ in c.turn_requests)
        for a, b in zip(ours, theirs, strict=True):
            assert a.token_ids == b.token_ids  # every turn, and the observations after them
            assert a.logprobs == b.logprobs  # exactly: no float drift from cached blocks
            assert a.reward == b.reward


def test_samples_of_a_prompt_share_its_blocks_until_a_weight_update(cached, tool_path):
    prompt = list(("12*34=" * 20).encode())[:100]
    sampling = SamplingConfig(temperature=1.0, max_tokens=4)
    first = cached.generate([prompt], n=3, sampling=sampling, seeds=[7])[0]
    # the first sample computes the prompt; its siblings, scheduled in the same step, take
    # its whole blocks (never the prompt's last token)
    assert [c.cached_tokens for c in first] == [0, 96, 96]
    again = cached.generate([prompt], n=1, sampling=sampling, seeds=[7])[0][0]
    assert again.cached_tokens == 96
    # keys and values of the old weights must not serve the new ones
    cached.update_weights(load_hf_state_dict(tool_path), version=0)
    after = cached.generate([prompt], n=1, sampling=sampling, seeds=[7])[0][0]
    assert after.cached_tokens == 0
    assert after.token_ids == again.token_ids == first[0].token_ids
    # computed or cached, the same log-probs to the bit in the same batch; the sample decoded
    # beside its siblings differs at float rounding (batch composition, cache or not)
    assert after.logprobs == again.logprobs
    assert first[0].logprobs == pytest.approx(after.logprobs, abs=1e-5)
