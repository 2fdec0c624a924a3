"""The papers' claims, tested: one central claim per built-in, measured on a board.

Each claim names the paper's statement (paraphrased, with where it stands), the quantity
that tests it here, per run, and the direction the paper predicts against a baseline
(usually grpo). ``claims_table`` computes it for every claim whose two rows the board
ran: the difference algorithm - baseline over seeds (paired seed by seed when both ran
the same seeds, else Welch) with a 95% t-interval, a p-value, and the verdict, decided
with Holm's adjustment over every claim the table tests (one family, at 5%):

- supported: the paper's direction ("higher", "lower") is significant; for a claim that
  an algorithm does "as well as" its baseline, non-inferiority within delta (the board's
  equivalence margin) is: H0 difference <= -delta rejected;
- contradicted: the other direction is significant (for "as well": inferior by more than
  delta, H0 difference >= -delta rejected);
- inconclusive: neither (these seeds cannot tell);
- not tested here (with the reason): a precondition of the claim fails on this testbed, so
  the data cannot bear on it either way: the mechanism the claim is about did not act
  (its acting share below ``ACTS``), or the algorithm or its baseline did not learn (its
  headline not significantly above the untrained start);
- no interval: one seed, or a metric the runs did not log.

Most papers made their claims on 7-32B models over hundreds of steps; here they are tested
in direction, on the testbed's scale, and the scope column says what that leaves out.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd
import scipy.stats as sps

Quantity = Callable[[dict], float]
"""A run (harness/analysis.py load_runs) -> one number."""


def late_mean(metric: str) -> Quantity:
    """The mean of a step metric over the second half of a run's training steps: where a
    trend the paper describes (entropy collapse, length growth) has had time to show."""

    def of(run: dict) -> float:
        steps = [r[metric] for r in run["records"] if r["step"] > 0 and metric in r]
        tail = steps[len(steps) // 2 :]
        return float(np.mean(tail)) if tail else math.nan

    return of


def step_max(metric: str) -> Quantity:
    def of(run: dict) -> float:
        values = [r[metric] for r in run["records"] if r["step"] > 0 and metric in r]
        return float(max(values)) if values else math.nan

    return of


def share_sum(*metrics: str) -> Quantity:
    """The mean over training steps of the sum of several shares (low + high clip)."""

    def of(run: dict) -> float:
        steps = [r for r in run["records"] if r["step"] > 0]
        if not steps or not all(m in steps[0] for m in metrics):
            return math.nan
        return float(np.mean([sum(r[m] for m in metrics) for r in steps]))

    return of


def checkpoint_score(column: str) -> Quantity:
    """A run's headline or AUC: ``run["scores"]``, its row of harness/analysis.py's
    run_scores, which ``claims_table`` attaches."""

    def of(run: dict) -> float:
        return float(run.get("scores", {}).get(column, math.nan))

    return of


@dataclass(frozen=True)
class Claim:
    algorithm: str
    baseline: str
    claim: str
    where: str
    quantity: str
    measure: Quantity
    direction: int
    """+1: the paper predicts the algorithm's quantity above the baseline's; -1 below; 0:
    "as well as" (non-inferiority within delta, on the headline's scale)."""
    scope: str
    needs_mechanism: bool = False
    """The claim is about what the algorithm's mechanism does: untested when it does not act."""


TOKEN_CLIPS = ("clip_low_frac", "clip_high_frac")
CLAIMS = [
    Claim(
        "dr_grpo",
        "grpo",
        "GRPO's per-response length normalisation lets wrong answers grow longer; "
        "without it (Dr. GRPO) they do not",
        "Liu et al., arXiv 2503.20783, abstract and Sec. 3.2 / Fig. 5",
        "tokens of incorrect training samples, mean over the second half of the steps",
        late_mean("response_len_incorrect_mean"),
        -1,
        "direction only: the paper's growth is over hundreds of steps on long answers; "
        "grpo here also has a KL term (beta 0.04) that dr_grpo lacks",
    ),
    Claim(
        "dapo",
        "grpo",
        "Clip-Higher (eps_high 0.28 > eps_low 0.2) keeps the policy's entropy from collapsing",
        "Yu et al., arXiv 2503.14476, Sec. 3.1 / Fig. 2",
        "entropy of sampled tokens (nats), mean over the second half of the steps",
        late_mean("entropy_sampled"),
        +1,
        "confounded: dapo also drops the KL term and uses token_mean; an eps_high ablation "
        "isolates Clip-Higher",
        needs_mechanism=True,
    ),
    Claim(
        "gspo",
        "grpo",
        "sequence-level clipping clips about two orders of magnitude more tokens than GRPO",
        "Zheng et al., arXiv 2507.18071, Sec. 5.2 / Fig. 2",
        "share of response tokens out of the clip range, mean over steps",
        share_sum(*TOKEN_CLIPS),
        +1,
        "mechanistic: visible from the first mini-batch",
    ),
    Claim(
        "gspo",
        "grpo",
        "GSPO trains more efficiently than GRPO (higher reward at the same compute)",
        "Zheng et al., arXiv 2507.18071, Sec. 5.1 / Fig. 1",
        "area under the held-out reward curve over the budget",
        checkpoint_score("auc"),
        +1,
        "direction only: the paper's gain is on a 30B mixture-of-experts model",
    ),
    Claim(
        "cispo",
        "dapo",
        "CISPO matches DAPO with half the training steps (faster at matched compute)",
        "MiniMax, arXiv 2506.13585, Sec. 3.1 / Fig. 2",
        "area under the held-out reward curve over the budget",
        checkpoint_score("auc"),
        +1,
        "direction only: the paper ran 16 off-policy rounds per batch",
        needs_mechanism=True,
    ),
    Claim(
        "sapo",
        "grpo",
        "a soft, temperature-controlled gate instead of a hard clip gives higher Pass@1 "
        "at a comparable budget",
        "Gao et al., arXiv 2511.20347, abstract",
        "held-out greedy headline",
        checkpoint_score("headline"),
        +1,
        "direction only: the paper's instability is of long MoE runs",
        needs_mechanism=True,
    ),
    Claim(
        "gpg",
        "grpo",
        "plain policy gradient with the B/B_valid rescale beats GRPO at lower compute",
        "Chu et al., arXiv 2504.02546, abstract",
        "held-out greedy headline",
        checkpoint_score("headline"),
        +1,
        "direction only; at a FLOP budget gpg's cheaper steps (no reference) buy it more steps",
    ),
    Claim(
        "opo",
        "grpo",
        "exact on-policy training with the optimal baseline keeps output entropy higher",
        "Hao et al., arXiv 2505.23585, abstract",
        "entropy of sampled tokens (nats), mean over the second half of the steps",
        late_mean("entropy_sampled"),
        +1,
        "direction only; on the board opo runs 4 mini-batches like grpo (its on-policy "
        "regime is the ablation's claim below)",
    ),
    Claim(
        "opo@mini_batches=1",
        "opo@mini_batches=4",
        "exact on-policy training (one update per rollout batch) trains better than "
        "off-policy updates of the same batch",
        "Hao et al., arXiv 2505.23585, abstract",
        "held-out greedy headline, each arm at its own tuned lr",
        checkpoint_score("headline"),
        +1,
        "the ablation board (compare opo --vary mini_batches=1,4 --tuned ...)",
    ),
    Claim(
        "reinforce_pp",
        "grpo",
        "global advantage normalisation is more stable and performs better than GRPO's "
        "per-prompt normalisation",
        "Hu et al., arXiv 2501.03262, abstract",
        "held-out greedy headline",
        checkpoint_score("headline"),
        +1,
        "direction only: the paper's instability is over long runs",
    ),
    Claim(
        "gmpo",
        "grpo",
        "the geometric-mean objective keeps importance ratios in a narrower range than "
        "GRPO, even with a wider clip",
        "Zhao et al., arXiv 2507.20673, Fig. 1 and 3",
        "largest token importance ratio seen in a step, max over steps",
        step_max("ratio_max"),
        -1,
        "needs off-policy mini-batches (ratios away from 1)",
        needs_mechanism=True,
    ),
    Claim(
        "clip_cov",
        "grpo",
        "detaching a few high-covariance tokens keeps entropy far above GRPO's",
        "Cui et al., arXiv 2505.22617, Sec. 4.3 / Fig. 11",
        "entropy of sampled tokens (nats), mean over the second half of the steps",
        late_mean("entropy_sampled"),
        +1,
        "direction only: at this batch size the rule selects few tokens per update",
        needs_mechanism=True,
    ),
    Claim(
        "kl_cov",
        "grpo",
        "a KL penalty on the top-covariance tokens keeps entropy far above GRPO's",
        "Cui et al., arXiv 2505.22617, Sec. 4.3",
        "entropy of sampled tokens (nats), mean over the second half of the steps",
        late_mean("entropy_sampled"),
        +1,
        "direction only: at this batch size the rule selects few tokens per update",
        needs_mechanism=True,
    ),
    Claim(
        "rloo",
        "grpo",
        "REINFORCE with a leave-one-out baseline does as well as PPO-style training, "
        "whose clip rarely binds",
        "Ahmadian et al., arXiv 2402.14740, abstract",
        "held-out greedy headline",
        checkpoint_score("headline"),
        0,
        "the paper's baseline is PPO with a critic on RLHF; here grpo stands in",
    ),
    Claim(
        "remax",
        "ppo",
        "REINFORCE with the greedy answer's reward as baseline, and no value model, "
        "performs as well as PPO with a critic while using less memory and time",
        "Li et al., arXiv 2310.10505, abstract and Sec. 5",
        "held-out greedy headline",
        checkpoint_score("headline"),
        0,
        "the headline only (the memory saving is of a 7B critic, nothing to measure on "
        "a 0.5M model); matched FLOPs charge remax its greedy generation, ppo its critic",
    ),
    Claim(
        "grpo",
        "ppo",
        "dropping the value model for the group's mean reward as baseline does as well as "
        "PPO with a learned critic",
        "Shao et al., arXiv 2402.03300, Sec. 4.1",
        "held-out greedy headline",
        checkpoint_score("headline"),
        0,
        "direction only: the paper's comparison is on a 7B math model; each row at its "
        "own tuned lr and clip",
    ),
]
"""One central claim per built-in (two for GSPO; OPO's on-policy claim between the rows of
the mini-batch ablation; ``ppo``, the critic baseline, is the other side of ReMax's and
GRPO's claims); ``custom`` (PPO's clipped surrogate
with group advantages) has none the testbed can test: PPO's claim is against an
unclipped surrogate over many epochs on control tasks."""


ACTS = 1e-3
"""A mechanism acts on a board when its mean acting share (the share of its units whose
gradient it changed) is at least this: one token (or sequence) in a thousand. The GSPO
paper reports ~0.13% of tokens clipped for GRPO."""
ALPHA = 0.05


def difference_interval(
    x: np.ndarray, y: np.ndarray, paired: bool
) -> tuple[float, float, float, float, float]:
    """mean(x) - mean(y), its 95% t-interval, its standard error and degrees of freedom:
    paired on x - y, else Welch. Fewer than 2 seeds on a side: nan spread."""
    if paired:
        d = x - y
        if len(d) < 2:
            return float(d.mean()), math.nan, math.nan, math.nan, math.nan
        se, dof = float(d.std(ddof=1) / math.sqrt(len(d))), len(d) - 1
        diff = float(d.mean())
    else:
        if len(x) < 2 or len(y) < 2:
            return float(x.mean() - y.mean()), math.nan, math.nan, math.nan, math.nan
        vx, vy = x.var(ddof=1) / len(x), y.var(ddof=1) / len(y)
        se = math.sqrt(vx + vy)
        dof = (vx + vy) ** 2 / (vx**2 / (len(x) - 1) + vy**2 / (len(y) - 1)) if se > 0 else 1
        diff = float(x.mean() - y.mean())
    half = sps.t.ppf(0.975, dof) * se
    return diff, diff - half, diff + half, se, dof


def one_sided_p(
    diff: float, se: float, dof: float, shift: float = 0.0, upper: bool = True
) -> float:
    """p of H0 "difference <= shift" (``upper``) or ">= shift" against the other side."""
    if math.isnan(se):
        return math.nan
    if se == 0:
        return 0.0 if (diff > shift if upper else diff < shift) else 1.0
    t = (diff - shift) / se
    return float(sps.t.sf(t, dof) if upper else sps.t.cdf(t, dof))


def learns(run_rows: list[dict]) -> tuple[bool, float]:
    """Whether a row learned: its runs' headlines against their untrained start (held-out
    reward at checkpoint 0), paired over seeds, one-sided t-test at 5%. (mean gain, p)."""
    gains = [r["scores"].get("headline", math.nan) - r["start"] for r in run_rows]
    gains = np.array([g for g in gains if not math.isnan(g)])
    if len(gains) < 2:
        return True, math.nan  # nothing to test with: no reason to withhold the claim
    se = float(gains.std(ddof=1) / math.sqrt(len(gains)))
    p = one_sided_p(float(gains.mean()), se, len(gains) - 1)
    return p < ALPHA and gains.mean() > 0, p


def precondition(c: Claim, a: dict, b: dict, acting: float) -> str | None:
    """Why the claim cannot be tested on this board (None when it can)."""
    if c.needs_mechanism and not (acting >= ACTS):
        share = "no share logged" if math.isnan(acting) else f"{acting:.3%} of its units"
        return (
            f"not tested here: {c.algorithm}'s mechanism did not act ({share}; it acts "
            f"from {ACTS:.1%})"
        )
    for name, rows in ((c.algorithm, a), (c.baseline, b)):
        ok, p = learns(list(rows.values()))
        if not ok:
            return (
                f"not tested here: {name} does not learn on this testbed (its headline "
                f"above its start: one-sided p {p:.2g})"
            )
    return None


def claims_table(
    runs: list[dict],
    scores: pd.DataFrame | None = None,
    off_policy: pd.DataFrame | None = None,
    delta: float = 0.02,
) -> pd.DataFrame:
    """Every claim whose algorithm and baseline rows this experiment ran, per env;
    ``scores`` holds each run's headline and AUC (harness/analysis.py run_scores);
    ``delta``: the board's equivalence margin, for the "as well as" claims."""
    by_run = {}
    if scores is not None and len(scores):
        by_run = {(r["env"], r["algorithm"], r["seed"]): r for r in scores.to_dict("records")}
    runs = [
        {
            **run,
            "scores": by_run.get((run["env"], run["algorithm"], run["seed"]), {}),
            "start": next(
                (r["eval_reward"] for r in run["records"] if r["step"] == 0 and "eval_reward" in r),
                math.nan,
            ),
        }
        for run in runs
    ]
    acting = {}
    if off_policy is not None and "mechanism_acting" in off_policy:
        acting = {(r.env, r.algorithm): r.mechanism_acting for r in off_policy.itertuples()}
    rows = []
    for env in sorted({run["env"] for run in runs}):
        by_row: dict[str, dict[int, dict]] = {}
        for run in runs:
            if run["env"] == env:
                by_row.setdefault(run["algorithm"], {})[run["seed"]] = run
        for c in CLAIMS:
            if c.algorithm not in by_row or c.baseline not in by_row:
                continue
            a, b = by_row[c.algorithm], by_row[c.baseline]
            paired = sorted(a) == sorted(b)
            xa = np.array([c.measure(a[s]) for s in sorted(a)])
            xb = np.array([c.measure(b[s]) for s in sorted(b)])
            if np.isnan(xa).any() or np.isnan(xb).any():
                diff = low = high = se = dof = math.nan
            else:
                diff, low, high, se, dof = difference_interval(xa, xb, paired)
            if c.direction == 0:  # "as well as": non-inferiority within delta, and its converse
                p_for = one_sided_p(diff, se, dof, shift=-delta, upper=True)
                p_against = one_sided_p(diff, se, dof, shift=-delta, upper=False)
            else:
                p_for = one_sided_p(diff, se, dof, upper=c.direction > 0)
                p_against = one_sided_p(diff, se, dof, upper=c.direction < 0)
            mech = acting.get((env, c.algorithm), math.nan)
            predicts = {1: "higher", -1: "lower", 0: f"as well (within -{delta:g})"}
            rows.append(
                {
                    "env": env,
                    "algorithm": c.algorithm,
                    "baseline": c.baseline,
                    "claim": c.claim,
                    "where": c.where,
                    "quantity": c.quantity,
                    "predicts": predicts[c.direction],
                    "algorithm_value": float(np.mean(xa)),
                    "baseline_value": float(np.mean(xb)),
                    "difference": diff,
                    "ci_low": low,
                    "ci_high": high,
                    "seeds": f"{len(a)} vs {len(b)}" + (" paired" if paired else ""),
                    "p_for": p_for,
                    "p_against": p_against,
                    "untested": precondition(c, a, b, mech),
                    "mechanism_acting": mech,
                    "scope": c.scope,
                }
            )
    table = pd.DataFrame(rows)
    return decide_claims(table)


def decide_claims(table: pd.DataFrame) -> pd.DataFrame:
    """The verdicts, Holm-adjusted over every one-sided test of the claims that can be
    tested (two per claim, "for" and "against"; at most one of each pair is true)."""
    from harness.stats import holm

    if table.empty:
        return table
    tested = table[table.untested.isna() & table.p_for.notna()]
    adjusted = holm([*tested.p_for, *tested.p_against])
    table["p_for_holm"] = math.nan
    table["p_against_holm"] = math.nan
    table.loc[tested.index, "p_for_holm"] = adjusted[: len(tested)]
    table.loc[tested.index, "p_against_holm"] = adjusted[len(tested) :]

    def verdict(r: pd.Series) -> str:
        if isinstance(r.untested, str):
            return r.untested
        if math.isnan(r.p_for):
            return "no interval"  # (one seed, or a quantity not measured)
        if r.p_for_holm < ALPHA:
            return "supported"
        if r.p_against_holm < ALPHA:
            return "contradicted"
        return "inconclusive"

    table["verdict"] = table.apply(verdict, axis=1)
    return table
