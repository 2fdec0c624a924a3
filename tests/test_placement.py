"""The Monarch placement: generator, trainer and reference model in their own processes
as Monarch actors, driven by the same loop. Synchronous mode must give the same numbers
as the local placement, and a dead service process must stop the run with a clear error,
its metrics and a checkpoint it can resume from."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
from harness_cli import REPO, run_harness
from safetensors.torch import load_file

from harness.runner import execute_run, read_metrics
from zoo.core.config import ConfigError
from zoo.models.parallelism import check_tensor_parallel
from zoo.models.presets import ModelShape
from zoo.placement.calls import ServiceFailure
from zoo.placement.config import PlacementConfig
from zoo.run.loop import RLLoop
from zoo.run.run_config import RunConfig
from zoo.run.runlog import is_timing_key
from zoo.run.wiring import build_services


def numbers(records: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if not is_timing_key(k)} for r in records]


def cli_run(tmp_path: Path, placement: str) -> Path:
    out = tmp_path / placement
    result = run_harness(
        "run",
        "grpo",
        "--steps",
        "3",
        "--prompts-per-step",
        "32",
        "--eval-every",
        "2",
        "--checkpoint-every",
        "1",
        "--placement",
        placement,
        "--quiet",
        "--out",
        str(out),
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    return out


@pytest.mark.slow
@pytest.mark.extra  # CI keeps the golden metrics of a Monarch run (test_golden_metrics)
def test_monarch_placement_gives_the_local_placements_numbers(tmp_path, tiny_model_path):
    """GRPO (beta > 0, so the reference runs too), 3 steps, through the CLI."""
    local, remote = cli_run(tmp_path, "local"), cli_run(tmp_path, "monarch")
    assert json.loads((remote / "config.json").read_text())["run"]["placement"] == "monarch"
    ours, theirs = read_metrics(local), read_metrics(remote)
    assert [r["step"] for r in ours] == [0, 1, 2, 3]
    assert numbers(ours) == numbers(theirs)
    # the checkpoint written through the trainer actor holds the same weights
    a = load_file(str(local / "checkpoint" / "model.safetensors"))
    b = load_file(str(remote / "checkpoint" / "model.safetensors"))
    assert sorted(a) == sorted(b) and all(a[k].equal(b[k]) for k in a)


@pytest.mark.slow
@pytest.mark.extra  # CI keeps a killed trainer (test_faults) and a killed save
def test_a_killed_generator_stops_the_run_and_the_run_resumes(tmp_path, tiny_model_path):
    """(With the endpoint weight sync; the other tests use the default, RDMA.)"""
    cfg = RunConfig.from_flat(
        algorithm="dapo",
        steps=3,
        prompts_per_step=16,
        eval_every=2,
        checkpoint_every=1,
        placement="monarch",
        device="cpu",
        weight_sync="endpoint",
    )
    out = tmp_path / "run"
    services = build_services(cfg, quiet=True)
    pid = services.generator.actors[0].pid.call_one().get()

    def kill_after_step_one(record: dict) -> None:
        if record["step"] == 1:
            os.kill(pid, signal.SIGKILL)

    try:
        with pytest.raises(ServiceFailure, match=r"generator service failed.*--resume"):
            execute_run(cfg, out, services, command="test", on_record=kill_after_step_one)
    finally:
        services.close()
    assert [r["step"] for r in read_metrics(out)] == [0, 1]  # nothing lost, nothing partial
    resumed = build_services(cfg, quiet=True)
    try:
        history = execute_run(cfg, out, resumed, command="test", resume=True)
    finally:
        resumed.close()
    local = build_services(cfg.replace(placement="local"), quiet=True)
    uninterrupted = execute_run(
        cfg.replace(placement="local"), tmp_path / "local", local, command="test"
    )
    assert numbers(history) == numbers(uninterrupted)


@pytest.mark.slow
@pytest.mark.parametrize(
    "stage",
    # CI keeps one kill point; scripts/check-all.sh runs both
    [pytest.param("state written", marks=pytest.mark.extra), "link switched"],
)
def test_a_save_killed_on_monarch_resumes_to_the_uninterrupted_numbers(
    stage, tmp_path, monkeypatch
):
    """The trainer runs in its own process; the loop fetches its weights and writes every
    part of the checkpoint (zoo/run/checkpoint.py). A save killed before and after the
    checkpoint becomes current resumes to the numbers of an uninterrupted local run."""
    from zoo.run import checkpoint

    cfg = RunConfig.from_flat(
        steps=3,
        prompts_per_step=8,
        eval_every=3,
        checkpoint_every=1,
        placement="monarch",
        device="cpu",
        eval_samples=0,
        env_config={"eval_size": 50},
    )
    out, seen = tmp_path / "run", []

    def kill_in_second_save(s: str) -> None:
        seen.append(s)
        if s == stage and seen.count(stage) == 2:
            raise KeyboardInterrupt(stage)  # like a kill: nothing catches it

    monkeypatch.setattr(checkpoint, "reached", kill_in_second_save)
    services = build_services(cfg, quiet=True)
    try:
        with pytest.raises(KeyboardInterrupt):
            execute_run(cfg, out, services, command="test")
    finally:
        services.close()
    monkeypatch.setattr(checkpoint, "reached", lambda s: None)
    resumed = build_services(cfg, quiet=True)
    try:
        history = execute_run(cfg, out, resumed, command="test", resume=True)
    finally:
        resumed.close()
    local_cfg = cfg.replace(placement="local")
    local = build_services(local_cfg, quiet=True)
    try:
        uninterrupted = execute_run(local_cfg, tmp_path / "local", local, command="test")
    finally:
        local.close()
    assert numbers(history) == numbers(uninterrupted)
    assert checkpoint.checkpoint_step(out / "checkpoint") == 3


@pytest.mark.slow  # ~25 s: a Monarch run and a local one
def test_an_evaluation_overlapped_with_training_gives_the_same_numbers(tmp_path, monkeypatch):
    """eval_overlap on: step k's evaluation runs on the generator while the trainer
    trains step k+1, its record written after. Metrics and kept samples match a local
    run's (which evaluates in place); the evaluations of the checkpoint's step (3) and the
    last step (4) run in place, so steps 1 and 2 are the ones sent, during steps 2 and 3."""
    from zoo.run.runlog import read_samples

    cfg = RunConfig.from_flat(
        steps=4,
        prompts_per_step=16,
        eval_every=1,
        checkpoint_every=3,
        eval_samples=2,
        sampled_eval_points=0,
        device="cpu",
        env_config={"eval_size": 50},
    )
    sent: list[int] = []  # the step whose weights each evaluation sent during training had
    send = RLLoop._submit_eval

    def recorded_send(loop: RLLoop, sampled: bool):
        sent.append(loop.step_index)
        return send(loop, sampled)

    monkeypatch.setattr(RLLoop, "_submit_eval", recorded_send)
    runs = {}
    for placement, overlap in (("local", "off"), ("monarch", "on")):
        run_cfg = cfg.replace(placement=placement, eval_overlap=overlap)
        services = build_services(run_cfg, quiet=True)
        try:
            execute_run(run_cfg, tmp_path / placement, services, command="test")
        finally:
            services.close()
        runs[placement] = tmp_path / placement
    assert sent == [1, 2]
    local, remote = read_metrics(runs["local"]), read_metrics(runs["monarch"])
    assert [r["step"] for r in remote] == [0, 1, 2, 3, 4]
    assert all("eval_pass_at_1" in r for r in remote)
    assert numbers(local) == numbers(remote)
    rows = read_samples(runs["monarch"])
    assert rows == read_samples(runs["local"])
    assert all(r["policy_version"] == r["step"] for r in rows if r["kind"] == "eval")


def parent_pid(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


@pytest.mark.slow  # ~70 s: two stand-in hosts, six actor processes, two restarts
def test_replicas_on_two_hosts_survive_killed_replicas_with_unchanged_numbers(
    tmp_path, tiny_model_path, two_hosts
):
    """A placement file with two hosts (local workers standing in), two generator replicas
    and two scorer replicas, one of each per host. A call's prompts are split across the
    replicas and each prompt carries its own sampler seed, so the samples equal one
    engine's. A generator replica's process is killed after step 1, a scorer's after step
    2; the run replaces them, re-sends the lost requests and ends with exactly the local
    placement's numbers."""
    addresses, worker_pids = two_hosts
    config = tmp_path / "distributed.yaml"
    config.write_text(
        "services:\n  generator: {procs: 1, num_replicas: 2, on_failure: replace}\n"
        "  scorer: {procs: 1, num_replicas: 2, on_failure: replace}\n"
        f"hosts: [{', '.join(addresses)}]\n"
    )
    cfg = RunConfig.from_flat(
        algorithm="dapo", steps=3, prompts_per_step=16, eval_every=2, device="cpu"
    )
    local = build_services(cfg, quiet=True)
    expected = execute_run(cfg, tmp_path / "local", local, command="test")
    remote_cfg = cfg.replace(
        placement="monarch", distributed=PlacementConfig.from_yaml(config).to_dict()
    )
    remote = build_services(remote_cfg, quiet=True)
    pids = [a.pid.call_one().get() for a in remote.generator.actors]
    scorers = [a.pid.call_one().get() for a in remote.scorer.replicas.actors]
    # replica i runs on host (1 + i) mod 2: its process is a child of that host's worker
    assert [parent_pid(p) for p in pids] == [worker_pids[1], worker_pids[0]]
    assert [parent_pid(p) for p in scorers] == [worker_pids[1], worker_pids[0]]

    def kill_after_step_one(record: dict) -> None:
        if record["step"] == 1:
            os.kill(pids[1], signal.SIGKILL)
        if record["step"] == 2:
            os.kill(scorers[0], signal.SIGKILL)

    try:
        history = execute_run(
            remote_cfg, tmp_path / "remote", remote, command="test", on_record=kill_after_step_one
        )
        assert remote.generator.replacements == remote.scorer.replicas.replacements == 1
    finally:
        remote.close()
    assert numbers(history) == numbers(expected)
    recorded = json.loads((tmp_path / "remote" / "config.json").read_text())["run"]
    assert recorded["distributed"]["hosts"] == addresses


@pytest.mark.slow  # ~24 s: a Monarch run of 5 async steps
def test_async_mode_overlaps_and_respects_max_policy_age(tmp_path, tiny_model_path):
    """Batches are requested max_policy_age steps ahead: from the first step that can
    have them, samples are exactly that many versions old, never older; none is dropped.
    The trainer computes the old log-probs with the weights that sampled each batch (kept
    for max_policy_age versions), so the staleness shows in the first update's ratio and
    the sampler-trainer mismatch stays at float-rounding size (with TIS reporting its
    weights; every correction is run in the slow set, below)."""
    out = tmp_path / "async"
    result = run_harness(
        "run",
        "grpo",
        "--steps",
        "5",
        "--prompts-per-step",
        "32",
        "--eval-every",
        "5",
        "--placement",
        "monarch",
        "--mode",
        "async",
        "--max-policy-age",
        "2",
        "--correction",
        "tis",
        "--quiet",
        "--out",
        str(out),
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    records = read_metrics(out)[1:]
    assert [r["policy_age_max"] for r in records] == [0, 1, 2, 2, 2]
    assert [r["policy_age_mean"] for r in records] == [0, 1, 2, 2, 2]
    assert all(r["stale_dropped"] == 0 for r in records)
    # from step 2 on the first update's ratio is already away from 1 (older weights)
    assert records[0]["staleness_kl"] < 1e-9
    assert all(r["staleness_kl"] > 1e-7 for r in records[1:]), [r["staleness_kl"] for r in records]
    assert all(r["mismatch_logprob_max"] < 1e-3 for r in records)
    # TIS against the sampler: weights of ~1, none truncated at equal weights
    assert all(abs(r["is_weight_mean"] - 1) < 1e-3 and r["is_truncated_frac"] == 0 for r in records)
    run = json.loads((out / "config.json").read_text())["run"]
    assert (run["mode"], run["max_policy_age"]) == ("async", 2)


def test_samples_older_than_max_policy_age_are_dropped_and_counted(tiny_model_path):
    cfg = RunConfig.from_flat(prompts_per_step=4, max_policy_age=2, device="cpu", generator="hf")
    loop = RLLoop(cfg, build_services(cfg, quiet=True))
    loop.version = 3  # as if the trainer had stepped 3 times since these weights (version 0)
    prompts, groups = loop.sample_groups(4)
    assert (prompts, groups, loop.stale_dropped) == ([], [], 4 * cfg.sampling.group_size)
    loop.version = 2
    prompts, groups = loop.sample_groups(4)
    assert len(groups) == 4 and loop.policy_ages == [2] * 4 * cfg.sampling.group_size


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "parallelism: {data_parallel_shard_degree: 2}\nservices: {trainer: {procs: 4}}",
            r"multiply to 2 \(.*\) but services.trainer.procs is 4",
        ),
        ("services: {generator: {with_gpus: true}}", "ask for 1 GPU.* sees 0"),
        ("services: {trainer: {prcs: 2}}", "unknown key in services.trainer 'prcs'; valid: procs"),
        ("services: {trainer: {procs: '2'}}", "services.trainer.procs must be int"),
        (
            "parallelism: {tensor_parallel_degree: 2, data_parallel_shard_degree: 2}\n"
            "services: {trainer: {procs: 2}}",
            r"multiply to 4 \(tensor 2 x pipeline 1 x data",
        ),
        (
            "parallelism: {pipeline_parallel_degree: 2}\nservices: {trainer: {procs: 2}}",
            "pipeline parallelism is not implemented",
        ),
        ("services: {learner: {}}", "unknown service 'learner'; valid: generator, trainer"),
        ("services: {trainer: {on_failure: replace}}", "only generator and scorer replicas"),
        ("services: [1, 2]", "services must be a mapping"),
    ],
)
def test_placement_files_are_checked_with_clear_errors(tmp_path, text, message):
    path = tmp_path / "distributed.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        PlacementConfig.from_yaml(path, gpus_available=0)


def test_a_bad_placement_file_is_quoted_in_excerpts_never_echoed(tmp_path):
    # A file that is not YAML keys (here shaped like /etc/passwd) is not printed back.
    path = tmp_path / "passwd"
    path.write_text("root:x:0:0:root:/root:/bin/bash\nsecret-user:x:1000:1000::/home/s:/bin/sh\n")
    with pytest.raises(ConfigError, match=r"mapping of keys, got \d+ characters of text") as info:
        PlacementConfig.from_yaml(path, gpus_available=0)
    assert "root:x" not in str(info.value) and "secret-user" not in str(info.value)
    path.write_text("services:\n  trainer: {procs: " + "9" * 5000 + "x}\n")
    with pytest.raises(ConfigError) as info:
        PlacementConfig.from_yaml(path, gpus_available=0)
    assert len(str(info.value)) < 300


def test_a_placement_file_fills_the_defaults_and_round_trips(tmp_path):
    path = tmp_path / "distributed.yaml"
    path.write_text("model: tiny\nservices:\n  trainer: {procs: 2}\n")
    layout = PlacementConfig.from_yaml(path, gpus_available=0)
    assert layout.parallelism.data_parallel_shard_degree == 2  # -1: all trainer processes
    assert PlacementConfig.from_dict(layout.to_dict(), gpus_available=0) == layout
    with pytest.raises(ConfigError, match="needs --placement monarch"):
        RunConfig.from_flat(distributed=layout.to_dict()).validate()
    with pytest.raises(ConfigError, match="needs --placement monarch"):
        RunConfig.from_flat(mode="async").validate()
    for procs, data_shards in ((2, 1), (4, 2)):  # -1: the processes over the tensor degree
        path.write_text(
            f"parallelism: {{tensor_parallel_degree: 2}}\nservices: {{trainer: {{procs: {procs}}}}}"
        )
        layout = PlacementConfig.from_yaml(path, gpus_available=0)
        assert layout.parallelism.data_parallel_shard_degree == data_shards


def test_a_tensor_parallel_degree_must_divide_what_it_splits(tiny_model_path):
    shape = ModelShape.from_hf_dir(tiny_model_path)  # 4 heads, 2 KV heads
    check_tensor_parallel(shape, 2)
    with pytest.raises(ConfigError, match="does not divide the model's num_attention_heads"):
        check_tensor_parallel(shape, 3)
    with pytest.raises(ConfigError, match=r"services\.generator\.procs 3 does not divide"):
        check_tensor_parallel(shape, 3, "services.generator.procs")
    qwen3_1_7b = ModelShape(28, 2048, 16, 8, 128, 6144, 151936, tied_embeddings=True)
    check_tensor_parallel(qwen3_1_7b, 8)
    with pytest.raises(ConfigError, match="num_key_value_heads"):
        check_tensor_parallel(qwen3_1_7b, 16)


@pytest.mark.slow
def test_async_mode_trains_the_tiny_model(tmp_path, tiny_model_path):
    """Measured (seed 0, 128 prompts x 8, max_policy_age 1): held-out 0.274 -> 0.362 at
    step 20, 0.410 at 40, 0.452 at 60; sync GRPO gains +20..31 points by step 100."""
    out = tmp_path / "async"
    result = run_harness(
        "run",
        "grpo",
        "--steps",
        "40",
        "--eval-every",
        "40",
        "--placement",
        "monarch",
        "--mode",
        "async",
        "--quiet",
        "--out",
        str(out),
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    records = read_metrics(out)
    start, end = records[0]["eval_reward"], records[-1]["eval_reward"]
    assert end - start >= 0.08, f"held-out accuracy {start:.3f} -> {end:.3f}"
    assert max(r.get("policy_age_max", 0) for r in records) == 1


def local_run_and_placed_config(
    tmp_path: Path, placement: str, generator: str = "by_size"
) -> tuple[list[dict], RunConfig]:
    """A 3-step run with the local placement (its metrics), and the same run's config
    under the placement file ``placement`` (YAML text)."""
    config = tmp_path / "placement.yaml"
    config.write_text(placement)
    cfg = RunConfig.from_flat(
        steps=3, prompts_per_step=32, eval_every=3, device="cpu", generator=generator
    )
    expected = execute_run(cfg, tmp_path / "local", build_services(cfg, quiet=True), command="test")
    placed = cfg.replace(
        placement="monarch", distributed=PlacementConfig.from_yaml(config).to_dict()
    )
    return expected, placed


@pytest.mark.slow
@pytest.mark.parametrize(
    "degree",
    # CI keeps FSDP on Monarch; tensor parallelism itself is in test_fsdp (default set)
    ["data_parallel_shard_degree", pytest.param("tensor_parallel_degree", marks=pytest.mark.extra)],
)
def test_two_trainer_processes_give_the_one_process_losses(tmp_path, tiny_model_path, degree):
    """A placement file with services.trainer.procs 2: the trainer is split over two
    Monarch processes (gloo), by FSDP2 (each trains on half of every batch) or by tensor
    parallelism (each holds half of every weight matrix). The loss sequence equals the
    local placement's to float rounding (tests/test_fsdp.py checks the split trainer
    itself in depth)."""
    expected, sharded_cfg = local_run_and_placed_config(
        tmp_path, f"parallelism: {{{degree}: 2}}\nservices:\n  trainer: {{procs: 2}}\n"
    )
    sharded = build_services(sharded_cfg, quiet=True)
    shards = list(sharded.trainer.actors.shard.call().get().values())
    whole = sum(p.numel() for p in load_file(str(tiny_model_path / "model.safetensors")).values())
    assert [(s["rank"], s["world"]) for s in shards] == [(0, 2), (1, 2)]
    # halves, not two copies (tensor parallelism keeps the norms, 0.2%, whole on both)
    assert sum(s["local_params"] for s in shards) <= 1.01 * whole
    assert all(s["local_params"] < 0.6 * whole for s in shards)
    try:
        history = execute_run(sharded_cfg, tmp_path / "split", sharded, command="test")
    finally:
        sharded.close()
    # The loss is a small residue (~3e-4) of per-token terms of size ~1 whose group
    # advantages cancel, so it is compared in absolute terms: 1e-5 is float32 rounding over
    # the batch's tokens (on one CPU tensor parallelism gave 2.7379e-4 against 2.7179e-4);
    # a wrong reduction moves the gradient norm, compared relatively.
    for ours, theirs in zip(history[1:], expected[1:], strict=True):
        assert ours["loss"] == pytest.approx(theirs["loss"], rel=0, abs=1e-5)
        assert ours["grad_norm"] == pytest.approx(theirs["grad_norm"], rel=1e-4)
        assert ours["kept_groups"] == theirs["kept_groups"] == 32


@pytest.mark.slow
def test_a_tensor_parallel_generator_gives_the_one_process_run(tmp_path, tiny_model_path):
    """services.generator.procs 2: the generator actor's vLLM engine runs tensor-parallel
    over two worker processes it starts itself, and takes RDMA weight updates. Samples
    (hence rewards) are the local placement's, losses equal to float rounding."""
    expected, split_cfg = local_run_and_placed_config(
        tmp_path, "services:\n  generator: {procs: 2}\n", generator="vllm"
    )
    services = build_services(split_cfg, quiet=True)
    try:
        history = execute_run(split_cfg, tmp_path / "split", services, command="test")
    finally:
        services.close()
    assert [r["eval_reward"] for r in (history[0], history[-1])] == [
        r["eval_reward"] for r in (expected[0], expected[-1])
    ]
    for ours, theirs in zip(history[1:], expected[1:], strict=True):
        assert ours["reward_mean"] == theirs["reward_mean"]
        assert ours["loss"] == pytest.approx(theirs["loss"], rel=1e-4, abs=1e-7)


def test_the_example_placement_files_are_valid():
    layout = PlacementConfig.from_yaml(REPO / "configs" / "distributed.yaml", gpus_available=0)
    assert (layout.trainer.procs, layout.generator.num_replicas, layout.scorer.procs) == (2, 2, 1)
    layout = PlacementConfig.from_yaml(REPO / "configs" / "tensor_parallel.yaml", gpus_available=0)
    assert (layout.trainer.procs, layout.parallelism.tensor_parallel_degree) == (2, 2)


@pytest.mark.slow
@pytest.mark.extra  # CI keeps async training and its corrections; check-all.sh adds determinism
def test_async_runs_with_the_same_seed_give_the_same_numbers(tmp_path, tiny_model_path):
    """Which weights sample which batch is fixed by message order (requests ahead of the
    weight update behind them), not by timing, so async runs reproduce."""
    runs = []
    for name in ("a", "b"):
        result = run_harness(
            "run",
            "grpo",
            "--steps",
            "4",
            "--prompts-per-step",
            "32",
            "--eval-every",
            "2",
            "--placement",
            "monarch",
            "--mode",
            "async",
            "--max-policy-age",
            "2",
            "--quiet",
            "--out",
            str(tmp_path / name),
            cwd=tmp_path,
        )
        assert result.returncode == 0, result.stderr[-3000:]
        runs.append(numbers(read_metrics(tmp_path / name)))
    assert runs[0] == runs[1]
    assert runs[0][3]["policy_age_max"] == 2 and runs[0][3]["loss"] != runs[0][4]["loss"]


CORRECTION_METRICS = {
    "none": set(),
    "bypass": set(),
    "tis": {"is_weight_mean", "is_truncated_frac"},
    "mis-token": {"is_masked_frac"},
    "mis-sequence": {"is_masked_frac"},
}


@pytest.mark.slow
@pytest.mark.parametrize(
    "correction",
    # CI keeps tis (a correction that reweights); scripts/check-all.sh runs every one
    [c if c == "tis" else pytest.param(c, marks=pytest.mark.extra) for c in CORRECTION_METRICS],
)
def test_async_comparison_with_each_correction_reports_staleness_and_mismatch(
    tmp_path, tiny_model_path, correction
):
    """An async comparison (batches one version old) with a correction: every step logs
    the mismatch, the staleness and the correction's own metrics, and the report's
    training-regime table carries them."""
    import pandas as pd

    result = run_harness(
        "compare",
        "grpo",
        "--seeds",
        "1",
        "--budget",
        "4e10",
        "--eval-points",
        "2",
        "--prompts-per-step",
        "16",
        "--placement",
        "monarch",
        "--mode",
        "async",
        "--correction",
        correction,
        "--quiet",
        "--out",
        "exp",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    records = read_metrics(tmp_path / "exp" / "runs" / "grpo__arithmetic__seed0")[1:]
    assert len(records) >= 3
    wanted = {"mismatch_logprob_mean", "mismatch_logprob_max", "mismatch_kl", "staleness_kl"}
    assert all(wanted | CORRECTION_METRICS[correction] <= set(r) for r in records)
    assert all(r["policy_age_max"] == 1 and r["staleness_kl"] > 1e-7 for r in records[1:])
    table = pd.read_csv(tmp_path / "exp" / "tables" / "off_policy.csv")
    assert f"correction {correction}" in table["regime"][0]
    assert wanted | CORRECTION_METRICS[correction] <= set(table.columns)
    assert "Training regime" in (tmp_path / "exp" / "report.md").read_text()
