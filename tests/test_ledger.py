"""The compute ledger's analytical FLOPs against FLOPs counted from the real model's
matmuls (torch's FlopCounterMode) and a brute-force count of causal attention."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from zoo.core.types import Completion
from zoo.models.presets import ModelShape
from zoo.models.titan import build_titan_model
from zoo.services.batch import response_logprobs
from zoo.services.ledger import Ledger


def attention_flops_by_hand(shape: ModelShape, length: int) -> int:
    """QK^T and AV: 2 * head_dim FLOPs per (query, visible key) pair, each, per head."""
    pairs = sum(p + 1 for p in range(length))
    return shape.num_layers * shape.num_heads * 2 * (2 * shape.head_dim * pairs)


@pytest.mark.parametrize(("length", "response"), [(11, 5), (20, 1), (8, 7)])
def test_scoring_flops_match_counted_matmuls_plus_causal_attention(tiny_path, length, response):
    model, _ = build_titan_model(tiny_path)
    shape = ModelShape.from_hf_dir(tiny_path)
    ledger = Ledger(shape)
    batch = 3
    tokens = torch.randint(0, 256, (batch, length))
    with FlopCounterMode(display=False) as counter:
        response_logprobs(model, tokens, torch.full((batch,), length - response), response)
    counted_mm = counter.get_total_flops()  # CPU SDPA is not counted: matmuls only
    expected = ledger.scoring_flops(length - response, response) * batch
    assert expected - attention_flops_by_hand(shape, length) * batch == counted_mm


def test_training_flops_are_three_forwards(tiny_path):
    model, _ = build_titan_model(tiny_path)
    tokens = torch.randint(0, 256, (2, 9))
    with FlopCounterMode(display=False) as forward:
        response_logprobs(model, tokens, torch.full((2,), 5), 4)
    with FlopCounterMode(display=False) as both:
        response_logprobs(model, tokens, torch.full((2,), 5), 4).sum().backward()
    # backward of y = x W computes dx and dW: twice the forward's matmuls (the embedding
    # lookup needs no input gradient, so the ratio is exact).
    assert both.get_total_flops() == 3 * forward.get_total_flops()


def test_generation_counts_every_position_but_the_last_token(tiny_path):
    shape = ModelShape.from_hf_dir(tiny_path)
    ledger = Ledger(shape)
    prompt, response = 6, 4
    body = 2 * shape.body_params * (prompt + response - 1)
    head = 2 * shape.head_params * response
    attention = attention_flops_by_hand(shape, prompt + response - 1)
    assert ledger.generation_flops(prompt, response) == body + head + attention
    assert ledger.generation_flops(prompt, 0) == 0


def test_a_cached_prefix_is_attended_to_not_computed(tiny_path):
    shape = ModelShape.from_hf_dir(tiny_path)
    ledger = Ledger(shape)
    prompt, response, cached = 40, 5, 32
    computed = prompt + response - 1 - cached  # positions 32 .. 43
    body = 2 * shape.body_params * computed
    head = 2 * shape.head_params * response
    pairs = sum(p + 1 for p in range(cached, prompt + response - 1))  # each sees 0 .. p
    attention = shape.num_layers * shape.num_heads * 2 * (2 * shape.head_dim * pairs)
    charged = ledger.generation_flops(prompt, response, cached_tokens=cached)
    assert charged == body + head + attention


def test_an_episode_is_charged_its_turns_as_the_engine_ran_them(tiny_path):
    """Three turns of a 6-token prompt: 10, 8 and 4 sampled tokens, observations of 3 and
    5 tokens; each turn's context is all before it."""
    ledger = Ledger(ModelShape.from_hf_dir(tiny_path))
    turns, observations, prompt = [10, 8, 4], [3, 5], 6
    tokens, mask, contexts = [], [], []
    for i, r in enumerate(turns):
        contexts.append(prompt + len(tokens))
        tokens += [1] * r
        mask += [1] * r
        if i < len(observations):
            tokens += [2] * observations[i]
            mask += [0] * observations[i]
    episode = Completion(
        prompt_ids=[0] * prompt,
        token_ids=tokens,
        logprobs=[0.0] * len(tokens),
        text="",
        finish_reason="stop",
        policy_version=0,
        assistant_mask=mask,
        turns=3,
    )
    # no turn_requests (an episode from elsewhere): one forward over the trajectory
    least = ledger.generation_flops(prompt, len(tokens), head_tokens=sum(turns))
    assert ledger.sample_flops(episode) == least
    # a cache that kept everything gives the same: each turn from its context's last token
    # computed by an earlier turn (the one sampled last was never fed back)
    kept = [
        (c, 0 if i == 0 else c - observations[i - 1] - 1, r)
        for i, (c, r) in enumerate(zip(contexts, turns, strict=True))
    ]
    assert ledger.sample_flops(replace(episode, turn_requests=kept)) == pytest.approx(least)
    # no cache: every turn recomputes its whole context
    none = [(c, 0, r) for c, r in zip(contexts, turns, strict=True)]
    uncached = sum(ledger.generation_flops(c, r) for c, r in zip(contexts, turns, strict=True))
    assert ledger.sample_flops(replace(episode, turn_requests=none)) == uncached > least
    # a single-turn completion: its whole prompt, whatever the engine took from its cache
    single = Completion([0] * 200, [1] * 4, [0.0] * 4, "", "stop", 0, cached_tokens=128)
    assert ledger.sample_flops(single) == ledger.generation_flops(200, 4)


def test_tiny_model_parameter_counts(tiny_path):
    shape = ModelShape.from_hf_dir(tiny_path)
    model, _ = build_titan_model(tiny_path)
    linear = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    assert shape.body_params + shape.head_params == linear


@pytest.mark.parametrize("name", ["qwen3-0.6b", "qwen3-1.7b", "qwen3-4b", "qwen3-8b"])
def test_ledger_matches_counted_matmuls_at_qwen3_sizes(name, tmp_path):
    """The real architectures, built on the meta device (shapes only, no memory): the
    matmuls torch counts equal the ledger's non-attention FLOPs exactly, and the whole
    count is within 2% of the ledger (torch's meta attention is the non-causal math path,
    so it counts every query-key pair; the ledger counts the causal half)."""
    from zoo.models.presets import qwen3_config_dir
    from zoo.models.titan import titan_qwen3_config

    path = qwen3_config_dir(name, tmp_path)
    with torch.device("meta"):
        model = titan_qwen3_config(path).build()
    shape = ModelShape.from_hf_dir(path)
    batch, length, response = 2, 48, 16
    tokens = torch.zeros((batch, length), dtype=torch.long, device="meta")
    with FlopCounterMode(display=False) as counter:
        response_logprobs(
            model, tokens, torch.full((batch,), length - response, device="meta"), response
        )
    counts = {str(op): n for op, n in counter.get_flop_counts()["Global"].items()}
    expected = Ledger(shape).scoring_flops(length - response, response) * batch
    causal_attention = attention_flops_by_hand(shape, length) * batch
    assert counts["aten.mm"] == expected - causal_attention
    full_attention = 4 * shape.num_layers * shape.num_heads * shape.head_dim * length**2 * batch
    assert counts["aten.bmm"] == full_attention
    assert abs(counter.get_total_flops() / expected - 1) < 0.02
