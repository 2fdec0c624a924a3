"""Real models on this CPU, through exactly the code a released Qwen3 checkpoint goes
through: presets resolved offline from the Hugging Face cache or --model-path, clear
errors when weights are missing, --init random, the transformers generator as the
fallback where vLLM cannot be imported, and the memory estimates. The checkpoints are
small Qwen3s built here (grouped-query attention, tied embeddings like Qwen3-0.6B/1.7B,
the ChatML chat template)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import huggingface_hub.constants
import pytest
import torch
from harness_cli import run_harness

from zoo.core.config import ConfigError
from zoo.envs import Prompt
from zoo.models.presets import (
    CHATML_TEMPLATE,
    QWEN3_SHAPES,
    ModelShape,
    model_shape,
    qwen3_config_dir,
    resolve_model,
)
from zoo.models.titan import titan_qwen3_config
from zoo.models.tokenizer import save_tokenizer
from zoo.run.loop import RLLoop
from zoo.run.run_config import RunConfig
from zoo.run.wiring import build_services, prompt_encoder
from zoo.services.batch import response_logprobs

REVISION = "0123456789abcdef0123456789abcdef01234567"


def small_qwen3_config(**overrides):
    from transformers import Qwen3Config

    fields = dict(
        vocab_size=320,
        hidden_size=64,
        intermediate_size=160,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        max_position_embeddings=256,
        tie_word_embeddings=True,
        eos_token_id=256,
        pad_token_id=256,
        dtype="float32",
    )
    return Qwen3Config(**{**fields, **overrides})


@pytest.fixture(scope="module")
def qwen3_checkpoint(tmp_path_factory) -> Path:
    """A 3-layer Qwen3 with 4 query / 2 KV heads of 32, tied embeddings, safetensors
    weights, tokenizer.json and a chat template: the files of a released checkpoint."""
    from transformers import Qwen3ForCausalLM

    torch.manual_seed(11)
    path = tmp_path_factory.mktemp("qwen3-small")
    Qwen3ForCausalLM(small_qwen3_config()).save_pretrained(path, safe_serialization=True)
    save_tokenizer(path, chat_template=CHATML_TEMPLATE)
    return path


@pytest.fixture
def hf_cache(tmp_path, qwen3_checkpoint, monkeypatch) -> Path:
    """A Hugging Face hub cache holding the small checkpoint as Qwen/Qwen3-0.6B's main
    revision, laid out as `hf download` leaves it (refs/main -> snapshots/<commit>)."""
    cache = tmp_path / "hub"
    repo = cache / "models--Qwen--Qwen3-0.6B"
    shutil.copytree(qwen3_checkpoint, repo / "snapshots" / REVISION)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(REVISION)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    return cache


def test_a_preset_resolves_from_the_hugging_face_cache_offline(hf_cache, qwen3_checkpoint):
    spec = resolve_model("qwen3-0.6b")
    assert spec.path == hf_cache / "models--Qwen--Qwen3-0.6B" / "snapshots" / REVISION
    # the shape (ledger, memory estimate) is the cached checkpoint's, not the preset table's
    assert model_shape("qwen3-0.6b") == ModelShape.from_hf_dir(qwen3_checkpoint)


def test_missing_weights_say_where_we_looked_and_how_to_provide_them(tmp_path, monkeypatch):
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "empty"))
    with pytest.raises(ConfigError) as error:
        resolve_model("qwen3-1.7b")
    message = str(error.value)
    assert str(tmp_path / "empty" / "models--Qwen--Qwen3-1.7B") in message
    for hint in ("hf download Qwen/Qwen3-1.7B", "--model-path", "--init random"):
        assert hint in message


def test_model_path_is_checked_before_use(tmp_path, qwen3_checkpoint):
    assert resolve_model("qwen3-1.7b", model_path=str(qwen3_checkpoint)).path == qwen3_checkpoint
    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copy(qwen3_checkpoint / "config.json", bare)
    save_tokenizer(bare)
    with pytest.raises(ConfigError, match=r"no \*.safetensors weights.*--init random"):
        resolve_model("qwen3-1.7b", model_path=str(bare))
    assert resolve_model("qwen3-1.7b", model_path=str(bare), init="random").path == bare
    config = json.loads((bare / "config.json").read_text())
    (bare / "config.json").write_text(json.dumps({**config, "model_type": "llama"}))
    with pytest.raises(ConfigError, match="model_type 'llama'"):
        resolve_model(str(bare), init="random")


def test_init_random_without_weights_uses_the_preset_architecture(tmp_path, monkeypatch):
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "empty"))
    monkeypatch.setenv("FORGE_ZOO_CACHE", str(tmp_path / "zoo"))
    spec = resolve_model("qwen3-8b", init="random")
    assert not list(spec.path.glob("*.safetensors"))
    config = json.loads((spec.path / "config.json").read_text())
    assert {k: config[k] for k in QWEN3_SHAPES["qwen3-8b"]} == QWEN3_SHAPES["qwen3-8b"]
    assert model_shape("qwen3-8b") == ModelShape.from_hf_dir(spec.path)


def test_chat_prompts_go_through_the_checkpoints_chat_template(qwen3_checkpoint):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(qwen3_checkpoint)
    encode = prompt_encoder(tokenizer)
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is 2+3?"},
    ]
    ids = encode(
        Prompt(text="What is 2+3?", answer=5, index=0, split="train", meta={"messages": messages})
    )
    assert tokenizer.decode(ids) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n"
        "<|im_start|>user\nWhat is 2+3?<|im_end|>\n<|im_start|>assistant\n"
    )


def greedy_agrees_with_trainer(services, prompts: list[list[int]]) -> float:
    """Largest gap between the generator's greedy logprobs and the trainer's logprobs of
    the same tokens: near zero only when the generator holds the trainer's weights."""
    from zoo.services.sampling import SamplingConfig

    groups = services.generator.generate(
        prompts, n=1, sampling=SamplingConfig(max_tokens=5), greedy=True
    )
    gap = 0.0
    for prompt, (c,) in zip(prompts, groups, strict=True):
        tokens = torch.tensor([prompt + c.token_ids])
        with torch.no_grad():
            ours = response_logprobs(
                services.trainer.model, tokens, torch.tensor([len(prompt)]), len(c.token_ids)
            )[0]
        gap = max(gap, float((ours - torch.tensor(c.logprobs)).abs().max()))
    return gap


def weights_flow(configs: list[RunConfig], hub_cache: str) -> None:
    """The body of the test below, run in a process of its own: a second in-process vLLM
    engine tears down vLLM's process-wide parallel state when it goes, which the
    session's shared engine (tests/conftest.py) still needs."""
    huggingface_hub.constants.HF_HUB_CACHE = hub_cache
    for cfg in configs:
        services = build_services(cfg, quiet=True)
        prompts = [list(b"12+34="), list(b"7*8="), list(b"hello")]
        assert greedy_agrees_with_trainer(services, prompts) < 1e-4
        torch.manual_seed(0)
        with torch.no_grad():
            for p in services.trainer.model.parameters():
                p.add_(0.05 * torch.randn_like(p))
        assert greedy_agrees_with_trainer(services, prompts) > 1e-2  # the generator is stale
        RLLoop(cfg, services).step()
        assert services.generator.policy_version == 1
        assert greedy_agrees_with_trainer(services, prompts) < 1e-4


@pytest.mark.slow  # ~18 s: a vLLM engine on a Qwen3 preset
def test_weights_flow_trainer_to_vllm_in_hugging_face_naming(hf_cache, tmp_path, qwen3_checkpoint):
    """Pretrained weights from the cache, and random ones the trainer made (vLLM starts
    with dummy weights and receives them): the generator samples from the trainer's
    weights before the first step and again after a step's sync. (A small random model
    earns no reward on arithmetic, so its gradient is zero: the trainer's weights are
    moved by hand, as an optimizer step would, and the step must carry them over.)"""
    import multiprocessing

    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copy(qwen3_checkpoint / "config.json", bare)
    save_tokenizer(bare)
    settings = {
        "generator": "vllm",
        "prompts_per_step": 4,
        "group_size": 4,
        "max_response_len": 5,
        "lr": 1e-2,
        "device": "cpu",
    }
    configs = [
        RunConfig.from_flat(model="qwen3-0.6b", **settings),  # from the cache
        RunConfig.from_flat(model=str(bare), init="random", **settings),
    ]
    child = multiprocessing.get_context("spawn").Process(
        target=weights_flow, args=(configs, str(hf_cache))
    )
    child.start()
    child.join(timeout=600)
    assert child.exitcode == 0, "the check failed in its process (its traceback is above)"


def test_auto_generator_falls_back_to_transformers_where_vllm_cannot_import(
    tmp_path, tiny_model_path
):
    out = tmp_path / "run"  # (the default, by_size, would pick transformers for tiny anyway)
    result = run_harness(
        "run",
        "grpo",
        "--generator",
        "auto",
        "--steps",
        "2",
        "--prompts-per-step",
        "16",
        "--quiet",
        "--out",
        str(out),
        cwd=tmp_path,
        without=("vllm",),
    )
    assert result.returncode == 0, result.stderr
    notices = [line for line in result.stderr.splitlines() if "vLLM cannot be imported" in line]
    assert len(notices) == 1 and "--generator hf" in notices[0]
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [0, 1, 2]  # step 0: the first evaluation
    assert all(r["generate_tokens"] > 0 and 0 <= r["reward_mean"] <= 1 for r in records[1:])
    assert 0.2 < records[0]["eval_reward"] < 0.4  # the tiny model's ~27% at the start


def test_asking_for_vllm_where_it_cannot_import_is_an_error(tmp_path, tiny_model_path):
    result = run_harness(
        "run",
        "grpo",
        "--steps",
        "1",
        "--generator",
        "vllm",
        "--quiet",
        "--out",
        str(tmp_path / "run"),
        cwd=tmp_path,
        without=("vllm",),
    )
    assert result.returncode != 0 and "vllm" in result.stderr.lower()


@pytest.mark.parametrize("name", list(QWEN3_SHAPES))
def test_parameter_counts_of_the_presets_match_the_built_architecture(name, tmp_path):
    """ModelShape.params (memory estimates, `list models`) against TorchTitan's model of
    the preset, built on the meta device (no memory), norms excluded."""
    config = titan_qwen3_config(qwen3_config_dir(name, tmp_path))
    with torch.device("meta"):
        model = config.build()
    counted = sum(p.numel() for n, p in model.named_parameters() if "norm" not in n)
    assert model_shape(name).params == counted
    published = {"qwen3-0.6b": 0.6e9, "qwen3-1.7b": 1.7e9, "qwen3-4b": 4.0e9, "qwen3-8b": 8.2e9}
    assert abs(counted / published[name] - 1) < 0.05


def test_list_models_prints_every_preset_with_its_memory(tmp_path):
    result = run_harness("list", "models", cwd=tmp_path, timeout=120, env={"COLUMNS": "200"})
    assert result.returncode == 0, result.stderr
    memory = result.stdout.split("memory in GiB")[1]  # (the second table: memory by part)
    rows = {
        line.split("│")[1].strip(): line
        for line in memory.splitlines()
        if line.startswith("│") and line.split("│")[1].strip()
    }
    assert set(rows) >= {"tiny", "tiny-code", *QWEN3_SHAPES}
    minimums = [float(rows[n].split("│")[2].split("/")[0]) for n in QWEN3_SHAPES]
    assert minimums == sorted(minimums) and minimums[0] > 1  # GiB, growing with model size


@pytest.mark.parametrize("what", ["models", "envs"])
def test_the_lists_fit_the_terminals_width(tmp_path, what):
    """They printed 200 and 220 columns whatever the terminal; now its width (COLUMNS
    here, as a terminal sets it), with every model name whole."""
    narrow = run_harness("list", what, cwd=tmp_path, timeout=120, env={"COLUMNS": "80"})
    assert narrow.returncode == 0, narrow.stderr
    assert max(len(line) for line in narrow.stdout.splitlines()) <= 80
    if what == "models":
        assert all(f"│ {name} " in narrow.stdout for name in ("tiny-code-feedback", *QWEN3_SHAPES))
    wide = run_harness("list", what, cwd=tmp_path, timeout=120, env={"COLUMNS": "160"})
    assert 80 < max(len(line) for line in wide.stdout.splitlines()) <= 160
