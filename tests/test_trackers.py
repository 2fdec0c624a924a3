"""``--report-to``: real TensorBoard, W&B (offline) and MLflow (file store) runs of a short
tiny-model run, read back with each library's own reader and compared with metrics.jsonl;
the flag's validation and the fail-fast message when a tracker is not installed."""

from __future__ import annotations

import importlib.util
import json
import struct
from pathlib import Path

import pytest
from harness_cli import run_harness

from harness.runner import execute_run
from zoo.core.config import ConfigError
from zoo.run.run_config import RunConfig
from zoo.run.trackers import TRACKERS, numeric_metrics, parse_report_to


def installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def needs(module: str):
    return pytest.mark.skipif(
        not installed(module),
        reason=f"{module} is not installed (pip install -e '.[trackers]'; scripts/setup.sh does)",
    )


def tracked_run(loop_for, out: Path, report_to: str, monkeypatch) -> list[dict]:
    """A 2-step run (evaluations at 0, 1, 2) into ``out`` through execute_run, the code
    path of `harness run`; its metrics.jsonl records."""
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("WANDB_MODE", "offline")  # never the network
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    cfg = RunConfig(algorithm="grpo", steps=2, prompts_per_step=8, eval_every=1, seed=5,
                    report_to=report_to, env_config={"eval_size": 16})  # fmt: skip
    loop = loop_for(cfg)
    execute_run(cfg, out, loop.s, command="test_trackers")
    return [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]


def test_report_to_takes_several_and_names_the_valid_ones_when_wrong():
    assert parse_report_to("tensorboard, wandb,tensorboard") == ("tensorboard", "wandb")
    assert parse_report_to("") == ()
    with pytest.raises(ConfigError, match="valid: tensorboard, wandb, mlflow"):
        RunConfig(report_to="tensorboard,neptune").validate()
    from harness.cli import build_parser

    args = build_parser().parse_args(["run", "grpo", "--report-to", "tensorboard,mlflow"])
    assert args.report_to == "tensorboard,mlflow"
    assert set(TRACKERS) == {"tensorboard", "wandb", "mlflow"}


def test_a_tracker_that_is_not_installed_stops_the_run_before_it_starts(tmp_path):
    result = run_harness("run", "grpo", "--report-to", "tensorboard,mlflow", "--out", "r",
                         cwd=tmp_path, without=("mlflow",), timeout=300)  # fmt: skip
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
    for record in records:
        for key in numeric_metrics(record):
            assert key in scalars, key
    for key in ("reward_mean", "loss", "flops", "eval_reward", "eval_pass_at_8"):
        logged = {e.step: e.value for e in acc.Scalars(key)}
        expected = {r["step"]: r[key] for r in records if key in r}
        assert logged == pytest.approx(expected, rel=1e-6), key  # (TensorBoard: float32)
    assert sorted(e.step for e in acc.Scalars("eval_reward")) == [0, 1, 2]
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


@needs("wandb")
def test_wandb_offline_run_holds_every_step_the_config_and_the_eval_points(
    loop_for, tmp_path, monkeypatch
):
    records = tracked_run(loop_for, tmp_path / "run", "wandb", monkeypatch)
    runs = list((tmp_path / "run" / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(runs) == 1, "expected one offline W&B run in the run folder"
    history: dict[int, dict] = {}
    config: dict[str, object] = {}
    for rec in read_wandb_records(runs[0]):
        kind = rec.WhichOneof("record_type")
        if kind == "history":
            items = {i.key or "/".join(i.nested_key): json.loads(i.value_json)
                     for i in rec.history.item}  # fmt: skip
            history.setdefault(int(items["_step"]), {}).update(items)
        elif kind in ("run", "config"):  # the config comes with the run record
            items = rec.run.config.update if kind == "run" else rec.config.update
            config.update({i.key: json.loads(i.value_json) for i in items})
    assert sorted(history) == [r["step"] for r in records]
    for record in records:
        logged = history[record["step"]]
        for key, value in numeric_metrics(record).items():
            assert logged[key] == pytest.approx(value, rel=1e-12), key
    assert [s for s, h in sorted(history.items()) if "eval_reward" in h] == [0, 1, 2]
    assert config["run"]["report_to"] == "wandb" and config["run"]["algorithm"] == "grpo"
    assert "samples" in history[2]  # the kept samples, as a table
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
    assert run.data.params["algorithm"] == "grpo" and run.data.params["report_to"] == "mlflow"
    for key in ("reward_mean", "loss", "samples", "eval_reward", "eval_pass_at_1"):
        logged = {m.step: m.value for m in client.get_metric_history(run_id, key)}
        assert logged == {r["step"]: pytest.approx(r[key]) for r in records if key in r}, key
    assert sorted(m.step for m in client.get_metric_history(run_id, "eval_reward")) == [0, 1, 2]
    artifacts = Path(client.download_artifacts(run_id, "config.json", str(tmp_path / "dl")))
    assert json.loads(artifacts.read_text())["run"]["report_to"] == "mlflow"
    names = {f.path for f in client.list_artifacts(run_id, "samples")}
    assert names == {f"samples/step-{s:06d}.json" for s in (0, 1, 2)}
