"""Running the levels: ``python -m benchmarks.parity --levels a,b [--prompts 64] [--out
results/parity]`` writes ``levels_ab.md`` and ``levels_ab.json`` there; ``python -m harness
bench --only parity`` puts the same figures (``parity_table``) in performance.md.
``--levels c`` (learning, benchmarks.parity.learning) trains both sides per algorithm and
seed, one file per run under ``<out>/levels_c/runs``, and writes ``levels_c.md`` and
``levels_c.json`` in ``--out``."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.common import REPO
from benchmarks.parity.settings import ALGORITHMS

LEVELS = ("a", "b", "c")
"""a: the loss on the same inputs; b: one rollout batch's update; c: learning over seeds
(benchmarks.parity.learning)."""


def run_levels(
    levels: list[str], prompts: int = 64, seed: int = 0, algorithms: tuple[str, ...] = ALGORITHMS
) -> dict[str, Any]:
    """The figures of ``levels`` on one shared batch of ``prompts`` x G completions."""
    from benchmarks.parity import levels as lv
    from benchmarks.parity.shared import sample_batch

    start = time.perf_counter()
    batch = sample_batch(prompts, seed)
    out: dict[str, Any] = {
        "batch": {
            "prompts": prompts,
            "completions": batch.size,
            "seed": seed,
            "response tokens": int(batch.mask.sum()),
            "mean reward": float(batch.rewards.mean()),
            "groups with differing rewards": int(
                (batch.rewards.amax(1) > batch.rewards.amin(1)).sum()
            ),
        },
    }
    if "a" in levels:
        logprobs = lv.logprob_parity(batch)
        old = logprobs.pop("old")
        out["a"] = {"logprobs": logprobs, "losses": [], "advantages": {}}
        for name in algorithms:
            out["a"]["losses"] += lv.loss_parity(name, batch, old, seed)
            out["a"]["advantages"][name] = lv.advantage_parity(name, batch)
    if "b" in levels:
        out["b"] = [lv.update_parity(name, batch) for name in algorithms]
    out["seconds"] = time.perf_counter() - start
    return out


def _fmt(x: Any) -> str:
    if isinstance(x, float):
        return f"{x:.3g}"
    if isinstance(x, list):
        return ", ".join(_fmt(v) for v in x)
    return "" if x is None else str(x).replace("|", "\\|")


def _table(rows: list[dict[str, Any]]) -> list[str]:
    keys = list(dict.fromkeys(k for r in rows for k in r))
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    lines += ["| " + " | ".join(_fmt(r.get(k)) for k in keys) + " |" for r in rows]
    return lines


def report(result: dict[str, Any], command: str, machine: str) -> str:
    """levels_ab.md: the measured figures with their command and machine."""
    b = result["batch"]
    lines = [
        "# Parity with TRL 1.16 GRPOTrainer: levels a and b",
        "",
        f"Measured by `{command}` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} "
        f"({result['seconds'] / 60:.1f} min); machine: {machine}.",
        "",
        f"Shared batch: {b['prompts']} running_sum training prompts x 8 = {b['completions']} "
        f"completions sampled once from the tiny-sum start weights (transformers' generate, "
        f"T 0.7, 64 new tokens, seed {b['seed']}), {b['response tokens']} response tokens, "
        f"mean reward {b['mean reward']:.3f}, {b['groups with differing rewards']} groups "
        "with differing rewards.",
        "",
    ]
    if "a" in result:
        a = result["a"]
        lp = a["logprobs"]
        lines += [
            "## Level a: the loss on the same inputs",
            "",
            f"Log-probs, each side's own model code from the same weights (forge-zoo: "
            f"TorchTitan Qwen3, right-padded; TRL: transformers Qwen3, left-padded prompt, "
            f"fused LM head): max |difference| {lp['max abs logprob diff']:.3g}, mean "
            f"{lp['mean abs logprob diff']:.3g} over {lp['response tokens']} response tokens.",
            "",
            "Advantages, each side's formula from the same rewards (std + 1e-6 against std + "
            "1e-4): max |difference| "
            + ", ".join(f"{k} {v:.3g}" for k, v in a["advantages"].items())
            + ". The losses below take forge-zoo's advantages on both sides.",
            "",
            "Loss and d loss / d log-probs: forge-zoo's log-probs as old, old + N(0, 0.15^2) "
            "per token as new (with grad) and, independently, as ref, into TRL's "
            "`GRPOTrainer.compute_loss` (its log-prob method returning the new log-probs) "
            "and forge-zoo's `algorithm.loss(TrainBatch)`. Normalisers matched explicitly: "
            "'whole batch' trains all rows as one optimizer step on both sides (TRL "
            "per_device_train_batch_size = B, steps_per_generation 1), so TRL's per-batch "
            "means and forge-zoo's whole-batch counts are the same numbers; 'mini-batch 1 "
            "of 4' is TRL's first mini-batch at the run's settings, with forge-zoo given "
            "TRL's normaliser (dapo: the generation batch's tokens / 4, not the mini-batch's "
            "own; the last column is own / that, the factor forge-zoo's own run differs by).",
            "",
            *_table(a["losses"]),
            "",
        ]
    if "b" in result:
        lines += [
            "## Level b: one rollout batch's update",
            "",
            "Each side trains the shared batch from the start weights at the run's settings "
            "(4 mini-batches = 4 AdamW steps, lr 2.5e-5, grad clip 2, constant lr), "
            "forge-zoo's advantages on both; TRL through its own `train()` (its generation "
            "step replaced by the finished batch, its own old log-probs), forge-zoo through "
            "`Trainer.train` with TRL's recorded row shuffle reproduced. Relative L2 "
            "distance: ||update forge-zoo - update TRL|| / ||update TRL|| over all "
            "parameters. dapo: TRL divides each mini-batch by the average mini-batch's "
            "tokens, forge-zoo by its own (the tokens per mini-batch are listed); the last "
            "column reruns forge-zoo's side with TRL's normaliser, to show that this is "
            "where dapo's distance comes from.",
            "",
            *_table(result["b"]),
            "",
        ]
    lines += [
        "The settings map and the settings that cannot be matched: docs/parity.md "
        "(printed by `python -m benchmarks.parity.settings`).",
        "",
    ]
    return "\n".join(lines)


def parity_table(root: Path, quick: bool = False) -> list[dict[str, Any]]:
    """``harness bench``'s rows: level a's losses and log-probs, level b's updates (quick:
    8 prompts, figures meaningless beyond a smoke test), and level c's verdicts as its
    committed report holds them (``level_c_rows``)."""
    result = run_levels(["a", "b"], prompts=8 if quick else 64)
    a = result["a"]
    rows = [
        {
            "level": "a",
            "algorithm": "(model)",
            "check": "max abs logprob diff",
            "value": a["logprobs"]["max abs logprob diff"],
        }
    ]
    for r in a["losses"]:
        rows += [
            {
                "level": "a",
                "algorithm": r["algorithm"],
                "check": f"{r['scope']}: {k}",
                "value": r[k],
            }
            for k in ("abs loss diff", "max abs grad diff")
        ]
    rows += [
        {"level": "a", "algorithm": k, "check": "max abs advantage diff", "value": v}
        for k, v in a["advantages"].items()
    ]
    rows += [
        {
            "level": "b",
            "algorithm": r["algorithm"],
            "check": "update relative L2 distance",
            "value": r["relative L2 distance"],
        }
        for r in result["b"]
    ]
    return rows + level_c_rows()


LEVEL_C_REPORT = REPO / "results" / "parity" / "levels_c.json"
"""Level c's committed report (``python -m benchmarks.parity --levels c``, docs/parity.md)."""


def level_c_rows(report: Path = LEVEL_C_REPORT) -> list[dict[str, Any]]:
    """Level c's rows for ``harness bench``: read from its committed report, never re-run
    here (it is hours of CPU: 60 TRL runs), each row naming the file, its seeds, verdict
    and commit; one row saying how to make it when there is none."""
    shown = report.relative_to(REPO) if report.is_relative_to(REPO) else report
    if not report.exists():
        return [
            {
                "level": "c",
                "algorithm": "(none)",
                "check": f"not run: no {shown} (python -m benchmarks.parity --levels c)",
                "value": float("nan"),
            }
        ]
    result = json.loads(report.read_text())
    within = f" within +/-{result['delta']:g}"
    return [
        {
            "level": "c",
            "algorithm": r["algorithm"],
            "check": (
                f"held-out headline, forge-zoo - TRL, {len(r['seeds'])} paired seeds: "
                f"{r['verdict']}{within if r['verdict'] == 'equivalent' else ''} "
                f"(read from {shown}, commit {result['commit']})"
            ),
            "value": r["difference"]["mean"],
        }
        for r in result["rows"]
    ]


def main(argv: list[str] | None = None) -> None:
    from benchmarks.parity.learning import BOARD_BUDGET, BOARD_EVAL_POINTS

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--levels", default="a,b", help="comma-separated, from: a, b, c")
    parser.add_argument(
        "--prompts", type=int, default=64, help="a, b: the shared batch's; c: per rollout batch"
    )
    parser.add_argument("--seed", type=int, default=0, help="a, b: the shared batch's seed")
    parser.add_argument("--out", type=Path, default=Path("results/parity"))
    c = parser.add_argument_group("level c (learning)")
    c.add_argument(
        "--algorithms", default=",".join(ALGORITHMS), help="comma-separated, from the three"
    )
    c.add_argument("--seeds", type=int, default=10, help="seeds 0..N-1 on each side")
    c.add_argument(
        "--first-seed",
        type=int,
        default=0,
        help="start at this seed (K..N-1), so that two processes can share the seeds "
        "(the report reads every finished run in the folder)",
    )
    c.add_argument(
        "--steps",
        type=int,
        default=0,
        help="TRL's optimizer steps, evaluated at k/K of them (default 0: the optimizer "
        "steps of forge-zoo's run of the same seed, evaluated where it was)",
    )
    c.add_argument(
        "--fz-from",
        default="",
        help="read forge-zoo's runs from this committed board (e.g. "
        "results/running-sum-paper) instead of running them; refused if a setting differs",
    )
    c.add_argument(
        "--budget", type=float, default=BOARD_BUDGET, help="forge-zoo's budget, ledger FLOPs"
    )
    c.add_argument(
        "--rollout-steps",
        type=int,
        default=0,
        help="forge-zoo's budget in rollout steps instead of FLOPs (smoke tests)",
    )
    c.add_argument("--eval-points", type=int, default=BOARD_EVAL_POINTS)
    c.add_argument(
        "--eval-prompts", type=int, default=0, help="held-out problems (0: the env's 500)"
    )
    c.add_argument("--threads", type=int, default=1, help="torch threads, both sides")
    c.add_argument(
        "--runs-folder",
        type=Path,
        default=None,
        help="where the per-run files and forge-zoo's run folders go (default <out>/levels_c)",
    )
    args = parser.parse_args(argv)
    levels = [x.strip() for x in args.levels.split(",") if x.strip()]
    unknown = sorted(set(levels) - set(LEVELS))
    if unknown or not levels:
        parser.error(
            f"--levels {args.levels!r}: unknown level(s) {', '.join(unknown) or '(none given)'}; "
            f"valid: {', '.join(LEVELS)}"
        )
    algorithms = tuple(a.strip() for a in args.algorithms.split(",") if a.strip())
    if not algorithms or set(algorithms) - set(ALGORITHMS):
        parser.error(f"--algorithms {args.algorithms!r}: valid are {', '.join(ALGORITHMS)}")
    if not 0 <= args.first_seed < args.seeds:
        parser.error(f"--first-seed {args.first_seed}: must be in 0..{args.seeds - 1}")
    from benchmarks.common import machine_line

    command = "python -m benchmarks.parity " + " ".join(argv if argv is not None else sys.argv[1:])
    command = command.strip()
    args.out.mkdir(parents=True, exist_ok=True)
    ab = [x for x in levels if x in ("a", "b")]
    if ab:
        result = run_levels(ab, args.prompts, args.seed)
        (args.out / "levels_ab.json").write_text(
            json.dumps({"command": command, "machine": machine_line(), **result}, indent=1)
        )
        (args.out / "levels_ab.md").write_text(report(result, command, machine_line()))
        print(f"wrote {args.out / 'levels_ab.md'}")
    if "c" in levels:
        from benchmarks.parity import learning

        setting = learning.Setting(
            prompts=args.prompts,
            budget_flops=args.budget,
            rollout_steps=args.rollout_steps,
            eval_points=args.eval_points,
            eval_prompts=args.eval_prompts,
            steps=args.steps,
            fz_from=args.fz_from,
        )
        folder = args.runs_folder or args.out / "levels_c"
        seeds = range(args.first_seed, args.seeds)
        learning.run_level_c(folder, setting, algorithms, seeds, args.threads)
        learning.write_report(folder, args.out, command)
        print(f"wrote {args.out / 'levels_c.md'}")
