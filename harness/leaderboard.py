"""`harness leaderboard`: every experiment under results/ aggregated into
leaderboards/<model>__<env>.md, a static leaderboards/index.html (plots embedded, readable
offline) and leaderboards/leaderboard.json. Each row carries what made it: the exact
command, a hash of the run config, package versions, git commit and date."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

import pandas as pd

from harness.analysis import write_analysis


def config_hash(run_config: dict) -> str:
    """Hash of everything that defines a run except its seed."""
    payload = {k: v for k, v in run_config.items() if k != "seed"}
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:12]


def experiment_rows(experiment: Path) -> list[dict]:
    if not (experiment / "tables" / "summary.csv").exists():
        write_analysis(experiment)
    manifest = json.loads((experiment / "experiment.json").read_text())
    summary = pd.read_csv(experiment / "tables" / "summary.csv")
    throughput = pd.read_csv(experiment / "tables" / "throughput.csv")
    rows = []
    for r in summary.itertuples():
        run_dirs = sorted((experiment / "runs").glob(f"{r.algorithm}__{r.env}__seed*"))
        config = json.loads((run_dirs[0] / "config.json").read_text())
        t = throughput[(throughput.algorithm == r.algorithm) & (throughput.env == r.env)]
        rows.append({
            "id": f"{config['run']['model']}__{r.env}__{r.algorithm}__{experiment.name}",
            "model": config["run"]["model"], "env": r.env, "algorithm": r.algorithm,
            "reward": r.final_reward_iqm, "ci_low": r.final_ci_low, "ci_high": r.final_ci_high,
            "fit_A": r.fit_A, "fit_B": r.fit_B, "fit_converged": bool(r.fit_converged),
            "seeds": int(r.seeds),
            "generate_tokens_per_s": float(t.generate_tokens_per_s.iloc[0]),
            "train_tokens_per_s": float(t.train_tokens_per_s.iloc[0]),
            "budget": _budget(config["run"]),
            "command": manifest["command"], "config_hash": config_hash(config["run"]),
            "versions": manifest["versions"], "git_commit": config["git"]["commit"],
            "date": manifest["created"], "experiment": str(experiment),
            "runs": [str(d) for d in run_dirs],
        })  # fmt: skip
    return rows


def _budget(run: dict) -> str:
    for key, unit in (("budget_flops", "FLOPs"), ("budget_samples", "samples"),
                      ("budget_seconds", "s")):  # fmt: skip
        if run.get(key):
            return f"{run[key]:.3g} {unit}"
    return f"{run['steps']} steps"


def build_leaderboards(results: Path, out: Path) -> list[Path]:
    experiments = sorted(p.parent for p in results.glob("*/experiment.json"))
    rows = [row for e in experiments for row in experiment_rows(e)]
    if not rows:
        raise FileNotFoundError(f"no experiment (experiment.json) under {results}")
    out.mkdir(parents=True, exist_ok=True)
    (out / "leaderboard.json").write_text(json.dumps(rows, indent=2))
    frame = pd.DataFrame(rows)
    written = [out / "leaderboard.json"]
    sections = []
    for (model, env), g in frame.groupby(["model", "env"]):
        g = g.sort_values("reward", ascending=False)
        table = pd.DataFrame({
            "algorithm": g.algorithm,
            "reward at budget [95% CI]": [f"{r.reward:.3f} [{r.ci_low:.3f}, {r.ci_high:.3f}]"
                                          for r in g.itertuples()],
            "A": g.fit_A.map(lambda v: f"{v:.3f}"), "B": g.fit_B.map(lambda v: f"{v:.2f}"),
            "fit ok": g.fit_converged, "seeds": g.seeds, "budget": g.budget,
            "gen tok/s": g.generate_tokens_per_s.map(lambda v: f"{v:,.0f}"),
            "train tok/s": g.train_tokens_per_s.map(lambda v: f"{v:,.0f}"),
            "config": g.config_hash, "commit": g.git_commit.map(lambda c: (c or "")[:10]),
            "date": g.date, "row id": g.id,
        })  # fmt: skip
        commands = sorted(set(g.command))
        md = [f"# {model} on {env}", "",
              "Reward: held-out reward at the compute budget, interquartile mean across seeds "
              "with a 95% stratified-bootstrap interval. A, B: sigmoid compute fit "
              "(arXiv 2510.13786). Reproduce a row: `python -m harness reproduce ROW_ID`.", "",
              table.to_markdown(index=False), "", "Commands:", ""]  # fmt: skip
        md += [f"    {c}" for c in commands]
        md += ["", "Versions: " + json.dumps(g.versions.iloc[0])]
        path = out / f"{model}__{env}.md"
        path.write_text("\n".join(md) + "\n")
        written.append(path)
        images = "".join(_img(Path(e) / "plots" / "reward_vs_flops.png")
                         for e in sorted(set(g.experiment)))  # fmt: skip
        sections.append(f"<h2>{model} on {env}</h2>{table.to_html(index=False)}"
                        f"<p>Commands: {'<br>'.join(f'<code>{c}</code>' for c in commands)}</p>"
                        f"{images}")  # fmt: skip
    html = ("<!doctype html><html><head><meta charset='utf-8'><title>forge-zoo leaderboards"
            "</title><style>body{font-family:sans-serif;margin:2em}table{border-collapse:"
            "collapse}td,th{border:1px solid #ccc;padding:4px 8px}img{max-width:720px}"
            "</style></head><body><h1>forge-zoo leaderboards</h1>" + "".join(sections)
            + "</body></html>")  # fmt: skip
    (out / "index.html").write_text(html)
    written.append(out / "index.html")
    return written


def _img(path: Path) -> str:
    if not path.exists():
        return ""
    data = base64.b64encode(path.read_bytes()).decode()
    return f"<p><img alt='{path}' src='data:image/png;base64,{data}'></p>"


def find_row(leaderboards: Path, row_id: str) -> dict:
    rows = json.loads((leaderboards / "leaderboard.json").read_text())
    for row in rows:
        if row["id"] == row_id:
            return row
    raise KeyError(row_id)
