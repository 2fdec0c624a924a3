"""The RL loop: one step is one rollout batch, written against service interfaces
(``Services``, zoo.run.services), in five parts:

    collect     the step's sampling rounds (zoo.run.rounds): ``prompts_per_step`` prompts
                from env.train_prompts, G samples each from ``rollouts.sample``
                (generator.generate's completions, or a multi-turn env's episodes:
                zoo.run.rollout, zoo.run.episodes), their rewards (services.score_batch,
                or each episode's own), then the algorithm's hooks: shape_rewards (DAPO's
                overlong punishment), per-turn rewards and states (GiGPO), a greedy
                baseline completion per prompt (ReMax, charged to the ledger's baseline
                phase), group_advantages, keep (DAPO's dynamic sampling: more rounds up to
                ``max_sampling_rounds``)
    advantages  come with the rounds; the kept groups packed into one batch
    train       the update (zoo.run.update): old log-probs with the weights that sampled
                the batch, the reference's, the critic's values and targets (PPO), the
                trainer-sampler mismatch and the run's off-policy correction
                (zoo.services.offpolicy), KL control (zoo.run.kl_control: the KL return
                in the advantages, the adaptive weight), trainer.train(batch,
                algorithm.loss) in mini_batches x epochs optimizer steps, critic.train
    sync        services.sync_weights: trainer weights to the generators, a new version
    account     the ledger's FLOPs, tokens and seconds per phase, each service's idle time

Evaluations (zoo.run.evaluation) run at their due points, in place, or with
``eval_overlap`` on the generators while the next step trains. Each step keeps a few of
its samples (the first ``SAMPLE_GROUPS`` groups of its first round) and each evaluation
its first ``EVAL_SAMPLES`` problems, for samples.jsonl; reading them changes nothing.

Sync mode (the default) samples each batch with the current weights. Async mode (Monarch
placement) requests batches ``max_policy_age`` steps ahead, so generation overlaps
training; the trainer keeps the weights of those versions to compute the old log-probs
with the weights that sampled each batch. Services are built by ``build_services``, in
this process or as Monarch actors (zoo.placement): a placement only has to provide
objects with the same methods. What a sample is, is chosen once per run
(``make_rollouts``), so the step never asks. (``X as X`` imports below keep names that
moved out of this module importable from it.)
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import torch

from zoo.core.types import Completion
from zoo.envs import Prompt
from zoo.run.episodes import make_rollouts
from zoo.run.evaluation import EVAL_SAMPLES as EVAL_SAMPLES
from zoo.run.evaluation import (
    EvalInFlight,
    Evaluated,
    Evaluator,
    check_eval_overlap,
    eval_points_crossed,
    may_defer_eval,
    sampled_eval_due,
)
from zoo.run.kl_control import kl_controller
from zoo.run.plan import episode_budget
from zoo.run.rollout import sampling_seed
from zoo.run.rounds import SAMPLE_GROUPS as SAMPLE_GROUPS
from zoo.run.rounds import Rounds, check_greedy_baseline, greedy_baseline, sampling_rounds
from zoo.run.rounds import length_metrics as length_metrics
from zoo.run.run_config import RunConfig
from zoo.run.services import Services
from zoo.run.update import train_batch
from zoo.run.wiring import resolved_config as resolved_config
from zoo.services.batch import RolloutBatch
from zoo.services.protocols import AsyncGeneratorService, PendingGeneration
from zoo.services.sampling import SamplingConfig


@dataclasses.dataclass
class StepClock:
    """Where a step's accounting starts: its wall clock, the generators' busy seconds and
    the ledger's seconds per phase."""

    started: float
    generator_busy: float
    phase_seconds: dict[str, float]


class RLLoop:
    def __init__(self, cfg: RunConfig, services: Services) -> None:
        self.cfg = cfg
        self.s = services
        services.algorithm.check_run(
            cfg.sampling.group_size, cfg.sampling.prompts_per_step * cfg.sampling.group_size
        )
        self.sampling = SamplingConfig(
            temperature=cfg.sampling.temperature, max_tokens=cfg.sampling.max_response_len
        )
        plan = services.plan
        self.budget = plan.episode_budget if plan is not None else episode_budget(cfg, services.env)
        """Tokens after the prompt per sample: max_response_len, or a multi-turn env's
        token limit per episode (also the L_max of length shaping); the plan's, resolved
        once for the run."""
        self.rollouts = make_rollouts(services, self.sampling, self.budget)
        """What a sample is: a completion, or a multi-turn env's episode."""
        self.evaluator = Evaluator(cfg, services, self.rollouts, self.sampling)
        self.kl = kl_controller(services.algorithm)
        """The KL weight's controller (zoo.run.kl_control): fixed, or adaptive."""
        check_greedy_baseline(cfg, services.algorithm)
        self.greedy_baseline = services.algorithm.needs_greedy_baseline
        """Generate, score and charge a greedy completion of every prompt (ReMax)."""
        if self.greedy_baseline:
            services.ledger.open_phase("baseline")
        self.drawn: list[list[Completion]] = []
        """Every group sampled since the last step's record (stale ones too): its
        ``rollouts.metrics``."""
        self.cursor = 0  # next index in the env's train stream for this seed
        self.samples = 0
        self.train_seconds = 0.0
        self.step_started = 0.0  # perf_counter at the start of the current step
        self.step_index = 0  # optimizer steps done
        self.evals_done = 0  # budget checkpoints evaluated
        self.version = 0  # the trainer's policy version (read at the start of each step)
        self.in_flight: deque[tuple[int, list[Prompt], PendingGeneration]] = deque()
        """Async mode: (first prompt's cursor, prompts, pending generation), oldest first."""
        self.policy_ages: list[int] = []  # of the samples taken in this step
        self.stale_dropped = 0
        self.kept_samples: list[dict[str, Any]] = []
        """Sample rows of the last step and evaluation, not yet handed to ``run``'s
        ``samples`` callback."""
        self.eval_to_send: bool | None = None
        """eval_overlap: the evaluation of the last step's weights that the next step sends
        to the generators once it has sampled (its ``sampled`` argument); None: none."""
        self.eval_answered: Evaluated | None = None
        """eval_overlap: that evaluation's record and sample rows, once back."""
        if cfg.evaluation.eval_overlap == "on":
            check_eval_overlap(self.rollouts, services)

    def step(self) -> dict[str, Any]:
        """One rollout batch: collect it (the sampling rounds, with their advantages),
        train on it, sync the weights, account for the step's time."""
        s = self.s
        clock = self._start_clock()
        rounds = self.collect()
        record = rounds.record(self.rollouts.metrics(self.drawn), s.algorithm.advantage_metrics())
        self.drawn = []
        # eval_overlap: the last step's weights are evaluated while this step trains; the
        # generators hold those weights until the answer is back (before the sync below)
        flight = self._submit_eval(self.eval_to_send) if self.eval_to_send is not None else None
        self.eval_to_send = None
        if rounds.groups:
            record.update(self.train(rounds.batch(), rounds.shapes()))
        evaluation_cost = self._await_eval(flight)
        if rounds.groups:
            with s.ledger.timed("sync"):
                s.sync_weights()
        record.update(self._account(clock, *evaluation_cost))
        return record

    def _start_clock(self) -> StepClock:
        s = self.s
        started = self.step_started = time.perf_counter()
        clock = StepClock(started, s.generator.busy_seconds, dict(s.ledger.seconds))
        self.version = s.trainer.version
        return clock

    def collect(self) -> Rounds:
        """This step's sampling rounds (zoo.run.rounds), its first round's sample rows
        kept for samples.jsonl."""
        baseline = self.baseline_groups if self.greedy_baseline else None
        s, sample = self.s, self.sample_groups
        rounds = sampling_rounds(
            self.cfg, s.algorithm, self.rollouts, s.ledger, self.budget, sample, baseline
        )
        self.kept_samples += rounds.rows
        return rounds

    def _account(self, clock: StepClock, eval_wall: float, eval_busy: float) -> dict[str, Any]:
        """The step's wall seconds (an overlapped evaluation's excluded) added to the run's,
        and its idle figures: wall seconds of this step a service was not working for it
        (the trainer works in old_logprobs, train and in exporting its weights for sync;
        generator busy time is summed over replicas and counted when its samples arrive).
        Async mode: the policy ages of its samples and the stale groups dropped."""
        s, ledger = self.s, self.s.ledger
        wall = time.perf_counter() - clock.started - eval_wall
        self.train_seconds += wall
        spent = {k: v - clock.phase_seconds.get(k, 0.0) for k, v in ledger.seconds.items()}
        trainer_busy = sum(spent.get(p, 0.0) for p in ("old_logprobs", "train", "sync"))
        generator_busy = s.generator.busy_seconds - clock.generator_busy - eval_busy
        record: dict[str, Any] = {
            "trainer_idle_seconds": max(0.0, wall - trainer_busy),
            "generator_busy_seconds": generator_busy,
            "generator_idle_seconds": max(0.0, wall * s.generator.replicas - generator_busy),
        }
        if self.cfg.placement.mode == "async":
            ages, self.policy_ages = self.policy_ages, []
            record["policy_age_mean"] = statistics.fmean(ages) if ages else 0.0
            record["policy_age_max"] = max(ages, default=0)
            record["stale_dropped"] = self.stale_dropped
        self.policy_ages, self.stale_dropped = [], 0
        return record

    def sample_groups(self, n: int) -> tuple[list[Prompt], list[list[Completion]]]:
        """The next ``n`` prompts of the train stream and G completions of each, less any
        group sampled by weights more than ``max_policy_age`` steps old.

        Async mode: the prompts were requested ``max_policy_age`` steps ago (or now, the
        first time); before returning, requests for the batches after them are topped up,
        so the generator samples those while the trainer trains on these. An actor handles
        its messages in order, so a batch requested after the weight update of step k is
        sampled by version k and trained on at step k + max_policy_age + 1 at the latest."""
        cfg, s, ledger = self.cfg, self.s, self.s.ledger
        if cfg.placement.mode == "sync":
            prompts = self._next_prompts(n)
            encoded = [s.encode(p) for p in prompts]
            seeds = self._seeds(prompts)
            with ledger.timed("generate"):  # a multi-turn env's steps included
                groups = self.rollouts.sample(prompts, encoded, cfg.sampling.group_size, seeds)
        else:
            _, prompts, pending = self.in_flight.popleft() if self.in_flight else self._submit(n)
            with ledger.timed("generate"):  # what overlapping did not hide
                groups = pending.result()
            while len(self.in_flight) < cfg.placement.max_policy_age:
                self.in_flight.append(self._submit(n))
        for g in groups:
            for c in g:  # every generated token is charged, kept or not
                # an episode: once, each turn's request as the engine ran it (its cached
                # prefix not charged); its tokens with the observations (zoo.services.ledger)
                ledger.add("generate", ledger.sample_flops(c), len(c.token_ids))
        self.drawn += groups
        self.samples += n * cfg.sampling.group_size
        fresh = []
        for i, g in enumerate(groups):
            age = self.version - g[0].policy_version  # a group comes from one call: one version
            if age <= cfg.placement.max_policy_age:
                fresh.append(i)
                self.policy_ages += [age] * len(g)
            else:
                self.stale_dropped += len(g)
        return [prompts[i] for i in fresh], [groups[i] for i in fresh]

    def baseline_groups(
        self, prompts: list[Prompt], groups: list[list[Completion]]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """ReMax's greedy baseline of ``groups`` (zoo.run.rounds.greedy_baseline), counted
        in ``samples``: the run pays for it from the same budget. Returns the [groups] task
        rewards and [groups] lengths (tokens after the prompt) of the greedy completions."""
        rewards, lengths = greedy_baseline(self.rollouts, self.s.ledger, prompts, groups)
        self.samples += len(rewards)
        return rewards, lengths

    def _next_prompts(self, n: int) -> list[Prompt]:
        prompts = self.s.env.train_prompts(self.cursor, n, self.cfg.run.seed)
        self.cursor += n
        return prompts

    def _seeds(self, prompts: list[Prompt]) -> list[int]:
        """The training samples' seeds, one per prompt (zoo.run.rollout.sampling_seed)."""
        seed, sampling = self.cfg.run.seed, self.cfg.sampling
        noise, streams, n = sampling.noise_seed, sampling.sample_streams, sampling.group_size
        return [sampling_seed(seed, p.index, noise, streams, samples=n) for p in prompts]

    def _submit(self, n: int) -> tuple[int, list[Prompt], PendingGeneration]:
        """Request completions for the next ``n`` prompts without waiting for them."""
        cfg, s = self.cfg, self.s
        if not isinstance(s.generator, AsyncGeneratorService):  # (RunConfig.validate asks
            raise TypeError(  # for the Monarch placement, whose generator submits)
                f"asynchronous mode needs a generator that submits requests "
                f"(AsyncGeneratorService); {type(s.generator).__name__} does not"
            )
        start = self.cursor
        prompts = self._next_prompts(n)
        pending = s.generator.submit(
            [s.encode(p) for p in prompts],
            n=cfg.sampling.group_size,
            sampling=self.sampling,
            seeds=self._seeds(prompts),
        )
        return start, prompts, pending

    def train(self, batch: RolloutBatch, shapes: list[tuple[int, int]]) -> dict[str, Any]:
        """The update on ``batch`` (zoo.run.update.train_batch), whose rows have the
        (prompt, response) lengths ``shapes``, told how much of the budget is spent and
        whether the old-log-prob pass can be skipped."""
        cfg = self.cfg
        # the share of the budget spent with this batch's generation counted (not its
        # training): above 0, so a warm-up over the budget starts above lr 0
        spent = self.spent(self.step_index + 1)
        if cfg.budget.limit[0] == "seconds":  # (train_seconds counts finished steps only)
            spent += time.perf_counter() - self.step_started
        batch.budget_spent = min(1.0, spent / cfg.budget.limit[1])
        # (every row sampled by the current weights: so in sync mode)
        own_forward = cfg.skips_old_logprob_pass(self.s.algorithm) and bool(
            (batch.policy_versions == self.version).all()
        )
        return train_batch(cfg, self.s, self.kl, batch, shapes, own_forward)

    def evaluate(self, sampled: bool = True) -> dict[str, float]:
        """Evaluate the current weights in place (zoo.run.evaluation); its sample rows are
        kept for samples.jsonl."""
        record, rows = self.evaluator.run(sampled)
        self.kept_samples += rows
        return record

    def _submit_eval(self, sampled: bool) -> EvalInFlight:
        """Send the evaluation of the current weights without waiting (eval_overlap)."""
        return self.evaluator.send(sampled)

    def _await_eval(self, flight: EvalInFlight | None) -> tuple[float, float]:
        """Collect an overlapped evaluation (into ``eval_answered``); the wall seconds and
        generator busy seconds it cost, which are the evaluation's, not this step's."""
        if flight is None:
            return 0.0, 0.0
        waited, busy = time.perf_counter(), self.s.generator.busy_seconds
        self.eval_answered = self.evaluator.receive(flight)
        eval_wall = time.perf_counter() - waited + flight.send_seconds
        return eval_wall, self.s.generator.busy_seconds - busy

    def spent(self, step: int) -> float:
        """How much of the run's budget is used, in its unit."""
        unit, _ = self.cfg.budget.limit
        return {
            "flops": self.s.ledger.total_flops,
            "samples": self.samples,
            "seconds": self.train_seconds,
            "steps": step,
        }[unit]

    def sampled_eval_due(self, step: int) -> bool:
        """Is the evaluation made at ``step`` (after ``eval_due``) one of the last
        ``sampled_eval_points``? (zoo.run.evaluation.sampled_eval_due)"""
        return sampled_eval_due(self.cfg, step, self.evals_done)

    def eval_due(self, step: int) -> bool:
        """Evaluate now? Step mode: every ``eval_every`` steps and at the end. Budget mode:
        whenever the spend crosses the next of K evenly spaced points."""
        unit, amount = self.cfg.budget.limit
        if unit == "steps":
            return step % self.cfg.evaluation.eval_every == 0 or step >= amount
        crossed = eval_points_crossed(self.cfg, self.spent(step), self.evals_done)
        due, self.evals_done = crossed > self.evals_done, crossed
        return due

    def run(
        self,
        log: Callable[[dict[str, Any]], None],
        on_step: Callable[[dict[str, Any]], None] | None = None,
        checkpoint: Callable[[int], None] | None = None,
        samples: Callable[[list[dict[str, Any]]], None] | None = None,
    ) -> list[dict[str, Any]]:
        """Train until the budget is spent, logging one record per step (plus step 0, the
        evaluation of the starting weights). Resumes from ``self.step_index`` if a
        checkpoint was loaded. ``checkpoint(step)`` is called every ``checkpoint_every``
        steps and at the end. ``samples(rows)`` gets the samples kept at each step (its
        training samples and its evaluation's), each row with its ``step``, just before
        the step's record goes to ``log``."""
        cfg, ledger = self.cfg, self.s.ledger
        _, amount = cfg.budget.limit
        history = []

        def write(record: dict[str, Any], rows: list[dict[str, Any]]) -> None:
            if samples and rows:
                samples([{"step": record["step"], **row} for row in rows])
            log(record)
            history.append(record)

        def close(record: dict[str, Any], rows: list[dict[str, Any]]) -> None:
            """Write a finished step's samples and record, stop on a non-finite figure,
            checkpoint and report it."""
            step = record["step"]
            write(record, rows)
            if bad := non_finite(record):
                raise FloatingPointError(f"step {step}: {', '.join(bad)} not finite; stopping")
            if (
                checkpoint
                and cfg.output.checkpoint_every
                and step % cfg.output.checkpoint_every == 0
            ):
                checkpoint(step)
            if on_step:
                on_step(record)

        if self.step_index == 0:
            first = {
                "step": 0,
                "samples": 0,
                "flops": 0.0,
                "seconds": 0.0,
                **self.evaluate(self.sampled_eval_due(0)),
            }
            write(first, self._taken_rows())
        waiting: tuple[dict[str, Any], list[dict[str, Any]]] | None = None
        """eval_overlap: the last step's record and sample rows, written once the
        evaluation of its weights, sent during this step's training, is back."""
        while self.spent(self.step_index) < amount:
            step = self.step_index + 1
            record = {"step": step, **self.step()}
            self.step_index = step  # the trainer's state is now this step's
            if waiting is not None:  # its evaluation ran during this step's training
                assert self.eval_answered is not None
                (done, rows), (evaluation, eval_rows) = waiting, self.eval_answered
                waiting = self.eval_answered = None
                close({**done, **evaluation}, rows + eval_rows)
            delta = ledger.step_delta()
            record.update(delta)
            record.update(
                {
                    "samples": self.samples,
                    "flops": ledger.total_flops,
                    "seconds": self.train_seconds,
                    "policy_version": self.s.trainer.version,
                    "generate_tokens_per_s": _ratio(
                        delta["generate_tokens"], delta["generate_seconds"]
                    ),
                }
            )
            last = self.spent(step) >= amount
            if self.eval_due(step) or last:
                sampled = self.sampled_eval_due(step)
                if self._may_defer_eval(step, last, record):
                    self.eval_to_send = sampled
                    waiting = (record, self._taken_rows())
                    continue
                record.update(self.evaluate(sampled))
            close(record, self._taken_rows())
        return history

    def _may_defer_eval(self, step: int, last: bool, record: dict[str, Any]) -> bool:
        """Does this step's evaluation run during the next step's training (eval_overlap)?
        (zoo.run.evaluation.may_defer_eval), and not after a non-finite figure (the run
        stops there)."""
        return may_defer_eval(self.cfg, step, last) and not non_finite(record)

    def _taken_rows(self) -> list[dict[str, Any]]:
        """The sample rows kept since last taken (``kept_samples``), now handed over."""
        rows, self.kept_samples = self.kept_samples, []
        return rows


def non_finite(record: dict[str, Any]) -> list[str]:
    """The names of a step record's figures that are NaN or infinite (the run stops there)."""
    return [k for k, v in record.items() if isinstance(v, float) and not math.isfinite(v)]


def _ratio(a: float, b: float) -> float:
    return a / b if b > 0 else 0.0
