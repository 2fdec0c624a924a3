"""One run into one folder: config.json (with the run's provenance, see zoo.run.runlog),
metrics.jsonl (flushed per step), samples.jsonl (the completions kept at each step and
evaluation), sessions.jsonl (one line per start or resume), resumable checkpoints, and a
``complete.json`` marker once the budget is spent; the ``--report-to`` trackers
(zoo.run.trackers) get the same. Shared by ``harness run`` and ``harness compare``."""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from zoo.core.config import ConfigError, shown
from zoo.files import UnreadableFile, jsonl_file, jsonl_holds_data, read_json, read_json_lines
from zoo.run.checkpoint import (
    find_checkpoint,
    load_checkpoint,
    save_checkpoint,
    set_aside_damaged,
)
from zoo.run.diffs import diff_files
from zoo.run.loop import RLLoop, resolved_config
from zoo.run.plan import RunPlan
from zoo.run.run_config import NOT_DEFINING, RunConfig
from zoo.run.runlog import (
    COMPLETE,
    METRICS,
    RESUME,
    SAMPLES,
    SESSIONS,
    RunWriter,
    expand_jsonl,
    now_iso,
    start_weights,
    write_whole,
)
from zoo.run.trackers import STATE_FILE as TRACKER_STATE
from zoo.run.trackers import Trackers, parse_report_to
from zoo.run.wiring import Services, build_services


def is_complete(out: Path) -> bool:
    return (out / COMPLETE).exists()


def read_metrics(out: Path) -> list[dict[str, Any]]:
    """The records of ``out/metrics.jsonl`` or its .gz (none when neither is there); a
    damaged file, a cut last line included, is an UnreadableFile naming it."""
    return read_json_lines(out / METRICS).rows


def holds_metrics(out: Path) -> bool:
    """Whether ``out`` holds a run's records (a metrics.jsonl, or .gz, that is not empty)."""
    return jsonl_holds_data(out / METRICS)


EARLIER_STARTS = "earlier-starts"
"""Where a run that starts over (it stopped before its first checkpoint) keeps what its
earlier start recorded: ``earlier-starts/<k>/`` (metrics, samples, sessions, config,
source diffs or their pointers; the store stays where it is, and a pointer there still
finds it: zoo.run.diffs). Nothing recorded is deleted."""


def set_aside_start(out: Path) -> Path | None:
    """Move the records of a start that left no checkpoint into a new
    ``earlier-starts/<k>/`` (None when it recorded nothing)."""
    records = [out / METRICS, out / SAMPLES, out / SESSIONS]
    if not any(jsonl_holds_data(p) for p in records):
        return None
    k = 1
    while (out / EARLIER_STARTS / str(k)).exists():
        k += 1
    kept = out / EARLIER_STARTS / str(k)
    kept.mkdir(parents=True)
    for path in [*map(jsonl_file, records), out / "config.json", *diff_files(out)]:
        if path is not None and path.exists():
            path.rename(kept / path.name)
    return kept


def kept_on_resume(out: Path, step: int) -> tuple[dict[Path, str], list[str]]:
    """What a resume from the checkpoint of ``step`` makes of the run's record files:
    (path -> its new text, notes). metrics.jsonl and samples.jsonl keep their records up
    to ``step`` (the later ones are re-done); sessions.jsonl keeps all of its. A last line
    cut short by a stop mid-write (zoo.files.JsonLines.torn) is dropped, with a
    note: it belonged to a step after the checkpoint, or to no step at all. Any other
    damage, or records that do not reach ``step`` (a resume cannot re-do them), is an
    UnreadableFile, raised before anything is written."""
    advice = "nothing was changed: restore the file, or start the run afresh in another --out"
    texts: dict[Path, str] = {}
    notes: list[str] = []
    for path in (out / METRICS, out / SAMPLES):
        if path.name == SAMPLES and jsonl_file(path) is None:
            continue  # (a run recorded before samples.jsonl existed)
        try:
            lines = read_json_lines(path, torn_ok=True)
        except UnreadableFile as exc:
            raise exc.advised(advice) from None
        steps = [r["step"] for r in lines.rows if isinstance(r.get("step"), int)]
        reached = max(steps, default=None)
        if reached is None or reached < step:
            held = "no record" if reached is None else f"records up to step {reached}"
            cut = f" (then line {lines.torn}, cut short)" if lines.torn else ""
            raise UnreadableFile(
                path,
                f"holds {held}{cut}, but the checkpoint to resume from is of step "
                f"{step}: the records between are lost and a resume cannot re-do them",
                advice,
            )
        if lines.torn:
            notes.append(
                f"{path}: line {lines.torn}, the last, was cut short by a stop "
                f"mid-write (a step after the checkpoint of step {step}); dropped, "
                "the step is re-done"
            )
        kept = [r for r in lines.rows if isinstance(r.get("step"), int) and r["step"] <= step]
        texts[path] = "".join(json.dumps(r) + "\n" for r in kept)
    path = out / SESSIONS
    if jsonl_file(path) is not None:
        try:
            lines = read_json_lines(path, torn_ok=True)
        except UnreadableFile as exc:
            raise exc.advised(advice) from None
        if not lines.rows:
            raise UnreadableFile(
                path, "holds no session, though every start of a run records one there", advice
            )
        if lines.torn or lines.unterminated:  # the next session's line would join it
            texts[path] = "".join(json.dumps(r) + "\n" for r in lines.rows)
        if lines.torn:
            notes.append(
                f"{path}: line {lines.torn}, the last, was cut short by a stop mid-write; dropped"
            )
    return texts, notes


def note(text: str) -> None:
    """A line about what a resume did, on the terminal (third_party.routed_to keeps
    ``sys.stderr`` there)."""
    print(f"note: {text}", file=sys.stderr, flush=True)


def execute_run(
    cfg: RunConfig,
    out: Path,
    services: Services,
    *,
    command: str,
    resume: bool = False,
    on_record: Callable[[dict[str, Any]], None] | None = None,
    hosts: list[str] | None = None,
    experiment: Path | None = None,
    startup_seconds: float | None = None,
) -> list[dict[str, Any]]:
    """Run ``cfg`` into ``out``. With ``resume``, continue from the last checkpoint there
    (the metrics and samples before it are kept, the ones after it re-done); a fresh run
    refuses a folder that already holds metrics. ``hosts``: the Monarch hosts ``services``
    run on when not the placement file's (``compare --jobs``), recorded per session in
    sessions.jsonl, since a resume may run on other hosts. ``experiment``: the folder of
    the experiment the run is part of, which groups its ``--report-to`` trackers (None:
    the run is its own; zoo.run.trackers). ``startup_seconds``: how long building
    ``services`` took, kept in complete.json (harness.walltime)."""
    loop = RLLoop(cfg, services)
    config = {"run_id": out.name, "command": command, **resolved_config(cfg, services)}
    model_path = Path(config["model_path"])
    checkpoint_dir = out / "checkpoint"
    found = find_checkpoint(checkpoint_dir) if resume else None  # (UnreadableFile: none whole)
    if found is not None:
        config_file = out / "config.json"
        try:
            saved = read_json(config_file)
            # Through RunConfig, so fields added since the run started take their defaults.
            before = RunConfig.from_record(saved["run"]).to_flat()
        except UnreadableFile as exc:
            raise exc.advised("nothing was changed: restore it to resume") from None
        except (KeyError, TypeError, AttributeError):
            raise UnreadableFile(
                config_file,
                'holds no run config (its "run" section)',
                "nothing was changed: restore it to resume",
            ) from None
        recorded, now = _defining(before), _defining(config["run"])
        if recorded != now:
            fields = ", ".join(
                f"{k} (recorded {recorded.get(k)!r}, now {now.get(k)!r})"
                for k in sorted(set(recorded) | set(now))
                if recorded.get(k) != now.get(k)
            )
            raise ConfigError(
                f"{out}: cannot resume, its config.json differs from this run's in {fields}; "
                "resume with the recorded values (their flags) or start it afresh"
            )
        texts, notes = kept_on_resume(out, found.step)  # (refuses before any write)
        step = load_checkpoint(checkpoint_dir, loop, found)
        expand_jsonl(out)  # (a finished run's .jsonl.gz, plain again to be appended to)
        kept = set_aside_damaged(found)
        for (folder, problem), target in zip(found.passed_over, kept, strict=True):
            note(
                f"{problem.path}: {problem.problem}; resuming from the checkpoint of step "
                f"{step} ({folder.name} kept as {target.name})"
            )
        for path, text in texts.items():
            write_whole(path, text, RESUME)
        for text in notes:
            note(text)
    else:
        if not resume and holds_metrics(out):
            raise ConfigError(f"{out} already holds a run; use --resume or another --out")
        earlier = set_aside_start(out)  # a start that stopped before its first checkpoint
        expand_jsonl(out)  # (only an empty one is left: the others were set aside)
        if earlier is not None:
            note(
                f"{out}: no checkpoint was saved before the run stopped, so it starts over; "
                f"what it recorded is kept in {earlier}"
            )
    writer = RunWriter(out)
    if loop.step_index == 0:  # a first start (a resume keeps config.json as it was)
        writer.write_config({**config, **start_weights(model_path, cfg.run.init, cfg.run.seed)})
        (out / TRACKER_STATE).unlink(missing_ok=True)  # runs of a start that saved nothing
    writer.start_session(loop.step_index, hosts or (cfg.placement.distributed or {}).get("hosts"))
    if cfg.output.report_to:
        try:
            recorded = read_json(out / "config.json")
            writer.trackers = Trackers(
                parse_report_to(cfg.output.report_to), out, recorded, loop.step_index, experiment
            )
        except BaseException:
            writer.close()
            raise

    def log(record: dict[str, Any]) -> None:
        writer.log(record)
        if on_record:
            on_record(record)

    def checkpoint(step: int) -> None:
        save_checkpoint(checkpoint_dir, loop, model_path)

    started = time.time()
    try:
        history = loop.run(log, checkpoint=checkpoint, samples=writer.log_samples)
    finally:
        writer.close()
    checkpoint(loop.step_index)
    write_whole(
        out / COMPLETE,
        json.dumps(
            {
                "steps": loop.step_index,
                "flops": services.ledger.total_flops,
                "samples": loop.samples,
                "wall_seconds_this_session": time.time() - started,
                **({} if startup_seconds is None else {"startup_seconds": startup_seconds}),
                "finished": now_iso(),
                "sessions": writer.sessions(),
            }
        ),
        RESUME,
    )
    return read_metrics(out) if resume else history


PATH_RESERVE = 512
"""Bytes of path a run or experiment adds below its folder (runs/<run>/checkpoints/
step-N.tmp/<file>, ~150 at most), with room to spare."""


def check_out(out: Path) -> None:
    """Refuse, before anything starts, a folder a run or experiment cannot be written to:
    ``out`` or a folder above it is a file, a name in it is longer than its filesystem
    takes, or no folder can be made where it goes (no permission, a read-only or virtual
    filesystem such as /proc). Leaves nothing behind."""
    try:
        path = Path(os.path.abspath(out))
        encoded = [os.fsencode(part) for part in path.parts]
    except (UnicodeEncodeError, ValueError):  # a lone surrogate, a NUL byte
        raise ConfigError(f"--out {shown(str(out))} is not a valid file name") from None
    base = next(p for p in (path, *path.parents) if os.path.lexists(p))  # ("/" exists)
    if not base.is_dir():
        if base == path:
            raise ConfigError(f"--out {out} is a file, not a folder; name a folder")
        raise ConfigError(f"--out {out}: {base} is a file, so no folder can be made under it")
    try:
        name_max = os.pathconf(base, "PC_NAME_MAX")
        path_max = os.pathconf(base, "PC_PATH_MAX")
    except (OSError, ValueError):
        name_max, path_max = 255, 4096  # Linux's
    for name in encoded:
        if len(name) > name_max:
            raise ConfigError(
                f"--out: the name {shown(os.fsdecode(name))} is {len(name)} bytes long; this "
                f"filesystem takes {name_max} at most"
            )
    if sum(len(name) + 1 for name in encoded) > path_max - PATH_RESERVE:
        raise ConfigError(
            f"--out {shown(str(out))} is too long: the paths below it must stay under "
            f"{path_max} bytes; keep it under {path_max - PATH_RESERVE}"
        )
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".forge-zoo-probe-", dir=base))
    except OSError as exc:
        raise ConfigError(
            f"--out {out}: cannot make a folder in {base} ({exc.strerror or exc})"
        ) from None


def check_run_folder(out: Path, resume: bool) -> None:
    """``check_out``, then: with ``resume``, ``out`` must hold a run to continue (its
    config.json or a checkpoint); without, it must not hold one already."""
    check_out(out)
    if resume and not (
        (out / "config.json").exists()
        or os.path.lexists(out / "checkpoint")
        or (out / "checkpoints").is_dir()
    ):
        raise ConfigError(
            f"--resume: {out} holds no run to continue (no config.json, no checkpoint); "
            "leave out --resume to start one there"
        )
    if not resume and holds_metrics(out):
        raise ConfigError(f"{out} already holds a run; use --resume or another --out")


def _defining(run: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in run.items() if k not in NOT_DEFINING}


def run_name(cfg: RunConfig) -> str:
    """``<row>__<env>__seed<k>``; the row is the algorithm, or its variant in an ablation."""
    return f"{cfg.run.variant or cfg.run.algorithm}__{cfg.run.env}__seed{cfg.run.seed}"


def row_of(name: str) -> tuple[str, str] | None:
    """(env, row) of a run named by ``run_name`` (None for another name)."""
    row, env, seed = [*name.rsplit("__", 2), "", ""][:3]
    return (env, row) if row and env and seed.startswith("seed") else None


def train_one(
    cfg: RunConfig,
    run_dir: Path,
    command: str,
    resume: bool,
    generators: dict[tuple, object],
    on_record=None,
    hosts: list[str] | None = None,
    plan: RunPlan | None = None,
) -> dict:
    """One run of an experiment. On the local placement the generation engine of each
    model is kept in ``generators`` and reused by the next run (its weights reset per run).
    ``hosts``: place the services on these of the placement file's hosts only (a worker's
    group with ``compare --jobs``); the run's recorded config keeps the file as given, so
    the run resumes on any group and its config equals that of ``--jobs 1``. The
    experiment is the folder ``run_dir`` is in, ``<experiment>/runs/<run>``
    (run_experiment). ``plan``: the config's plan from the pre-flight checks (None: it is
    resolved here, once, as in a worker process of ``compare --jobs``)."""
    key = (
        cfg.run.model,
        cfg.run.model_path,
        cfg.run.init,
        cfg.placement.generator,
        cfg.placement.device,
    )
    if plan is not None and plan.cfg != cfg:
        raise ValueError(f"{run_name(cfg)}: the plan given is another config's")
    started = time.perf_counter()
    plan = plan or RunPlan.resolve(cfg, spec=False)  # (build_services resolves the model)
    if cfg.placement.placement == "local":
        services = build_services(plan, quiet=True, generator=generators.get(key))
        generators[key] = services.generator
    else:
        if hosts:  # nothing the plan resolved depends on the hosts
            placed = cfg.replace(distributed={**cfg.placement.distributed, "hosts": hosts})
            plan = plan.for_config(placed)
        services = build_services(plan, quiet=True)
    startup = time.perf_counter() - started
    try:
        history = execute_run(
            cfg,
            run_dir,
            services,
            command=command,
            resume=resume,
            on_record=on_record,
            hosts=hosts,
            experiment=run_dir.parent.parent,
            startup_seconds=startup,
        )
    finally:
        services.close()
    return {
        "run": run_name(cfg),
        "steps": history[-1]["step"],
        "final_eval": history[-1].get("eval_reward"),
    }
