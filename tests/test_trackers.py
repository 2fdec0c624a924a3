"""``--report-to``: real TensorBoard, W&B (offline) and MLflow (file store) runs of a short
tiny-model run, read back with each library's own reader and compared with metrics.jsonl;
the runs of a compare grouped as one experiment (one MLflow store and experiment, one W&B
group), a resume continuing the same runs, metric names in sections; the flag's
validation and the fail-fast message when a tracker is not installed."""

from __future__ import annotations

import importlib.util
import json
import shutil
import struct
import threading
from pathlib import Path

import pytest
from harness_cli import run_harness

from harness.runner import execute_run
from zoo.core.config import ConfigError
from zoo.run.run_config import RunConfig
from zoo.run.trackers import (
    TRACKERS,
    mlflow_experiment_id,
    numeric_metrics,
    parse_report_to,
    tracker_key,
)

SECTIONS = ("train/", "eval/", "perf/", "regime/")
LR = RunConfig.from_flat().optimizer.lr
"""tracked_run's learning rate: constant, so metrics.jsonl records none; trackers get it."""


def installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def needs(module: str):
    return pytest.mark.skipif(
        not installed(module),
        reason=f"{module} is not installed (pip install -e '.[trackers]'; scripts/setup.sh does)",
    )


def offline(monkeypatch) -> None:
    """W&B never on the network, MLflow at its default store and experiment name."""
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("WANDB_MODE", "offline")
    for name in ("MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME", "WANDB_RUN_GROUP"):
        monkeypatch.delenv(name, raising=False)


def tracked_run(loop_for, out: Path, report_to: str, monkeypatch) -> list[dict]:
    """A 2-step run (evaluations at 0, 1, 2) into ``out`` through execute_run, the code
    path of `harness run`; its metrics.jsonl records."""
    offline(monkeypatch)
    cfg = RunConfig.from_flat(
        algorithm="grpo",
        steps=2,
        prompts_per_step=8,
        eval_every=1,
        seed=5,
        report_to=report_to,
        env_config={"eval_size": 16},
    )
    loop = loop_for(cfg)
    execute_run(cfg, out, loop.s, command="test_trackers")
    return [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]


def test_report_to_takes_several_and_names_the_valid_ones_when_wrong():
    assert parse_report_to("tensorboard, wandb,tensorboard") == ("tensorboard", "wandb")
    assert parse_report_to("") == ()
    with pytest.raises(ConfigError, match="valid: tensorboard, wandb, mlflow"):
        RunConfig.from_flat(report_to="tensorboard,neptune").validate()
    from harness.cli import build_parser

    args = build_parser().parse_args(["run", "grpo", "--report-to", "tensorboard,mlflow"])
    assert args.report_to == "tensorboard,mlflow"
    assert set(TRACKERS) == {"tensorboard", "wandb", "mlflow"}


def test_a_tracker_that_is_not_installed_stops_the_run_before_it_starts(tmp_path):
    result = run_harness(
        "run",
        "grpo",
        "--report-to",
        "tensorboard,mlflow",
        "--out",
        "r",
        cwd=tmp_path,
        without=("mlflow",),
        timeout=300,
    )
    assert result.returncode == 2, result.stderr[-2000:]
    assert "mlflow not installed" in result.stderr
    assert "pip install" in result.stderr and "mlflow-skinny==" in result.stderr
    assert not (tmp_path / "r").exists()


@needs("tensorboard")
def test_tensorboard_gets_every_step_the_config_and_the_eval_points(
    loop_for, tmp_path, monkeypatch
):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    records = tracked_run(loop_for, tmp_path / "run", "tensorboard", monkeypatch)
    acc = EventAccumulator(str(tmp_path / "run" / "tensorboard"), size_guidance={"tensors": 0})
    acc.Reload()
    scalars = set(acc.Tags()["scalars"])
    assert scalars == {k for r in records for k in numeric_metrics(r, LR)}
    assert all(tag.startswith(SECTIONS) for tag in scalars), sorted(scalars)
    for key in ("reward_mean", "loss", "flops", "eval_reward", "eval_pass_at_8"):
        logged = {e.step: e.value for e in acc.Scalars(tracker_key(key))}
        expected = {r["step"]: r[key] for r in records if key in r}
        assert logged == pytest.approx(expected, rel=1e-6), key  # (TensorBoard: float32)
    assert sorted(e.step for e in acc.Scalars("eval/reward")) == [0, 1, 2]
    texts = {t: acc.Tensors(t) for t in acc.Tags()["tensors"]}
    config = texts["config/text_summary"][0].tensor_proto.string_val[0].decode()
    assert '"report_to": "tensorboard"' in config and '"algorithm": "grpo"' in config
    assert any(t.startswith("samples/eval") for t in texts)


def read_wandb_records(path: Path):
    """The protobuf records of a .wandb file: W&B's log format (a 7-byte header, then
    32 KiB blocks of chunks, each with a 7-byte header: CRC-32, length, type), parsed with
    wandb's own Record message."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B", "not a W&B transaction log"
    pos, block, pending = 7, 32768, b""
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:  # a block's tail too short for a header is padding
            pos += left
            continue
        length, kind = struct.unpack("<HB", data[pos + 4 : pos + 7])
        chunk = data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind == 0 and length == 0:
            continue
        pending += chunk
        if kind in (1, 4):  # FULL or LAST: a whole record
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            yield record
            pending = b""


def read_wandb_run(path: Path):
    """(the run record, history by step, config) of an offline W&B run's .wandb file."""
    run = None
    history: dict[int, dict] = {}
    config: dict[str, object] = {}
    for rec in read_wandb_records(path):
        kind = rec.WhichOneof("record_type")
        if kind == "history":
            items = {
                i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in rec.history.item
            }
            history.setdefault(int(items["_step"]), {}).update(items)
        elif kind in ("run", "config"):  # the config comes with the run record
            run = rec.run if kind == "run" else run
            items = rec.run.config.update if kind == "run" else rec.config.update
            config.update({i.key: json.loads(i.value_json) for i in items})
    return run, history, config


@needs("wandb")
def test_wandb_offline_run_holds_every_step_the_config_and_the_eval_points(
    loop_for, tmp_path, monkeypatch
):
    records = tracked_run(loop_for, tmp_path / "run", "wandb", monkeypatch)
    runs = list((tmp_path / "run" / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(runs) == 1, "expected one offline W&B run in the run folder"
    run, history, config = read_wandb_run(runs[0])
    assert (run.run_group, run.display_name) == ("run", "run")  # a lone run: its own group
    assert sorted(history) == [r["step"] for r in records]
    for record in records:
        logged = history[record["step"]]
        for key, value in numeric_metrics(record, LR).items():
            assert logged[key] == pytest.approx(value, rel=1e-12), key
    assert [s for s, h in sorted(history.items()) if "eval/reward" in h] == [0, 1, 2]
    assert config["run"]["report_to"] == "wandb" and config["run"]["algorithm"] == "grpo"
    assert history[2]["samples/_type"] == "table-file"  # the kept samples, as a table
    assert json.loads((tmp_path / "run" / "trackers.json").read_text())["wandb_id"]


@needs("mlflow")
def test_mlflow_file_store_holds_every_step_the_config_and_the_eval_points(
    loop_for, tmp_path, monkeypatch
):
    from mlflow.tracking import MlflowClient

    records = tracked_run(loop_for, tmp_path / "run", "mlflow", monkeypatch)
    run_id = json.loads((tmp_path / "run" / "trackers.json").read_text())["mlflow_run_id"]
    client = MlflowClient(tracking_uri=(tmp_path / "run" / "mlruns").as_uri())
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED" and run.info.run_name == "run"
    assert client.get_experiment(run.info.experiment_id).name == "run"  # a lone run's own
    assert run.data.params["algorithm"] == "grpo" and run.data.params["report_to"] == "mlflow"
    # the algorithm's and env's configs as resolved (not the overrides, {} here), and lr
    params = run.data.params
    assert "algorithm_config" not in params and params["env.eval_size"] == "16"
    assert params["algorithm.eps"] == "0.2" and params["algorithm.beta"] == "0.04"
    assert params["lr"] == str(LR)
    found = client.search_runs([run.info.experiment_id], "params.`algorithm.eps` = '0.2'")
    assert [r.info.run_id for r in found] == [run_id]
    assert set(run.data.metrics) == {k for r in records for k in numeric_metrics(r, LR)}
    lr = {m.step: m.value for m in client.get_metric_history(run_id, "train/lr")}
    assert lr == {1: LR, 2: LR}  # every step that trained (step 0 only evaluates)
    for key in ("reward_mean", "loss", "samples", "eval_reward", "eval_pass_at_1"):
        history = client.get_metric_history(run_id, tracker_key(key))
        logged = {m.step: m.value for m in history}
        assert logged == {r["step"]: pytest.approx(r[key]) for r in records if key in r}, key
    assert sorted(m.step for m in client.get_metric_history(run_id, "eval/reward")) == [0, 1, 2]
    artifacts = Path(client.download_artifacts(run_id, "config.json", str(tmp_path / "dl")))
    assert json.loads(artifacts.read_text())["run"]["report_to"] == "mlflow"
    names = {f.path for f in client.list_artifacts(run_id, "samples")}
    assert names == {f"samples/step-{s:06d}.json" for s in (0, 1, 2)}


def test_every_metric_goes_in_one_of_four_sections():
    """One rule for all trackers: evaluations under eval/ (without their eval_ prefix),
    the training regime under regime/, budget counters and costs under perf/, the rest
    under train/; the metrics.jsonl name is kept otherwise."""
    expected = {
        "eval_reward": "eval/reward",
        "eval_pass_at_8": "eval/pass_at_8",
        "eval_seconds": "eval/seconds",
        "eval_tool_success_rate": "eval/tool_success_rate",
        "updates": "regime/updates",
        "policy_kl": "regime/policy_kl",
        "staleness_kl": "regime/staleness_kl",
        "mismatch_kl": "regime/mismatch_kl",
        "mismatch_logprob_max": "regime/mismatch_logprob_max",
        "is_weight_mean": "regime/is_weight_mean",
        "policy_version": "regime/policy_version",
        "policy_age_mean": "regime/policy_age_mean",
        "stale_dropped": "regime/stale_dropped",
        "samples": "perf/samples",
        "flops": "perf/flops",
        "seconds": "perf/seconds",
        "generate_seconds": "perf/generate_seconds",
        "train_flops": "perf/train_flops",
        "old_logprobs_tokens": "perf/old_logprobs_tokens",
        "generate_tokens_per_s": "perf/generate_tokens_per_s",
        "trainer_idle_seconds": "perf/trainer_idle_seconds",
        "reward_mean": "train/reward_mean",
        "loss": "train/loss",
        "kl": "train/kl",
        "clip_high_acting_frac": "train/clip_high_acting_frac",
        "grad_norm": "train/grad_norm",
        "response_tokens": "train/response_tokens",
        "response_len_mean": "train/response_len_mean",
        "turns_mean": "train/turns_mean",
    }
    assert {k: tracker_key(k) for k in expected} == expected
    record = {"step": 3, "loss": 1, "kept": True, "note": "x"}
    assert numeric_metrics(record) == {"train/loss": 1.0, "train/kept": 1.0}


@needs("mlflow")
def test_runs_that_start_at_once_share_one_mlflow_experiment(tmp_path, monkeypatch):
    """A file store checks that a name is free, then creates it: the runs of `compare
    --jobs` starting together would each make an experiment of the same name without the
    store's lock."""
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    uri = (tmp_path / "mlruns").as_uri()
    start = threading.Barrier(8)
    ids: list[str] = []

    def one() -> None:
        client = MlflowClient(tracking_uri=uri)
        start.wait()
        ids.append(mlflow_experiment_id(client, "exp", uri))

    threads = [threading.Thread(target=one) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    named = [e for e in MlflowClient(tracking_uri=uri).search_experiments() if e.name == "exp"]
    assert len(named) == 1 and set(ids) == {named[0].experiment_id}


@pytest.fixture(scope="module")
def tracked_compare(tiny_model_path, tmp_path_factory) -> Path:
    """`harness compare` of two tiny 2-step runs with all three trackers (W&B offline,
    MLflow at its default store); the experiment folder."""
    root = tmp_path_factory.mktemp("tracked")
    env = {
        "WANDB_MODE": "offline",
        "WANDB_API_KEY": "",
        "MLFLOW_TRACKING_URI": "",
        "MLFLOW_EXPERIMENT_NAME": "",
        "WANDB_RUN_GROUP": "",
    }
    result = run_harness(
        "compare",
        "grpo",
        "--seeds",
        "2",
        "--steps",
        "2",
        "--eval-every",
        "2",
        "--prompts-per-step",
        "8",
        "--eval-samples",
        "0",
        "--env-set",
        "eval_size=16",
        "--checkpoint-every",
        "0",
        "--quiet",
        "--report-to",
        ",".join(TRACKERS),
        "--out",
        "exp",
        cwd=root,
        env=env,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    # no W&B line on the terminal (its Weave advert appears when vLLM has imported openai)
    assert "wandb:" not in result.stdout + result.stderr, result.stderr[-3000:]
    return root / "exp"


RUNS = ("grpo__arithmetic__seed0", "grpo__arithmetic__seed1")


@pytest.mark.skipif(
    not all(map(installed, ("mlflow", "wandb", "tensorboard"))),
    reason="needs all three trackers (pip install -e '.[trackers]')",
)
def test_a_compares_runs_are_one_experiment_in_every_tracker(tracked_compare, monkeypatch):
    from mlflow.tracking import MlflowClient
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # as for `mlflow ui` on the store
    exp = tracked_compare
    assert [p.name for p in exp.glob("**/mlruns")] == ["mlruns"]  # one store, not one per run
    client = MlflowClient(tracking_uri=(exp / "mlruns").as_uri())
    experiment = client.get_experiment_by_name("exp")
    assert [e.name for e in client.search_experiments()] == ["exp", "Default"]
    runs = client.search_runs([experiment.experiment_id])
    assert sorted(r.info.run_name for r in runs) == list(RUNS)
    for run in runs:
        assert run.info.status == "FINISHED"
        assert run.data.tags["forge_zoo.experiment"] == "exp"
        lines = (exp / "runs" / run.info.run_name / "metrics.jsonl").read_text().splitlines()
        assert run.data.metrics["eval/reward"] == json.loads(lines[-1])["eval_reward"]
    for name in RUNS:
        (wandb_file,) = (exp / "runs" / name / "wandb").glob("offline-run-*/run-*.wandb")
        run, history, _ = read_wandb_run(wandb_file)
        assert (run.run_group, run.display_name) == ("exp", f"exp/{name}")
        assert all(k.startswith((*SECTIONS, "_", "samples")) for h in history.values() for k in h)
        acc = EventAccumulator(str(exp / "runs" / name / "tensorboard"))
        acc.Reload()
        tags = acc.Tags()["scalars"]
        assert {t.split("/")[0] for t in tags} == {"train", "eval", "perf", "regime"}


@needs("mlflow")
@needs("wandb")
def test_a_resumed_run_continues_its_trackers_runs(loop_for, tmp_path, monkeypatch):
    """Killed after step 2 (checkpoint at 1), the experiment folder moved, resumed with
    another MLFLOW_TRACKING_URI set: the same MLflow run in the same store and experiment,
    the same W&B run, every step there (the re-done ones twice in MLflow)."""
    from mlflow.tracking import MlflowClient

    offline(monkeypatch)
    cfg = RunConfig.from_flat(
        algorithm="grpo",
        steps=3,
        prompts_per_step=8,
        eval_every=3,
        seed=5,
        checkpoint_every=1,
        eval_samples=0,
        report_to="mlflow,wandb",
        env_config={"eval_size": 16},
    )

    class Killed(Exception):
        pass

    def kill_at_2(record: dict) -> None:
        if record["step"] == 2:
            raise Killed

    first = tmp_path / "first"
    with pytest.raises(Killed):
        execute_run(
            cfg,
            first / "runs" / "r",
            loop_for(cfg).s,
            command="test",
            on_record=kill_at_2,
            experiment=first,
        )
    state = json.loads((first / "runs" / "r" / "trackers.json").read_text())
    assert state["experiment"] == "first" and state["mlflow_store"] == "../../mlruns"
    shutil.move(first, tmp_path / "moved")
    out = tmp_path / "moved" / "runs" / "r"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", (tmp_path / "elsewhere").as_uri())
    execute_run(cfg, out, loop_for(cfg).s, command="test", resume=True)  # alone, as `run`

    assert json.loads((out / "trackers.json").read_text()) == state
    assert not (tmp_path / "elsewhere").exists() and not (out / "mlruns").exists()
    client = MlflowClient(tracking_uri=(tmp_path / "moved" / "mlruns").as_uri())
    (run,) = client.search_runs([client.get_experiment_by_name("first").experiment_id])
    assert run.info.run_id == state["mlflow_run_id"] and run.info.status == "FINISHED"
    steps = [m.step for m in client.get_metric_history(run.info.run_id, "train/loss")]
    assert sorted(steps) == [1, 2, 2, 3]
    wandb_runs = list((out / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(wandb_runs) == 2 and all(state["wandb_id"] in str(p) for p in wandb_runs)
    resumed = max(wandb_runs, key=lambda p: p.stat().st_mtime)
    run, history, _ = read_wandb_run(resumed)
    assert (run.run_group, run.display_name) == ("first", "first/r") and sorted(history) == [2, 3]
