"""A run's evaluations: when one is due, and how it runs, in place or overlapped with the
next step's training.

An evaluation scores the held-out split (not charged to compute): the mean reward of
greedy decoding (``eval_reward``), and with ``eval_samples`` n > 0 (and a sampled
evaluation) pass@k and mean reward of n samples per prompt (zoo.services.evaluation),
seeded per (run seed, prompt) so every checkpoint and every algorithm at this seed draws
the same random numbers. A multi-turn env plays episodes instead (greedy: every turn
greedy; the sampled ones seeded per turn as in training), rewarded by the env, and adds
eval_turns_mean, eval_tool_calls_mean and eval_tool_success_rate of the greedy episodes.

With ``eval_overlap`` on, the evaluation of a step's weights is sent to the generators
(``Evaluator.send``) once the next step has sampled, and collected (``Evaluator.receive``)
after that step's training, before its weight sync: the generators still hold the
evaluated weights, and the trainer did not wait for them."""

from __future__ import annotations

import dataclasses
import statistics
import time
from typing import Any

from zoo.core.config import ConfigError
from zoo.core.types import Completion
from zoo.envs import Prompt
from zoo.run.rollout import EVAL_SEED_OFFSET, CompletionRollouts, Rollouts, sampling_seed, shown
from zoo.run.run_config import RunConfig
from zoo.run.services import Services
from zoo.services.evaluation import sampled_metrics
from zoo.services.protocols import AsyncGeneratorService, PendingGeneration
from zoo.services.sampling import SamplingConfig

EVAL_SAMPLES = 4
"""Held-out problems per evaluation kept for samples.jsonl (greedy completion, reference)."""

Evaluated = tuple[dict[str, float], list[dict[str, Any]]]
"""An evaluation's record and its sample rows for samples.jsonl."""


@dataclasses.dataclass
class EvalInFlight:
    """An evaluation's requests, sent to the generators and not yet answered
    (``eval_overlap``)."""

    prompts: list[Prompt]
    greedy: PendingGeneration
    drawn: PendingGeneration | None  # the n samples per prompt, if this one draws them
    send_seconds: float


class Evaluator:
    """Runs a run's evaluations with its services, rollouts and sampling settings."""

    def __init__(
        self, cfg: RunConfig, services: Services, rollouts: Rollouts, sampling: SamplingConfig
    ) -> None:
        self.cfg, self.s, self.rollouts, self.sampling = cfg, services, rollouts, sampling

    def run(self, sampled: bool = True) -> Evaluated:
        """Evaluate now, in place (the module's docstring); ``sampled``: with the n
        samples per prompt."""
        start = time.perf_counter()
        prompts, encoded, n, seeds = self._requests(sampled)
        greedy = self.rollouts.sample(prompts, encoded, n=1, greedy=True)
        drawn = self.rollouts.sample(prompts, encoded, n, seeds) if n else None
        record, rows = self._record(prompts, greedy, drawn)
        record["eval_seconds"] = time.perf_counter() - start
        return record, rows

    def send(self, sampled: bool) -> EvalInFlight:
        """Send an evaluation's requests to the generators without waiting for them
        (``eval_overlap``): the same requests ``run`` makes, greedy and sampled."""
        start = time.perf_counter()
        prompts, encoded, n, seeds = self._requests(sampled)
        generator, sampling = self.s.generator, self.sampling
        assert isinstance(generator, AsyncGeneratorService)  # (check_eval_overlap)
        greedy = generator.submit(encoded, n=1, sampling=sampling, greedy=True)
        drawn = generator.submit(encoded, n=n, sampling=sampling, seeds=seeds) if n else None
        return EvalInFlight(prompts, greedy, drawn, time.perf_counter() - start)

    def receive(self, flight: EvalInFlight) -> Evaluated:
        """Wait for an evaluation sent by ``send``. Its ``eval_seconds`` are the wall
        seconds it added to the run: sending, waiting for what training did not hide,
        and scoring."""
        start = time.perf_counter()
        drawn = flight.drawn.result() if flight.drawn is not None else None
        record, rows = self._record(flight.prompts, flight.greedy.result(), drawn)
        record["eval_seconds"] = flight.send_seconds + time.perf_counter() - start
        return record, rows

    def _requests(self, sampled: bool) -> tuple[list[Prompt], list[list[int]], int, list[int]]:
        """The held-out prompts, their ids, the samples per prompt (0: greedy only) and
        their seeds."""
        s, n = self.s, self.cfg.evaluation.eval_samples if sampled else 0
        prompts = s.env.eval_split(self.cfg.evaluation.eval_split)
        eval_seed = self.cfg.run.seed + EVAL_SEED_OFFSET
        streams = self.cfg.sampling.sample_streams
        seeds = [
            sampling_seed(eval_seed, i, streams=streams, samples=n) for i in range(len(prompts))
        ]
        return prompts, [s.encode(p) for p in prompts], n, seeds

    def _record(
        self,
        prompts: list[Prompt],
        greedy: list[list[Completion]],
        drawn: list[list[Completion]] | None,
    ) -> Evaluated:
        """An evaluation's record from its greedy completions and, if any, its n sampled
        completions per prompt; and its sample rows for samples.jsonl."""
        rewards = self.rollouts.rewards(prompts, greedy)
        record = {"eval_reward": statistics.fmean(rewards)}
        record.update({f"eval_{k}": v for k, v in self.rollouts.metrics(greedy).items()})
        rows = [
            {
                "kind": "eval",
                "index": p.index,
                "prompt": p.text,
                "completion": shown(g[0]),
                "reference": self.s.env.reference_answer(p),
                "reward": float(r),
                "finish_reason": g[0].finish_reason,
                "policy_version": g[0].policy_version,
            }
            for p, g, r in zip(prompts[:EVAL_SAMPLES], greedy, rewards, strict=False)
        ]
        if drawn is not None:
            n = len(drawn[0])
            flat = self.rollouts.rewards(prompts, drawn)
            record.update(sampled_metrics([flat[i * n : (i + 1) * n] for i in range(len(prompts))]))
        return record, rows


def eval_points_crossed(cfg: RunConfig, spent: float, evals_done: int) -> int:
    """Budget mode: how many of the K evenly spaced evaluation points a spend of ``spent``
    has crossed, counting on from ``evals_done`` (one evaluation even if a step crossed
    two points)."""
    _, amount = cfg.budget.limit
    while spent >= amount * (evals_done + 1) / cfg.evaluation.eval_points:
        evals_done += 1
    return evals_done


def sampled_eval_due(cfg: RunConfig, step: int, evals_done: int) -> bool:
    """Is the evaluation made at ``step`` one of the last ``sampled_eval_points``? Step
    mode: of step 0, the multiples of ``eval_every`` and the last step. Budget mode: of the
    K + 1 points (0, 1/K, ..., K/K of the budget), by the highest point the spend has
    crossed (``evals_done``)."""
    last = cfg.evaluation.sampled_eval_points
    if not last:
        return True
    unit, amount = cfg.budget.limit
    if unit != "steps":
        return evals_done > cfg.evaluation.eval_points - last
    points = sorted(
        {0, *range(cfg.evaluation.eval_every, int(amount), cfg.evaluation.eval_every), int(amount)}
    )
    return step >= points[-min(last, len(points))]


def may_defer_eval(cfg: RunConfig, step: int, last: bool) -> bool:
    """May this step's evaluation run during the next step's training (eval_overlap)? Not
    at the last step (there is no next one), nor at a checkpoint's step (a checkpoint
    never holds a step whose record is not written). (Nor after a non-finite figure: the
    run stops there; the loop checks that.)"""
    return (
        cfg.evaluation.eval_overlap == "on"
        and not last
        and not (cfg.output.checkpoint_every and step % cfg.output.checkpoint_every == 0)
    )


def check_eval_overlap(rollouts: object, services: Services) -> None:
    """Refuse ``eval_overlap`` on for what it cannot overlap: a multi-turn env's evaluation
    is episodes, each a conversation of calls (not requests sent at once), and an
    in-process generator cannot take requests while this process trains."""
    if not isinstance(rollouts, CompletionRollouts):
        raise ConfigError(
            f"eval_overlap on needs a single-turn env; {services.env.name!r} plays "
            "multi-turn episodes, whose evaluation runs in place: use --eval-overlap off"
        )
    if not isinstance(services.generator, AsyncGeneratorService):
        raise ConfigError(
            "eval_overlap on needs generators that take requests without waiting "
            f"(the Monarch placement's); {type(services.generator).__name__} does not"
        )
