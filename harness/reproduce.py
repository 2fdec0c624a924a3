"""`harness reproduce`: re-run recorded runs from their config.json and say whether the
numbers agree with the record.

Two verdicts. Exact: on the CPU class the run was made on (CPU model and vector
instruction sets), with the same package versions, on the CPU and without a wall-clock
budget, a re-run with the recorded seed and thread count must give every non-timing field
of every step bit for bit (MATCH / DIFFERS). Statistical: anywhere else float rounding
changes the sampled tokens after the first update, so a re-run is one more draw from the
run's distribution; the lowest seeds of a leaderboard row (or of a run folder's siblings)
are re-run here and their headlines tested against the row's per-seed headlines: a Welch
t-test decides (AGREES / CONSISTENT / DIFFERS), a TOST within the row's MDD says how close.
docs/provenance.md has the details."""

from __future__ import annotations

import contextlib
import math
import os
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from scipy import stats as sps

from harness.runner import execute_run, read_metrics
from harness.stats import row_mdd
from harness.third_party import LOG_NAME, routed_to
from zoo.core.config import ConfigError
from zoo.files import UnreadableFile, jsonl_shown, read_json
from zoo.run.loop import resolved_config
from zoo.run.plan import RunPlan
from zoo.run.run_config import RunConfig
from zoo.run.runlog import is_timing_key, machine, package_versions, start_weights
from zoo.run.wiring import build_services

ALPHA = 0.05
"""Level of both statistical tests (the t-test and each one-sided test of the TOST)."""

DEFAULT_STATISTICAL_SEEDS = 3
"""Seeds a statistical check re-runs unless --seeds says otherwise (never more than the row
has). Three is the fewest whose own spread has 2 degrees of freedom: with 2 seeds (1 degree)
the new side's variance is so uncertain that Welch's critical t runs towards 12.7 (t at
97.5% with 1 degree, against 4.3 with 2) and the test would accept almost anything. Each
seed is one full run, so more cost proportionally more time."""

WELCH = "Welch two-sample t-test"
POOLED = "two-sample t-test with the row's spread"
TOST = "TOST equivalence test"


class NotReproducible(Exception):
    """A recorded run that cannot be re-run here as recorded (its config is not valid in
    this version, or its starting weights are not what its model resolves to here)."""


@dataclass
class Verdict:
    matches: bool
    exact: bool
    """True when an exact comparison was made (same versions, CPU class, no time budget)."""
    detail: str


def comparable(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if not is_timing_key(k)} for r in records]


def first_difference(old: list[dict], new: list[dict]) -> str | None:
    if len(old) != len(new):
        return f"{len(old)} recorded steps, {len(new)} reproduced"
    for a, b in zip(old, new, strict=True):
        for key in sorted(set(a) | set(b)):
            if a.get(key) != b.get(key):
                return f"step {a.get('step')}: {key} recorded {a.get(key)!r}, got {b.get(key)!r}"
    return None


def same_cpu(recorded: dict[str, Any], now: dict[str, Any]) -> bool:
    """The recorded machine's CPU is this one's: same model and, where recorded, the same
    vector instruction sets (runs from before they were recorded compare the model only)."""
    if recorded.get("cpu") != now.get("cpu"):
        return False
    return "cpu_vector_flags" not in recorded or recorded["cpu_vector_flags"] == now.get(
        "cpu_vector_flags"
    )


def describe_cpu(record: dict[str, Any]) -> str:
    flags = record.get("cpu_vector_flags")
    return f"{record.get('cpu', '?')} [{flags if flags is not None else 'flags not recorded'}]"


def exact_obstacle(config: dict[str, Any]) -> str | None:
    """Why a re-run here cannot match the run of ``config`` (its config.json) bit for bit,
    or None when it can: other package versions, another CPU class, a GPU (its kernels are
    not bit-reproducible run to run) or a wall-clock budget (where it stops follows the
    machine's speed). The thread count is not an obstacle: a re-run takes the recorded one."""
    reasons = []
    recorded, now = config.get("versions") or {}, package_versions()
    if recorded != now:
        changed = sorted(k for k in set(recorded) | set(now) if recorded.get(k) != now.get(k))
        reasons.append(
            "package versions differ ("
            + ", ".join(
                f"{k} {recorded.get(k, 'absent')} recorded, {now.get(k, 'absent')} here"
                for k in changed
            )
            + ")"
        )
    made_on, here = config.get("machine") or {}, machine()
    if not same_cpu(made_on, here):
        reasons.append(
            f"the CPU class differs (made on {describe_cpu(made_on)}, this machine "
            f"is {describe_cpu(here)})"
        )
    if made_on.get("cuda") or here.get("cuda"):
        reasons.append(f"a GPU ({made_on.get('cuda') or here.get('cuda')}) runs it")
    if (config.get("run") or {}).get("budget_seconds"):
        reasons.append("its budget is wall-clock seconds")
    return "; ".join(reasons) or None


def weights_mismatch(
    config: dict[str, Any], cfg: RunConfig, now: str | None, model_path: Path
) -> str:
    """Why the starting weights differ, as far as the record tells."""
    from zoo.models.presets import TINY_MODELS

    recorded = config["start_weights_sha256"]
    what = (
        f"its starting weights (sha256 {recorded[:12]}) differ from what {cfg.run.model!r} "
        f"resolves to here ({(now or 'none')[:12]}, {model_path})"
    )
    commit = config.get("git", {}).get("commit", "?")
    if not cfg.run.model_path and cfg.run.model in TINY_MODELS:
        # Before the presets' weights shipped, each machine warm-started its own on first
        # use, with its CPU's kernels: such a run's start exists only where it was built.
        made_on = describe_cpu(config.get("machine", {}))
        return (
            f"not reproducible from the shipped start weights: {what}, which ship with "
            f"forge-zoo. The run (made on {made_on}, at commit {commit}) started from other "
            f"weights: a warm start built on first use before the weights shipped, whose "
            f"bytes followed the CPU that built it, or an older shipped version. Pass those "
            f"weights with `reproduce --model-path DIR`, or re-run the row from the shipped "
            f"start"
        )
    return (
        f"not reproducible with this version: {what}; check out the commit it records "
        f"({commit}) or pass the original weights with `reproduce --model-path DIR`"
    )


@contextlib.contextmanager
def recorded_threads(config: dict[str, Any]) -> Iterator[None]:
    """Run with the thread count the run recorded: the order of float reductions follows
    it, so a run of ``compare --jobs N`` (each worker on its share of the cores) gives
    other floats with all of them. Set before the engine starts (vLLM sizes its OpenMP
    pool by OMP_NUM_THREADS)."""
    threads = config.get("machine", {}).get("torch_threads")
    before, env_before = torch.get_num_threads(), os.environ.get("OMP_NUM_THREADS")
    if threads:
        os.environ["OMP_NUM_THREADS"] = str(threads)
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)
        if env_before is None:
            os.environ.pop("OMP_NUM_THREADS", None)
        else:
            os.environ["OMP_NUM_THREADS"] = env_before


def read_config(run_dir: Path) -> dict[str, Any]:
    """A run folder's config.json; a damaged one (or one with no run section) is an
    UnreadableFile naming it: a sibling's too, so a row is never checked on fewer seeds
    than it has without a word."""
    path = run_dir / "config.json"
    if not path.exists():
        raise ConfigError(f"{run_dir}: no config.json (not a run folder)")
    config = read_json(path)
    if not isinstance(config.get("run"), dict):
        raise UnreadableFile(path, 'holds no run config (its "run" section)')
    return config


def rerun(
    run_dir: Path, model_path: Path | None = None, verbose: bool = False
) -> list[dict[str, Any]]:
    """Re-run ``run_dir`` from its config.json into a temporary folder (with
    ``model_path`` as its starting weights, when given; they must hash to the recorded
    ones) and return the new metrics records. Other libraries' warnings go to a log in
    that folder, gone with it (``verbose``: to the terminal). Raises NotReproducible with
    the reason."""
    config = read_config(run_dir)
    try:
        # a re-run for checking streams to no tracker
        cfg = RunConfig.from_record(config["run"]).replace(report_to="")
    except ConfigError as exc:
        commit = config.get("git", {}).get("commit", "?")
        raise NotReproducible(
            f"not reproducible with this version: {exc} (recorded at commit {commit})"
        ) from None
    if model_path is not None:
        cfg = cfg.replace(model_path=str(model_path))
    with (
        tempfile.TemporaryDirectory(prefix="reproduce-") as tmp,
        recorded_threads(config),
        routed_to(Path(tmp) / LOG_NAME, verbose),
    ):
        # resolved once (validated there): the services and config.json read the plan
        services = build_services(RunPlan.resolve(cfg), quiet=True)
        try:
            resolved = Path(resolved_config(cfg, services)["model_path"])
            now = start_weights(resolved, cfg.run.init, cfg.run.seed)["start_weights_sha256"]
            if config.get("start_weights_sha256") and now != config["start_weights_sha256"]:
                raise NotReproducible(weights_mismatch(config, cfg, now, resolved))
            return execute_run(
                cfg, Path(tmp) / run_dir.name, services, command=f"reproduce {run_dir}"
            )
        finally:
            services.close()


def reproduce_run(run_dir: Path, model_path: Path | None = None, verbose: bool = False) -> Verdict:
    """Re-run ``run_dir`` and compare every non-timing field of every step exactly. Where
    an exact comparison is impossible (``exact_obstacle``) nothing is run: the verdict
    says why (a statistical check is what `harness reproduce` does then)."""
    config = read_config(run_dir)
    obstacle = exact_obstacle(config)
    if obstacle is not None:
        return Verdict(False, False, f"no exact comparison possible here: {obstacle}")
    recorded = read_metrics(run_dir)
    if not recorded:
        raise ConfigError(f"{jsonl_shown(run_dir / 'metrics.jsonl')}: no record to compare against")
    try:
        fresh = rerun(run_dir, model_path, verbose)
    except NotReproducible as exc:
        return Verdict(False, False, str(exc))
    diff = first_difference(comparable(recorded), comparable(fresh))
    if diff is None:
        return Verdict(True, True, f"all {len(fresh)} steps match exactly")
    return Verdict(False, True, f"numbers differ: {diff}")


def headline(config: dict[str, Any], records: list[dict[str, Any]]) -> float:
    """A run's headline exactly as the leaderboards compute it: harness/analysis.py's
    checkpoints of the budget (``checkpoint_rows``) and its per-run score
    (``run_scores``), so a change of the headline there holds here too."""
    import pandas as pd

    from harness.scores import checkpoint_rows, run_scores

    run = config["run"]
    try:
        points = checkpoint_rows(
            {
                "config": config,
                "records": records,
                "algorithm": run.get("variant") or run["algorithm"],
                "env": run["env"],
                "seed": run["seed"],
            }
        )
    except KeyError as exc:  # a run recorded before a field the headline reads existed
        raise ConfigError(
            f"run {config.get('run_id', '?')}: no headline, its config.json or metrics lack {exc}"
        ) from None
    scores = run_scores(pd.DataFrame(points)) if points else pd.DataFrame()
    if scores.empty:
        raise ConfigError(
            f"run {config.get('run_id', '?')}: no headline, its evaluations "
            "do not reach the end of its budget (an interrupted run?)"
        )
    return float(scores["headline"].iloc[0])


def recorded_headline(run_dir: Path) -> float:
    records = read_metrics(run_dir)
    if not records:  # (an emptied file, or none: the row's spread cannot count this seed)
        metrics = jsonl_shown(run_dir / "metrics.jsonl")
        raise UnreadableFile(metrics, "holds no record, so no headline")
    return headline(read_config(run_dir), records)


@dataclass(frozen=True)
class Agreement:
    """New seeds' headlines tested against a row's recorded per-seed headlines."""

    recorded: tuple[float, ...]
    new: tuple[float, ...]
    margin: float | None
    """Equivalence margin: the row's MDD at 80% power (None or nan: no TOST)."""
    test: str
    """WELCH, or POOLED with one new seed (it has no spread of its own)."""
    difference: float
    """Mean of the new headlines minus the row's mean."""
    se: float
    dof: float
    t: float
    p: float
    """Two-sided p of the t-test."""
    accept: tuple[float, float]
    """The new means the t-test accepts at ALPHA: the row's mean widened by both sides'
    spread."""
    tost_p: float | None
    """The larger p of the TOST's two one-sided tests (None without a margin)."""
    tost_interval: tuple[float, float] | None
    """The (1 - 2 ALPHA) interval of the difference; inside +-margin iff the TOST passes."""
    alpha: float = ALPHA

    @property
    def differs(self) -> bool:
        """The t-test rejects "same distribution" at ``alpha``: decides the exit code."""
        return self.p < self.alpha

    @property
    def equivalent(self) -> bool:
        return self.tost_p is not None and self.tost_p < self.alpha

    @property
    def label(self) -> str:
        if self.differs:
            return "DIFFERS"
        return "AGREES" if self.equivalent else "CONSISTENT"

    def describe(self) -> list[str]:
        """The tests by name with their numbers, and what the verdict means."""
        n_new, n_old = len(self.new), len(self.recorded)
        spread = (
            "both sides' spread"
            if self.test == WELCH
            else "the row's spread, standing in for the one new seed's"
        )
        lines = [
            f"{self.test} at {self.alpha:.0%} (decides the exit code): new mean "
            f"{float(np.mean(self.new)):.4f} ({n_new} seed{'s' * (n_new > 1)}) against the "
            f"row's {float(np.mean(self.recorded)):.4f} ({n_old} seeds), difference "
            f"{self.difference:+.4f}, t = {self.t:.3f}, df = {self.dof:.2f}, p = {self.p:.3g}; "
            f"it accepts a new mean in [{self.accept[0]:.4f}, {self.accept[1]:.4f}] (the row's "
            f"mean widened by {spread})"
        ]
        if self.test == POOLED:
            lines.append(
                "one new seed has no spread of its own: the test assumes it varies "
                f"as the row's seeds do (pooled variance, df = {n_old} - 1)"
            )
        if self.tost_p is None or self.tost_interval is None or self.margin is None:
            lines.append(f"{TOST}: not made, the row has no MDD to serve as the margin")
        else:
            low, high = self.tost_interval
            lines.append(
                f"{TOST} within the row's MDD 80% (+-{self.margin:.4f}) at {self.alpha:.0%}: "
                f"{1 - 2 * self.alpha:.0%} interval of the difference [{low:+.4f}, "
                f"{high:+.4f}], p = {self.tost_p:.3g}: "
                + ("equivalent" if self.equivalent else "equivalence not shown")
            )
        if self.differs:
            lines.append(
                "=> the new seeds' headlines differ from the row's"
                + (", though by less than the row's MDD" if self.equivalent else "")
            )
        elif self.equivalent:
            lines.append(
                "=> agrees: no significant difference, and the difference is within "
                "what the row's seeds can resolve"
            )
        else:
            lines.append(
                "=> consistent: no significant difference, but these seeds cannot show "
                "that the difference is below the row's MDD (more seeds might: "
                "--seeds N); exit 0, since the t-test decides"
            )
        return lines


def agreement(
    recorded: Sequence[float], new: Sequence[float], margin: float | None, alpha: float = ALPHA
) -> Agreement:
    """Test new seeds' headlines against a row's per-seed headlines.

    The t-test asks whether the new headlines could come from the row's distribution:
    Welch's two-sample test (unequal variances, Welch-Satterthwaite degrees of freedom),
    or with one new seed, which has no variance, the two-sample test with the row's
    variance for both sides (se = sd_row * sqrt(1 + 1/n_row), df = n_row - 1). The TOST
    (Schuirmann 1987) tests whether the difference of means lies within +-``margin``: two
    one-sided t-tests on the same standard error and degrees of freedom, equivalent when
    both reject at ``alpha``. With no spread on either side the tests are decided by the
    difference alone (p 1 or 0; equivalent when it is within the margin).
    Raises ValueError with fewer than 2 recorded or no new headlines."""
    old, fresh = np.asarray(recorded, dtype=float), np.asarray(new, dtype=float)
    if len(old) < 2:
        raise ValueError(
            f"a statistical check needs at least 2 recorded seeds (their spread), got {len(old)}"
        )
    if len(fresh) < 1:
        raise ValueError("a statistical check needs at least 1 new headline, got none")
    if not 0 < alpha < 0.5:
        raise ValueError(f"alpha must lie in (0, 0.5), got {alpha}")
    var_old = float(old.var(ddof=1))
    if len(fresh) == 1:
        test, se = POOLED, math.sqrt(var_old * (1 + 1 / len(old)))
        dof = float(len(old) - 1)
    else:
        a, b = float(fresh.var(ddof=1)) / len(fresh), var_old / len(old)
        test, se = WELCH, math.sqrt(a + b)
        dof = (a + b) ** 2 / (a**2 / (len(fresh) - 1) + b**2 / (len(old) - 1)) if se else math.nan
    diff = float(fresh.mean() - old.mean())
    if se > 0:
        t = diff / se
        p = float(2 * sps.t.sf(abs(t), dof))
        half = float(sps.t.ppf(1 - alpha / 2, dof)) * se
    else:  # no spread anywhere: any difference is certain
        t = 0.0 if diff == 0 else math.copysign(math.inf, diff)
        p, half = (1.0 if diff == 0 else 0.0), 0.0
    mean_old = float(old.mean())
    tost_p = tost_interval = None
    if margin is not None and math.isfinite(margin):
        if se > 0:
            p_above = float(sps.t.sf((diff + margin) / se, dof))  # H0: diff <= -margin
            p_below = float(sps.t.cdf((diff - margin) / se, dof))  # H0: diff >= +margin
            tost_p = max(p_above, p_below)
            reach = float(sps.t.ppf(1 - alpha, dof)) * se
            tost_interval = (diff - reach, diff + reach)
        else:
            tost_p, tost_interval = (0.0 if abs(diff) <= margin else 1.0), (diff, diff)
    return Agreement(
        recorded=tuple(float(v) for v in old),
        new=tuple(float(v) for v in fresh),
        margin=margin,
        test=test,
        difference=diff,
        se=se,
        dof=dof,
        t=t,
        p=p,
        accept=(mean_old - half, mean_old + half),
        tost_p=tost_p,
        tost_interval=tost_interval,
        alpha=alpha,
    )


def seed_of(run_dir: Path) -> int:
    return int(read_config(run_dir)["run"]["seed"])


def siblings(run_dir: Path) -> list[Path]:
    """The runs of ``run_dir``'s experiment folder that differ from it only in their seed
    (same config hash: algorithm, env, model and every setting), itself included, by seed."""
    from harness.leaderboard import config_hash

    key = config_hash(read_config(run_dir)["run"])
    runs = [d for d in run_dir.parent.iterdir() if (d / "config.json").exists()]
    found = [d for d in runs if config_hash(read_config(d)["run"]) == key]
    return sorted(found, key=seed_of)


@dataclass
class Target:
    """What `reproduce` checks: the runs of a row (a leaderboard row, or a run folder and
    its siblings) and those to re-run first (a run folder: itself)."""

    name: str
    runs: list[Path]
    first: list[Path]
    per_seed: list[float] | None = None
    """The leaderboard's per-seed headlines, where the target is a row."""


def resolve_target(target: str, leaderboards: Path) -> Target:
    path = Path(target)
    if (path / "config.json").exists():
        return Target(f"run {path}", siblings(path), [path])
    from harness.leaderboard import find_row

    try:
        row = find_row(leaderboards, target)
    except (KeyError, FileNotFoundError) as exc:
        where = leaderboards / "leaderboard.json"
        raise ConfigError(
            f"{target!r} is neither a run folder (config.json) nor a row id in {where}"
        ) from exc
    runs = sorted((Path(d) for d in row["runs"]), key=seed_of)
    per_seed = [float(v) for v in str(row.get("per_seed") or "").split()] or None
    return Target(f"row {target}", runs, [], per_seed)


def chosen_runs(target: Target, count: int) -> list[Path]:
    """The target's own runs first, then the lowest seeds of the row: ``count`` in all."""
    rest = [d for d in target.runs if d not in target.first]
    return (target.first + rest)[:count]


def reproduce(
    target: str,
    leaderboards: Path,
    *,
    statistical: bool = False,
    seeds: int | None = None,
    model_path: Path | None = None,
    verbose: bool = False,
    say: Callable[[str], None] = print,
) -> int:
    """`harness reproduce`: an exact check where this machine can give the recorded numbers
    bit for bit (``exact_obstacle``) and ``statistical`` is not asked for, a statistical
    one otherwise. ``seeds``: how many runs to re-run (default: for an exact check all of
    a row, or the run folder alone; for a statistical one DEFAULT_STATISTICAL_SEEDS), never
    more than the row has. ``verbose``: other libraries' logs in the terminal. Prints
    through ``say``; returns the exit status (0 agree, 1 not)."""
    found = resolve_target(target, leaderboards)
    if seeds is not None and not 1 <= seeds <= len(found.runs):
        raise ConfigError(
            f"--seeds {seeds}: {found.name} has {len(found.runs)} run(s) to "
            f"re-run; give 1 to {len(found.runs)}"
        )
    deciding = found.first or found.runs  # a run folder: its own setup decides
    obstacles = {d: exact_obstacle(read_config(d)) for d in deciding}
    obstacle = next((o for o in obstacles.values() if o), None)
    if obstacle is None and not statistical:
        ok = True
        for run_dir in chosen_runs(found, seeds or len(found.first or found.runs)):
            verdict = reproduce_run(run_dir, model_path, verbose)
            ok &= verdict.matches
            say(f"{'MATCH' if verdict.matches else 'DIFFERS'} {run_dir}: {verdict.detail}")
        return 0 if ok else 1
    if len(found.runs) < 2:
        why = f"{obstacle}, so no exact check" if obstacle else "--statistical"
        if found.first:  # a run folder without siblings
            raise ConfigError(
                f"{found.name}: {why}, and a statistical verdict needs a leaderboard row or "
                f"the run's sibling runs (same config, other seeds) in its experiment folder; "
                f"{found.runs[0].parent} holds none. Pass a row id, or reproduce on the run's "
                "own setup"
            )
        raise ConfigError(
            f"{found.name}: {why}, and a statistical verdict needs at least 2 "
            "recorded seeds (their spread); the row has 1"
        )
    count = seeds or min(DEFAULT_STATISTICAL_SEEDS, len(found.runs))
    chosen = chosen_runs(found, count)
    old = [recorded_headline(d) for d in found.runs]
    why = (
        f"exact numbers need the run's setup, and {obstacle}"
        if obstacle
        else "asked for (--statistical)"
    )
    say(f"statistical check of {found.name} ({len(found.runs)} recorded seeds): {why}")
    rounded = " ".join(f"{v:.3f}" for v in old)
    if found.per_seed and rounded != " ".join(f"{v:.3f}" for v in found.per_seed):
        # leaderboard.json keeps 3 decimals: a board built under another headline rule
        say(
            f"note: leaderboard.json's per-seed headlines ({' '.join(map(str, found.per_seed))})"
            f" are not its runs' under the current headline ({rounded}); the test uses the "
            "runs'"
        )
    say(
        f"re-running seed{'s' * (len(chosen) > 1)} "
        f"{', '.join(str(seed_of(d)) for d in chosen)} on this machine"
    )
    new = []
    for run_dir in chosen:
        try:
            records = rerun(run_dir, model_path, verbose)
        except NotReproducible as exc:
            say(f"DIFFERS {run_dir}: {exc}")
            return 1
        new.append(headline(read_config(run_dir), records))
        say(
            f"  seed {seed_of(run_dir)}: headline {new[-1]:.4f} (recorded "
            f"{old[found.runs.index(run_dir)]:.4f})  {run_dir}"
        )
    result = agreement(old, new, row_mdd(old))
    say(f"{result.label} {found.name}")
    for line in result.describe():
        say(f"  {line}")
    return 1 if result.differs else 0
