"""The Trainer split over gloo processes: FSDP2 data parallelism over 2, TorchTitan's Qwen3
tensor parallelism over 2, or both (2 x 2 = 4 processes). Each rank, given the same whole
batch, must compute the same old log-probs (also with the previous version's weights)
and make the same updates as one process (two mini-batches per batch: same losses,
gradient norms, gradients and weights), report whole-batch metrics on every rank, keep
tied embeddings tied, and resume from a checkpoint at either world size."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import socket
from datetime import timedelta
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

from zoo.algorithms import get_algorithm
from zoo.services.batch import RolloutBatch
from zoo.services.trainer import Trainer, TrainerConfig

SPLITS = {"fsdp": (2, 1), "tp": (2, 2), "2d": (4, 2)}
"""name: (processes, tensor-parallel degree); data-parallel degree = processes / tp."""
STEPS = 4
SAVE_AFTER = 2
RESPONSE = 5

# name: model, algorithm (name, overrides), rows per batch, micro-batch size, checkpoint
# the sharded resume starts from ("own": its own step-2 state; "single": one process's)
SCENARIOS = {
    # whole slices (5 and 4 rows in one pass each); GRPO's KL term reads ref_logprobs;
    # tied embeddings, as in the small Qwen3 releases
    "grpo_tied_whole": ("tied", ("grpo", {}), 9, 0, "own"),
    # 9 rows, micro 2: rank 0 runs 3 micro-batches, rank 1 runs 2 and one padding pass
    "dapo_uneven_micro": ("tiny", ("dapo", {}), 9, 2, "single"),
    # one row: rank 1 has none and only runs a padding pass
    "grpo_one_row": ("tiny", ("grpo", {"beta": 0.0}), 1, 0, "own"),
}


def make_batches(rows: int, seed: int) -> list[RolloutBatch]:
    """STEPS batches: ragged responses, all-zero mask rows (one per rank's slice, when
    there are more than two rows), per-row advantages."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(STEPS):
        prompt = 6
        tokens = torch.randint(0, 256, (rows, prompt + RESPONSE), generator=gen)
        lengths = torch.randint(1, RESPONSE + 1, (rows,), generator=gen)
        if rows > 2:
            lengths[[1, rows - 2]] = 0
        mask = (torch.arange(RESPONSE)[None, :] < lengths[:, None]).float()
        out.append(
            RolloutBatch(
                tokens=tokens,
                response_start=torch.full((rows,), prompt),
                mask=mask,
                advantages=torch.randn(rows, generator=gen),
                # near the tiny model's own logprobs of random tokens (about -10.5)
                ref_logprobs=-11.0 + 2.0 * torch.rand(rows, RESPONSE, generator=gen),
            )
        )
    return out


def train_on(trainer: Trainer, algo, batch: RolloutBatch) -> dict:
    """One rollout batch: old log-probs, then two mini-batches (Trainer.train)."""
    batch.old_logprobs = trainer.logprobs(batch)
    return trainer.train(batch, algo.loss)


def run_steps(trainer: Trainer, algo, batches: list[RolloutBatch]) -> list[dict]:
    return [train_on(trainer, algo, b) for b in batches]


def previous_version_logprobs(trainer: Trainer, batch: RolloutBatch) -> torch.Tensor:
    """The batch scored with the weights of one version back (kept by ``train``)."""
    versions = torch.full((batch.size,), trainer.version - 1)
    return trainer.logprobs(dataclasses.replace(batch, policy_versions=versions))


def trainer_config(micro: int) -> TrainerConfig:
    return TrainerConfig.of(micro_batch_size=micro, mini_batches=2)


def full_grads(trainer: Trainer) -> dict[str, torch.Tensor]:
    """Whole gradients by parameter name (a collective when split)."""
    out = {}
    for name, p in trainer.model.named_parameters():
        g = p.grad
        out[name] = g.full_tensor() if hasattr(g, "full_tensor") else g.clone()
    return out


def worker(rank: int, port: int, paths: dict[str, str], out_dir: str, split: str) -> None:
    import torch.distributed as dist

    torch.set_num_threads(1)
    world, tp = SPLITS[split]
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timedelta(seconds=60))
    try:
        results = {}
        for name, (model, (algo_name, overrides), rows, micro, resume_from) in SCENARIOS.items():
            config = trainer_config(micro)
            algo = get_algorithm(algo_name, **overrides)
            batches = make_batches(rows, seed=len(name))
            trainer = Trainer(
                Path(paths[model]), config, RESPONSE, tensor_parallel=tp, max_policy_age=1
            )
            assert trainer.world == world and trainer.parallel.tensor_parallel == tp
            assert trainer.sharded == (world > tp)  # FSDP2 over the tensor-parallel groups
            tied = trainer.model.enable_weight_tying
            metrics, grads, checkpoint = [], None, None
            for i, batch in enumerate(batches, start=1):
                metrics.append(train_on(trainer, algo, batch))
                if i == 1:
                    grads = full_grads(trainer)
                if i == SAVE_AFTER:
                    checkpoint = (
                        trainer.hf_state_dict(),
                        trainer.optimizer_state_dict(),
                        trainer.version,
                    )
            previous = previous_version_logprobs(trainer, batches[-1])
            if tied:  # still one Parameter after sharding and training
                assert trainer.model.tok_embeddings.weight is trainer.model.lm_head.weight
            final = trainer.hf_state_dict()  # (the current weights are back)
            if resume_from == "single":
                checkpoint = torch.load(Path(out_dir) / f"{name}-single.pt", weights_only=False)
            resumed = Trainer(
                Path(paths[model]), config, RESPONSE, tensor_parallel=tp, max_policy_age=1
            )
            resumed.load_state(*checkpoint)
            resumed_metrics = run_steps(resumed, algo, batches[SAVE_AFTER:])
            results[name] = {
                "metrics": metrics,
                "grads": grads if rank == 0 else None,
                "checkpoint": checkpoint if rank == 0 else None,
                "final": final,
                "previous": previous,
                "resumed": resumed_metrics,
                "resumed_final": resumed.hf_state_dict(),
                "tied": tied,
            }
        torch.save(results, Path(out_dir) / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def tied_path(tiny_path: Path, tmp_path_factory) -> Path:
    """The tiny model with its LM head tied to the embedding (the checkpoint then stores
    no lm_head.weight, as Qwen3-0.6B's does)."""
    from safetensors.torch import load_file, save_file

    path = tmp_path_factory.mktemp("tiny-tied")
    for f in tiny_path.iterdir():
        if f.is_file() and f.suffix != ".safetensors":
            shutil.copy2(f, path / f.name)
    config = json.loads((tiny_path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**config, "tie_word_embeddings": True}))
    weights = load_file(str(tiny_path / "model.safetensors"))
    del weights["lm_head.weight"]
    save_file(weights, str(path / "model.safetensors"), metadata={"format": "pt"})
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def assert_metrics_close(got: list[dict], want: list[dict]) -> None:
    """Within 1e-4 relative: a batch's second mini-batch starts from weights that already
    carry the rounding differences of the first update (see assert_weights_close), and
    pre-clip gradient norms of ~100 amplify them; a wrong reduction is off by 2x."""
    for g, w in zip(got, want, strict=True):
        assert g.keys() == w.keys()
        assert g["response_tokens"] == w["response_tokens"]
        assert g["loss"] == pytest.approx(w["loss"], rel=1e-4, abs=1e-7)
        assert g["grad_norm"] == pytest.approx(w["grad_norm"], rel=1e-4)
        for k in w:
            assert g[k] == pytest.approx(w[k], rel=1e-4, abs=1e-6), k


def assert_weights_close(got: dict, want: dict) -> None:
    """Within 3e-5 but for a few elements (at most 1 in 10,000 of a tensor), and those
    within 2e-3: AdamW moves each weight by about lr (2e-4) per step whatever the
    gradient's size, so a wrong update (a shard not updated, a wrong gather) is ~1e-4 on
    most elements of a tensor. Where a gradient is near zero, below AdamW's eps (1e-8), its
    rounding noise (which differs between one process and two) moves the step: one weight
    of the tensor-parallel run's k_proj has gradient 6.2e-9 in one process and 4.2e-9 in
    two, and ends 1.7e-5 away; on another CPU one element of the tied embedding (a token
    the model gives almost no probability, so a gradient of rounding noise) ended 6.9e-4
    away."""
    assert got.keys() == want.keys()
    for k in want:
        off = (got[k] - want[k]).abs()
        far = int((off > 3e-5).sum())
        assert far <= max(1, off.numel() // 10_000) and float(off.max()) < 2e-3, (
            f"{k}: {far} of {off.numel()} elements beyond 3e-5, largest {float(off.max()):.3g}"
        )


@pytest.fixture(scope="module")
def one_process(tiny_path: Path, tied_path: Path, tmp_path_factory) -> tuple[dict, dict, Path]:
    """(model paths, each scenario's one-process run, the folder of its step-2 checkpoints)."""
    tmp_path = tmp_path_factory.mktemp("one-process")
    paths = {"tiny": str(tiny_path), "tied": str(tied_path)}
    single = {}
    for name, (model, (algo_name, overrides), rows, micro, _) in SCENARIOS.items():
        algo = get_algorithm(algo_name, **overrides)
        batches = make_batches(rows, seed=len(name))
        trainer = Trainer(Path(paths[model]), trainer_config(micro), RESPONSE, max_policy_age=1)
        assert not trainer.sharded
        metrics = []
        for i, batch in enumerate(batches, start=1):
            metrics.append(train_on(trainer, algo, batch))
            if i == 1:
                grads = full_grads(trainer)
            if i == SAVE_AFTER:
                state = trainer.hf_state_dict(), trainer.optimizer_state_dict(), i
                torch.save(state, tmp_path / f"{name}-single.pt")
        previous = previous_version_logprobs(trainer, batches[-1])
        assert not torch.allclose(previous, trainer.logprobs(batches[-1]), atol=1e-4)
        single[name] = {
            "metrics": metrics,
            "grads": grads,
            "final": trainer.hf_state_dict(),
            "previous": previous,
        }
    return paths, single, tmp_path


@pytest.mark.parametrize(
    "split",
    ["fsdp", "tp", pytest.param("2d", marks=pytest.mark.slow)],  # 2d: 4 processes
)
def test_split_trainers_train_like_one_process(one_process, tmp_path, split: str):
    paths, single, single_dir = one_process
    for f in single_dir.iterdir():
        shutil.copy2(f, tmp_path / f.name)
    world = SPLITS[split][0]
    mp.start_processes(
        worker, args=(free_port(), paths, str(tmp_path), split), nprocs=world, start_method="spawn"
    )
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in range(world)]

    for name, (model, (algo_name, overrides), rows, micro, _) in SCENARIOS.items():
        want, got = single[name], ranks[0][name]
        assert got["tied"] == (model == "tied")
        # FSDP2: gradients are summed over ranks, not averaged: an average would halve
        # these (the first batch's last mini-batch's gradients, as clipped; they follow one
        # update, whose rounding moves a few elements by ~2e-6)
        assert_metrics_close(got["metrics"], want["metrics"])
        for k, g in want["grads"].items():
            torch.testing.assert_close(got["grads"][k], g, atol=1e-5, rtol=1e-4, msg=k)
        assert_weights_close(got["final"], want["final"])
        torch.testing.assert_close(got["previous"], want["previous"], atol=1e-5, rtol=1e-5)
        # every rank reports the whole batch's metrics and holds the same weights
        for other in ranks[1:]:
            assert other[name]["metrics"] == got["metrics"]
            for k, v in got["final"].items():
                assert torch.equal(other[name]["final"][k], v), k
        # resumed runs continue as the uninterrupted one
        assert_metrics_close(got["resumed"], got["metrics"][SAVE_AFTER:])
        assert_weights_close(got["resumed_final"], want["final"])

        # the sharded checkpoint (whole tensors, torch.optim layout) resumes in one process
        hf, optim, version = got["checkpoint"]
        algo = get_algorithm(algo_name, **overrides)
        one = Trainer(Path(paths[model]), trainer_config(micro), RESPONSE, max_policy_age=1)
        one.load_state(hf, optim, version)
        assert one.version == SAVE_AFTER
        later = make_batches(rows, seed=len(name))[SAVE_AFTER:]
        assert_metrics_close(run_steps(one, algo, later), want["metrics"][SAVE_AFTER:])
        assert_weights_close(one.hf_state_dict(), want["final"])
