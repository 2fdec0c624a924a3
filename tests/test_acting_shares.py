"""Acting shares: every clip, cap and gate of the built-ins reports the share of response
tokens (GSPO: of sequences) whose gradient it changed, beside the share merely out of
range. The expected shares here come from autograd: the gradient with the mechanism
against the gradient with it switched off (bounds at +-1e9, the cap at 1e9, the penalty's
coefficient at 0), not from the flags the losses compute. Also: the trainer combines
per-sequence shares over micro-batches exactly, and the compare report's
``mechanism_acted_steps`` reads acting shares only."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from zoo.algorithms import ALGORITHMS, get_algorithm, list_algorithms
from zoo.algorithms.sapo import GATE_ACTING_WEIGHT
from zoo.core.losses import aggregate, log_ratio
from zoo.core.types import TrainBatch

OFF = 1e9
PPO_CLIPS = {  # name -> the config that switches its clip off
    "grpo": {"eps": OFF},
    "dr_grpo": {"clip_low": -OFF, "clip_high": OFF},
    "dapo": {"eps_low": OFF, "eps_high": OFF},
    "rloo": {"eps": OFF},
    "opo": {"eps": OFF},
    "reinforce_pp": {"eps": OFF},
    "custom": {"clip_range": OFF},
    "clip_cov": {"eps_low": OFF, "eps_high": OFF},
}
NO_COV_SELECTION = {"cov_low": OFF, "cov_high": 2 * OFF}  # Clip-Cov: no candidate tokens
WIDTH = 6
LENGTHS = [6, 3, 0, 5, 4, 6, 2, 5]


@dataclasses.dataclass
class Case:
    lp: torch.Tensor
    old: torch.Tensor
    adv: torch.Tensor
    mask: torch.Tensor
    ref: torch.Tensor | None = None

    @property
    def ratio(self) -> torch.Tensor:
        return torch.exp((self.lp - self.old) * self.mask)

    @property
    def response(self) -> torch.Tensor:
        return self.mask > 0

    @property
    def tokens(self) -> int:
        return int(self.mask.sum())


def mask_of(lengths: list[int]) -> torch.Tensor:
    return torch.tensor([[1.0] * n + [0.0] * (WIDTH - n) for n in lengths], dtype=torch.float64)


def acting_case() -> Case:
    """8 responses (one empty), log-ratios uniform in [-1.3, 1.9] (ratios 0.27 to 6.7:
    past every built-in's bounds on both sides; three set above CISPO's cap), advantages of
    both signs and two rows of A = 0. Row 5's log-ratios average exactly 0 (binary
    fractions), so GSPO's sequence ratio is 1 there. Padding holds junk."""
    g = torch.Generator().manual_seed(11)
    shape = (len(LENGTHS), WIDTH)
    lp = -0.1 - 2 * torch.rand(shape, generator=g, dtype=torch.float64)
    d = -1.3 + 3.2 * torch.rand(shape, generator=g, dtype=torch.float64)
    d[5] = torch.tensor([0.5, -0.5, 0.25, -0.25, 0.125, -0.125], dtype=torch.float64)
    d[0, 4], d[3, 1], d[4, 3] = 1.8, 1.8, 1.75  # above CISPO's cap with A > 0, = 0, < 0
    mask = mask_of(LENGTHS)
    old = torch.where(mask > 0, lp - d, lp + 30.0)
    adv = torch.tensor([1.3, -0.7, 0.9, 0.0, -1.1, 0.6, -0.4, 0.0], dtype=torch.float64)
    return Case(lp, old, adv, mask)


def wrong_side_case() -> Case:
    """Every ratio past the bounds, but only on the side the advantage does not push:
    A > 0 rows at r in [0.3, 0.6] (below every lower bound), A < 0 rows at r in [2.2, 2.9]
    (above every upper bound but CISPO's cap and a dual clip at 3)."""
    g = torch.Generator().manual_seed(12)
    shape = (len(LENGTHS), WIDTH)
    lp = -0.1 - 2 * torch.rand(shape, generator=g, dtype=torch.float64)
    adv = torch.tensor([1.3, -0.7, 0.9, 0.5, -1.1, 0.6, -0.4, 0.2], dtype=torch.float64)
    u = torch.rand(shape, generator=g, dtype=torch.float64)
    r = torch.where(adv[:, None] > 0, 0.3 + 0.3 * u, 2.2 + 0.7 * u)
    return Case(lp, lp - torch.log(r), adv, mask_of(LENGTHS))


def run(name: str, case: Case, **overrides) -> tuple[torch.Tensor, dict[str, float]]:
    """Gradient with respect to lp and metrics of ``name`` (beta 0 unless overridden)."""
    fields = {f.name for f in dataclasses.fields(ALGORITHMS.load(name).config_class)}
    algo = get_algorithm(name, **{**({"beta": 0.0} if "beta" in fields else {}), **overrides})
    lp = case.lp.clone().requires_grad_(True)
    ref = case.ref if algo.needs_reference else None
    out = algo.loss(TrainBatch(lp, case.old, ref, case.adv, case.mask, max_response_len=WIDTH))
    out.loss.backward()
    return lp.grad, out.metrics


def changed(with_it: torch.Tensor, without: torch.Tensor, case: Case) -> torch.Tensor:
    """Response tokens whose gradient the mechanism changed."""
    scale = float(without.abs().max())
    assert scale > 0
    return ((with_it - without).abs() > 1e-9 * scale) & case.response


def share(flags: torch.Tensor, case: Case) -> float:
    return int((flags & case.response).sum()) / case.tokens


# --- the declarations --------------------------------------------------------------------


def test_every_declared_mechanism_is_acting_shares_idle_at_zero():
    declared = {n: ALGORITHMS.load(n).mechanism for n in list_algorithms()}
    builtins = {n for n, s in ALGORITHMS.specs().items() if s.source == "built-in"}
    assert {n for n in builtins if declared[n]} == builtins - {"gpg", "clip_cov"}
    for name in builtins:
        assert all(k.endswith("_acting_frac") and v == 0.0 for k, v in declared[name].items())
    assert set(declared["gspo"]) == {"seq_clip_low_acting_frac", "seq_clip_high_acting_frac"}


def test_mechanism_acted_reads_only_acting_shares():
    grpo = ALGORITHMS.load("grpo")
    out_of_range_only = {
        "clip_low_frac": 0.3,
        "clip_high_frac": 0.2,
        "clip_low_acting_frac": 0.0,
        "clip_high_acting_frac": 0.0,
    }
    assert not grpo.mechanism_acted(out_of_range_only)
    assert grpo.mechanism_acted({**out_of_range_only, "clip_high_acting_frac": 1e-9})
    assert not grpo.mechanism_acted({"clip_low_frac": 0.3})  # an old record: nothing to read


# --- no gradient changed: acting share exactly 0, out-of-range share above 0 ---------------

OUT_OF_RANGE = {  # name -> (out-of-range shares, acting shares)
    **{
        n: (("clip_low_frac", "clip_high_frac"), ("clip_low_acting_frac", "clip_high_acting_frac"))
        for n in PPO_CLIPS
    },
    "gmpo": (
        ("clip_low_frac", "clip_high_frac"),
        ("clip_low_acting_frac", "clip_high_acting_frac"),
    ),
    "gspo": (
        ("seq_clip_low_frac", "seq_clip_high_frac", "clip_low_frac", "clip_high_frac"),
        (
            "seq_clip_low_acting_frac",
            "seq_clip_high_acting_frac",
            "clip_low_acting_frac",
            "clip_high_acting_frac",
        ),
    ),
    "cispo": (("capped_frac",), ("capped_acting_frac",)),
}


@pytest.mark.parametrize("name", sorted(OUT_OF_RANGE))
def test_zero_advantages_act_nowhere_though_ratios_are_out_of_range(name):
    case = dataclasses.replace(acting_case(), adv=torch.zeros(len(LENGTHS), dtype=torch.float64))
    _, metrics = run(name, case)
    out_of_range, acting = OUT_OF_RANGE[name]
    assert sum(metrics[k] for k in out_of_range) > 0
    assert all(metrics[k] == 0.0 for k in acting), metrics


@pytest.mark.parametrize("name", sorted(set(OUT_OF_RANGE) - {"cispo"}))
def test_ratios_past_the_bound_the_advantage_does_not_push_act_nowhere(name):
    case = wrong_side_case()
    off = {
        "gmpo": {"clip_low": 1 / OFF, "clip_high": OFF},
        "gspo": {"eps_low": OFF, "eps_high": OFF},
    }.get(name) or PPO_CLIPS[name]
    selection = NO_COV_SELECTION if name == "clip_cov" else {}
    with_clip, metrics = run(name, case, **selection)
    without, _ = run(name, case, **off, **selection)
    assert not changed(with_clip, without, case).any()  # the clip changed no gradient
    out_of_range, acting = OUT_OF_RANGE[name]
    assert sum(metrics[k] for k in out_of_range) > 0
    assert all(metrics[k] == 0.0 for k in acting), metrics


def test_sapo_zero_advantages_gate_no_token_though_the_mean_weight_drops():
    case = dataclasses.replace(acting_case(), adv=torch.zeros(len(LENGTHS), dtype=torch.float64))
    _, metrics = run("sapo", case)
    assert metrics["gate_weight_mean"] < 0.9  # the out-of-range analogue: weights fell
    assert metrics["gate_acting_frac"] == 0.0
    assert metrics["gate_weight_q05"] == 1.0  # no token with A != 0


def test_kl_cov_selected_tokens_at_ratio_1_are_not_acting():
    on_policy = dataclasses.replace(acting_case(), old=acting_case().lp.clone())
    _, metrics = run("kl_cov", on_policy, kl_cov_ratio=0.2)
    assert metrics["kl_cov_frac"] > 0 and metrics["kl_cov_acting_frac"] == 0.0


# --- where a mechanism acts, the share is the share of gradients it changed ---------------


@pytest.mark.parametrize("name", sorted(PPO_CLIPS))
def test_ppo_clip_acting_shares_are_the_tokens_whose_gradient_the_clip_changed(name):
    case = acting_case()
    selection = NO_COV_SELECTION if name == "clip_cov" else {}
    with_clip, metrics = run(name, case, **selection)
    without, _ = run(name, case, **PPO_CLIPS[name], **selection)
    acted = changed(with_clip, without, case)
    assert torch.all(with_clip[acted] == 0)  # PPO's clip zeroes
    low, high = share(acted & (case.ratio < 1), case), share(acted & (case.ratio > 1), case)
    assert high > 0 and (low > 0 or name == "clip_cov")  # Clip-Cov's lower bound is 0
    assert metrics["clip_low_acting_frac"] == pytest.approx(low, abs=1e-15)
    assert metrics["clip_high_acting_frac"] == pytest.approx(high, abs=1e-15)
    assert metrics["clip_low_frac"] + metrics["clip_high_frac"] > low + high  # A = 0 rows


def test_reinforce_pp_counts_with_the_advantages_minus_the_kl_return():
    """Task advantages all 0, but KL in the reward gives every token A - K != 0: the clip
    acts on those, and the share says so."""
    case = acting_case()
    g = torch.Generator().manual_seed(13)
    ref = case.old - 0.5 * torch.rand(case.old.shape, generator=g, dtype=torch.float64)
    case = dataclasses.replace(case, adv=torch.zeros(len(LENGTHS), dtype=torch.float64), ref=ref)
    with_clip, metrics = run("reinforce_pp", case, beta=0.05)
    without, _ = run("reinforce_pp", case, beta=0.05, eps=OFF)
    acted = changed(with_clip, without, case)
    assert acted.any()
    assert metrics["clip_low_acting_frac"] == pytest.approx(share(acted & (case.ratio < 1), case))
    assert metrics["clip_high_acting_frac"] == pytest.approx(share(acted & (case.ratio > 1), case))


def test_custom_dual_clip_frac_is_the_share_whose_gradient_the_dual_clip_changed():
    case = acting_case()
    with_dual, metrics = run("custom", case, dual_clip=3.0)
    without, _ = run("custom", case)
    acted = changed(with_dual, without, case)
    assert acted.any() and torch.all(with_dual[acted] == 0)
    assert metrics["dual_clip_frac"] == pytest.approx(share(acted, case), abs=1e-15)
    zero = dataclasses.replace(case, adv=torch.zeros(len(LENGTHS), dtype=torch.float64))
    assert run("custom", zero, dual_clip=3.0)[1]["dual_clip_frac"] == 0.0


def test_gmpo_acting_shares_are_the_tokens_whose_gradient_the_clip_zeroed():
    """The clip also rescales the other tokens of a response (exp of the mean clipped
    log-ratio); only the zeroed ones count."""
    case = acting_case()
    with_clip, metrics = run("gmpo", case)
    without, _ = run("gmpo", case, clip_low=1 / OFF, clip_high=OFF)
    zeroed = (with_clip == 0) & (without != 0) & case.response
    low, high = share(zeroed & (case.ratio < 1), case), share(zeroed & (case.ratio > 1), case)
    assert low > 0 and high > 0
    assert metrics["clip_low_acting_frac"] == pytest.approx(low, abs=1e-15)
    assert metrics["clip_high_acting_frac"] == pytest.approx(high, abs=1e-15)


def test_gspo_shares_per_sequence_are_the_sequences_whose_gradient_the_clip_changed():
    case = acting_case()
    with_clip, metrics = run("gspo", case)
    without, _ = run("gspo", case, eps_low=OFF, eps_high=OFF)
    acted = changed(with_clip, without, case)
    real = case.mask.sum(-1) > 0
    s = torch.exp(((case.lp - case.old) * case.mask).sum(-1) / case.mask.sum(-1).clamp(min=1))
    seq_acted = acted.any(-1)
    sequences = int(real.sum())  # 7: the empty response is not counted
    assert metrics["seq_clip_low_acting_frac"] == pytest.approx(
        int((seq_acted & (s < 1)).sum()) / sequences
    )
    assert metrics["seq_clip_high_acting_frac"] == pytest.approx(
        int((seq_acted & (s > 1)).sum()) / sequences
    )
    # out of range: every sequence but row 5 (s = 1) and the empty one
    outside = real & ((s < 1 - 3e-4) | (s > 1 + 4e-4))
    assert int(outside.sum()) == 6
    seq_out = metrics["seq_clip_low_frac"] + metrics["seq_clip_high_frac"]
    assert seq_out == pytest.approx(6 / sequences)
    seq_acting = metrics["seq_clip_low_acting_frac"] + metrics["seq_clip_high_acting_frac"]
    assert 0 < seq_acting < seq_out  # rows 3 and 7 (A = 0) are out of range, not acting
    tokens_acting = metrics["clip_low_acting_frac"] + metrics["clip_high_acting_frac"]
    assert tokens_acting == pytest.approx(share(acted, case))


def test_cispo_capped_acting_share_is_the_tokens_whose_gradient_the_cap_changed():
    case = acting_case()
    with_cap, metrics = run("cispo", case)
    without, _ = run("cispo", case, eps_high=OFF)
    acted = changed(with_cap, without, case)
    assert acted.any() and torch.all(with_cap[acted] != 0)  # lowered, not zeroed
    assert metrics["capped_acting_frac"] == pytest.approx(share(acted, case), abs=1e-15)
    assert metrics["capped_frac"] > metrics["capped_acting_frac"]  # capped rows of A = 0


def test_sapo_gate_shares_from_the_gradient_it_kept():
    """The gate's weight per token is SAPO's gradient over that of the plain
    importance-weighted surrogate -r*A (seq_mean)."""
    case = acting_case()
    gated, metrics = run("sapo", case)
    lp = case.lp.clone().requires_grad_(True)
    batch = TrainBatch(lp, case.old, None, case.adv, case.mask)
    plain = -torch.exp(log_ratio(batch)) * batch.token_advantages
    aggregate(plain, batch, "seq_mean").backward()
    live = case.response & (lp.grad != 0)
    kept = gated[live] / lp.grad[live]
    assert metrics["gate_acting_frac"] == pytest.approx(
        int((kept < GATE_ACTING_WEIGHT).sum()) / case.tokens
    )
    assert 0 < metrics["gate_acting_frac"] < 1
    assert metrics["gate_weight_q05"] == pytest.approx(float(torch.quantile(kept, 0.05)))
    assert metrics["gate_weight_q05"] < metrics["gate_weight_mean"]


def test_kl_cov_acting_share_is_the_tokens_whose_gradient_the_penalty_changed():
    case = acting_case()
    with_penalty, metrics = run("kl_cov", case, kl_cov_ratio=0.2)
    without, _ = run("kl_cov", case, kl_cov_ratio=0.2, kl_coef=0.0)
    acted = changed(with_penalty, without, case)
    assert acted.any()
    assert metrics["kl_cov_acting_frac"] == pytest.approx(share(acted, case), abs=1e-15)


# --- the trainer: per-sequence shares combine exactly over micro-batches -------------------


def test_micro_batched_steps_give_the_whole_batchs_sequence_shares(tiny_path):
    """8 responses of unequal lengths (one empty), old log-probs set per row so that the
    sequence ratio is above, inside or below GSPO's range. Weighted by tokens, the
    micro-batches [0:3] (long responses, all out of range) and [3:6], [6:8] would give
    other shares than the whole batch; weighted by sequences they give its shares."""
    from zoo.services.batch import RolloutBatch
    from zoo.services.trainer import Trainer, TrainerConfig

    lengths = [5, 5, 5, 1, 0, 2, 1, 3]
    shift = [0.01, -0.01, 0.01, 0.0, 0.0, 0.01, -0.01, 0.0]  # mean log-ratio per row
    adv = [1.0, -1.0, -1.0, 0.5, 0.3, 0.0, 0.7, -0.2]
    gen = torch.Generator().manual_seed(0)
    mask = (torch.arange(5)[None, :] < torch.tensor(lengths)[:, None]).float()
    batch = RolloutBatch(
        tokens=torch.randint(0, 256, (8, 11), generator=gen),
        response_start=torch.full((8,), 6),
        mask=mask,
        advantages=torch.tensor(adv),
    )
    algo = get_algorithm("gspo")
    steps = {}
    for micro in (0, 3):
        trainer = Trainer(tiny_path, TrainerConfig.of(micro_batch_size=micro), 5)
        lp = trainer.logprobs(batch)
        batch.old_logprobs = lp - torch.tensor(shift)[:, None] * mask
        steps[micro] = trainer.step(batch, algo.loss)
    sequences = 7
    # by row: 0 high acting; 1 low acting; 2 high, A < 0; 5 high, A = 0; 6 low, A > 0
    want = {
        "seq_clip_high_frac": 3 / sequences,
        "seq_clip_low_frac": 2 / sequences,
        "seq_clip_high_acting_frac": 1 / sequences,
        "seq_clip_low_acting_frac": 1 / sequences,
    }
    for micro, metrics in steps.items():
        for key, value in want.items():
            assert metrics[key] == pytest.approx(value, abs=1e-12), (micro, key)
    # what token weights would have made of the micro-batches' own shares
    tokens = [sum(lengths[s]) for s in (slice(0, 3), slice(3, 6), slice(6, 8))]
    high = [2 / 3, 1 / 2, 0 / 2]  # seq_clip_high_frac of each micro-batch's own sequences
    token_weighted = sum(t * h for t, h in zip(tokens, high, strict=True)) / sum(tokens)
    assert not math.isclose(token_weighted, want["seq_clip_high_frac"], abs_tol=1e-3)


# --- the compare report --------------------------------------------------------------------


def fake_run(algorithm: str, steps: list[dict]) -> dict:
    records = [{"step": 0}, *({"step": k + 1, **r} for k, r in enumerate(steps))]
    config = {"run": {"mini_batches": 4, "epochs": 1, "correction": "none"}}
    return {
        "env": "arithmetic",
        "algorithm": algorithm,
        "plugin": algorithm,
        "config": config,
        "records": records,
        "seed": 0,
    }


def test_mechanism_acted_steps_counts_acting_shares_and_is_blank_for_old_runs():
    from harness.analysis import off_policy_table

    old = fake_run("grpo", [{"ratio_mean": 1.0, "clip_low_frac": 0.01, "clip_high_frac": 0.02}] * 3)
    new = fake_run(
        "gspo",
        [
            {
                "seq_clip_low_frac": 0.4,
                "seq_clip_low_acting_frac": 0.0,
                "seq_clip_high_frac": 0.3,
                "seq_clip_high_acting_frac": 0.0,
            },
            {
                "seq_clip_low_frac": 0.4,
                "seq_clip_low_acting_frac": 0.1,
                "seq_clip_high_frac": 0.3,
                "seq_clip_high_acting_frac": 0.0,
            },
            {
                "seq_clip_low_frac": 0.4,
                "seq_clip_low_acting_frac": 0.0,
                "seq_clip_high_frac": 0.3,
                "seq_clip_high_acting_frac": 0.0,
            },
            {
                "seq_clip_low_frac": 0.4,
                "seq_clip_low_acting_frac": 0.0,
                "seq_clip_high_frac": 0.3,
                "seq_clip_high_acting_frac": 0.2,
            },
        ],
    )
    table = off_policy_table([old, new]).set_index("algorithm")
    assert table.loc["grpo", "clip_high_frac"] == pytest.approx(0.02)
    assert math.isnan(table.loc["grpo", "mechanism_acted_steps"])  # not from clip_*_frac
    assert table.loc["gspo", "mechanism_acted_steps"] == pytest.approx(0.5)
    assert table.loc["gspo", "seq_clip_low_acting_frac"] == pytest.approx(0.025)
    columns = list(table.columns)
    assert columns.index("seq_clip_low_acting_frac") == columns.index("seq_clip_low_frac") + 1
    # the mechanism summed over its sides, per sequence for gspo, blank for the old run
    assert table.loc["gspo", "mechanism_acting"] == pytest.approx(0.025 + 0.05)
    assert table.loc["gspo", "mechanism_out_of_range"] == pytest.approx(0.4 + 0.3)
    assert table.loc["gspo", "mechanism_unit"] == "sequences"
    assert math.isnan(table.loc["grpo", "mechanism_acting"])


def test_the_leaderboard_cell_says_what_the_mechanism_did(tmp_path):
    from harness.analysis import off_policy_table
    from harness.leaderboard import mechanism_cells

    step = {
        "clip_low_frac": 0.02,
        "clip_low_acting_frac": 0.01,
        "clip_high_frac": 0.01,
        "clip_high_acting_frac": 0.01,
    }
    # the second step acts on 0.5% of tokens: on a step, not inside the 1-50% band
    below = {**step, "clip_low_acting_frac": 0.004, "clip_high_acting_frac": 0.001}
    grpo = fake_run("grpo", [step, below])
    gpg = fake_run("gpg", [{"ratio_mean": 1.0}] * 2)
    off_policy_table([grpo, gpg]).to_csv(tmp_path / "off_policy.csv", index=False)
    cells = mechanism_cells(tmp_path / "off_policy.csv")
    assert cells[("arithmetic", "grpo")] == (
        "acts on 1.25% of tokens (3.00% out of range), 100% of steps (50% on 1-50%)"
    )
    assert cells[("arithmetic", "gpg")] == "none declared"
    assert mechanism_cells(tmp_path / "absent.csv") == {}
