"""ReMax (zoo/algorithms/remax.py; Li et al., arXiv 2310.10505, Algorithm 1): advantages
and the on-policy gradient against values typed from the paper's formula, and the loop's
greedy baseline (``Algorithm.needs_greedy_baseline``): one greedy completion per prompt
from the same engine and weights, scored by the env, charged to the ledger's ``baseline``
phase beside exactly what a grpo run of the same samples charges, refused in async mode,
resumed exactly, and a short run of the command line (slow)."""

from __future__ import annotations

import csv
import json
import statistics
from pathlib import Path

import pytest
import torch
from harness_cli import run_harness

from harness.experiment import preflight
from harness.runner import execute_run, read_metrics
from zoo.algorithms import get_algorithm, list_algorithms
from zoo.algorithms.conformance import CHECKS
from zoo.core.config import ConfigError
from zoo.core.types import TrainBatch
from zoo.run import checkpoint
from zoo.run.checkpoint import current, load_state_file
from zoo.run.loop import RLLoop
from zoo.run.run_config import RunConfig
from zoo.run.runlog import is_timing_key
from zoo.services.ledger import PHASES

# --- the estimator: A_ij = R(x_i, y_ij) - R(x_i, greedy_i) ---------------------------------

# Three prompts, G = 4 samples each, and the reward of each prompt's greedy answer:
# prompt 0's greedy answer is right (b = 1): a right sample gets 0, a wrong one -1;
# prompt 1's greedy answer is wrong (b = 0): a right sample gets +1, a wrong one 0;
# prompt 2 has partial credit (b = 0.5).
REWARDS = [[1.0, 0.0, 1.0, 0.0], [0.0, 1.0, 0.0, 0.0], [0.5, 0.25, 1.0, 0.0]]
GREEDY = [1.0, 0.0, 0.5]
PAPER = [[0.0, -1.0, 0.0, -1.0], [0.0, 1.0, 0.0, 0.0], [0.0, -0.25, 0.5, -0.5]]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_advantages_are_each_samples_reward_minus_its_prompts_greedy_reward(dtype):
    algo = get_algorithm("remax")
    rewards = torch.tensor(REWARDS, dtype=dtype)
    lengths = torch.full((3, 4), 5)
    got = algo.group_advantages(rewards, lengths, None, torch.tensor(GREEDY))  # as the loop
    assert got.dtype == dtype and got.tolist() == PAPER  # exact: every value is binary


def test_the_flag_is_set_for_remax_only_and_the_baseline_is_required():
    assert get_algorithm("remax").needs_greedy_baseline
    assert [n for n in list_algorithms() if get_algorithm(n).needs_greedy_baseline] == ["remax"]
    rewards = torch.tensor(REWARDS)
    with pytest.raises(ValueError, match="greedy_rewards"):
        get_algorithm("remax").group_advantages(rewards, torch.ones(3, 4))
    with pytest.raises(ValueError, match=r"greedy_rewards.*\(3,\).*\(2,\)"):
        get_algorithm("remax").group_advantages(rewards, torch.ones(3, 4), None, torch.zeros(2))
    # an algorithm without the parameter ignores a baseline it is handed
    plain = get_algorithm("grpo").group_advantages(rewards, torch.ones(3, 4))
    assert torch.equal(
        get_algorithm("grpo").group_advantages(rewards, torch.ones(3, 4), None, torch.ones(3)),
        plain,
    )


def test_the_on_policy_gradient_is_reinforce_with_the_greedy_baseline_over_all_tokens():
    # Two prompts of G = 2: rewards [1, 0] with a wrong greedy answer (b = 0) and [0, 1]
    # with a right one (b = 1): A = [1, 0, -1, 0]. Responses of 2, 1, 3 and 2 tokens: 8 in
    # all, so d loss / d lp_it = -A_i / 8 (token_mean, the authors' actor_loss_fn), and the
    # loss at r = 1 is -sum_it A_i / 8 = -(2 * 1 + 3 * -1) / 8 = 1/8.
    adv = get_algorithm("remax").group_advantages(
        torch.tensor([[1.0, 0.0], [0.0, 1.0]]), torch.ones(2, 2), None, torch.tensor([0.0, 1.0])
    )
    assert adv.tolist() == [[1.0, 0.0], [-1.0, 0.0]]
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 1], [1, 1, 0]], dtype=torch.float64)
    lp = (-0.3 - torch.arange(12, dtype=torch.float64).reshape(4, 3) / 10).requires_grad_(True)
    batch = TrainBatch(lp, lp.detach().clone(), None, adv.reshape(-1).double(), mask)
    out = get_algorithm("remax").loss(batch)
    out.loss.backward()
    assert float(out.loss.detach()) == pytest.approx(1 / 8, abs=1e-15)
    want = [[-1 / 8, -1 / 8, 0.0], [0.0, 0.0, 0.0], [1 / 8, 1 / 8, 1 / 8], [0.0, 0.0, 0.0]]
    assert torch.allclose(lp.grad, torch.tensor(want, dtype=torch.float64), rtol=0, atol=1e-15)
    assert out.metrics["clip_low_acting_frac"] == out.metrics["clip_high_acting_frac"] == 0.0


def test_check_plugin_passes(tmp_path):
    result = run_harness("check-plugin", "remax", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr[-2000:]
    n = len(CHECKS)  # every check of the conformance suite
    assert f"{n} of {n} properties hold or do not apply" in result.stdout


# --- the loop's greedy baseline --------------------------------------------------------------


def recording(generator, calls: list):
    """Wrap ``generator.generate`` to record every call's arguments and result."""
    generate = generator.generate

    def recorded(prompts, n, sampling, seeds=None, greedy=False):
        out = generate(prompts, n, sampling, seeds=seeds, greedy=greedy)
        calls.append({"prompts": prompts, "n": n, "seeds": seeds, "greedy": greedy, "out": out})
        return out

    return recorded


def one_step(loop: RLLoop) -> tuple[dict, list[dict]]:
    """Run one step of ``loop``, recording its generate calls."""
    calls: list[dict] = []
    loop.s.generator.generate = recording(loop.s.generator, calls)
    try:
        return loop.step(), calls
    finally:
        del loop.s.generator.generate


def small(algorithm: str, **overrides) -> RunConfig:
    settings = dict(
        algorithm=algorithm,
        prompts_per_step=4,
        group_size=4,
        steps=1,
        eval_samples=0,
        env_config={"eval_size": 8},
    )
    return RunConfig.from_flat(**{**settings, **overrides})


def test_the_loop_generates_scores_and_charges_one_greedy_completion_per_prompt(loop_for):
    cfg = small("remax")
    loop = loop_for(cfg)
    record, calls = one_step(loop)
    sampled, greedy = calls  # two engine calls: the samples, then the greedy baseline
    assert (sampled["n"], sampled["greedy"], greedy["n"], greedy["greedy"]) == (4, False, 1, True)
    assert greedy["prompts"] == sampled["prompts"] and greedy["seeds"] is None
    completions = [g[0] for g in greedy["out"]]

    # scored by the env, as the samples are
    env = loop.s.env
    prompts = env.train_prompts(0, 4, cfg.run.seed)
    b = env.score_batch(prompts, [c.text for c in completions])
    assert record["baseline_reward_mean"] == statistics.fmean(b)
    assert record["baseline_len_mean"] == statistics.fmean(len(c.token_ids) for c in completions)

    # each sample's advantage is its reward minus its own prompt's greedy reward
    rows = [r for r in loop.kept_samples if r["kind"] == "train"]
    assert len(rows) == 2 * 4  # the first two groups are kept for samples.jsonl
    for r in rows:
        assert r["advantage"] == pytest.approx(r["reward"] - b[r["index"]], abs=1e-7)

    # charged as generation, in the baseline phase, and counted as completions generated
    ledger = loop.s.ledger
    flops = sum(ledger.generation_flops(len(c.prompt_ids), len(c.token_ids)) for c in completions)
    assert flops > 0 and ledger.flops["baseline"] == flops
    assert ledger.tokens["baseline"] == sum(len(c.token_ids) for c in completions)
    assert ledger.seconds["baseline"] > 0
    assert loop.samples == 4 * 4 + 4
    delta = ledger.step_delta()
    assert delta["baseline_flops"] == flops and ledger.phases == (*PHASES, "baseline")

    # grpo without its KL term on the same prompts, seeds and start weights draws the same
    # samples and charges exactly the same for every other phase; its records keep their keys
    grpo = loop_for(small("grpo", algorithm_config={"beta": 0.0}))
    grpo_record, grpo_calls = one_step(grpo)
    assert [c["greedy"] for c in grpo_calls] == [False]
    assert grpo_calls[0]["out"] == sampled["out"]
    assert grpo_record["reward_mean"] == record["reward_mean"]
    assert set(record) - set(grpo_record) == {"baseline_reward_mean", "baseline_len_mean"}
    assert set(grpo.s.ledger.step_delta()) == {k for k in delta if not k.startswith("baseline")}
    assert grpo.s.ledger.phases == PHASES
    for phase in PHASES:
        assert grpo.s.ledger.flops[phase] == ledger.flops[phase], phase
        assert grpo.s.ledger.tokens[phase] == ledger.tokens[phase], phase
    assert ledger.total_flops == grpo.s.ledger.total_flops + flops


def test_async_mode_is_refused_naming_the_setting(loop_for, tiny_model_path):
    cfg = RunConfig.from_flat(algorithm="remax", placement="monarch", mode="async")
    with pytest.raises(ConfigError, match=r"'remax'.*sync mode only; got mode 'async'"):
        preflight([cfg])  # before any work: harness run and compare exit 2
    loop = loop_for(small("remax"))
    loop.cfg.placement.mode = "async"
    with pytest.raises(ConfigError, match="sync mode only"):
        RLLoop(loop.cfg, loop.s)
    preflight(
        [RunConfig.from_flat(algorithm="rloo", placement="monarch", mode="async")]
    )  # others run


class Killed(BaseException):
    """Stands for SIGKILL (nothing catches it)."""


def test_a_remax_run_resumes_exactly(loop_for, tmp_path, monkeypatch):
    cfg = small("remax", steps=2, eval_every=2, checkpoint_every=1)

    def run(out: Path, resume: bool = False) -> None:
        execute_run(cfg, out, loop_for(cfg).s, command="test", resume=resume)

    run(tmp_path / "whole")
    whole = read_metrics(tmp_path / "whole")
    assert [r["step"] for r in whole] == [0, 1, 2]
    assert all(r["baseline_flops"] > 0 and "baseline_reward_mean" in r for r in whole[1:])

    seen: list[str] = []

    def kill_after_first_save(stage: str) -> None:
        seen.append(stage)
        if stage == "old removed":
            raise Killed(stage)

    out = tmp_path / "resumed"
    monkeypatch.setattr(checkpoint, "reached", kill_after_first_save)
    with pytest.raises(Killed):
        run(out)
    monkeypatch.setattr(checkpoint, "reached", lambda s: None)
    state = load_state_file(current(out / "checkpoint") / checkpoint.STATE_FILE)
    assert state["loop"]["step_index"] == 1
    assert state["loop"]["ledger"]["flops"]["baseline"] == whole[1]["baseline_flops"]
    run(out, resume=True)

    def untimed(records: list[dict]) -> list[dict]:
        return [{k: v for k, v in r.items() if not is_timing_key(k)} for r in records]

    assert untimed(read_metrics(out)) == untimed(whole)


# --- the command line ------------------------------------------------------------------------


@pytest.mark.slow
def test_a_short_run_beside_grpo_charges_the_baseline_from_the_same_budget(tmp_path):
    """remax and grpo (both at beta 0) through ``harness compare``: 256 completions each,
    16 prompts x 8 a step. remax also generates 16 greedy completions a step, which count
    in the budget: 144 a step, so both stop after 2 steps. Step 1 samples from the same
    start weights and seeds, so every phase but remax's baseline costs the same."""
    result = run_harness(
        "compare",
        "remax",
        "grpo",
        "--set",
        "beta=0",
        "--seeds",
        "1",
        "--budget-samples",
        "256",
        "--eval-points",
        "1",
        "--prompts-per-step",
        "16",
        "--eval-samples",
        "4",
        "--quiet",
        "--out",
        "cmp",
        cwd=tmp_path,
        timeout=1200,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    runs = tmp_path / "cmp" / "runs"
    remax = read_metrics(runs / "remax__arithmetic__seed0")
    grpo = read_metrics(runs / "grpo__arithmetic__seed0")
    assert [r["samples"] for r in remax[1:]] == [144, 288]
    assert [r["samples"] for r in grpo[1:]] == [128, 256]
    for r in remax[1:]:
        assert r["baseline_flops"] > 0 and r["baseline_tokens"] > 0
        assert 0 <= r["baseline_reward_mean"] <= 1
    assert remax[-1]["flops"] == pytest.approx(
        sum(r[f"{p}_flops"] for r in remax[1:] for p in (*PHASES, "baseline")), rel=1e-12
    )
    assert not any(k.startswith("baseline") for r in grpo for k in r)
    first, other = remax[1], grpo[1]
    for p in PHASES:
        assert first[f"{p}_flops"] == other[f"{p}_flops"], p
    assert first["flops"] == other["flops"] + first["baseline_flops"]
    assert first["reward_mean"] == other["reward_mean"]
    config = json.loads((runs / "remax__arithmetic__seed0" / "config.json").read_text())
    assert config["algorithm"]["name"] == "remax"
    # the comparison's throughput table gives the baseline its share of the FLOPs
    table = {
        r["algorithm"]: r
        for r in csv.DictReader((tmp_path / "cmp" / "tables" / "throughput.csv").open())
    }
    share = sum(r["baseline_flops"] for r in remax[1:]) / remax[-1]["flops"]
    assert float(table["remax"]["baseline_flops_share"]) == pytest.approx(share, rel=1e-9)
    assert float(table["grpo"]["baseline_flops_share"]) == 0.0


@pytest.mark.slow
@pytest.mark.extra  # CI keeps a ReMax run beside grpo end to end (the test above), its
# resume (default set) and GRPO's learning test
def test_remax_raises_heldout_accuracy_on_the_tiny_model(tmp_path):
    """With the run defaults (128 prompts x 8, 4 mini-batches), seed 0 measured held-out
    greedy accuracy 0.242 -> 0.374 at step 10, 0.388 at step 20, 0.392 at step 30 (sampled
    pass@1 0.157 -> 0.222); the greedy baseline took 2.3% of the ledger's FLOPs."""
    result = run_harness(
        "run",
        "remax",
        "--steps",
        "20",
        "--eval-every",
        "20",
        "--seed",
        "0",
        "--quiet",
        "--out",
        "run",
        cwd=tmp_path,
        timeout=3600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    records = read_metrics(tmp_path / "run")
    start, end = records[0]["eval_reward"], records[-1]["eval_reward"]
    assert end - start >= 0.08, f"held-out accuracy {start:.3f} -> {end:.3f}"
    share = sum(r["baseline_flops"] for r in records[1:]) / records[-1]["flops"]
    assert 0.005 < share < 0.1, share
