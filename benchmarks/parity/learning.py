"""Level c of the parity check against TRL 1.16's GRPOTrainer: learning (docs/parity.md,
"Level c: learning").

For each algorithm (grpo, dr_grpo, dapo) and seed, two runs from the tiny-sum start weights
at the matched settings (``settings.trl_config``):

- **forge-zoo**: its own run (``harness.runner.train_one``, the machinery of ``harness
  run``) at the board's budget and evaluation points, or, with ``fz_from``, the committed
  board's run of that algorithm and seed, after checking that its config holds the mapped
  settings;
- **TRL**: ``GRPOTrainer.train()`` on running_sum's training prompts of that seed in
  forge-zoo's order (``env.train_prompts``, TRL's shuffle off), rewarded by the env's own
  ``score_batch`` (dapo: plus TRL's ``get_soft_overlong_punishment(L_max, L_max / 4)``,
  forge-zoo's overlong punishment), for the optimizer steps forge-zoo's run of the same
  seed took (or ``steps``); a ``TrainerCallback`` saves the weights at the optimizer steps
  where forge-zoo's run was evaluated (or at k/K of ``steps``).

Every saved TRL checkpoint is scored with forge-zoo's own greedy held-out evaluation
(``zoo.run.evaluation.Evaluator``, the evaluation a run uses: the same held-out prompts,
max tokens, generator and scoring), and each run's headline is the board's: the mean of
its last 3 of K evaluation points (``harness.scores.headline_checkpoints``).

Each finished run is one json file, ``<folder>/runs/<side>__<algorithm>__seed<k>.json``,
written when the run finishes; a re-run skips the files that exist (and refuses one
written at other settings). The report (``levels_c.{md,json}``) is computed from those
files alone (``report``).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shutil
import statistics
import time
from pathlib import Path
from typing import Any

import torch

from benchmarks.parity.settings import ALGORITHMS, forge_zoo_algorithm, forge_zoo_run_config

BOARD_BUDGET = 4e12
"""The running_sum board's budget in ledger FLOPs (results/running-sum-paper)."""
BOARD_EVAL_POINTS = 8
SIDES = {"fz": "forge-zoo", "trl": "TRL"}

NOT_COMPARED = {
    "seed",  # one run per seed, checked by its folder's name
    "eval_samples",  # the sampled evaluation's n and points: not in the headline,
    "sampled_eval_points",  # not in training
    "checkpoint_every",
    "report_to",
    "eval_overlap",
    "device",  # the board's "auto" resolves to the CPU (config.json's "device", checked)
    "steps",  # unused under a FLOPs budget
    # how forge-zoo seeds its samples (the board at ca952d6 ran "consecutive"): the same
    # sampling distribution either way, and TRL's side samples with its own generator
    "sample_streams",
    "eval_every",  # unused under a FLOPs budget
}
"""RunConfig fields a committed run may hold other values of (``--fz-from``): none of them
changes what the run trains or what its headline reads."""


@dataclasses.dataclass(frozen=True)
class Setting:
    """What level c runs: the same for both sides (a per-run file records it, and a re-run
    reuses a file only at the same setting)."""

    prompts: int = 64
    """Prompts per rollout batch (x G = 8 completions)."""
    budget_flops: float = BOARD_BUDGET
    """forge-zoo's budget in ledger FLOPs (ignored with ``rollout_steps``)."""
    rollout_steps: int = 0
    """> 0: forge-zoo's budget in rollout steps instead (a smoke test's)."""
    eval_points: int = BOARD_EVAL_POINTS
    eval_prompts: int = 0
    """Held-out problems (running_sum's ``eval_size``); 0: the env's own (500)."""
    steps: int = 0
    """TRL's optimizer steps; 0: those of forge-zoo's run of the same seed."""
    fz_from: str = ""
    """A committed board's folder to read forge-zoo's runs from ("": run them here)."""

    def key(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def run_config(algorithm: str, seed: int, setting: Setting) -> Any:
    """forge-zoo's RunConfig of one run: the compared run (``forge_zoo_run_config``: the
    tiny-sum preset at the tuned lr) at ``seed``, the setting's batch, budget and
    evaluation points; greedy evaluation only (the sampled one is not in the headline)."""
    cfg = forge_zoo_run_config(algorithm)
    changes: dict[str, Any] = {
        "seed": seed,
        "prompts_per_step": setting.prompts,
        "eval_points": setting.eval_points,
        "eval_samples": 0,
        "sampled_eval_points": 0,
        "device": "cpu",
    }
    if setting.rollout_steps:
        if setting.rollout_steps % setting.eval_points:
            raise ValueError(
                f"--rollout-steps {setting.rollout_steps} is not a multiple of --eval-points "
                f"{setting.eval_points}"
            )
        changes |= {
            "steps": setting.rollout_steps,
            "budget_flops": 0.0,
            "eval_every": setting.rollout_steps // setting.eval_points,
        }
    else:
        changes["budget_flops"] = setting.budget_flops
    if setting.eval_prompts:
        changes["env_config"] = {"eval_size": setting.eval_prompts}
    return cfg.replace(**changes)


def run_file(folder: Path, side: str, algorithm: str, seed: int) -> Path:
    return folder / "runs" / f"{side}__{algorithm}__seed{seed}.json"


def write_whole(path: Path, payload: dict[str, Any]) -> None:
    """Write ``path`` whole or not at all (a file beside it, then renamed)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(payload, indent=1))
    os.replace(tmp, path)


def finished(path: Path, setting: Setting) -> dict[str, Any] | None:
    """The result in ``path`` if it exists (None if not). One written at another setting
    is refused, naming what differs: it is never overwritten."""
    if not path.exists():
        return None
    result = json.loads(path.read_text())
    if result.get("setting") != setting.key():
        was = result.get("setting") or {}
        differ = ", ".join(
            f"{k} (file {was.get(k)!r}, now {v!r})"
            for k, v in setting.key().items()
            if was.get(k) != v
        )
        raise SystemExit(
            f"{path} holds a run at other settings: {differ}; use another --out, or the "
            "recorded settings"
        )
    return result


# --- forge-zoo's side -------------------------------------------------------------------


def forge_zoo_result(run_dir: Path, setting: Setting, source: str) -> dict[str, Any]:
    """One forge-zoo run's curve and headline as the board reads them (harness.scores:
    the first evaluation at or past each k/K of the budget, the mean of the last 3), its
    optimizer steps at each point and in all, and its training wall seconds (evaluations
    excluded) per optimizer step."""
    from harness.runner import is_complete, read_metrics
    from harness.scores import budget_of, checkpoint_rows, headline_checkpoints
    from zoo.files import read_json

    config = read_json(run_dir / "config.json")
    records = read_metrics(run_dir)
    if not is_complete(run_dir):
        raise SystemExit(f"{run_dir} has not finished (no complete.json)")
    r = config["run"]
    run = {
        "config": config,
        "records": records,
        "env": r["env"],
        "algorithm": r["algorithm"],
        "seed": r["seed"],
    }
    points = budget_of(run)[2]
    rows = checkpoint_rows(run)
    if len(rows) != points + 1:
        raise SystemExit(f"{run_dir}: its evaluations stop before the end of its budget")
    used = headline_checkpoints(points)
    optimizer_steps = int(sum(x.get("updates", 0) for x in records))
    seconds = float(records[-1]["seconds"])
    return {
        "side": "fz",
        "algorithm": r["algorithm"],
        "seed": r["seed"],
        "source": source,
        "setting": setting.key(),
        "curve": [
            {
                "point": x["point"],
                "optimizer_steps": int(x["optimizer_steps"]),
                "reward": x["reward"],
            }
            for x in rows
        ],
        "headline": statistics.fmean(x["reward"] for x in rows if x["point"] in used),
        "headline_points": used,
        "rollout_steps": int(records[-1]["step"]),
        "optimizer_steps": optimizer_steps,
        "train_seconds": seconds,
        "seconds_per_optimizer_step": seconds / optimizer_steps,
        "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def board_differences(config: dict[str, Any], expected: Any) -> list[str]:
    """What a committed run's config.json holds other than ``expected`` (a RunConfig) in
    the fields that define a run (all but NOT_COMPARED), in its algorithm's constants, its
    env's config and its device."""
    from zoo.envs import get_env
    from zoo.run.run_config import RunConfig

    # through RunConfig, as a resume reads it: fields added since take their defaults
    recorded = RunConfig.from_record(config.get("run", {})).to_flat()
    want = expected.to_flat()
    out = [
        f"{k}: board {recorded.get(k)!r}, mapped {v!r}"
        for k, v in want.items()
        if k not in NOT_COMPARED and recorded.get(k) != v
    ]
    algo = forge_zoo_algorithm(expected.run.algorithm).describe()
    have = config.get("algorithm", {})
    for k in ("name", "aggregation", "config"):
        if have.get(k) != algo.get(k):
            out.append(f"algorithm {k}: board {have.get(k)!r}, mapped {algo.get(k)!r}")
    env = get_env(expected.run.env, **expected.run.env_config).describe()
    if config.get("env") != env:
        out.append(f"env: board {config.get('env')!r}, mapped {env!r}")
    if config.get("device") != "cpu":
        out.append(f"device: board {config.get('device')!r}, mapped 'cpu'")
    return out


def forge_zoo_side(
    algorithm: str, seed: int, setting: Setting, folder: Path, generators: dict
) -> dict[str, Any]:
    """forge-zoo's run of ``algorithm`` at ``seed``: run here (resumable: a run folder under
    ``folder/fz-runs`` continues from its checkpoint), or read from the committed board
    (``setting.fz_from``), refused when its config differs from the mapped settings."""
    from harness.runner import run_name, train_one

    cfg = run_config(algorithm, seed, setting)
    if setting.fz_from:
        run_dir = Path(setting.fz_from) / "runs" / run_name(cfg)
        if not (run_dir / "config.json").exists():
            raise SystemExit(f"--fz-from {setting.fz_from}: no run {run_dir.name} there")
        from zoo.files import read_json

        differ = board_differences(read_json(run_dir / "config.json"), cfg)
        if differ:
            raise SystemExit(
                f"{run_dir}: the committed run was not made at the mapped settings: "
                + "; ".join(differ)
            )
        return forge_zoo_result(run_dir, setting, str(run_dir))
    run_dir = folder / "fz-runs" / run_name(cfg)
    command = f"python -m benchmarks.parity --levels c (forge-zoo side, seed {seed})"
    from harness.runner import is_complete

    if not is_complete(run_dir):
        train_one(cfg, run_dir, command, resume=True, generators=generators)
    return forge_zoo_result(run_dir, setting, str(run_dir))


# --- the held-out evaluation ------------------------------------------------------------


class HeldOut:
    """forge-zoo's greedy held-out evaluation (``Evaluator.run(sampled=False)`` of a run's
    loop) of any weights in Hugging Face naming, loaded into the run's generator."""

    def __init__(self, cfg: Any) -> None:
        from zoo.run.loop import RLLoop
        from zoo.run.plan import RunPlan
        from zoo.run.wiring import build_services

        self.services = build_services(RunPlan.resolve(cfg), quiet=True)
        self.evaluator = RLLoop(cfg, self.services).evaluator
        self.version = 0

    def score(self, weights: dict[str, torch.Tensor]) -> float:
        self.version += 1
        self.services.generator.update_weights(weights, self.version)
        record, _ = self.evaluator.run(sampled=False)
        return float(record["eval_reward"])


_HELD_OUT: dict[int, HeldOut] = {}


def held_out(cfg: Any) -> HeldOut:
    """One evaluator per held-out set (its size), built once per process."""
    size = cfg.run.env_config.get("eval_size", 0)
    if size not in _HELD_OUT:
        _HELD_OUT[size] = HeldOut(cfg)
    return _HELD_OUT[size]


# --- TRL's side ---------------------------------------------------------------------------


def trl_schedule(setting: Setting, fz: dict[str, Any] | None) -> tuple[int, list[int]]:
    """(TRL's optimizer steps, the optimizer step of each evaluation point 1..K): forge-
    zoo's run of the same seed (its optimizer steps in all and where each point was
    evaluated), or with ``steps`` set, that many, evaluated at round(k/K x steps)."""
    if setting.steps:
        k = setting.eval_points
        return setting.steps, [max(1, round(setting.steps * i / k)) for i in range(1, k + 1)]
    if fz is None:
        raise ValueError("TRL's steps come from forge-zoo's run, and there is none")
    points = [c["optimizer_steps"] for c in fz["curve"] if c["point"] > 0]
    return fz["optimizer_steps"], points


def trl_side(
    algorithm: str, seed: int, setting: Setting, folder: Path, fz: dict[str, Any] | None
) -> dict[str, Any]:
    """TRL's run of ``algorithm`` at ``seed`` (the module's docstring): trained, its
    checkpoints scored by forge-zoo's held-out evaluation, the scratch weights removed."""
    from benchmarks.parity.settings import settings_map, trl_config
    from benchmarks.parity.shared import model_path, trl_without_vllm

    with trl_without_vllm():
        from datasets import Dataset
        from safetensors.torch import load_file, save_file
        from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
        from trl import GRPOTrainer
        from trl.rewards import get_soft_overlong_punishment

    import transformers
    import trl

    cfg = run_config(algorithm, seed, setting)
    evaluation = held_out(cfg)
    env = evaluation.services.env
    total, eval_steps = trl_schedule(setting, fz)
    batches = math.ceil(total / cfg.regime.mini_batches)
    problems = env.train_prompts(0, batches * cfg.sampling.prompts_per_step, seed)
    by_index = {p.index: p for p in problems}

    def task_reward(completions: list[str], index: list[int], **_: Any) -> list[float]:
        return env.score_batch([by_index[i] for i in index], list(completions))

    rewards: list[Any] = [task_reward]
    algo = forge_zoo_algorithm(algorithm)
    if getattr(algo.config, "overlong_punishment", False):  # dapo, eq. 13
        cache = algo.config.overlong_cache
        cache = cfg.sampling.max_response_len // 4 if cache is None else int(cache)
        rewards.append(get_soft_overlong_punishment(cfg.sampling.max_response_len, cache))

    work = folder / "work" / f"trl__{algorithm}__seed{seed}"
    shutil.rmtree(work, ignore_errors=True)  # a run stopped before its file: start over
    work.mkdir(parents=True)
    args = trl_config(
        algorithm, work / "trainer", run=cfg, max_steps=total, seed=seed, shuffle_dataset=False
    )
    unequal = [r for r in settings_map(algorithm, args, run=cfg) if not r.equal]
    if unequal:
        raise RuntimeError(f"TRL's config differs from forge-zoo's: {unequal}")

    class SaveAtEvalPoints(TrainerCallback):
        """Saves the weights after the optimizer steps in ``eval_steps``."""

        def __init__(self) -> None:
            self.saved: dict[int, Path] = {}
            self.seconds = 0.0

        def on_step_end(self, args, state, control, model=None, **kwargs):
            if state.global_step in eval_steps and state.global_step not in self.saved:
                start = time.perf_counter()
                path = work / f"step-{state.global_step}.safetensors"
                state_dict = model.state_dict()
                save_file({k: v.detach().clone() for k, v in state_dict.items()}, str(path))
                self.saved[state.global_step] = path
                self.seconds += time.perf_counter() - start
            return control

    model = AutoModelForCausalLM.from_pretrained(model_path(), dtype=torch.float32)
    saver = SaveAtEvalPoints()
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=rewards,
        args=args,
        train_dataset=Dataset.from_dict(
            {"prompt": [p.text for p in problems], "index": [p.index for p in problems]}
        ),
        processing_class=AutoTokenizer.from_pretrained(model_path()),
        callbacks=[saver],
    )
    start = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - start
    steps_done = int(trainer.state.global_step)
    if steps_done != total or set(saver.saved) != set(eval_steps):
        raise RuntimeError(
            f"TRL took {steps_done} optimizer steps (asked {total}) and saved at "
            f"{sorted(saver.saved)} (asked {eval_steps})"
        )
    del trainer, model
    eval_start = time.perf_counter()
    start_reward = evaluation.score(load_file(str(model_path() / "model.safetensors")))
    scores = {s: evaluation.score(load_file(str(p))) for s, p in saver.saved.items()}
    eval_seconds = time.perf_counter() - eval_start
    from harness.scores import headline_checkpoints

    curve = [{"point": 0, "optimizer_steps": 0, "reward": start_reward}] + [
        {"point": k, "optimizer_steps": s, "reward": scores[s]}
        for k, s in enumerate(eval_steps, start=1)
    ]
    used = headline_checkpoints(setting.eval_points)
    train_seconds = wall - saver.seconds
    result = {
        "side": "trl",
        "algorithm": algorithm,
        "seed": seed,
        "source": "TRL GRPOTrainer.train()",
        "setting": setting.key(),
        "steps_from": "--steps" if setting.steps else "forge-zoo's run of this seed",
        "curve": curve,
        "headline": statistics.fmean(c["reward"] for c in curve if c["point"] in used),
        "headline_points": used,
        "rollout_steps": batches,
        "optimizer_steps": total,
        "prompts_used": [problems[0].index, problems[-1].index],
        "reward_functions": [getattr(f, "__name__", type(f).__name__) for f in rewards],
        "versions": {m.__name__: m.__version__ for m in (trl, transformers, torch)},
        "train_seconds": train_seconds,
        "save_seconds": saver.seconds,
        "eval_seconds": eval_seconds,
        "seconds_per_optimizer_step": train_seconds / total,
        "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    shutil.rmtree(work, ignore_errors=True)
    return result


# --- running and reporting ----------------------------------------------------------------


def run_level_c(
    folder: Path,
    setting: Setting,
    algorithms: tuple[str, ...] = ALGORITHMS,
    seeds: range = range(10),
    threads: int = 1,
    log: Any = print,
) -> None:
    """Every (side, algorithm, seed) not yet finished in ``folder``, forge-zoo's run of a
    seed before TRL's (whose steps and evaluation points it gives), each written to its
    file as it finishes."""
    torch.set_num_threads(threads)
    generators: dict = {}
    for algorithm in algorithms:
        for seed in seeds:
            fz_path = run_file(folder, "fz", algorithm, seed)
            fz = finished(fz_path, setting)
            if fz is None:
                start = time.perf_counter()
                fz = forge_zoo_side(algorithm, seed, setting, folder, generators)
                fz["threads"] = threads if not setting.fz_from else None
                write_whole(fz_path, fz)
                log(
                    f"forge-zoo {algorithm} seed {seed}: headline {fz['headline']:.3f} "
                    f"({time.perf_counter() - start:.0f} s)"
                )
            trl_path = run_file(folder, "trl", algorithm, seed)
            if finished(trl_path, setting) is None:
                start = time.perf_counter()
                trl = trl_side(algorithm, seed, setting, folder, fz)
                trl["threads"] = threads
                write_whole(trl_path, trl)
                log(
                    f"TRL {algorithm} seed {seed}: headline {trl['headline']:.3f} "
                    f"({time.perf_counter() - start:.0f} s)"
                )


def load_results(folder: Path) -> list[dict[str, Any]]:
    """Every per-run file of ``folder`` (``runs/*.json``)."""
    return [json.loads(p.read_text()) for p in sorted((folder / "runs").glob("*.json"))]


def interval(values: list[float]) -> dict[str, float]:
    """Mean and 95% t-interval over runs (nan bounds with fewer than 2)."""
    from scipy import stats as sps

    n = len(values)
    mean = statistics.fmean(values) if n else math.nan
    if n < 2:
        return {"n": n, "mean": mean, "sd": math.nan, "low": math.nan, "high": math.nan}
    sd = statistics.stdev(values)
    half = float(sps.t.ppf(0.975, n - 1)) * sd / math.sqrt(n)
    return {"n": n, "mean": mean, "sd": sd, "low": mean - half, "high": mean + half}


def welch(a: list[float], b: list[float]) -> dict[str, float]:
    """mean(a) - mean(b) with its 95% Welch interval (unpaired, descriptive)."""
    from scipy import stats as sps

    if len(a) < 2 or len(b) < 2:
        return {"difference": math.nan, "low": math.nan, "high": math.nan}
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    se = math.sqrt(va + vb)
    diff = statistics.fmean(a) - statistics.fmean(b)
    if se == 0:
        return {"difference": diff, "low": diff, "high": diff}
    dof = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    half = float(sps.t.ppf(0.975, dof)) * se
    return {"difference": diff, "low": diff - half, "high": diff + half}


def correlation(x: list[float], y: list[float]) -> float:
    if len(x) < 3:
        return math.nan
    mx, my = statistics.fmean(x), statistics.fmean(y)
    sx = math.sqrt(sum((a - mx) ** 2 for a in x))
    sy = math.sqrt(sum((b - my) ** 2 for b in y))
    cov = sum((a - mx) * (b - my) for a, b in zip(x, y, strict=True))
    return cov / (sx * sy) if sx and sy else math.nan


def summarise(
    results: list[dict[str, Any]], delta: float | None = None, alpha: float | None = None
) -> dict[str, Any]:
    """Level c's figures from per-run results, per algorithm over the seeds both sides
    finished: each side's mean headline and interval, the paired difference forge-zoo -
    TRL by seed with the board's tests (harness.verdicts: ``difference_p``,
    ``equivalence_p`` within +/-delta, adjusted over the algorithms as one family by
    ``shaffer_holm``, decided by ``decide``), power at the family's level alpha / k, the
    unpaired (Welch) interval beside it, and each side's wall seconds per optimizer
    step."""
    from harness import verdicts as v
    from harness.scores import headline_text

    delta = v.DEFAULT_DELTA if delta is None else delta
    alpha = v.ALPHA if alpha is None else alpha
    runs: dict[str, dict[str, dict[int, dict[str, Any]]]] = {}
    for r in results:
        runs.setdefault(r["algorithm"], {"fz": {}, "trl": {}})[r["side"]][r["seed"]] = r
    names = [a for a in ALGORITHMS if a in runs] + sorted(set(runs) - set(ALGORITHMS))
    names = [a for a in names if runs[a]["fz"] and runs[a]["trl"]]
    family = v.comparisons(len(names))
    level = alpha / family
    points = sorted({r["setting"]["eval_points"] for r in results})
    headline = "; ".join(headline_text(k) for k in points)
    rows: list[dict[str, Any]] = []
    for name in names:
        fz, trl = runs[name]["fz"], runs[name]["trl"]
        seeds = sorted(set(fz) & set(trl))
        a = [fz[s]["headline"] for s in seeds]
        b = [trl[s]["headline"] for s in seeds]
        d = [x - y for x, y in zip(a, b, strict=True)]
        diff = interval(d)
        sd = diff["sd"]
        rows.append(
            {
                "algorithm": name,
                "seeds": seeds,
                "forge-zoo headlines": a,
                "TRL headlines": b,
                "forge-zoo": interval(a),
                "TRL": interval(b),
                "difference": diff,
                "p_difference": v.difference_p(d),
                "p_equivalence": v.equivalence_p(d, delta),
                "unpaired (Welch)": welch(a, b),
                "correlation of paired headlines": correlation(a, b),
                "mdd": v.family_mdd(sd, len(d), family, alpha),
                "power_at_delta": v.power_to_detect(delta, sd, len(d), level),
                "equivalence_power": v.equivalence_power(sd, len(d), delta, level),
                "forge-zoo seconds per optimizer step": statistics.fmean(
                    fz[s]["seconds_per_optimizer_step"] for s in seeds
                ),
                "TRL seconds per optimizer step": statistics.fmean(
                    trl[s]["seconds_per_optimizer_step"] for s in seeds
                ),
                "forge-zoo optimizer steps": [fz[s]["optimizer_steps"] for s in seeds],
                "TRL optimizer steps": [trl[s]["optimizer_steps"] for s in seeds],
                "forge-zoo source": sorted({str(Path(fz[s]["source"]).parent) for s in seeds}),
            }
        )
    adj_diff, adj_equiv = v.shaffer_holm(
        [r["p_difference"] for r in rows], [r["p_equivalence"] for r in rows]
    )
    for r, pd_, pe in zip(rows, adj_diff, adj_equiv, strict=True):
        verdict, also = v.decide(pd_, pe, r["difference"]["mean"], alpha)
        if not (pd_ == pd_ or pe == pe):
            verdict = "unresolved"
        r |= {
            "p_difference_adjusted": pd_,
            "p_equivalence_adjusted": pe,
            "verdict": verdict,
            "also_detected": also,
        }
    return {
        "delta": delta,
        "alpha": alpha,
        "family": family,
        "level": level,
        "pairing": "by seed",
        "headline": headline,
        "settings": sorted({json.dumps(r["setting"], sort_keys=True) for r in results}),
        "rows": rows,
    }


def _num(x: float, form: str = ".3f") -> str:
    return "n/a" if x != x else format(x, form)


def _ci(mean: float, low: float, high: float, form: str = ".3f") -> str:
    return f"{_num(mean, form)} [{_num(low, form)}, {_num(high, form)}]"


def _p(x: float) -> str:
    return _num(x, ".3g")


def report(summary: dict[str, Any], command: str, machine: str, commit: str) -> str:
    """levels_c.md from ``summarise``'s figures."""
    s = summary
    lines = [
        "# Parity with TRL 1.16 GRPOTrainer: level c, learning",
        "",
        f"Measured by `{command}` at commit {commit} on "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; machine: {machine}. "
        "Computed from the per-run files in runs/ (one per side, algorithm and seed).",
        "",
        "Settings (both sides; the per-run files record them): " + "; ".join(s["settings"]) + ".",
        "",
        "Each run starts from the tiny-sum weights at the mapped settings (docs/parity.md, "
        "'The settings'); TRL trains on forge-zoo's training prompts of its seed in order "
        "for the optimizer steps forge-zoo's run of that seed took, and its checkpoints at "
        "forge-zoo's evaluation points are scored by forge-zoo's greedy held-out "
        "evaluation. Headline: " + s["headline"] + ". Difference: "
        "forge-zoo - TRL, **paired by seed** (both sides of a seed see the same prompt "
        "stream, in the same order for grpo and dr_grpo, and the same deterministic "
        "evaluation; their samples differ, so the pairs may correlate little, which costs "
        "the paired test degrees of freedom but not its validity: the pairs are fixed "
        "before the runs). The unpaired Welch interval and the correlation of the paired "
        "headlines are shown beside it.",
        "",
        f"Verdicts: harness.verdicts, as the board decides them: the paired t-test of no "
        f"difference and the TOST of a difference of at least ±{s['delta']:g}, adjusted "
        f"over the {s['family']} algorithm(s) as one family (Holm with Shaffer's "
        f"restriction) at family-wise alpha {s['alpha']:g}; power and the minimum "
        f"detectable difference (80% power) at the family's first-step level "
        f"{s['alpha']:g}/{s['family']} = {s['level']:.4f}.",
        "",
        "| algorithm | seeds | forge-zoo [95% CI] | TRL [95% CI] | forge-zoo - TRL, paired "
        "[95% CI] | unpaired (Welch) [95% CI] | r(paired) | p diff (adj) | p equiv (adj) "
        "| verdict | MDD | power at ±delta | equivalence power | s / optimizer step, "
        "forge-zoo | s / optimizer step, TRL |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in s["rows"]:
        w, d, fz, trl = r["unpaired (Welch)"], r["difference"], r["forge-zoo"], r["TRL"]
        verdict = r["verdict"] + (" (a smaller difference detected)" if r["also_detected"] else "")
        if r["verdict"] == "equivalent":
            verdict = f"equivalent within ±{s['delta']:g}" + verdict[len("equivalent") :]
        lines.append(
            f"| {r['algorithm']} | {len(r['seeds'])} | "
            f"{_ci(fz['mean'], fz['low'], fz['high'])} | "
            f"{_ci(trl['mean'], trl['low'], trl['high'])} | "
            f"{_ci(d['mean'], d['low'], d['high'], '+.4f')} | "
            f"{_ci(w['difference'], w['low'], w['high'], '+.4f')} | "
            f"{_p(r['correlation of paired headlines'])} | {_p(r['p_difference'])} "
            f"({_p(r['p_difference_adjusted'])}) | {_p(r['p_equivalence'])} "
            f"({_p(r['p_equivalence_adjusted'])}) | {verdict} | {_p(r['mdd'])} | "
            f"{_p(r['power_at_delta'])} | {_p(r['equivalence_power'])} | "
            f"{r['forge-zoo seconds per optimizer step']:.2f} | "
            f"{r['TRL seconds per optimizer step']:.2f} |"
        )
    lines += [
        "",
        "Wall seconds per optimizer step: training time (sampling, scoring, old and "
        "reference log-probs, updates; evaluations and TRL's checkpoint saving excluded) "
        "over the run's optimizer steps, the mean over its seeds. forge-zoo's are its "
        "runs' own (`seconds` in metrics.jsonl): measured in this command when it ran "
        "them, in the board's session when read with --fz-from.",
        "",
        "Per seed (headline, optimizer steps):",
        "",
        "| algorithm | seed | forge-zoo | TRL | forge-zoo steps | TRL steps |",
        "|---|---|---|---|---|---|",
    ]
    for r in s["rows"]:
        for i, seed in enumerate(r["seeds"]):
            lines.append(
                f"| {r['algorithm']} | {seed} | {r['forge-zoo headlines'][i]:.3f} | "
                f"{r['TRL headlines'][i]:.3f} | {r['forge-zoo optimizer steps'][i]} | "
                f"{r['TRL optimizer steps'][i]} |"
            )
    return "\n".join(lines) + "\n"


def write_report(folder: Path, out: Path, command: str) -> dict[str, Any]:
    """levels_c.{md,json} in ``out`` from the per-run files of ``folder``."""
    from benchmarks.common import machine_line
    from benchmarks.parity.step1 import commit_of

    summary = summarise(load_results(folder))
    machine, commit = machine_line(), commit_of()
    payload = {
        "command": command,
        "commit": commit,
        "machine": machine,
        "runs folder": str(folder),
        **summary,
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "levels_c.json").write_text(json.dumps(payload, indent=1))
    (out / "levels_c.md").write_text(report(summary, command, machine, commit))
    return payload
