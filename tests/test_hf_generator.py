"""The transformers generation backend against the vLLM one on the tiny model."""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from zoo.core.config import ConfigError
from zoo.envs import get_env
from zoo.models.presets import ModelShape, qwen3_config_dir
from zoo.models.tokenizer import EOS_ID as EOS
from zoo.services.generation import SMALL_MODEL_PARAMS, resolve_backend
from zoo.services.generation.hf import HFGenerator
from zoo.services.sampling import SamplingConfig, completion_text


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
    groups = hf_generator.generate(
        prompts, n=4, sampling=SamplingConfig(max_tokens=6), seeds=[1] * 8
    )
    assert [len(g) for g in groups] == [4] * 8
    for prompt, group in zip(prompts, groups, strict=True):
        for c in group:
            assert c.prompt_ids == prompt and len(c.logprobs) == len(c.token_ids) <= 6
            assert c.finish_reason == ("stop" if c.token_ids[-1] == 256 else "length")
            assert all(lp <= 0 for lp in c.logprobs) and c.policy_version == 0
    again = hf_generator.generate(
        prompts, n=4, sampling=SamplingConfig(max_tokens=6), seeds=[1] * 8
    )
    assert [[c.token_ids for c in g] for g in groups] == [[c.token_ids for c in g] for g in again]


def test_a_sample_depends_on_its_seed_not_on_its_batch_nor_the_thread_count(hf_generator):
    # Runs split a batch over generator replicas and train with one thread per job
    # (compare --jobs): neither may change a sample, as neither changes vLLM's.
    prompts, seeds = heldout_prompt_ids(8), list(range(50, 58))
    sampling = SamplingConfig(max_tokens=6)
    together = hf_generator.generate(prompts, n=4, sampling=sampling, seeds=seeds)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        alone = [
            hf_generator.generate([p], n=4, sampling=sampling, seeds=[s])[0]
            for p, s in zip(prompts[-3:], seeds[-3:], strict=True)
        ]
    finally:
        torch.set_num_threads(threads)
    assert [[c.token_ids for c in g] for g in together[-3:]] == [
        [c.token_ids for c in g] for g in alone
    ]
    # and the sampler's log-probs, which the mismatch metrics and corrections read: equal
    # bit for bit on the AMD EPYC class; on an Intel Xeon the matmuls' blocking follows the
    # batch rows and thread count and moves them by ~1.4e-6 (measured 2026-12-05), float32
    # rounding, far below any mismatch a run reports
    gap = max(
        abs(x - y)
        for g, h in zip(together[-3:], alone, strict=True)
        for c, d in zip(g, h, strict=True)
        for x, y in zip(c.logprobs, d.logprobs, strict=True)
    )
    assert gap < 1e-5
    reseeded = hf_generator.generate(prompts[-3:], n=4, sampling=sampling, seeds=seeds[:3])
    assert [[c.token_ids for c in g] for g in reseeded] != [[c.token_ids for c in g] for g in alone]


def test_text_is_the_text_vllm_writes_for_the_same_tokens(generator, tiny_path):
    # At temperature 2 the tiny model samples stray bytes (a cut multi-byte character, a
    # byte that starts none): vLLM leaves them out of the text, a plain decode writes
    # U+FFFD for each. The rewards read the text, so both backends must write the same.
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_path)
    prompts = heldout_prompt_ids(32)
    hot = SamplingConfig(temperature=2.0, max_tokens=12)
    groups = generator.generate(prompts, n=8, sampling=hot, seeds=list(range(32)))
    stray = 0
    for prompt, group in zip(prompts, groups, strict=True):
        for c in group:
            body = c.token_ids[:-1] if c.finish_reason == "stop" else c.token_ids
            assert completion_text(tokenizer, prompt, body) == c.text
            stray += tokenizer.decode(body, skip_special_tokens=True) != c.text
    assert stray >= 20, stray  # the hard cases were there


def exact_two_token_probabilities(tiny_path, prompt: list[int], temperature: float) -> dict:
    """P(first two tokens) of the tiny model at ``temperature``: a completion that stops
    at its first token is the one-token sequence (EOS,)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_path, dtype=torch.float64).eval()
    with torch.no_grad():
        first = (model(torch.tensor([prompt])).logits[0, -1] / temperature).softmax(-1)
        rows = torch.tensor([[*prompt, t] for t in range(len(first))])
        second = (model(rows).logits[:, -1] / temperature).softmax(-1)
    joint = first[:, None] * second
    probs = {(EOS,): first[EOS].item()}
    for a in range(len(first)):
        if a != EOS:
            probs.update({(a, b): joint[a, b].item() for b in range(len(first))})
    return probs


def fit_p_value(samples: list[tuple[int, ...]], probs: dict, min_expected: float = 5.0):
    """Chi-square goodness of fit of the sampled sequences to ``probs``: sequences expected
    at least ``min_expected`` times are cells of their own, the rest share one. (p-value,
    number of cells)."""
    from scipy.stats import chisquare

    n = len(samples)
    cells = [s for s, p in probs.items() if p * n >= min_expected]
    counts = Counter(samples)
    observed = [counts[s] for s in cells]
    expected = [probs[s] * n for s in cells]
    observed.append(n - sum(observed))
    expected.append(n - sum(expected))
    return chisquare(observed, expected).pvalue, len(cells)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_both_backends_sample_the_model_distribution(
    hf_generator, generator, tiny_path, temperature
):
    # --generator by_size swaps vLLM for transformers on small models: that is only sound
    # if both draw from softmax(logits / T). Each backend's first two tokens, 4000 samples
    # of one prompt, against the probabilities computed exactly (float64 forward).
    prompt = list(b"17+25=")
    probs = exact_two_token_probabilities(tiny_path, prompt, temperature)
    sampling = SamplingConfig(temperature=temperature, max_tokens=2)
    for backend in (hf_generator, generator):
        (group,) = backend.generate([prompt], n=4000, sampling=sampling, seeds=[123])
        p_value, cells = fit_p_value([tuple(c.token_ids) for c in group], probs)
        assert cells >= 8, cells  # a distribution with room to differ
        assert p_value > 1e-3, (type(backend).__name__, p_value)


def test_by_size_generates_small_models_on_cpu_with_transformers(tiny_path, tmp_path):
    large = qwen3_config_dir("qwen3-0.6b", tmp_path)  # config only: no weights are read
    assert ModelShape.from_hf_dir(tiny_path).params < SMALL_MODEL_PARAMS
    assert resolve_backend("by_size", tiny_path, "cpu") == "hf"
    assert resolve_backend("by_size", large, "cpu") == "vllm"
    assert resolve_backend("by_size", tiny_path, "cuda") == "vllm"
    assert resolve_backend("by_size", tiny_path, "cpu", tensor_parallel=2) == "vllm"
    assert resolve_backend("auto", tiny_path, "cpu") == "vllm"  # what recorded runs meant
    with pytest.raises(ConfigError, match="valid: by_size, auto, vllm, hf"):
        resolve_backend("fast", tiny_path, "cpu")
