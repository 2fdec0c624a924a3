"""Where a run's wall time went: start-up, each phase of the training loop, evaluation and
the rest, in seconds per run (report.md's "Where the wall time went", tables/wall_time.csv).

The sources, all written by every run: the seconds it took to build the run's services
(``startup_seconds`` in complete.json: the generation engine, the trainer's model, the
reference; near zero for the engine when ``compare`` reuses one across runs), the
ledger's seconds per phase summed over metrics.jsonl's steps, the loop's own clock
(``seconds``: training steps, evaluations excluded), each evaluation's ``eval_seconds``,
and the session's wall time (complete.json). What the loop's clock holds beyond its
phases (batch packing, bookkeeping, Python between calls) is ``step_other``; what the
session holds beyond steps and evaluations (checkpoints, metric and sample files) is
``checkpoint_and_io``.
"""

from __future__ import annotations

import pandas as pd

from zoo.files import read_json
from zoo.services.ledger import ALL_PHASES, PHASES


def run_wall_time(run: dict) -> dict[str, float] | None:
    """One run's seconds by part, or None for a run that is not complete, ran in several
    sessions (complete.json times the last session only) or left no wall time."""
    done = run["dir"] / "complete.json"
    if not done.is_file():
        return None
    complete = read_json(done)
    if len(complete.get("sessions", [])) > 1 or "wall_seconds_this_session" not in complete:
        return None
    records = run["records"]
    steps = [r for r in records if r["step"] > 0]
    # every phase, the optional ones too (ReMax's baseline): 0 where a run spent nothing
    phases = {p: sum(r.get(f"{p}_seconds", 0.0) for r in steps) for p in ALL_PHASES}
    loop = steps[-1]["seconds"] if steps else 0.0
    evaluation = sum(r.get("eval_seconds", 0.0) for r in records)
    wall = complete["wall_seconds_this_session"]
    startup = complete.get("startup_seconds", float("nan"))  # (runs before it was kept)
    return {
        "startup": startup,
        **phases,
        "step_other": loop - sum(phases.values()),
        "evaluation": evaluation,
        "checkpoint_and_io": wall - loop - evaluation,
        "wall": wall + (0.0 if startup != startup else startup),
    }


def wall_time_table(runs: list[dict]) -> pd.DataFrame:
    """Per row (env, algorithm): complete single-session runs, then the mean seconds per
    run of each part and of the whole, and the shares of the whole spent in evaluation and
    start-up."""
    rows = []
    for run in runs:
        parts = run_wall_time(run)
        if parts is not None:
            rows.append({"env": run["env"], "algorithm": run["algorithm"], **parts})
    if not rows:
        return pd.DataFrame()
    frame = pd.DataFrame(rows)
    # an optional phase shows only where a run of the table spent in it
    frame = frame.drop(columns=[p for p in ALL_PHASES if p not in PHASES and not frame[p].any()])
    table = frame.groupby(["env", "algorithm"], sort=False).mean().reset_index()
    table.insert(2, "runs", frame.groupby(["env", "algorithm"], sort=False).size().values)
    table["evaluation_share"] = table["evaluation"] / table["wall"]
    table["startup_share"] = table["startup"] / table["wall"]
    return table
