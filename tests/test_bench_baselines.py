"""The benchmark baselines (benchmarks/baselines): the bare torch GRPO step samples
correctly, its loss has the gradient of -mean_seq(mean_tok(A * logp)), and TRL's trainer
really consumes prompts_per_step x group_size completions per optimizer step."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from benchmarks.baselines.bare_grpo import BareGRPO

EOS = 256
PROMPTS = ["37+45=", "3+4=", "12+9=", "80+11=", "5+5=", "61+2=", "9+70=", "44+44="]


def ids(text: str) -> list[int]:
    return list(text.encode())


def params(model: torch.nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


def test_bare_step_runs(tiny_path: Path) -> None:
    from zoo.envs import get_env

    env = get_env("arithmetic")
    prompts = env.train_prompts(0, 8, seed=0)
    rows = [p for p in prompts for _ in range(4)]
    seen: list[list[str]] = []

    def rewards(texts: list[str]) -> list[float]:
        seen.append(texts)
        return env.score_batch(rows, texts)

    out = BareGRPO(tiny_path).step([ids(p.text) for p in prompts], rewards, 4, 4)
    assert len(seen) == 1 and len(seen[0]) == 32
    assert not any("<|endoftext|>" in t for t in seen[0])  # the text stops before EOS
    assert out["generate_seconds"] > 0 and out["train_seconds"] > 0
    assert out["step_seconds"] >= out["generate_seconds"] + out["train_seconds"]
    assert 0.0 <= out["reward_mean"] <= 1.0
    assert torch.isfinite(torch.tensor(out["loss"]))


def test_bare_sampling_matches_uncached_greedy(tiny_path: Path) -> None:
    """Near-zero temperature makes sampling greedy: the left-padded, KV-cached batch must
    pick the same tokens as decoding each prompt alone, unpadded, without a cache."""
    bare = BareGRPO(tiny_path)
    bare.temperature = 1e-4
    prompts = [ids(p) for p in PROMPTS]
    got = bare.generate(prompts, max_new_tokens=4)
    for prompt, response in zip(prompts, got, strict=True):
        seq, want = list(prompt), []
        with torch.no_grad():
            for _ in range(4):
                tok = int(bare.model(input_ids=torch.tensor([seq])).logits[0, -1].argmax())
                want.append(tok)
                seq.append(tok)
                if tok == EOS:
                    break
        assert response == want
    assert any(r[-1] == EOS for r in got)  # the tiny model answers, then stops


def test_bare_loss_gradient_matches_reference(tiny_path: Path) -> None:
    bare = BareGRPO(tiny_path)
    prompts = [ids(p) for p in PROMPTS[:4]]
    responses = [[ord("8"), ord("2"), EOS], [ord("7")], [ord("2"), ord("1"), EOS], [EOS]]
    adv = torch.tensor([1.3, -0.4, 0.7, -1.6])
    bare.loss(prompts, responses, adv).backward()
    got = [p.grad.clone() for p in bare.model.parameters()]

    # Reference: each sequence alone, unpadded; plain log-softmax of its response tokens.
    bare.model.zero_grad(set_to_none=True)
    total = torch.zeros(())
    for p, r, a in zip(prompts, responses, adv, strict=True):
        logits = bare.model(input_ids=torch.tensor([p + r])).logits[0]
        logp = torch.log_softmax(logits[len(p) - 1 : -1], dim=-1)
        total = total + a * logp[torch.arange(len(r)), torch.tensor(r)].mean()
    (-total / len(prompts)).backward()
    for g, p in zip(got, bare.model.parameters(), strict=True):
        torch.testing.assert_close(g, p.grad, rtol=1e-4, atol=1e-6)


def test_bare_step_moves_weights_only_with_signal(tiny_path: Path) -> None:
    prompts = [ids(p) for p in PROMPTS]
    bare = BareGRPO(tiny_path)
    before = params(bare.model)
    bare.step(prompts, lambda texts: [1.0] * len(texts), 4, 4)  # all advantages are 0
    assert all(torch.equal(a, b) for a, b in zip(before, params(bare.model), strict=True))

    bare.step(prompts, lambda texts: [float(i % 2) for i in range(len(texts))], 4, 4)
    assert not all(torch.equal(a, b) for a, b in zip(before, params(bare.model), strict=True))


def test_trl_step_consumes_full_batches(tiny_path: Path) -> None:
    pytest.importorskip("trl")
    from benchmarks.baselines.trl_grpo import trl_grpo_step_seconds

    # Unique answers (the prompt's index) let the reward function see the groups it gets.
    answers = list(range(16))
    calls: list[list[int]] = []

    def rewards(completions: list[str], answer: list[int]) -> list[float]:
        calls.append(list(answer))
        return [float(len(c) % 2) for c in completions]

    out = trl_grpo_step_seconds(
        tiny_path,
        PROMPTS * 2,
        answers,
        rewards,
        group_size=4,
        prompts_per_step=8,
        max_new_tokens=4,
        steps=1,
        warmup=1,
        gradient_checkpointing=False,
    )
    assert out["step_seconds"] > 0 and out["steps"] == 1
    assert out["gradient_checkpointing"] is False
    assert out["default_gradient_checkpointing"] is True  # TRL 1.16's default
    assert out["completions_per_step"] == [32, 32]
    assert len(calls) == 2
    for call in calls:  # 8 distinct prompts, each sampled group_size=4 times
        assert len(set(call)) == 8
        assert all(call.count(a) == 4 for a in set(call))
