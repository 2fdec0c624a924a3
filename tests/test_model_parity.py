"""The Hugging Face <-> TorchTitan bridge: same logits as transformers' Qwen3, and weights
that convert back to Hugging Face naming unchanged."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from zoo.models.titan import build_titan_model
from zoo.models.tokenizer import save_tokenizer
from zoo.services.trainer import Trainer, TrainerConfig


def hf_model(path: Path):
    from transformers import Qwen3ForCausalLM

    return Qwen3ForCausalLM.from_pretrained(path, dtype=torch.float32).eval()


def random_batches(vocab: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab, shape, generator=g) for shape in [(1, 1), (3, 17), (2, 64)]]


def assert_same_logits(titan: torch.nn.Module, hf, vocab: int, seed: int = 0) -> None:
    with torch.no_grad():
        for tokens in random_batches(vocab, seed):
            ours = titan(tokens).float()
            theirs = hf(input_ids=tokens).logits.float()
            assert ours.shape == theirs.shape == (*tokens.shape, vocab)
            assert (ours - theirs).abs().max() < 1e-5


@pytest.fixture(scope="module")
def random_qwen3_path(tmp_path_factory) -> Path:
    """A freshly initialised small Qwen3: grouped-query attention (4 query heads, 2 KV
    heads), head_dim 32 with heads * head_dim != hidden, 3 layers, a non-default rope."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(123)
    config = Qwen3Config(
        vocab_size=300,
        hidden_size=64,
        intermediate_size=160,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        max_position_embeddings=128,
        rope_parameters={"rope_type": "default", "rope_theta": 5000.0},
        tie_word_embeddings=False,
        dtype="float32",
    )
    model = Qwen3ForCausalLM(config)
    with torch.no_grad():  # make the norms non-trivial so a missing/misplaced norm shows
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(0.3 * torch.randn_like(p))
    path = tmp_path_factory.mktemp("random-qwen3")
    model.save_pretrained(path, safe_serialization=True)
    save_tokenizer(path)
    return path


def test_titan_logits_match_transformers_on_tiny_model(tiny_path):
    titan, _ = build_titan_model(tiny_path)
    titan.eval()
    assert_same_logits(titan, hf_model(tiny_path), vocab=320)


def test_titan_logits_match_transformers_on_random_gqa_qwen3(random_qwen3_path):
    titan, _ = build_titan_model(random_qwen3_path)
    titan.eval()
    assert_same_logits(titan, hf_model(random_qwen3_path), vocab=300, seed=1)


@pytest.mark.parametrize("which", ["tiny", "random"])
def test_trainer_hf_state_dict_round_trips_keys_and_tensors(which, tiny_path, random_qwen3_path):
    path = tiny_path if which == "tiny" else random_qwen3_path
    trainer = Trainer(path, TrainerConfig(), max_response_len=6)
    ours = trainer.hf_state_dict()
    theirs = hf_model(path).state_dict()
    assert sorted(ours) == sorted(theirs)
    for key, tensor in theirs.items():
        assert ours[key].shape == tensor.shape, key
        assert ours[key].dtype == tensor.dtype, key
        assert torch.equal(ours[key], tensor), key


def test_changed_trainer_weights_reach_transformers_through_hf_state_dict(random_qwen3_path):
    """Perturb every TorchTitan parameter differently, export, load into transformers
    (strict): the logits must still agree, so each tensor went to the right HF name (a
    swapped q/k/v split or transposed weight would show)."""
    trainer = Trainer(random_qwen3_path, TrainerConfig(), max_response_len=6)
    torch.manual_seed(7)
    with torch.no_grad():
        for p in trainer.model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    hf = hf_model(random_qwen3_path)
    before = hf(input_ids=torch.arange(10)[None]).logits
    hf.load_state_dict(trainer.hf_state_dict(), strict=True)
    after = hf(input_ids=torch.arange(10)[None]).logits
    assert (after - before).abs().max() > 1e-3  # the export carries the new weights
    trainer.model.eval()
    assert_same_logits(trainer.model, hf, vocab=300, seed=2)


def test_tied_embedding_qwen3_matches_transformers_and_exports_the_checkpoint_keys(tmp_path):
    """Small Qwen3 releases tie the LM head to the embedding; the checkpoint then stores
    no lm_head.weight, and the export must carry exactly the checkpoint's tensors."""
    from safetensors.torch import load_file
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(5)
    config = Qwen3Config(
        vocab_size=300,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        max_position_embeddings=128,
        tie_word_embeddings=True,
        dtype="float32",
    )
    Qwen3ForCausalLM(config).save_pretrained(tmp_path, safe_serialization=True)
    save_tokenizer(tmp_path)
    trainer = Trainer(tmp_path, TrainerConfig(), max_response_len=6)
    trainer.model.eval()
    assert_same_logits(trainer.model, hf_model(tmp_path), vocab=300, seed=3)
    on_disk = load_file(str(tmp_path / "model.safetensors"))
    ours = trainer.hf_state_dict()
    assert sorted(ours) == sorted(on_disk)
    assert all(torch.equal(ours[k], on_disk[k]) for k in on_disk)
