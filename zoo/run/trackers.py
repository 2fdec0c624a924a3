"""Experiment trackers (``--report-to``): TensorBoard, Weights & Biases and MLflow receive
what ``metrics.jsonl`` and ``samples.jsonl`` receive, from the one place a run writes them
(zoo.run.runlog.RunWriter): every step's numeric metrics (evaluation points included, on
the steps that evaluated), the resolved config (config.json's contents) once per start,
and the samples kept at each step as text or a table.

The learning rate is a metric (``train/lr``) of every step that trained, the run's ``lr``
where metrics.jsonl records none (a constant learning rate); MLflow's params are every
run setting and the algorithm's and env's resolved configs (``algorithm.eps``,
``algorithm.beta``, ...: ``run_params``), so runs filter by them.

Metrics go in sections, the same in all three (``tracker_key``, one rule): ``eval/`` the
evaluations (``eval_reward`` is ``eval/reward``), ``regime/`` the training regime (updates
per batch, policy and staleness KL, trainer-sampler mismatch, a correction's ``is_*``,
policy version and age), ``perf/`` the budget counters and costs (``samples``, ``flops``,
``seconds``, every phase's seconds, tokens and FLOPs, throughput, idle times) and
``train/`` the rest (reward, loss, ratios, the mechanism's shares, KL, entropy, lengths).

Runs are grouped by experiment: the runs of a ``compare`` share its folder (``--out``) as
their experiment, a run alone is its own. Each tracker is an optional extra (``pip
install 'forge-zoo[trackers]'``); a run that asks for one that is not installed stops
before it starts (``check_installed``), with the pip command. Where they write:

- tensorboard: ``tensorboard/`` in the run folder (torch.utils.tensorboard's
  SummaryWriter; a resume purges the events after the checkpoint it continues from);
  ``tensorboard --logdir <experiment>/runs`` shows a compare's runs side by side;
- wandb: ``wandb/`` in the run folder; offline unless an API key is configured
  (``WANDB_API_KEY`` or a ``wandb login`` entry in ~/.netrc) or ``WANDB_MODE`` says
  otherwise; ``wandb sync`` uploads an offline run later. Project ``$WANDB_PROJECT``,
  else forge-zoo; group: the experiment's name; run name: the run folder's name, after
  ``<experiment>/`` in a compare (apart from the runs of other experiments);
- mlflow: one file store per experiment, ``mlruns/`` in its folder (a compare's
  ``--out``; a lone run's folder), unless ``MLFLOW_TRACKING_URI`` names another (a
  server, a database); MLflow experiment: the experiment's name (``$MLFLOW_EXPERIMENT_NAME``
  overrides it), each run named by its folder and tagged ``forge_zoo.experiment``.
  MLflow 3 keeps its file store only on request, so ``MLFLOW_ALLOW_FILE_STORE`` is set
  for it. Concurrent runs (``compare --jobs``) create the experiment once: a lock file in
  a file store, the server's unique names otherwise.

W&B and MLflow runs are continued on ``--resume``: ``trackers.json`` in the run folder
keeps their ids, the experiment's name and the MLflow store of the first start (the
default one relative to the run folder, so a moved experiment folder resumes too), so a
resume writes to the same runs whatever the environment says then. Unlike TensorBoard
they cannot drop the values logged after the checkpoint, so the steps re-done after a
resume appear there twice.
"""

from __future__ import annotations

import fcntl
import importlib.util
import json
import math
import netrc
import os
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlparse
from urllib.request import url2pathname

from zoo.core.config import ConfigError
from zoo.files import read_json
from zoo.services.ledger import ALL_PHASES

TRACKERS = ("tensorboard", "wandb", "mlflow")
"""The valid names of ``--report-to`` (RunConfig.report_to)."""

REQUIREMENTS = {
    "tensorboard": ("tensorboard", "tensorboard==2.21.0"),
    "wandb": ("wandb", "wandb==0.31.0"),
    "mlflow": ("mlflow", "mlflow-skinny==3.17.2"),
}
"""Tracker -> (module it needs, the pinned requirement of its extra in pyproject.toml)."""

STATE_FILE = "trackers.json"
"""Per run folder: the W&B and MLflow run ids, the experiment's name and the MLflow
tracking URI, so a resume continues the same runs in the same place."""

PROJECT = "forge-zoo"

REGIME = ("updates", "policy_kl", "staleness_kl", "policy_version", "stale_dropped")
REGIME_PREFIXES = ("mismatch_", "is_", "policy_age_")
"""metrics.jsonl names in ``regime/``: the training regime (docs/training.md)."""

PERF = ("samples", "flops", "seconds", *(f"{phase}_tokens" for phase in ALL_PHASES))
PERF_SUFFIXES = ("_seconds", "_flops", "_per_s")
"""metrics.jsonl names in ``perf/``: the budget counters, each phase's cost, throughput."""


def tracker_key(name: str) -> str:
    """The name a metrics.jsonl key has in every tracker: ``eval/`` + the rest of an
    ``eval_*`` name, else the name under ``regime/``, ``perf/`` or (all others)
    ``train/``."""
    if name.startswith("eval_"):
        return "eval/" + name.removeprefix("eval_")
    if name in REGIME or name.startswith(REGIME_PREFIXES):
        return "regime/" + name
    if name in PERF or name.endswith(PERF_SUFFIXES):
        return "perf/" + name
    return "train/" + name


def parse_report_to(value: str) -> tuple[str, ...]:
    """The trackers named in ``value`` (comma-separated, spaces ignored, each once), in
    the order given; ConfigError naming the valid ones for an unknown name."""
    names = [n.strip().lower() for n in value.split(",") if n.strip()]
    unknown = [n for n in names if n not in TRACKERS]
    if unknown:
        raise ConfigError(
            f"unknown tracker {', '.join(map(repr, unknown))} in report_to; valid: "
            f"{', '.join(TRACKERS)} (several: comma-separated, e.g. tensorboard,wandb)"
        )
    return tuple(dict.fromkeys(names))


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # ValueError: blocked in sys.modules (set to None)
        return False


def check_installed(names: tuple[str, ...]) -> None:
    """Raise ConfigError, with the pip command, when a tracker in ``names`` is not
    installed (checked without importing it)."""
    missing = [n for n in names if not _importable(REQUIREMENTS[n][0])]
    if missing:
        extras = ",".join(missing)
        pins = " ".join(f"'{REQUIREMENTS[n][1]}'" for n in missing)
        raise ConfigError(
            f"--report-to {','.join(names)}: {', '.join(missing)} not installed; install "
            f"with: pip install -e '.[{extras}]' (from a checkout of forge-zoo), or pip "
            f"install {pins}"
        )


def numeric_metrics(record: dict[str, Any], lr: float | None = None) -> dict[str, float]:
    """The metrics of a metrics.jsonl record a tracker can plot, under their tracker
    names (``tracker_key``): every int, float or bool value except ``step`` (which is the
    x axis), as floats. ``lr``: the run's learning rate, given as ``train/lr`` on a step
    that trained (it has a ``loss``) and records none: metrics.jsonl holds ``lr`` only
    under a schedule, where it changes (its records before schedules stay comparable),
    while a tracker's charts and filters want it on every run."""
    metrics = {
        tracker_key(k): float(v)
        for k, v in record.items()
        if k != "step" and isinstance(v, int | float) and not isinstance(v, complex)
    }
    if lr is not None and "loss" in record and "lr" not in record:
        metrics[tracker_key("lr")] = float(lr)
    return metrics


def run_params(config: dict[str, Any]) -> dict[str, str]:
    """An MLflow run's params from config.json: every run setting, with the algorithm's
    and the env's configs as resolved (``algorithm.eps``, ``algorithm.beta``, ``env.digits``:
    each default filled in, so runs filter by them) in place of the overrides alone
    (``algorithm_config``, ``{}`` for a run at the defaults)."""
    run = dict(config.get("run", {}))
    params = {k: v for k, v in run.items() if k not in ("algorithm_config", "env_config")}
    for part in ("algorithm", "env"):
        resolved = config.get(part, {}).get("config")
        if resolved is None:  # (a config.json without it: the overrides are what there is)
            resolved = run.get(f"{part}_config", {})
        params |= {f"{part}.{k}": v for k, v in resolved.items()}
    return {k: str(v)[:6000] for k, v in sorted(params.items())}


def _samples_markdown(rows: list[dict[str, Any]]) -> str:
    head = (
        "| kind | prompt | completion | reward | advantage | reference |\n|---|---|---|---|---|---|"
    )

    def cell(v: Any) -> str:
        text = "" if v is None else (f"{v:.4g}" if isinstance(v, float) else str(v))
        return text.replace("|", "\\|").replace("\n", "\\n")

    body = [
        "| "
        + " | ".join(
            cell(r.get(k))
            for k in ("kind", "prompt", "completion", "reward", "advantage", "reference")
        )
        + " |"
        for r in rows
    ]
    return "\n".join([head, *body])


class Tracker(Protocol):
    def log_metrics(self, step: int, metrics: dict[str, float]) -> None: ...
    def log_samples(self, step: int, rows: list[dict[str, Any]]) -> None: ...
    def close(self) -> None: ...


class TensorBoardTracker:
    """Scalars under their tracker names, the config and samples as text."""

    def __init__(self, run_dir: Path, config: dict[str, Any], start_step: int) -> None:
        from torch.utils.tensorboard import SummaryWriter

        # purge_step: events an earlier session wrote at steps after the checkpoint this
        # one starts from (all of them on a first start) are dropped
        self.writer = SummaryWriter(
            str(run_dir / "tensorboard"), purge_step=start_step + 1 if start_step else 0
        )
        if not start_step:
            text = json.dumps(config, indent=2, default=str)
            self.writer.add_text("config", "    " + text.replace("\n", "\n    "), 0)

    def log_metrics(self, step: int, metrics: dict[str, float]) -> None:
        for key, value in metrics.items():
            self.writer.add_scalar(key, value, step)
        self.writer.flush()

    def log_samples(self, step: int, rows: list[dict[str, Any]]) -> None:
        for kind in ("train", "eval"):
            chosen = [r for r in rows if r.get("kind") == kind]
            if chosen:
                self.writer.add_text(f"samples/{kind}", _samples_markdown(chosen), step)

    def close(self) -> None:
        self.writer.close()


def wandb_mode() -> str:
    """``$WANDB_MODE`` when set; else online when an API key is configured (the
    environment or ~/.netrc, as ``wandb login`` writes it), offline otherwise."""
    if os.environ.get("WANDB_MODE"):
        return os.environ["WANDB_MODE"]
    if os.environ.get("WANDB_API_KEY"):
        return "online"
    host = urlparse(os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")).hostname
    try:
        found = netrc.netrc().authenticators(host or "api.wandb.ai")
    except (OSError, netrc.NetrcParseError):
        found = None
    return "online" if found and found[2] else "offline"


class WandbTracker:
    """A W&B run in ``run_dir/wandb`` (offline unless a key is configured) in the group
    ``experiment``: the config as its config, metrics by step, samples as a table per
    step."""

    def __init__(
        self, run_dir: Path, config: dict[str, Any], state: dict[str, Any], experiment: str
    ) -> None:
        import wandb

        self.wandb = wandb
        state.setdefault("wandb_id", uuid.uuid4().hex[:12])
        # W&B prints to the terminal before its settings apply: an advert for Weave when it
        # sees openai imported (vLLM imports it) and its own start lines; the run's records
        # say all of it (the user may still set either variable)
        os.environ.setdefault("WANDB_DISABLE_WEAVE", "true")
        os.environ.setdefault("WANDB_SILENT", "true")
        # a lone run is its own experiment; in a compare, the experiment makes it unique
        name = run_dir.name if experiment == run_dir.name else f"{experiment}/{run_dir.name}"
        self.run = wandb.init(
            project=os.environ.get("WANDB_PROJECT", PROJECT),
            group=experiment,
            name=name,
            id=state["wandb_id"],
            resume="allow",
            dir=str(run_dir),
            config=config,
            mode=wandb_mode(),
            settings=wandb.Settings(
                silent=True, console="off", save_code=False, x_disable_stats=True
            ),
        )

    def log_metrics(self, step: int, metrics: dict[str, float]) -> None:
        self.run.log(metrics, step=step)

    def log_samples(self, step: int, rows: list[dict[str, Any]]) -> None:
        columns = sorted({k for r in rows for k in r})
        table = self.wandb.Table(columns=columns, data=[[r.get(c) for c in columns] for r in rows])
        self.run.log({"samples": table}, step=step)

    def close(self) -> None:
        self.run.finish()


def mlflow_tracking_uri(run_dir: Path, state: dict[str, Any], experiment_dir: Path) -> str:
    """Where the run's MLflow run is (or goes), recorded in ``state`` on a first start:
    ``$MLFLOW_TRACKING_URI`` as it was then, else the file store ``mlruns/`` in the
    experiment's folder, kept relative to the run folder (so a moved experiment folder
    still resumes). A run id recorded before the store was kept is in the run's own store,
    as then."""
    if "mlflow_tracking_uri" in state:
        return state["mlflow_tracking_uri"]
    if "mlflow_store" not in state:
        if os.environ.get("MLFLOW_TRACKING_URI"):
            state["mlflow_tracking_uri"] = os.environ["MLFLOW_TRACKING_URI"]
            return state["mlflow_tracking_uri"]
        store = run_dir if "mlflow_run_id" in state else experiment_dir
        state["mlflow_store"] = os.path.relpath(store / "mlruns", run_dir)
    return Path(os.path.abspath(run_dir / state["mlflow_store"])).as_uri()


@contextmanager
def _store_lock(uri: str) -> Iterator[None]:
    """Held while a run looks up or creates its MLflow experiment: a file store checks
    that a name is free and then creates it, so two runs starting at once (``compare
    --jobs``) could each create one. A lock file in the store's folder for a file store;
    nothing for a server or database, which keep names unique themselves."""
    parsed = urlparse(uri)
    if parsed.scheme not in ("", "file"):
        yield
        return
    root = Path(url2pathname(parsed.path))
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".forge-zoo.lock", "a") as lock:  # a file: the store lists folders
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def mlflow_experiment_id(client: Any, name: str, uri: str) -> str:
    """The id of the MLflow experiment ``name`` in ``client``'s store, created if it does
    not exist yet; once however many runs ask at once."""
    from mlflow.exceptions import MlflowException

    with _store_lock(uri):
        found = client.get_experiment_by_name(name)
        if found is not None:
            return found.experiment_id
        try:
            return client.create_experiment(name)
        except MlflowException:  # a server's: another run created it in the meantime
            found = client.get_experiment_by_name(name)
            if found is None:
                raise
            return found.experiment_id


class MlflowTracker:
    """An MLflow run in the experiment's store (``<experiment>/mlruns`` by default) and
    MLflow experiment: the run settings as params, config.json as an artifact, metrics by
    step, samples as JSON tables."""

    def __init__(
        self,
        run_dir: Path,
        config: dict[str, Any],
        state: dict[str, Any],
        experiment: str,
        experiment_dir: Path,
    ) -> None:
        uri = mlflow_tracking_uri(run_dir, state, experiment_dir)
        if uri.startswith("file:"):
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        self.client = MlflowClient(tracking_uri=uri)
        self.run_id = state.get("mlflow_run_id")
        if self.run_id is None:
            name = os.environ.get("MLFLOW_EXPERIMENT_NAME") or experiment
            experiment_id = mlflow_experiment_id(self.client, name, uri)
            self.run_id = self.client.create_run(
                experiment_id, run_name=run_dir.name, tags={"forge_zoo.experiment": experiment}
            ).info.run_id
            state["mlflow_run_id"] = self.run_id
            params = [Param(k, v) for k, v in run_params(config).items()]
            self.client.log_batch(self.run_id, params=params)
            self.client.log_dict(self.run_id, config, "config.json")
        else:
            self.client.update_run(self.run_id, status="RUNNING")

    def log_metrics(self, step: int, metrics: dict[str, float]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        batch = [Metric(k, v, now, step) for k, v in metrics.items() if math.isfinite(v)]
        for i in range(0, len(batch), 1000):  # MLflow's limit per batch
            self.client.log_batch(self.run_id, metrics=batch[i : i + 1000])

    def log_samples(self, step: int, rows: list[dict[str, Any]]) -> None:
        self.client.log_dict(self.run_id, rows, f"samples/step-{step:06d}.json")

    def close(self) -> None:
        self.client.set_terminated(self.run_id)


class Trackers:
    """The trackers of one run, opened at its start (or resume) from step ``start_step``;
    ``config`` is the run's resolved config (config.json). ``experiment``: the folder of
    the experiment the run belongs to (a compare's ``--out``); None: the run is its own.
    Its name groups the runs in W&B and MLflow, and MLflow's file store goes in it. A
    resume keeps what the first start recorded in ``trackers.json``."""

    def __init__(
        self,
        names: tuple[str, ...],
        run_dir: Path,
        config: dict[str, Any],
        start_step: int = 0,
        experiment: Path | None = None,
    ) -> None:
        check_installed(names)
        self.names = names
        self.run_dir = run_dir
        self.lr: float | None = config.get("run", {}).get("lr")
        state_path = run_dir / STATE_FILE
        state = read_json(state_path) if state_path.exists() else {}
        experiment_dir = Path(os.path.abspath(experiment or run_dir))
        state.setdefault("experiment", experiment_dir.name)
        self.experiment: str = state["experiment"]
        self.trackers: list[Tracker] = []
        for name in names:
            if name == "tensorboard":
                self.trackers.append(TensorBoardTracker(run_dir, config, start_step))
            elif name == "wandb":
                self.trackers.append(WandbTracker(run_dir, config, state, self.experiment))
            else:
                self.trackers.append(
                    MlflowTracker(run_dir, config, state, self.experiment, experiment_dir)
                )
        state_path.write_text(json.dumps(state, indent=2))

    def log(self, record: dict[str, Any]) -> None:
        """One metrics.jsonl record (it has ``step``)."""
        metrics = numeric_metrics(record, self.lr)
        for t in self.trackers:
            t.log_metrics(int(record["step"]), metrics)

    def log_samples(self, rows: list[dict[str, Any]]) -> None:
        """samples.jsonl rows, all of one step."""
        if rows:
            for t in self.trackers:
                t.log_samples(int(rows[0]["step"]), rows)

    def close(self) -> None:
        for t in self.trackers:
            t.close()
