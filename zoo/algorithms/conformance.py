"""The conformance suite: docs/algorithms.md's "Invariants every loss must satisfy",
checked generically against any Algorithm class (a built-in or a third-party plugin):
nine properties of the loss and one of the advantages (check 10).

    run_conformance(cls) -> list[CheckResult]      # what `python -m harness check-plugin` runs
    run_conformance(cls, {"token_level": True})    # with config overrides
    run_conformance(cls, overrides, group_size=16) # the advantages on the run's group size
    CHECKS["padding"](cls) -> CheckResult          # one property (tests/test_conformance.py)
    failure_report(results)                        # each failure with its FIXES hint

Every check builds the algorithm through its class with overrides (``beta = 0`` and
``entropy_coef = 0`` where the config has them and the property asks for it: terms that
do not depend on the advantages) and computes in float64 on small hand-shaped batches:
sequences of different lengths, one without response tokens, junk values on padding. An
algorithm whose ``needs_entropy`` is True also gets the policy's per-token entropy
(``TrainBatch.entropy``, synthetic, a leaf whose gradient the checks compare too).
Tolerances are relative to the gradient's scale (TOL = 1e-6), so they only absorb
rounding. A check that cannot apply (no hard clip, not sequence-level)
returns ``passed=None`` with the reason.

What the checks read from the class (zoo/algorithms/base.py): ``aggregation`` (how to
build the REINFORCE reference), ``clip_style`` ("zero" / "cap" / "none"),
``sequence_level``, ``mechanism`` (its acting shares, idle at 0) and
``token_selection`` (the metric of a selection made from the rows' own statistics, which
relaxes checks 1 and 4 as base.py says; read from the built instance, since
``entropy_top_share < 1`` declares one). The upper clip is located by ``mechanism``:
the ratio at which its acting shares start to act on a response with A > 0, whatever the
config calls the clip (``locate_upper_clip``); only a class that declares no mechanism
has it read from the first config field among ``eps_high``, ``eps``, ``clip_range``,
``clip`` (ratio bound 1 + value) and ``clip_high`` (the ratio bound itself).

The advantages check (``check_advantages``) reads no loss: it calls the class's
``group_advantages`` (and, with a critic, ``token_advantages``) as the loop does, on
groups whose better answers are known (``ranked_groups``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import torch

from zoo.algorithms.base import Algorithm
from zoo.core.entropy import KEPT_METRIC, entropy_bonus_loss
from zoo.core.losses import aggregate, log_ratio
from zoo.core.types import TrainBatch, ValueBatch

Overrides = Mapping[str, Any]
NONE: Overrides = MappingProxyType({})
TOL = 1e-6
ZERO = 1e-12  # what counts as an exactly-zero loss or gradient in float64
UPPER_CLIP_FIELDS = (
    ("eps_high", 1.0),
    ("eps", 1.0),
    ("clip_range", 1.0),
    ("clip", 1.0),
    ("clip_high", 0.0),
)
"""(config field, offset): the upper ratio bound is offset + value."""


@dataclass(frozen=True)
class CheckResult:
    name: str
    passed: bool | None
    """True / False, or None when the property does not apply to this algorithm."""
    detail: str


@dataclass
class Case:
    """A batch's tensors (float64, detached); ``lp`` becomes the leaf that gets the grad."""

    lp: torch.Tensor
    old: torch.Tensor
    ref: torch.Tensor
    adv: torch.Tensor
    mask: torch.Tensor
    max_response_len: int = 8
    """L_max, the run's generation budget: at least the longest response, and unchanged
    by padding."""
    entropy: torch.Tensor | None = None
    """The policy's per-token entropy, for an algorithm that reads it; None: drawn by
    ``synthetic_entropy`` for the batch's shape (from its own generator, so adding it
    changed none of the other tensors)."""

    def __post_init__(self) -> None:
        if self.entropy is None:
            self.entropy = synthetic_entropy(tuple(self.lp.shape))


def synthetic_entropy(shape: tuple[int, ...]) -> torch.Tensor:
    """Distinct entropies in (0.05, 3.05), the same for the same shape."""
    g = torch.Generator().manual_seed(9000 + 97 * shape[0] + shape[-1])
    return 0.05 + 3 * torch.rand(shape, generator=g, dtype=torch.float64)


def entropy_of(algo: Algorithm, case: Case, rows: slice = slice(None)) -> torch.Tensor | None:
    """``case.entropy[rows]`` for an algorithm that reads the entropy, else None (the
    batch the trainer gives it)."""
    return case.entropy[rows] if algo.needs_entropy and case.entropy is not None else None


def lengths_mask(lengths: Sequence[int], width: int) -> torch.Tensor:
    return torch.tensor([[1.0] * n + [0.0] * (width - n) for n in lengths], dtype=torch.float64)


def random_case(seed: int, on_policy: bool) -> Case:
    """B = 6 responses of lengths 7, 1, 0, 4, 6, 3 (T = 7). Off-policy rows have log-ratios
    of scale 0.3-0.5, 1e-4 or 0, so that both tight (GSPO) and loose clips leave some
    tokens with a gradient. Padding holds random values like any other position."""
    g = torch.Generator().manual_seed(seed)
    lengths, width = [7, 1, 0, 4, 6, 3], 7
    shape = (len(lengths), width)
    lp = -0.05 - 3 * torch.rand(shape, generator=g, dtype=torch.float64)
    scale = torch.tensor([0.3, 0.0, 0.3, 1e-4, 0.5, 0.0], dtype=torch.float64)[:, None]
    noise = torch.randn(shape, generator=g, dtype=torch.float64)
    old = lp.clone() if on_policy else lp - scale * noise
    ref = lp + 0.3 * torch.randn(shape, generator=g, dtype=torch.float64)
    adv = torch.randn(len(lengths), generator=g, dtype=torch.float64)
    return Case(lp, old, ref, adv, lengths_mask(lengths, width))


REGULARISERS = ("beta", "entropy_coef")
"""Config fields of terms that do not depend on the advantages (KL penalty, entropy
bonus): ``build(..., beta_zero=True)`` sets them to 0."""


def build(cls: type[Algorithm], overrides: Overrides, beta_zero: bool) -> Algorithm:
    fields = {f.name for f in dataclasses.fields(cls.config_class)}
    zeroed = {f: 0.0 for f in REGULARISERS if beta_zero and f in fields}
    return cls(**{**overrides, **zeroed})


def loss_and_grad(
    algo: Algorithm, case: Case, splits: Sequence[slice] = (slice(None),)
) -> tuple[float, torch.Tensor]:
    """Loss summed over micro-batches ``splits`` (each dividing by the whole batch's
    counts) and the accumulated gradient with respect to ``case.lp``."""
    loss, grad, _ = loss_and_grads(algo, case, splits)
    return loss, grad


def loss_and_grads(
    algo: Algorithm, case: Case, splits: Sequence[slice] = (slice(None),)
) -> tuple[float, torch.Tensor, torch.Tensor | None]:
    """``loss_and_grad`` and the gradient with respect to the entropy (zeros when the
    loss does not use it), or None for an algorithm that does not read it."""
    lp = case.lp.clone().requires_grad_(True)
    entropy = entropy_of(algo, case)
    if entropy is not None:
        entropy = entropy.clone().requires_grad_(True)
    ref = case.ref if algo.needs_reference else None
    whole = TrainBatch(lp.detach(), case.old, None, case.adv, case.mask)
    total = 0.0
    for rows in splits:
        batch = TrainBatch(
            lp[rows],
            case.old[rows],
            None if ref is None else ref[rows],
            case.adv[rows],
            case.mask[rows],
            num_sequences=whole.num_sequences,
            num_tokens=whole.num_tokens,
            max_response_len=case.max_response_len,
            entropy=None if entropy is None else entropy[rows],
        )
        out = algo.loss(batch)
        out.loss.backward()
        total += float(out.loss.detach())
    grad = lp.grad if lp.grad is not None else torch.zeros_like(lp)
    if entropy is None:
        return total, grad, None
    return total, grad, entropy.grad if entropy.grad is not None else torch.zeros_like(entropy)


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max())


def compare_grads(name: str, got: torch.Tensor, want: torch.Tensor, what: str) -> CheckResult:
    scale = float(want.abs().max())
    if scale == 0:
        return CheckResult(name, False, f"{what}: the gradient is zero everywhere (vacuous)")
    diff = max_diff(got, want)
    ok = diff <= TOL * scale
    return CheckResult(name, ok, f"{what}: max |grad diff| {diff:.2e} (scale {scale:.2e})")


# --- the properties ------------------------------------------------------------------------


def check_reinforce_on_policy(cls: type[Algorithm], overrides: Overrides = NONE) -> CheckResult:
    """(1) On-policy, beta = 0: grad equals that of -A*lp under ``cls.aggregation``; with
    ``token_selection``, on all but at most the tokens its metric says it selected."""
    name = "reinforce_on_policy"
    algo = build(cls, overrides, beta_zero=True)
    case = random_case(0, on_policy=True)
    _, grad = loss_and_grad(algo, case)

    lp = case.lp.clone().requires_grad_(True)
    batch = TrainBatch(
        lp,
        case.old,
        None,
        case.adv,
        case.mask,
        max_response_len=case.max_response_len,
        entropy=entropy_of(algo, case),
    )
    aggregate(-batch.token_advantages * lp, batch, algo.aggregation).backward()
    what = f"vs -A*lp under {algo.aggregation}"
    selection = algo.token_selection
    if not selection:
        return compare_grads(name, grad, lp.grad, what)
    metrics = algo.loss(dataclasses.replace(batch, logprobs=case.lp.clone())).metrics
    if selection not in metrics:
        return CheckResult(name, False, f"declares token_selection but reports no {selection}")
    scale = float(lp.grad.abs().max())
    differ = (grad - lp.grad).abs() > TOL * scale
    allowed = round(metrics[selection] * float(case.mask.sum()))
    ok = scale > 0 and int(differ.sum()) <= allowed
    detail = f"{what}: {int(differ.sum())} tokens differ, {allowed} selected ({selection})"
    return CheckResult(name, ok, detail)


def check_zero_advantages(cls: type[Algorithm], overrides: Overrides = NONE) -> CheckResult:
    """(2) Zero advantages, beta = 0, off-policy: loss 0 and gradient 0."""
    case = random_case(1, on_policy=False)
    algo = build(cls, overrides, beta_zero=True)
    loss, grad = loss_and_grad(algo, dataclasses.replace(case, adv=torch.zeros_like(case.adv)))
    worst = float(grad.abs().max())
    ok = abs(loss) <= ZERO and worst <= ZERO
    return CheckResult("zero_advantages", ok, f"loss {loss:.2e}, max |grad| {worst:.2e}")


def check_padding(cls: type[Algorithm], overrides: Overrides = NONE) -> CheckResult:
    """(3) Appending mask-0 columns holding junk changes neither loss nor gradient."""
    name = "padding"
    algo = build(cls, overrides, beta_zero=False)
    case = random_case(2, on_policy=False)
    loss, grad, entropy_grad = loss_and_grads(algo, case)

    def pad(x: torch.Tensor, junk: float) -> torch.Tensor:
        return torch.cat([x, torch.full((x.shape[0], 3), junk, dtype=x.dtype)], dim=1)

    # r = e^30.5 on padding; an entropy above every real one (a selection by entropy
    # that read padding would pick it)
    junk = {"lp": 0.5, "old": -30.0, "ref": 10.0, "mask": 0.0, "entropy": 40.0}
    padded = dataclasses.replace(case, **{k: pad(getattr(case, k), v) for k, v in junk.items()})
    loss_p, grad_p, entropy_grad_p = loss_and_grads(algo, padded)
    width = case.lp.shape[1]
    if abs(loss_p - loss) > TOL * max(1.0, abs(loss)):
        return CheckResult(name, False, f"loss changed from {loss!r} to {loss_p!r}")
    if float(grad_p[:, width:].abs().max()) > ZERO:
        return CheckResult(name, False, "padding tokens received a gradient")
    if entropy_grad is not None and entropy_grad_p is not None:
        if float(entropy_grad_p[:, width:].abs().max()) > ZERO:
            return CheckResult(name, False, "the entropy of padding tokens received a gradient")
        diff = max_diff(entropy_grad_p[:, :width], entropy_grad)
        if diff > TOL * max(float(entropy_grad.abs().max()), ZERO):
            return CheckResult(name, False, f"padding changed the entropy's gradient by {diff:.2e}")
    return compare_grads(name, grad_p[:, :width], grad, "3 junk padding columns appended")


def check_micro_batching(cls: type[Algorithm], overrides: Overrides = NONE) -> CheckResult:
    """(4) Micro-batches carrying the whole batch's counts sum to the full loss and grad.
    With ``token_selection`` (a selection from each micro-batch's own rows): each
    micro-batch's loss and grad are those of the same rows as a batch of their own, times
    their share of the whole batch's count (tokens for token_mean, else sequences)."""
    name = "micro_batching"
    algo = build(cls, overrides, beta_zero=False)
    case = random_case(3, on_policy=False)
    # unequal shares; the middle micro-batch holds only the empty response
    splits = (slice(0, 2), slice(2, 3), slice(3, None))
    if algo.token_selection:
        return micro_batches_divide_by_whole_counts(algo, case, splits)
    loss, grad, entropy_grad = loss_and_grads(algo, case)
    loss_mb, grad_mb, entropy_grad_mb = loss_and_grads(algo, case, splits)
    if abs(loss_mb - loss) > TOL * max(1.0, abs(loss)):
        return CheckResult(name, False, f"summed loss {loss_mb!r} != full-batch loss {loss!r}")
    if entropy_grad is not None and entropy_grad_mb is not None:
        diff = max_diff(entropy_grad_mb, entropy_grad)
        if diff > TOL * max(float(entropy_grad.abs().max()), ZERO):
            return CheckResult(name, False, f"the entropy's gradient differs by {diff:.2e}")
    return compare_grads(name, grad_mb, grad, "micro-batches [0:2], [2:3], [3:6] vs whole")


def micro_batches_divide_by_whole_counts(
    algo: Algorithm, case: Case, splits: Sequence[slice]
) -> CheckResult:
    name = "micro_batching"
    whole = TrainBatch(case.lp, case.old, None, case.adv, case.mask)
    tokens = case.mask.sum(-1)
    for rows in splits:
        fields = ("lp", "old", "ref", "adv", "mask", "entropy")
        part = dataclasses.replace(case, **{k: getattr(case, k)[rows] for k in fields})
        own_loss, own_grad, own_entropy_grad = loss_and_grads(algo, part)
        in_whole, in_whole_grad, in_whole_entropy_grad = loss_and_grads(algo, case, (rows,))
        if algo.aggregation == "token_mean":
            share = float(tokens[rows].sum()) / max(whole.num_tokens, 1)
        else:
            share = int((tokens[rows] > 0).sum()) / max(whole.num_sequences, 1)
        where = f"rows [{rows.start}:{rows.stop}]"
        if abs(in_whole - share * own_loss) > TOL * max(1.0, abs(own_loss)):
            return CheckResult(
                name, False, f"{where}: loss {in_whole!r} != {share:.3g} x its own {own_loss!r}"
            )
        diff = max_diff(in_whole_grad[rows], share * own_grad)
        if diff > TOL * max(float(own_grad.abs().max()), ZERO):
            return CheckResult(name, False, f"{where}: grad differs by {diff:.2e}")
        if own_entropy_grad is not None and in_whole_entropy_grad is not None:
            diff = max_diff(in_whole_entropy_grad[rows], share * own_entropy_grad)
            if diff > TOL * max(float(own_entropy_grad.abs().max()), ZERO):
                return CheckResult(
                    name, False, f"{where}: the entropy's grad differs by {diff:.2e}"
                )
    return CheckResult(
        name,
        True,
        "selection per micro-batch (token_selection); each of "
        "[0:2], [2:3], [3:6] divides by the whole batch's counts",
    )


def upper_ratio_bound(algo: Algorithm) -> tuple[str, float] | None:
    """The upper ratio bound from the conventional config field names (``UPPER_CLIP_FIELDS``),
    for a class that declares no mechanism to locate its clip by; None without one."""
    for field, offset in UPPER_CLIP_FIELDS:
        if hasattr(algo.config, field):
            return field, offset + float(getattr(algo.config, field))
    return None


PROBE_LOG_RATIOS = tuple(1e-6 * 2.0**k for k in range(24))
"""log r at which the clip check first looks for the mechanism to act, doubling from 1e-6
(a ratio within GSPO's 1 + 4e-4) to about 8.4 (r of about 4400, above CISPO's cap of 5)."""
BISECTIONS = 48
"""Halvings of the last probe interval: the bound to ~1e-14 of its log, far inside the
checks' 1.5x and 3x."""


def clip_case(log_r: Sequence[float], lead: int = 1) -> Case:
    """Three responses (4, 4 and 2 tokens), A = 1, 1 and 0.7, every token of row i at the
    log-ratio ``log_r[i]``; the first token of row ``lead`` has the highest entropy."""
    lp = -0.1 - torch.arange(12, dtype=torch.float64).reshape(3, 4) / 7
    mask = lengths_mask([4, 4, 2], 4)
    adv = torch.tensor([1.0, 1.0, 0.7], dtype=torch.float64)
    # entropies: row ``lead``'s first token highest, then the other's first, so that a
    # selection of even one or two tokens by entropy keeps tokens the check reads
    entropy = [[4.5, 2.5, 1.5, 0.5], [5.0, 2.0, 1.0, 0.4], [3.0, 0.3, 0.2, 0.1]]
    if lead == 0:
        entropy[0][0], entropy[1][0] = entropy[1][0], entropy[0][0]
    entropy_t = torch.tensor(entropy, dtype=torch.float64)
    old = lp - torch.tensor(log_r, dtype=torch.float64)[:, None]
    return Case(lp, old, lp.clone(), adv, mask, entropy=entropy_t)


def loss_metrics(algo: Algorithm, case: Case) -> dict[str, float]:
    """The metrics ``algo.loss`` reports on ``case`` (no reference: beta is 0 here)."""
    entropy = entropy_of(algo, case)
    length = case.max_response_len
    batch = TrainBatch(
        case.lp, case.old, None, case.adv, case.mask, max_response_len=length, entropy=entropy
    )
    return algo.loss(batch).metrics


def locate_upper_clip(algo: Algorithm) -> tuple[float | None, str]:
    """The ratio above which the class's declared ``mechanism`` starts to act on a
    response with A > 0 (rows 1 and 2 of ``clip_case`` stay at r = 1, idle): the upper
    bound the loss really applies, whatever its config calls it. Probes ``PROBE_LOG_RATIOS``
    up to the first ratio where it acts, then bisects. (bound, "") or (None, why not)."""
    declared = ", ".join(algo.mechanism)

    def acts(log_r: float) -> bool:  # (the probed row leads a selection by entropy)
        return algo.mechanism_acted(loss_metrics(algo, clip_case([log_r, 0.0, 0.0], lead=0)))

    at_one = loss_metrics(algo, clip_case([0.0, 0.0, 0.0], lead=0))
    missing = [m for m in algo.mechanism if m not in at_one]
    if missing:
        return None, f"declares {declared} but reports no {missing[0]}"
    if algo.mechanism_acted(at_one):
        return None, f"{declared} acts at r = 1, so it locates no ratio bound"
    low = 0.0
    for high in PROBE_LOG_RATIOS:
        if acts(high):
            break
        low = high
    else:
        top = math.exp(PROBE_LOG_RATIOS[-1])
        why = (
            f"{declared} never acted on a response with A > 0 at ratios up to {top:.3g}: "
            "no upper clip (declare clip_style = 'none' if the loss has none)"
        )
        return None, why
    for _ in range(BISECTIONS):
        middle = (low + high) / 2
        if acts(middle):
            high = middle
        else:
            low = middle
    return math.exp(high), ""


def check_clipping(cls: type[Algorithm], overrides: Overrides = NONE) -> CheckResult:
    """(5) A > 0 and every token's ratio far above the upper clip: "zero" style gives those
    tokens no gradient (a control response at r = 1 gets one); "cap" style gives them the
    same nonzero gradient at 1.5x and 3x the bound (the weight is capped, not zeroed).
    The bound is where the class's declared ``mechanism`` starts to act
    (``locate_upper_clip``), whatever the config field is called; only a class that
    declares no mechanism has it read from a conventional field name
    (``UPPER_CLIP_FIELDS``)."""
    name = "clipping"
    algo = build(cls, overrides, beta_zero=True)
    if algo.clip_style == "none":
        return CheckResult(name, None, "no hard clip (clip_style = 'none')")
    if algo.mechanism:
        bound, why = locate_upper_clip(algo)
        if bound is None:
            return CheckResult(name, False, f"clip_style = {algo.clip_style!r}: {why}")
        located = f"where its mechanism ({', '.join(algo.mechanism)}) starts to act"
    else:
        found = upper_ratio_bound(algo)
        if found is None:
            fields = ", ".join(f for f, _ in UPPER_CLIP_FIELDS)
            why = (
                f"declares no mechanism to locate a clip by, and has no config field among "
                f"{fields}: declare `mechanism` (its acting shares) to have the clip checked"
            )
            return CheckResult(name, None, why)
        located, bound = f"{found[0]}; no mechanism declared", found[1]
    # rows 0 and 1: 4 tokens each, the same A; row 2: a short response at r = 1
    second = 3.0 * bound if algo.clip_style == "cap" else 1.0
    case = clip_case([math.log(1.5 * bound), math.log(second), 0.0])
    _, grad = loss_and_grad(algo, case)
    where = f"r = 1.5 x {bound:.6g} ({located})"
    if algo.clip_style == "cap":
        if float(grad[0].abs().min()) <= ZERO:
            return CheckResult(name, False, f"{where}: gradient zeroed, but clip_style = 'cap'")
        diff = max_diff(grad[0], grad[1])
        ok = diff <= TOL * float(grad[0].abs().max())
        return CheckResult(name, ok, f"{where} and 3 x: capped, not zeroed (diff {diff:.2e})")
    worst = float(grad[0].abs().max())
    # a selection of tokens (token_selection) may leave most of the control's tokens out
    control = grad[1].abs().max() if algo.token_selection else grad[1].abs().min()
    if float(control) <= ZERO:
        return CheckResult(name, False, "control response at r = 1 got no gradient")
    detail = f"{where}, A > 0: max |grad| {worst:.2e}"
    if worst > ZERO:
        detail += " (if the loss caps the weight instead, declare clip_style = 'cap')"
    return CheckResult(name, worst <= ZERO, detail)


def check_sequence_level(cls: type[Algorithm], overrides: Overrides = NONE) -> CheckResult:
    """(6) For ``sequence_level`` algorithms: two responses with the same length, advantage
    and mean log-ratio, but different per-token log-ratios and log-probs, get identical
    gradients, constant over each response's tokens."""
    name = "sequence_level"
    if not cls.sequence_level:
        return CheckResult(name, None, "not declared sequence-level (sequence_level = False)")
    algo = build(cls, overrides, beta_zero=True)
    # binary-exact log-ratios: each row's mean is exactly 0, so s_i = 1 lies inside any clip
    log_r = torch.tensor(
        [
            [0.25, -0.125, -0.125, 0.0],
            [0.5, 0.0, -0.5, 0.0],
            [0.75, -0.25, -0.25, -0.25],
            [-0.5, 0.5, 0.125, -0.125],
        ],
        dtype=torch.float64,
    )
    lp = -0.2 - torch.arange(16, dtype=torch.float64).reshape(4, 4) / 9
    mask = lengths_mask([3, 3, 4, 4], 4)
    adv = torch.tensor([0.9, 0.9, -0.6, -0.6], dtype=torch.float64)
    _, grad = loss_and_grad(algo, Case(lp, lp - log_r, lp.clone(), adv, mask))
    rows = [grad[i, : int(mask[i].sum())] for i in range(4)]
    scale = max(float(r.abs().max()) for r in rows)
    if scale == 0:
        return CheckResult(name, False, "the gradient is zero everywhere (vacuous)")
    within = max(float((r - r[0]).abs().max()) for r in rows)
    across = max(max_diff(rows[0], rows[1]), max_diff(rows[2], rows[3]))
    ok = max(within, across) <= TOL * scale
    return CheckResult(name, ok, f"spread within a response {within:.2e}, between {across:.2e}")


def off_policy_case() -> Case:
    """B = 5 responses whose log-ratios lp - old have scales 0.05, 0.3, 0.6, 1.0 and 2.0
    (ratios from about 0.35 to 20, as after several updates on a batch), two positive and
    three negative advantages. Every built-in's mechanism acts on some token here."""
    g = torch.Generator().manual_seed(7)
    lengths, width = [6, 3, 5, 4, 6], 6
    lp = -0.1 - 2 * torch.rand(len(lengths), width, generator=g, dtype=torch.float64)
    scale = torch.tensor([0.05, 0.3, 0.6, 1.0, 2.0], dtype=torch.float64)[:, None]
    old = lp - scale * torch.randn(len(lengths), width, generator=g, dtype=torch.float64)
    adv = torch.tensor([1.2, -0.4, 0.7, -1.1, -0.5], dtype=torch.float64)
    # entropy grows with how far a token's ratio moved the way its advantage pushes it
    # (up for A > 0, down for A < 0), where clips act: a selection of the highest-entropy
    # tokens keeps tokens for a mechanism to act on
    entropy = 0.1 + 3 * torch.sigmoid(adv.sign()[:, None] * (lp - old))
    return Case(lp, old, lp.clone(), adv, lengths_mask(lengths, width), entropy=entropy)


def check_off_policy(cls: type[Algorithm], overrides: Overrides = NONE) -> CheckResult:
    """(7) The mechanism the class declares (``Algorithm.mechanism``: acting shares, idle
    at 0) is idle on-policy; stays idle on a batch whose ratios moved but whose advantages
    are all 0 (no token has a policy gradient for a clip, cap or gate to change, so a
    share counting tokens merely out of range fails here); and acts on the same batch
    with its advantages, where the gradient differs from that of the unclipped
    importance-weighted surrogate -r*A (same aggregation): the mechanism changes the
    update, and its shares say so."""
    name = "off_policy"
    if not cls.mechanism:
        return CheckResult(name, None, "declares no mechanism (Algorithm.mechanism is empty)")
    algo = build(cls, overrides, beta_zero=True)
    declared = ", ".join(cls.mechanism)
    not_zero = {k: v for k, v in cls.mechanism.items() if v != 0}
    if not_zero:
        return CheckResult(
            name,
            False,
            f"declares idle values other than 0: {not_zero}; "
            "mechanism names acting shares, idle at 0",
        )
    on_case = random_case(4, on_policy=True)
    on_metrics = algo.loss(
        TrainBatch(
            on_case.lp,
            on_case.old,
            None,
            on_case.adv,
            on_case.mask,
            max_response_len=8,
            entropy=entropy_of(algo, on_case),
        )
    ).metrics
    missing = [m for m in cls.mechanism if m not in on_metrics]
    if missing:
        return CheckResult(name, False, f"declares {declared} but reports no {missing[0]}")
    if cls.mechanism_acted(on_metrics):
        return CheckResult(name, False, f"{declared} not idle on-policy: {on_metrics}")
    case = off_policy_case()
    no_adv = TrainBatch(
        case.lp,
        case.old,
        None,
        torch.zeros_like(case.adv),
        case.mask,
        max_response_len=case.max_response_len,
        entropy=entropy_of(algo, case),
    )
    zero_metrics = algo.loss(no_adv).metrics
    if cls.mechanism_acted(zero_metrics):
        shares = ", ".join(f"{m} {zero_metrics.get(m, 0.0):.3g}" for m in cls.mechanism)
        return CheckResult(
            name,
            False,
            f"with every advantage 0 (no gradient to change) "
            f"the ratios moved and {shares}: an acting share "
            "counts only tokens whose gradient changed",
        )
    _, grad = loss_and_grad(algo, case)
    batch = TrainBatch(
        case.lp.detach(),
        case.old,
        None,
        case.adv,
        case.mask,
        max_response_len=case.max_response_len,
        entropy=entropy_of(algo, case),
    )
    metrics = algo.loss(batch).metrics
    lp = case.lp.clone().requires_grad_(True)
    plain = TrainBatch(
        lp, case.old, None, case.adv, case.mask, max_response_len=case.max_response_len
    )
    ratio = torch.exp(log_ratio(plain))
    aggregate(-ratio * plain.token_advantages, plain, algo.aggregation).backward()
    changed = max_diff(grad, lp.grad) / float(lp.grad.abs().max())
    values = ", ".join(f"{m} {metrics[m]:.3g}" for m in cls.mechanism)
    acted = cls.mechanism_acted(metrics)
    ok = acted and changed > TOL
    on_tokens = ratio.detach()[case.mask > 0]
    detail = (
        f"declares {declared}; ratios {float(on_tokens.min()):.2g}..{float(on_tokens.max()):.2g}:"
        f" {values}, "
        f"{'acted' if acted else 'did not act'}; gradient vs unclipped -r*A: relative max "
        f"diff {changed:.2e}"
    )
    return CheckResult(name, ok, detail)


def check_entropy(cls: type[Algorithm], overrides: Overrides = NONE) -> CheckResult:
    """(8) For an algorithm that reads the policy's entropy through the shared options
    (config fields ``entropy_coef`` c and ``entropy_top_share`` rho, zoo/core/entropy.py):
    with every advantage 0 and beta 0 (off-policy), the loss and its gradient with respect
    to the entropy are those of the bonus -c * aggregate(H) under the class's
    aggregation, and lp gets none; with c = 0 on-policy, the gradient is REINFORCE's on
    the ceil(rho N) response tokens of highest entropy (ties: earlier rows, then earlier
    tokens) and 0 on the others, and ``entropy_kept_frac`` reports their share."""
    name = "entropy"
    algo = build(cls, overrides, beta_zero=False)
    if not algo.needs_entropy:
        return CheckResult(name, None, "does not read the policy's entropy (needs_entropy)")
    fields = {f.name for f in dataclasses.fields(cls.config_class)}
    if not {"entropy_coef", "entropy_top_share"} & fields:
        return CheckResult(
            name,
            None,
            "reads the entropy its own way: no entropy_coef or entropy_top_share field to check",
        )
    coef, share = algo.entropy_options
    details = []
    if coef != 0.0:
        bonus_only = cls(**{**overrides, **({"beta": 0.0} if "beta" in fields else {})})
        case = random_case(5, on_policy=False)
        case = dataclasses.replace(case, adv=torch.zeros_like(case.adv))
        loss, grad, entropy_grad = loss_and_grads(bonus_only, case)
        entropy = case.entropy.clone().requires_grad_(True)
        batch = TrainBatch(
            case.lp,
            case.old,
            None,
            case.adv,
            case.mask,
            max_response_len=case.max_response_len,
            entropy=entropy,
        )
        bonus = entropy_bonus_loss(batch, coef, algo.aggregation)
        bonus.backward()
        want = float(bonus.detach())
        if abs(loss - want) > TOL * max(1.0, abs(want)):
            return CheckResult(
                name,
                False,
                f"with A = 0 the loss is {loss!r}, the bonus -c * aggregate(H) is {want!r}",
            )
        if float(grad.abs().max()) > ZERO:
            return CheckResult(name, False, "with A = 0 and beta = 0 lp got a gradient")
        result = compare_grads(name, entropy_grad, entropy.grad, "bonus gradient wrt H")
        if not result.passed:
            return result
        details.append(result.detail)
    if share < 1.0:
        selecting = build(cls, overrides, beta_zero=True)
        case = random_case(6, on_policy=True)
        _, grad = loss_and_grad(selecting, case)
        lp = case.lp.clone().requires_grad_(True)
        batch = TrainBatch(
            lp, case.old, None, case.adv, case.mask, max_response_len=case.max_response_len
        )
        aggregate(-batch.token_advantages * lp, batch, algo.aggregation).backward()
        # the top share, in plain Python: (-H, row, token) sorts ties by position
        tokens = [
            (-float(case.entropy[i, t]), i, t) for i, t in torch.nonzero(case.mask > 0).tolist()
        ]
        kept = math.ceil(share * len(tokens) - 1e-9)
        keep = torch.zeros_like(case.mask)
        for _, i, t in sorted(tokens)[:kept]:
            keep[i, t] = 1.0
        result = compare_grads(name, grad, lp.grad * keep, f"top {share:g} by entropy")
        if not result.passed:
            return result
        metrics = selecting.loss(
            dataclasses.replace(batch, logprobs=case.lp.clone(), entropy=case.entropy)
        ).metrics
        reported = metrics.get(KEPT_METRIC)
        if reported is None or abs(reported - kept / len(tokens)) > TOL:
            return CheckResult(
                name, False, f"{kept} of {len(tokens)} tokens kept, {KEPT_METRIC} = {reported}"
            )
        details.append(f"{result.detail}; {kept} of {len(tokens)} tokens kept")
    return CheckResult(name, True, "; ".join(details))


def check_value_loss(cls: type[Algorithm], overrides: Overrides = NONE) -> CheckResult:
    """(9) For an algorithm with a learned critic (``needs_values``): its ``value_loss``
    ignores padding (junk appended under mask 0 changes neither loss nor gradient, and
    padding gets none) and adds up over micro-batches that carry the whole batch's token
    count, like the policy loss (checks 3 and 4); with values equal to their targets and
    to the old values, the loss and its gradient are 0."""
    name = "value_loss"
    if not cls.needs_values:
        return CheckResult(name, None, "no learned critic (needs_values = False)")
    algo = cls(**overrides)
    g = torch.Generator().manual_seed(11)
    v, old, target = (torch.randn(5, 6, generator=g, dtype=torch.float64) for _ in range(3))
    mask = lengths_mask([6, 2, 0, 4, 3], 6)

    def loss_grad(v, old, target, mask, splits=(slice(None),)):
        leaf = v.clone().requires_grad_(True)
        total, tokens = 0.0, int(mask.sum())
        for rows in splits:
            out = algo.value_loss(
                ValueBatch(leaf[rows], old[rows], target[rows], mask[rows], num_tokens=tokens)
            )
            out.loss.backward()
            total += float(out.loss.detach())
        return total, leaf.grad if leaf.grad is not None else torch.zeros_like(leaf)

    loss, grad = loss_grad(v, old, target, mask)
    if float(grad.abs().max()) == 0:
        return CheckResult(name, False, "the value loss has no gradient (vacuous)")

    def pad(x: torch.Tensor, junk: float) -> torch.Tensor:
        return torch.cat([x, torch.full((5, 3), junk, dtype=x.dtype)], dim=1)

    loss_p, grad_p = loss_grad(pad(v, 40.0), pad(old, -30.0), pad(target, 9.0), pad(mask, 0.0))
    if abs(loss_p - loss) > TOL * max(1.0, abs(loss)) or float(grad_p[:, 6:].abs().max()) > 0:
        return CheckResult(
            name, False, f"padding changed the loss ({loss!r} -> {loss_p!r}) or got a gradient"
        )
    loss_mb, grad_mb = loss_grad(v, old, target, mask, (slice(0, 2), slice(2, 3), slice(3, 5)))
    if abs(loss_mb - loss) > TOL * max(1.0, abs(loss)):
        return CheckResult(name, False, f"summed micro-batch loss {loss_mb!r} != {loss!r}")
    exact, exact_grad = loss_grad(target, target, target, mask)
    if abs(exact) > ZERO or float(exact_grad.abs().max()) > ZERO:
        return CheckResult(name, False, f"values at their targets: loss {exact:.2e}, not 0")
    return compare_grads(name, grad_mb, grad, "value loss: micro-batches vs whole, padding")


GROUP_SIZE = 8
"""Responses per hand-built group of the advantages check when the run's group size is
not given (``run_conformance(..., group_size=)``): the run's default ``--group-size``."""


def ranked_groups(group_size: int) -> torch.Tensor:
    """[6, G] float32 rewards (as the loop's, from the env's floats) of groups whose better
    answers are known: one right, one wrong, every other one right, partial credit with
    every value distinct (shuffled), rewards of -1 and 1, and all equal (no better answer:
    it only keeps batch-wide estimators honest)."""
    g = group_size
    one_wrong = [1.0] * g
    one_wrong[g // 2] = 0.0
    order = torch.randperm(g, generator=torch.Generator().manual_seed(58)).tolist()
    rows = [
        [1.0] + [0.0] * (g - 1),
        one_wrong,
        [float(i % 2) for i in range(g)],
        [order[i] / (g - 1) for i in range(g)],
        [1.0 if i % 3 == 1 else -1.0 for i in range(g)],
        [0.5] * g,
    ]
    return torch.tensor(rows, dtype=torch.float32)


def per_response_advantages(algo: Algorithm, group_size: int) -> tuple[torch.Tensor, str]:
    """``algo``'s advantages of ``ranked_groups`` as the loop computes them, one per
    response ([groups, G] float64), and what they are. ``group_advantages`` with the
    responses' lengths (equal within a group, so that no length-aware baseline can reorder
    a group), one turn per response, and for a greedy baseline each group's mean reward.
    A per-turn result gives its only turn. For an algorithm with a critic
    (``needs_values``), the per-token advantages ``token_advantages`` makes of the
    rewards on each response's last token and values of 0 (a critic that has learnt
    nothing yet), averaged over each response's tokens: what the loss is given."""
    rewards = ranked_groups(group_size)
    groups = rewards.shape[0]
    lengths = torch.tensor([[3 + 2 * k] * group_size for k in range(groups)])
    greedy = rewards.mean(dim=1) if algo.needs_greedy_baseline else None
    advantages = algo.group_advantages(rewards, lengths, None, greedy, None)
    if advantages.dim() == 3:
        advantages = advantages[..., 0]
    if not algo.needs_values:
        return advantages.double(), "advantage"
    from zoo.core.losses import last_token_rewards

    mask = lengths_mask(lengths.flatten().tolist(), int(lengths.max())).float()
    token_rewards = last_token_rewards(advantages.flatten(), mask)
    per_token, _ = algo.token_advantages(token_rewards, torch.zeros_like(token_rewards), mask)
    mean = (per_token.double() * mask).sum(-1) / mask.sum(-1)
    return mean.view(groups, group_size), "mean token advantage (values 0)"


def check_advantages(
    cls: type[Algorithm], overrides: Overrides = NONE, group_size: int = GROUP_SIZE
) -> CheckResult:
    """(10) The advantages the loop would train on rank the better answer higher: on
    ``ranked_groups`` of ``group_size``, a response with a higher reward than another of
    its group never gets a lower advantage, and at least one gets a higher one. (Ties are
    allowed: pass@k gives a group whose pass@k is certain the same advantage throughout.)
    A flipped sign fails here while every loss check passes, and would train toward the
    wrong answers."""
    name = "advantages"
    algo = cls(**overrides)
    rewards = ranked_groups(group_size).double()
    advantages, what = per_response_advantages(algo, group_size)
    if not bool(torch.isfinite(advantages).all()):
        return CheckResult(name, False, f"{what}: not finite, {advantages.tolist()}")
    tol = TOL * max(1.0, float(advantages.abs().max()))
    # [groups, G, G]: response i rewarded above response j of its group, and by how much
    # i's advantage exceeds j's
    better = rewards[:, :, None] > rewards[:, None, :]
    gap = advantages[:, :, None] - advantages[:, None, :]
    pairs, higher = int(better.sum()), int((better & (gap > tol)).sum())
    below = torch.where(better & (gap < -tol), -gap, 0.0)
    shown = f"{rewards.shape[0]} groups of {group_size}"
    if float(below.max()) > 0:
        k, i, j = (int(x) for x in torch.nonzero(below == below.max())[0])
        r, a = rewards[k].tolist(), advantages[k].tolist()
        flipped = " (not one pair ranked the right way: a flipped sign?)" if higher == 0 else ""
        detail = (
            f"group rewards {[round(x, 3) for x in r]}: the answer rewarded {r[i]:g} got "
            f"{what} {a[i]:.3g}, below the {a[j]:.3g} of one rewarded {r[j]:g}{flipped}"
        )
        return CheckResult(name, False, detail)
    if higher == 0:
        values = sorted({round(float(x), 6) for x in advantages.flatten()})
        detail = f"{shown}: no better answer got a higher {what} (values {values[:6]})"
        return CheckResult(name, False, detail)
    detail = f"{shown}: the better answer's {what} higher in {higher} of {pairs} pairs, never lower"
    return CheckResult(name, True, detail)


CHECKS: dict[str, Callable[[type[Algorithm], Overrides], CheckResult]] = {
    "reinforce_on_policy": check_reinforce_on_policy,
    "zero_advantages": check_zero_advantages,
    "padding": check_padding,
    "micro_batching": check_micro_batching,
    "clipping": check_clipping,
    "sequence_level": check_sequence_level,
    "off_policy": check_off_policy,
    "entropy": check_entropy,
    "value_loss": check_value_loss,
    "advantages": check_advantages,
}


FIXES: dict[str, str] = {
    "reinforce_on_policy": "on-policy (ratio 1, no clip binding, beta 0) the gradient must "
    "be REINFORCE's, -A_i * grad log pi aggregated as the class's `aggregation` says: check "
    "the sign of the surrogate and that `aggregation` names the reduction the loss uses",
    "zero_advantages": "with every advantage 0 and beta 0 the loss and its gradient must be "
    "0: do not add terms that do not depend on the advantages (or scale them by beta)",
    "padding": "read only the tokens batch.mask marks: mask every per-token term before "
    "reducing (zoo.core.losses.aggregate does)",
    "micro_batching": "the loss must be additive over micro-batches: reduce with the shared "
    "`aggregate(values, batch, mode)` or divide by the batch's global counts "
    "(batch.num_tokens, batch.num_sequences), never by the micro-batch's own",
    "clipping": "outside the clip range the declared clip must bind: zero gradient there "
    "(clip_style 'zero') or a capped weight ('cap'), as the class declares",
    "sequence_level": "a sequence-level algorithm gives every token of a response the same "
    "ratio (length-normalised), and clips it per sequence",
    "off_policy": "`mechanism` must name acting shares, idle at 0: the share of response "
    "tokens whose gradient the clip, cap or gate changed (not those merely out of range; a "
    "token with A = 0 never counts), reported by the loss; they must be 0 on-policy and "
    "above 0 (with the gradient changed) when the ratios move. For PPO's clip, "
    "`ratio_metrics(ratio, batch, low, high, advantages)` reports clip_*_acting_frac",
    "entropy": "the entropy options act as zoo/core/entropy.py says: subtract "
    "entropy_coef * H per response token before the class's `aggregate` (never on padding), "
    "and multiply the advantages of the policy-gradient term by `top_share_mask(...)`; "
    "`entropy_terms(batch, *self.entropy_options)` gives both",
    "value_loss": "a critic's `value_loss` must read only the tokens batch.mask marks and "
    "divide by batch.num_tokens (the whole batch's), never by the micro-batch's own; "
    "`zoo.core.losses.clipped_value_loss` does both",
    "advantages": "`advantages` must give a response rewarded above another of its group "
    "the higher advantage: reward minus a baseline that does not grow with the response's "
    "own reward (group_norm, rloo, ...); the loss adds -A * log pi, so a flipped sign "
    "trains toward the wrong answers. Check the sign of A = R - b (not b - R)",
}
"""How to repair a failed property, as `harness run` says before refusing a plugin."""


def run_conformance(
    algorithm_cls: type[Algorithm], overrides: Overrides = NONE, group_size: int = GROUP_SIZE
) -> list[CheckResult]:
    """Every property, on the algorithm built with ``overrides`` (default: its paper
    defaults), the advantages on groups of ``group_size`` (the run's, so that an estimator
    bounded by it, pass@k's k, is checked as the run will use it); a check that raises is
    reported as failed with the exception."""
    results = []
    for name, check in CHECKS.items():
        try:
            if name == "advantages":
                results.append(check_advantages(algorithm_cls, overrides, group_size))
            else:
                results.append(check(algorithm_cls, overrides))
        except Exception as exc:  # a plugin's bug is a result, not a crash of the suite
            results.append(CheckResult(name, False, f"raised {type(exc).__name__}: {exc}"))
    return results


def failure_report(results: Sequence[CheckResult]) -> list[str]:
    """Two lines per failed property, what went wrong and how to fix it (``FIXES``), as
    both `harness run` (refusing the plugin) and `harness check-plugin` print them."""
    failed = [r for r in results if r.passed is False]
    return [f"  {r.name}: {r.detail}\n    fix: {FIXES.get(r.name, '')}" for r in failed]


__all__ = ["CHECKS", "FIXES", "CheckResult", "failure_report", "run_conformance"]
