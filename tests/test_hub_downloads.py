"""Downloads by name: the real huggingface_hub and datasets code fetches a small Qwen3
checkpoint and small data sets, built here, from a Hub stand-in on 127.0.0.1
(tests/hub_server.py) that ``HF_ENDPOINT`` points at, into Hugging Face caches under
tmp_path; then a run trains on them. Offline (``HF_HUB_OFFLINE=1``, or a Hub that
cannot be reached) the same commands read the cache, and with an empty cache stop with
the offline message (exit 2). Nothing leaves the machine: each command runs in a
subprocess whose only Hub is the local one."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch
from harness_cli import REPO, run_harness
from hub_server import LocalHub

from zoo.models.presets import CHATML_TEMPLATE
from zoo.models.tokenizer import save_tokenizer

QWEN = "Qwen/Qwen3-0.6B"  # the preset qwen3-0.6b's repo, served here with a small model


def parquet(rows: list[dict]) -> bytes:
    buffer = io.BytesIO()
    pd.DataFrame(rows).to_parquet(buffer, index=False)
    return buffer.getvalue()


def jsonl(rows: list[dict]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


def card(config: str, splits: list[str]) -> bytes:
    """A data set card whose YAML maps config ``config`` to ``<config>/<split>-*`` files,
    as openai/gsm8k's and google-research-datasets/mbpp's cards do."""
    files = "".join(f"  - split: {s}\n    path: {config}/{s}-*\n" for s in splits)
    return f"---\nconfigs:\n- config_name: {config}\n  data_files:\n{files}---\n".encode()


def small_checkpoint(directory: Path) -> dict[str, bytes]:
    """The files of a 2-layer Qwen3 (hidden 64, 4 query / 2 KV heads, tied embeddings)
    with the byte-level tokenizer and ChatML template: a released checkpoint's layout."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(5)
    config = Qwen3Config(
        vocab_size=320,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        eos_token_id=256,
        pad_token_id=256,
        dtype="float32",
    )
    Qwen3ForCausalLM(config).save_pretrained(directory, safe_serialization=True)
    save_tokenizer(directory, chat_template=CHATML_TEMPLATE)
    return {p.name: p.read_bytes() for p in directory.iterdir() if p.is_file()}


GSM8K_TRAIN = [
    {
        "question": f"Tom has {i} apples and buys 2. How many now?",
        "answer": f"{i} + 2 = {i + 2}\n#### {i + 2}",
    }
    for i in range(12)
]
GSM8K_TEST = [{"question": f"What is {i} times 3?", "answer": f"#### {3 * i}"} for i in range(4)]
MATH500 = [
    {
        "problem": f"Compute ${i}^2$.",
        "solution": f"$\\boxed{{{i * i}}}$",
        "answer": str(i * i),
        "subject": "Algebra",
        "level": 1,
        "unique_id": f"test/algebra/{i}.json",
    }
    for i in range(5)
]
MATH_TRAIN = [
    {
        "problem": f"Compute ${i} + {i}$.",
        "solution": f"So $\\boxed{{{2 * i}}}$.",
        "level": "Level 1",
        "type": "Algebra",
    }
    for i in range(8)
]
MATH_TRAIN.append(
    {
        "problem": "Compute  $3^2$.",
        "solution": "$\\boxed{9}$",
        "level": "Level 1",
        "type": "Algebra",
    }
)  # MATH-500's text, spaced apart
MBPP_SANITIZED = [
    {
        "source_file": "x",
        "task_id": 600 + i,
        "prompt": f"Write a function to add {i} to a number.",
        "code": f"def add_{i}(x):\n    return x + {i}",
        "test_imports": ["import math"],
        "test_list": [
            f"assert add_{i}(1) == {1 + i}",
            f"assert add_{i}(math.floor(2.5)) == {2 + i}",
        ],
    }
    for i in range(6)
]
HUMANEVAL = [
    {
        "task_id": f"HumanEval/{i}",
        "entry_point": f"f{i}",
        "prompt": f"def f{i}(x):\n    '''Return x plus {i}.'''\n",
        "canonical_solution": f"    return x + {i}\n",
        "test": f"def check(candidate):\n    assert candidate(1) == {1 + i}\n",
    }
    for i in range(3)
]


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    with LocalHub() as local:
        local.add_model(QWEN, small_checkpoint(tmp_path_factory.mktemp("qwen3-small")))
        local.add_dataset(
            "openai/gsm8k",
            {
                "README.md": card("main", ["train", "test"]),
                "main/train-00000-of-00001.parquet": parquet(GSM8K_TRAIN),
                "main/test-00000-of-00001.parquet": parquet(GSM8K_TEST),
            },
        )
        local.add_dataset("HuggingFaceH4/MATH-500", {"test.jsonl": jsonl(MATH500)})
        local.add_dataset(
            "DigitalLearningGmbH/MATH-lighteval",
            {"data/train-00000-of-00001.parquet": parquet(MATH_TRAIN)},
        )
        local.add_dataset(
            "google-research-datasets/mbpp",
            {
                "README.md": card("sanitized", ["train", "test"]),
                "sanitized/train-00000-of-00001.parquet": parquet(MBPP_SANITIZED[:4]),
                "sanitized/test-00000-of-00001.parquet": parquet(MBPP_SANITIZED[4:]),
            },
        )
        local.add_dataset(
            "openai/openai_humaneval",
            {
                "README.md": card("openai_humaneval", ["test"]),
                "openai_humaneval/test-00000-of-00001.parquet": parquet(HUMANEVAL),
            },
        )
        yield local


def hub_env(home: Path, endpoint: str, offline: bool = False) -> dict[str, str]:
    """The environment of a command: an empty (or earlier-filled) Hugging Face home,
    the Hub at ``endpoint``; HF_HUB_OFFLINE unset unless ``offline``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "TRANSFORMERS_"))}
    env.update(
        HF_HOME=str(home),
        HF_HUB_CACHE=str(home / "hub"),
        HF_ENDPOINT=endpoint,
        HF_HUB_DISABLE_TELEMETRY="1",
    )
    # run_harness adds these to this process's environment, where conftest set it offline
    env.update(
        dict.fromkeys(
            ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"),
            "1" if offline else "0",
        )
    )
    return env


RUN = (
    "run",
    "grpo",
    "--model",
    "qwen3-0.6b",
    "--env",
    "gsm8k",
    "--steps",
    "2",
    "--prompts-per-step",
    "2",
    "--group-size",
    "2",
    "--max-response-len",
    "8",
    "--mini-batches",
    "1",
    "--micro-batch-size",
    "4",
    "--lr",
    "1e-3",
    "--generator",
    "hf",
    "--device",
    "cpu",
    "--quiet",
)


@pytest.mark.slow
def test_a_preset_and_gsm8k_download_then_two_steps_train_on_them(hub, tmp_path):
    """~50-130 s: the acceptance run; then the same command offline trains from the cache."""
    home = tmp_path / "hf-home"
    before = len(hub.requests)
    result = run_harness(
        *RUN, "--out", str(tmp_path / "run"), cwd=tmp_path, env=hub_env(home, hub.url), timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    asked = hub.requests[before:]
    # the real clients' routes: repo info, file listing, then each file's HEAD and GET
    assert ("GET", f"/api/models/{QWEN}/revision/main") in asked
    sha = hub.repos["model", QWEN].sha
    # config.json first, alone (the pre-flight memory check reads the real shape), then
    # the rest of the snapshot
    assert ("GET", f"/{QWEN}/resolve/main/config.json") in asked
    for name in ("model.safetensors", "tokenizer.json"):
        assert ("GET", f"/{QWEN}/resolve/{sha}/{name}") in asked, name
    assert asked.index(("GET", f"/{QWEN}/resolve/main/config.json")) < asked.index(
        ("GET", f"/{QWEN}/resolve/{sha}/model.safetensors")
    )
    gsm8k = hub.repos["dataset", "openai/gsm8k"].sha
    for split in ("train", "test"):
        path = f"/datasets/openai/gsm8k/resolve/{gsm8k}/main/{split}-00000-of-00001.parquet"
        assert ("GET", path) in asked
    snapshot = home / "hub" / "models--Qwen--Qwen3-0.6B" / "snapshots" / sha
    served = hub.repos["model", QWEN].files["model.safetensors"]
    assert (snapshot / "model.safetensors").read_bytes() == served
    record = json.loads((tmp_path / "run" / "config.json").read_text())
    assert Path(record["model_path"]).resolve() == snapshot.resolve()
    metrics = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    assert [m["step"] for m in metrics] == [0, 1, 2]
    assert all(m["samples"] > 0 and m["train_tokens"] > 0 for m in metrics[1:])

    # offline, with the cache the download filled: it trains from the cache
    before = len(hub.requests)
    result = run_harness(
        *RUN,
        "--steps",
        "1",
        "--out",
        str(tmp_path / "cached"),
        cwd=tmp_path,
        env=hub_env(home, hub.url, offline=True),
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert len(hub.requests) == before  # not one request


def test_the_same_command_offline_with_an_empty_cache_stops_with_the_offline_message(hub, tmp_path):
    # HF_HUB_OFFLINE=1, an empty cache: exit 2, the offline message, no traceback
    empty = tmp_path / "empty-home"
    before = len(hub.requests)
    result = run_harness(
        *RUN,
        "--out",
        str(tmp_path / "offline"),
        cwd=tmp_path,
        env=hub_env(empty, hub.url, offline=True),
        timeout=300,
    )
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    # the weights first: with them missing, nothing else the user could fix matters
    assert result.stderr.startswith("error: no weights for qwen3-0.6b"), result.stderr[-3000:]
    # the data: with weights not needed (--init random), gsm8k's train split is missing
    result = run_harness(
        *RUN,
        "--init",
        "random",
        "--out",
        str(tmp_path / "offline-data"),
        cwd=tmp_path,
        env=hub_env(empty, hub.url, offline=True),
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert "gsm8k: no data for the train split" in result.stderr
    assert "Nothing was downloaded: HF_HUB_OFFLINE is set." in result.stderr
    assert len(hub.requests) == before  # not one request
    # the model too: offline with the data at hand, the weights are missing
    result = run_harness(
        *RUN[:5],
        "arithmetic",
        *RUN[6:],
        "--out",
        str(tmp_path / "o2"),
        cwd=tmp_path,
        env=hub_env(empty, hub.url, offline=True),
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert "no weights for qwen3-0.6b (Qwen/Qwen3-0.6B) found offline" in result.stderr
    assert str(empty / "hub" / "models--Qwen--Qwen3-0.6B") in result.stderr
    assert "nothing was downloaded: HF_HUB_OFFLINE is set" in result.stderr
    assert len(hub.requests) == before
    # a model this machine could not hold (8B: ~122 GiB of float32 trainer state) still
    # gets the missing-weights message, not the memory check's
    result = run_harness(
        "run",
        "grpo",
        "--model",
        "qwen3-8b",
        "--out",
        str(tmp_path / "o8"),
        cwd=tmp_path,
        env=hub_env(empty, hub.url, offline=True),
    )
    assert result.returncode == 2, result.stderr[-3000:]
    assert result.stderr.startswith("error: no weights for qwen3-8b (Qwen/Qwen3-8B)"), (
        result.stderr[-3000:]
    )
    # no network: HF_HUB_OFFLINE unset, but nothing listens where the Hub should be
    result = run_harness(
        *RUN[:5],
        "arithmetic",
        *RUN[6:],
        "--out",
        str(tmp_path / "o3"),
        cwd=tmp_path,
        env=hub_env(empty, "http://127.0.0.1:9"),
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert "nothing was downloaded: the Hub at http://127.0.0.1:9 could not be reached" in (
        result.stderr
    )


def env_report(home: Path, endpoint: str, offline: bool, specs: dict[str, dict]) -> dict:
    """Build each env of ``specs`` (name -> settings) in a fresh process with the given
    Hub and cache; each env's ``describe()`` (sources, sizes), its first held-out prompt
    and reference score, or its error."""
    code = f"""
import json, sys
from zoo.envs import get_env
out = {{}}
for name, settings in {specs!r}.items():
    try:
        env = get_env(name.split("#")[0], **settings)
    except Exception as exc:
        out[name] = {{"error": type(exc).__name__ + ": " + str(exc)}}
        continue
    d = env.describe()
    p = env.eval_prompts()[0]
    reference = env.reference_answer(p) if hasattr(env, "reference_answer") else None
    score = env.score(p, reference if reference is not None else "\\\\boxed{{%s}}" % p.answer)
    out[name] = {{"sources": d["sources"], "sizes": d["sizes"], "score": score,
                 "dropped": d.get("dropped_overlap"), "prompt": p.text}}
print("REPORT" + json.dumps(out))
"""
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env={**hub_env(home, endpoint, offline), "PYTHONPATH": str(REPO)},
    )
    lines = [x for x in result.stdout.splitlines() if x.startswith("REPORT")]
    assert result.returncode == 0 and lines, result.stderr[-3000:]
    return json.loads(lines[-1][len("REPORT") :])


@pytest.mark.slow  # ~14 s: three data sets through the local Hub
def test_math_mbpp_and_humaneval_download_by_name_then_read_from_the_cache(hub, tmp_path):
    specs = {
        "math": {},
        "mbpp": {},
        "humaneval": {"hf_eval": "openai/openai_humaneval:openai_humaneval:test", "eval_size": 2},
    }
    home = tmp_path / "hf-home"
    online = env_report(home, hub.url, False, specs)
    assert online["math"]["sources"] == {
        "train": "Hugging Face DigitalLearningGmbH/MATH-lighteval:default:train",
        "eval": "Hugging Face HuggingFaceH4/MATH-500:default:test",
    }
    # MATH train rows with a MATH-500 problem's text (whitespace aside) are dropped
    assert online["math"]["sizes"] == {"train": 8, "eval": 5}
    assert online["math"]["dropped"] == 1 and online["math"]["score"] == 1.0
    assert online["mbpp"]["sizes"] == {"train": 4, "eval": 2}
    assert online["mbpp"]["sources"]["eval"].endswith("mbpp:sanitized:test")
    assert online["mbpp"]["score"] == 1.0  # the sanitized rows' test_imports run first
    assert "Write a function to add" in online["mbpp"]["prompt"]
    assert online["humaneval"]["sizes"] == {"train": 1, "eval": 2}
    assert online["humaneval"]["score"] == 1.0
    # offline, the datasets cache the downloads filled serves the same rows
    offline = env_report(home, hub.url, True, specs)
    assert offline == online
    # a Hub that cannot be reached (nothing listens on the port): the cache, no error
    closed = "http://127.0.0.1:9"
    assert env_report(home, closed, False, {"math": {}})["math"] == online["math"]
    # ... and with an empty cache, the offline message says why nothing was downloaded
    failed = env_report(tmp_path / "empty", closed, False, {"gsm8k": {}})["gsm8k"]["error"]
    assert "gsm8k: no data for the train split" in failed
    assert "Nothing was downloaded: the Hub at http://127.0.0.1:9 could not be reached" in failed
    # a data set the Hub does not have: the download's own error is in the message
    missing = env_report(
        tmp_path / "empty", hub.url, False, {"gsm8k": {"hf_train": "nobody/nothing:main:train"}}
    )
    assert "Downloading it from http://127.0.0.1" in missing["gsm8k"]["error"]
    assert "nobody/nothing" in missing["gsm8k"]["error"]
