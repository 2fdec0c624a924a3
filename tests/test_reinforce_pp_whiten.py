"""REINFORCE++'s batch whitening (zoo/algorithms/reinforce_pp.py, ``whiten``): "token",
the paper's eq. 10 (and verl's / OpenRLHF's) mean and std over every response token of
the batch, against a plain-Python computation over the tokens; "response", the zoo's
form so far and still the default, unchanged; and on a batch where wrong answers are
longer the two differ by whole advantage units (the flagged deviation)."""

from __future__ import annotations

import statistics

import pytest
import torch

from zoo.algorithms import get_algorithm
from zoo.algorithms.conformance import run_conformance
from zoo.algorithms.reinforce_pp import ReinforcePP
from zoo.core.config import ConfigError
from zoo.core.losses import estimate_advantages, group_center, token_whiten

# two groups of 4: correct answers short (6, 9 tokens), wrong ones long (30-55 tokens)
REWARDS = [[1.0, 0.0, 0.0, 1.0], [0.0, 1.0, 0.0, 0.0]]
LENGTHS = [[6, 40, 55, 9], [30, 8, 48, 36]]


def per_token(values: list[list[float]]) -> list[list[float]]:
    """Whitening as eq. 10 writes it: every token of every response carries its
    response's value; mean and (unbiased) std over that flat list of tokens."""
    tokens = [
        v
        for vs, ns in zip(values, LENGTHS, strict=True)
        for v, n in zip(vs, ns, strict=True)
        for _ in range(n)
    ]
    mean, std = statistics.fmean(tokens), statistics.stdev(tokens)
    return [[(v - mean) / (std + 1e-6) for v in vs] for vs in values]


def advantages(**overrides) -> list[list[float]]:
    algo = get_algorithm("reinforce_pp", **overrides)
    r = torch.tensor(REWARDS, dtype=torch.float64)
    return algo.group_advantages(r, torch.tensor(LENGTHS)).tolist()  # as the loop calls it


def approx(rows: list[list[float]]):
    return [pytest.approx(row, rel=1e-12, abs=1e-12) for row in rows]


def test_token_whitening_matches_a_per_token_computation():
    assert advantages(whiten="token") == approx(per_token(REWARDS))


def test_token_whitening_of_reinforce_pp_baseline_recentres_over_tokens():
    centred = [[r - statistics.fmean(g) for r in g] for g in REWARDS]
    got = advantages(whiten="token", advantage="reinforce_pp_baseline")
    assert got == approx(per_token(centred))
    # the group-centred values' token mean is not 0 when lengths differ: re-centred, as
    # verl's masked_whiten and OpenRLHF do
    assert sum(map(sum, centred)) == pytest.approx(0.0)
    assert got != approx(advantages(advantage="reinforce_pp_baseline"))


def test_the_default_is_still_per_response_and_unchanged():
    assert get_algorithm("reinforce_pp").config.whiten == "response"
    r = torch.tensor(REWARDS, dtype=torch.float64)
    assert advantages() == estimate_advantages("reinforce_pp", r).tolist()  # bit for bit
    flat = [x for g in REWARDS for x in g]
    mean, std = statistics.fmean(flat), statistics.stdev(flat)
    assert advantages() == approx([[(x - mean) / (std + 1e-6) for x in g] for g in REWARDS])
    base = advantages(advantage="reinforce_pp_baseline")
    assert base == estimate_advantages("reinforce_pp_baseline", r).tolist()


def test_where_wrong_answers_are_longer_the_forms_differ_by_whole_units():
    """The long wrong answers pull the token mean down and dominate the token std: under
    "token" a correct answer's advantage is larger (3.01 against 1.21 here) and a wrong
    one's closer to 0 (-0.33 against -0.72) than under "response"."""
    token, response = advantages(whiten="token"), advantages()
    diffs = [
        t - r for ts, rs in zip(token, response, strict=True) for t, r in zip(ts, rs, strict=True)
    ]
    assert max(abs(d) for d in diffs) > 1.5
    assert token[0][0] > response[0][0] and abs(token[0][1]) < abs(response[0][1])


def test_token_whitening_edge_cases():
    same = torch.tensor([[0.5, 0.5], [0.5, 0.5]], dtype=torch.float64)
    assert token_whiten(same, torch.tensor([[3, 1], [0, 2]])).tolist() == [[0.0, 0.0]] * 2
    # a response with no tokens does not count (its value is never trained on)
    v = torch.tensor([[1.0, 0.0, 7.0]], dtype=torch.float64)
    got = token_whiten(v, torch.tensor([[2, 2, 0]]))[0, :2].tolist()
    want = token_whiten(v[:, :2], torch.tensor([[2, 2]]))[0].tolist()
    assert got == pytest.approx(want, rel=1e-12)
    with pytest.raises(ConfigError, match="lengths"):
        token_whiten(v, None)
    with pytest.raises(ConfigError, match="at least 2"):
        token_whiten(torch.tensor([[1.0, 0.0]]), torch.tensor([[1, 0]]))
    assert torch.equal(group_center(torch.tensor([[1.0, 1.0]])), torch.zeros(1, 2))


def test_bad_whiten_settings_are_config_errors():
    with pytest.raises(ConfigError, match="'tokens'; valid: response, token"):
        get_algorithm("reinforce_pp", whiten="tokens")
    with pytest.raises(ConfigError, match="not 'rloo'"):
        get_algorithm("reinforce_pp", whiten="token", advantage="rloo")


@pytest.mark.parametrize("advantage", ["reinforce_pp", "reinforce_pp_baseline"])
def test_token_whitening_passes_the_conformance_suite(advantage):
    results = run_conformance(ReinforcePP, {"whiten": "token", "advantage": advantage})
    assert not [r for r in results if r.passed is False]
