"""The RL loop: one function per step, written against service interfaces.

    env.train_prompts        -> prompts (the env keeps the answers)
    rollouts.sample          -> G samples per prompt (ids, sampler logprobs, version):
                                generator.generate's completions, or a multi-turn env's
                                episodes (zoo.run.rollout.Rollouts)
    rollouts.rewards         -> rewards: services.score_batch (the env, here or in scorer
                                processes), or each episode's own
    greedy baseline          -> only if algorithm.needs_greedy_baseline (ReMax): one greedy
                                completion per prompt, same generator and weights, scored
                                like the samples, charged to the ledger's baseline phase
    algorithm.shape_rewards  -> e.g. DAPO's overlong punishment
    rollouts.turn_rewards    -> only if algorithm.uses_turn_rewards: per-turn rewards of
                                episodes (none for single-turn completions)
    rollouts.turn_states     -> only if algorithm.uses_turn_states: ids of the history
                                each turn starts from (GiGPO's anchor states)
    algorithm.advantages     -> per-response advantages
    algorithm.keep           -> e.g. DAPO's dynamic sampling (refill up to max rounds)
    trainer.logprobs         -> the old log-probs: the trainer's own, with the weights
                                that sampled the batch, once per batch
    reference.logprobs       -> only if algorithm.needs_reference
    critic.values            -> only if algorithm.needs_values (PPO): V(s_t) per token, and
                                the algorithm's per-token advantages and returns from them
    offpolicy                -> trainer-sampler mismatch metrics, and the run's correction
                                (none, TIS, MIS, bypass) (zoo.services.offpolicy)
    KL control               -> with the shared kl_in_reward, the KL return subtracted
                                from the advantages; with kl_target, the adaptive KL
                                weight logged, then moved for the next step
    trainer.train(batch, algorithm.loss)
                             -> mini_batches x epochs optimizer steps (zoo.services.trainer)
    critic.train(batch, algorithm.value_loss)
                             -> only if algorithm.needs_values: the critic on the returns
    services.sync_weights    -> trainer weights to the generators, new policy version
    ledger                   -> FLOPs, tokens, seconds per phase

Each step also keeps a few of its samples (the first ``SAMPLE_GROUPS`` groups of its first
sampling round: prompt, completion, reward, advantage, finish reason, policy version),
and each evaluation its first ``EVAL_SAMPLES`` problems (with the reference answer and
the greedy completion), for samples.jsonl; reading them changes nothing computed.

One step of the loop is one rollout batch. Sync mode (the default) samples each batch
with the current weights; it then trains in ``mini_batches`` optimizer steps per pass
over ``epochs`` passes, so every update after the first sees a ratio away from 1 (where
the algorithms' clips, caps and gates act). Async mode (Monarch placement) requests
batches ``max_policy_age`` steps ahead, so generation overlaps training; the trainer keeps
the weights of those versions to compute the old log-probs with the weights that sampled
each batch. Services are built by ``build_services``, in this process or as Monarch actors
(zoo.placement): a placement only has to provide objects with the same methods.

What a sample is, is chosen once per run (``make_rollouts``), so the step never asks:
a multi-turn env (zoo.envs.episode) samples episodes instead of single completions
(``EpisodeRollouts``, zoo.run.episodes, sync mode only): each episode is one response of
its group, its reward given by the env when it ended (no scoring call), its environment
tokens masked out of everything the trainer computes, every one of its tokens charged,
and its turns and tool calls in the step's record (``rollouts.metrics``).
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from zoo.core.config import ConfigError
from zoo.core.losses import (
    KL_ESTIMATORS,
    adaptive_kl_coef,
    explained_variance,
    kl_reward_to_go,
    last_token_rewards,
    masked_mean,
    rollout_kl,
)
from zoo.core.types import Completion, TrainBatch
from zoo.envs import Prompt
from zoo.run.episodes import episode_budget, make_rollouts
from zoo.run.rollout import (
    EVAL_SEED_OFFSET,
    CompletionRollouts,
    rollout_batch,
    sampling_seed,
    stack_advantages,
)
from zoo.run.run_config import RunConfig
from zoo.run.wiring import Services
from zoo.services.batch import RolloutBatch
from zoo.services.evaluation import sampled_metrics
from zoo.services.offpolicy import correction_weights, mismatch_metrics
from zoo.services.protocols import AsyncGeneratorService, PendingGeneration
from zoo.services.sampling import SamplingConfig

if TYPE_CHECKING:  # (the loop reaches plugins only through their registries)
    from zoo.algorithms.base import Algorithm

SAMPLE_GROUPS = 2
"""Groups (prompts, with all their G completions) per step kept for samples.jsonl."""
EVAL_SAMPLES = 4
"""Held-out problems per evaluation kept for samples.jsonl (greedy completion, reference)."""


@dataclasses.dataclass
class EvalInFlight:
    """An evaluation's requests, sent to the generators and not yet answered
    (``eval_overlap``)."""

    prompts: list[Prompt]
    greedy: PendingGeneration
    drawn: PendingGeneration | None  # the n samples per prompt, if this one draws them
    send_seconds: float


class RLLoop:
    def __init__(self, cfg: RunConfig, services: Services) -> None:
        self.cfg = cfg
        self.s = services
        services.algorithm.check_run(cfg.group_size, cfg.prompts_per_step * cfg.group_size)
        self.sampling = SamplingConfig(temperature=cfg.temperature, max_tokens=cfg.max_response_len)
        plan = services.plan
        self.budget = plan.episode_budget if plan is not None else episode_budget(cfg, services.env)
        """Tokens after the prompt per sample: max_response_len, or a multi-turn env's
        token limit per episode (also the L_max of length shaping); the plan's, resolved
        once for the run."""
        self.rollouts = make_rollouts(services, self.sampling, self.budget)
        """What a sample is: a completion, or a multi-turn env's episode."""
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
        self.eval_answered: tuple[dict[str, float], list[dict[str, Any]]] | None = None
        """eval_overlap: that evaluation's record and sample rows, once back."""
        if cfg.eval_overlap == "on":
            check_eval_overlap(self.rollouts, services)

    def sample_groups(self, n: int) -> tuple[list[Prompt], list[list[Completion]]]:
        """The next ``n`` prompts of the train stream and G completions of each, less any
        group sampled by weights more than ``max_policy_age`` steps old.

        Async mode: the prompts were requested ``max_policy_age`` steps ago (or now, the
        first time); before returning, requests for the batches after them are topped up,
        so the generator samples those while the trainer trains on these. An actor handles
        its messages in order, so a batch requested after the weight update of step k is
        sampled by version k and trained on at step k + max_policy_age + 1 at the latest."""
        cfg, s, ledger = self.cfg, self.s, self.s.ledger
        if cfg.mode == "sync":
            prompts = self._next_prompts(n)
            encoded = [s.encode(p) for p in prompts]
            seeds = [sampling_seed(cfg.seed, p.index, cfg.noise_seed) for p in prompts]
            with ledger.timed("generate"):  # a multi-turn env's steps included
                groups = self.rollouts.sample(prompts, encoded, cfg.group_size, seeds)
        else:
            _, prompts, pending = self.in_flight.popleft() if self.in_flight else self._submit(n)
            with ledger.timed("generate"):  # what overlapping did not hide
                groups = pending.result()
            while len(self.in_flight) < cfg.max_policy_age:
                self.in_flight.append(self._submit(n))
        for g in groups:
            for c in g:  # every generated token is charged, kept or not
                # an episode: once, each turn's request as the engine ran it (its cached
                # prefix not charged); its tokens with the observations (zoo.services.ledger)
                ledger.add("generate", ledger.sample_flops(c), len(c.token_ids))
        self.drawn += groups
        self.samples += n * cfg.group_size
        fresh = []
        for i, g in enumerate(groups):
            age = self.version - g[0].policy_version  # a group comes from one call: one version
            if age <= cfg.max_policy_age:
                fresh.append(i)
                self.policy_ages += [age] * len(g)
            else:
                self.stale_dropped += len(g)
        return [prompts[i] for i in fresh], [groups[i] for i in fresh]

    def baseline_groups(
        self, prompts: list[Prompt], groups: list[list[Completion]]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """ReMax's baseline (arXiv 2310.10505, Algorithm 1): one greedy (argmax) completion
        of each prompt of ``groups``, from the same generator and weights that sampled them
        and the same prompt ids (a multi-turn env: a greedy episode, every turn greedy),
        scored by the env like the samples. Timed and charged to the ledger's ``baseline``
        phase as generation (FLOPs as ``generate``, its generated tokens), and counted in
        ``samples``: the run pays for it from the same budget. Returns the [groups] task
        rewards and [groups] lengths (tokens after the prompt) of the greedy completions."""
        ledger = self.s.ledger
        with ledger.timed("baseline"):
            encoded = [g[0].prompt_ids for g in groups]
            greedy = self.rollouts.sample(prompts, encoded, 1, greedy=True)
            rewards = torch.tensor(self.rollouts.rewards(prompts, greedy))
        for g in greedy:
            c = g[0]
            ledger.add("baseline", ledger.sample_flops(c), len(c.token_ids))
        self.samples += len(greedy)
        return rewards, torch.tensor([len(g[0].token_ids) for g in greedy])

    def _next_prompts(self, n: int) -> list[Prompt]:
        prompts = self.s.env.train_prompts(self.cursor, n, self.cfg.seed)
        self.cursor += n
        return prompts

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
            [s.encode(p) for p in prompts], n=cfg.group_size, sampling=self.sampling,
            seeds=[sampling_seed(cfg.seed, p.index, cfg.noise_seed) for p in prompts],
        )  # fmt: skip
        return start, prompts, pending

    def step(self) -> dict[str, Any]:
        cfg, s, ledger = self.cfg, self.s, self.s.ledger
        algo = s.algorithm
        start = self.step_started = time.perf_counter()
        busy_before = s.generator.busy_seconds
        phase_before = dict(ledger.seconds)
        self.version = s.trainer.version
        kept_groups: list[list[Completion]] = []
        kept_adv: list[torch.Tensor] = []
        kept_in_loss: list[torch.Tensor] = []
        task_rewards: list[float] = []
        response_lengths: list[int] = []
        greedy_rewards: list[float] = []
        greedy_lengths: list[int] = []
        informative = drawn_groups = 0  # groups whose task rewards differ: they carry gradient
        rounds = 0
        while len(kept_groups) < cfg.prompts_per_step and rounds < cfg.max_sampling_rounds:
            rounds += 1
            prompts, groups = self.sample_groups(cfg.prompts_per_step)
            with ledger.timed("score"):
                flat = self.rollouts.rewards(prompts, groups)
            rewards = torch.tensor(flat).view(len(groups), cfg.group_size)
            ledger.add("score", tokens=sum(len(c.token_ids) for g in groups for c in g))
            task_rewards += rewards.flatten().tolist()
            informative += int((rewards.amax(dim=1) > rewards.amin(dim=1)).sum())
            drawn_groups += len(groups)
            # an episode's length is every token after its prompt, observations included,
            # against its token limit (self.budget)
            lengths = torch.tensor([[len(c.token_ids) for c in g] for g in groups])
            response_lengths += lengths.flatten().tolist()
            shaped = algo.shape_rewards(rewards, lengths, self.budget)
            wanted = algo.uses_turn_rewards
            per_turn = self.rollouts.turn_rewards(groups, shaped) if wanted else None
            states = self.rollouts.turn_states(groups) if algo.uses_turn_states else None
            baseline = None
            if self.greedy_baseline:
                greedy, greedy_len = self.baseline_groups(prompts, groups)
                greedy_rewards += greedy.tolist()
                greedy_lengths += greedy_len.tolist()
                # shaped as the samples' rewards are, so that R - b compares like with like
                baseline = algo.shape_rewards(greedy[:, None], greedy_len[:, None],
                                              self.budget)[:, 0]  # fmt: skip
            advantages = algo.group_advantages(shaped, lengths, per_turn, baseline, states)
            keep = algo.keep(rewards)
            truncated = torch.tensor([[c.finish_reason == "length" for c in g] for g in groups])
            in_loss = algo.train_mask(truncated)
            if rounds == 1:
                self.kept_samples += train_samples(
                    prompts[:SAMPLE_GROUPS], groups, rewards, advantages, keep
                )
            for i in torch.nonzero(keep).flatten().tolist():
                if len(kept_groups) < cfg.prompts_per_step:
                    kept_groups.append(groups[i])
                    kept_adv.append(advantages[i])
                    kept_in_loss.append(in_loss[i])

        record: dict[str, Any] = {
            "reward_mean": statistics.fmean(task_rewards),
            "reward_std": statistics.pstdev(task_rewards),
            "sampling_rounds": rounds,
            "kept_groups": len(kept_groups),
            "informative_group_frac": informative / drawn_groups,
            "masked_responses": int(sum((~m).sum() for m in kept_in_loss)),
            **length_metrics(response_lengths, task_rewards),
        }
        record.update(self.rollouts.metrics(self.drawn))
        record.update(algo.advantage_metrics())
        self.drawn = []
        if self.greedy_baseline:
            record.update(baseline_metrics(greedy_rewards, greedy_lengths))
        # eval_overlap: the last step's weights are evaluated while this step trains; the
        # generators hold those weights until the answer is back (before the sync below)
        in_flight = self._submit_eval(self.eval_to_send) if self.eval_to_send is not None else None
        self.eval_to_send = None
        if kept_groups:
            batch = rollout_batch(
                kept_groups, stack_advantages(kept_adv), torch.stack(kept_in_loss)
            )
            shapes = [(len(c.prompt_ids), len(c.token_ids)) for g in kept_groups for c in g]
            record.update(self.train(batch, shapes))
        eval_wall = eval_busy = 0.0  # the evaluation's, not this step's
        if in_flight is not None:
            waited, busy = time.perf_counter(), s.generator.busy_seconds
            self.eval_answered = self._collect_eval(in_flight)
            eval_wall = time.perf_counter() - waited + in_flight.send_seconds
            eval_busy = s.generator.busy_seconds - busy
        if kept_groups:
            with ledger.timed("sync"):
                s.sync_weights()
        wall = time.perf_counter() - start - eval_wall
        self.train_seconds += wall
        spent = {k: v - phase_before.get(k, 0.0) for k, v in ledger.seconds.items()}
        # Idle: wall seconds of this step a service was not working for it (the trainer
        # works in old_logprobs, train and in exporting its weights for sync; generator
        # busy time is summed over replicas and counted when its samples arrive).
        trainer_busy = sum(spent.get(p, 0.0) for p in ("old_logprobs", "train", "sync"))
        generator_busy = s.generator.busy_seconds - busy_before - eval_busy
        record["trainer_idle_seconds"] = max(0.0, wall - trainer_busy)
        record["generator_busy_seconds"] = generator_busy
        record["generator_idle_seconds"] = max(0.0, wall * s.generator.replicas - generator_busy)
        if cfg.mode == "async":
            ages, self.policy_ages = self.policy_ages, []
            record.update({"policy_age_mean": statistics.fmean(ages) if ages else 0.0,
                           "policy_age_max": max(ages, default=0),
                           "stale_dropped": self.stale_dropped})  # fmt: skip
        self.policy_ages, self.stale_dropped = [], 0
        return record

    def train(self, batch: RolloutBatch, shapes: list[tuple[int, int]]) -> dict[str, Any]:
        """The old log-probs, the mismatch metrics and correction, the reference, then the
        trainer's updates on ``batch``; each phase timed and charged to the ledger by the
        (prompt, response) lengths of its rows, ``shapes`` (a response masked out of the
        loss still passes through every forward)."""
        cfg, s, ledger = self.cfg, self.s, self.s.ledger
        tokens = sum(p + r for p, r in shapes)
        forward = sum(ledger.scoring_flops(p, r) for p, r in shapes)
        # the share of the budget spent with this batch's generation counted (not its
        # training): above 0, so a warm-up over the budget starts above lr 0
        spent = self.spent(self.step_index + 1)
        if cfg.budget[0] == "seconds":  # (train_seconds counts finished steps only)
            spent += time.perf_counter() - self.step_started
        batch.budget_spent = min(1.0, spent / cfg.budget[1])
        # (every row sampled by the current weights: so in sync mode)
        own_forward = cfg.skips_old_logprob_pass(s.algorithm) and bool(
            (batch.policy_versions == self.version).all()
        )
        if not own_forward:
            with ledger.timed("old_logprobs"):
                batch.old_logprobs = s.trainer.logprobs(batch)
            ledger.add("old_logprobs", forward, tokens)
        if s.algorithm.needs_reference:
            with ledger.timed("reference"):
                batch.ref_logprobs = s.reference.logprobs(batch)
            ledger.add("reference", forward, tokens)
        record = {}
        if not own_forward:  # (else the update's forward gives them, below)
            record = mismatch_metrics(batch.old_logprobs, batch.sampler_logprobs, batch.mask)
        if s.algorithm.needs_values:  # GAE's advantages, before a correction weighs them
            record.update(self.critic_targets(batch, shapes))
        weights, correction = correction_weights(
            cfg.correction, batch.old_logprobs, batch.sampler_logprobs, batch.mask,
            cap=cfg.correction_cap, low=cfg.correction_low, high=cfg.correction_high,
        )  # fmt: skip
        record.update(correction)
        if weights is not None:  # on the policy-gradient term only: through the advantages
            advantages = batch.advantages
            advantages = advantages if advantages.dim() == 2 else advantages[:, None]
            batch.advantages = advantages * weights
        if cfg.correction == "bypass":
            batch.old_logprobs = batch.sampler_logprobs
        next_kl_coef = self.kl_control(batch, record)
        with ledger.timed("train"):
            trained = s.trainer.train(batch, s.algorithm.loss)
        ledger.add("train", cfg.epochs * 3 * forward, cfg.epochs * tokens)
        if own_forward:
            batch.old_logprobs = trained.pop("old_logprobs")
            record.update(mismatch_metrics(batch.old_logprobs, batch.sampler_logprobs, batch.mask))
        record.update(trained)
        if s.algorithm.needs_values:  # the critic's forward and backward, per pass
            with ledger.timed("critic_train"):
                record.update(s.critic.train(batch, s.algorithm.value_loss))
            value = sum(ledger.value_flops(p, r) for p, r in shapes)
            ledger.add("critic_train", cfg.epochs * 3 * value, cfg.epochs * tokens)
        if next_kl_coef is not None:
            s.algorithm.set_kl_coef(next_kl_coef)  # for the next step (and the checkpoint)
        return record

    def critic_targets(self, batch: RolloutBatch, shapes: list[tuple[int, int]]) -> dict[str, Any]:
        """For an algorithm with a critic (``needs_values``): the critic's values of the
        batch's response tokens (charged to ``critic``), the per-token rewards (each
        response's reward, as its ``advantages`` hook gave it, on its last token; with
        ``kl_in_reward``, minus beta * KL of old against ref on every token, the
        algorithm's ``kl`` estimator), and from them the algorithm's per-token advantages
        and the critic's targets (``batch.advantages``, ``batch.returns``). Logged:
        ``value_mean``, ``return_mean`` and ``explained_variance`` of the values, which
        the critic predicted before training on this batch, over response tokens."""
        s, ledger, algo, mask = self.s, self.s.ledger, self.s.algorithm, batch.mask
        with ledger.timed("critic"):
            batch.values = s.critic.values(batch)
        ledger.add("critic", sum(ledger.value_flops(p, r) for p, r in shapes),
                   sum(p + r for p, r in shapes))  # fmt: skip
        rewards, record = last_token_rewards(batch.advantages, mask), {}
        if algo.kl_in_reward_by_loop:
            kl = KL_ESTIMATORS[algo.kl_estimator](batch.old_logprobs, batch.ref_logprobs)
            kl = torch.where(mask > 0, kl, 0.0)
            rewards, record["kl"] = rewards - algo.kl_coef * kl, masked_mean(kl, mask)
        batch.advantages, batch.returns = algo.token_advantages(rewards, batch.values, mask)
        v, returns = batch.values, batch.returns
        return {**record, "value_mean": masked_mean(v, mask),
                "return_mean": masked_mean(returns, mask),
                "explained_variance": explained_variance(v, returns, mask)}  # fmt: skip

    def kl_control(self, batch: RolloutBatch, record: dict[str, Any]) -> float | None:
        """The algorithm's shared KL options (``zoo.algorithms.base.SharedOptions``) on a
        batch whose old and reference log-probs are set, before it is trained on:

        - ``kl_in_reward``: subtract the KL return beta * sum_{s >= t} KL_s of the sampling
          policy against the reference (``kl_reward_to_go``, the algorithm's ``kl``
          estimator; with ``kl_reward_credit = token`` each token's own beta * KL_t) from
          each token's advantage, after any off-policy correction weights,
          as reinforce_pp's own KL in the reward does; ``kl`` goes to the record (the loss,
          at beta 0, reports none). An algorithm with a critic has it in GAE's per-token
          rewards instead (``critic_targets``).
        - ``kl_target`` (adaptive KL): log the weight this step trains with, ``kl_coef``,
          and the KL the controller reads, ``kl_rollout`` (the ``kl`` estimator of old
          against ref: the sampling policy's, before this step's updates, averaged as
          ``kl_rollout_mean`` says: over response tokens by default, where verl takes
          each response's token mean of k1, then their mean); hand the weight to the
          trainer with the batch (a trainer in another process holds its own copy of the
          algorithm); and
          return the next step's weight (``adaptive_kl_coef``, n_steps = the batch's
          responses), which the caller sets once the step has trained.

        Returns None when the weight stays as it is."""
        algo = self.s.algorithm
        adaptive = algo.options.kl_target > 0
        if not (adaptive or algo.kl_in_reward_by_loop):
            return None
        old, ref = batch.old_logprobs, batch.ref_logprobs
        view = TrainBatch(old, old, ref, batch.advantages, batch.mask)
        if algo.kl_in_reward_by_loop and not algo.needs_values:  # (a critic's: in GAE)
            kl_return, kl_metrics = kl_reward_to_go(
                view, algo.kl_coef, algo.kl_estimator, algo.options.kl_reward_credit
            )
            advantages = batch.advantages
            advantages = advantages if advantages.dim() == 2 else advantages[:, None]
            batch.advantages = advantages - kl_return
            record.update(kl_metrics)
        if not adaptive:
            return None
        kl = KL_ESTIMATORS[algo.kl_estimator](old, ref)
        measured = rollout_kl(kl, view.mask, algo.options.kl_rollout_mean)
        record.update({"kl_coef": algo.kl_coef, "kl_rollout": measured})
        batch.kl_coef = algo.kl_coef
        options = algo.options
        return adaptive_kl_coef(algo.kl_coef, measured, options.kl_target, options.kl_horizon,
                                batch.size)  # fmt: skip

    def evaluate(self, sampled: bool = True) -> dict[str, float]:
        """Held-out split (not charged to compute): mean reward of greedy decoding
        (``eval_reward``), and with ``eval_samples`` n > 0 (and ``sampled``) pass@k and
        mean reward of n samples per prompt (zoo.services.evaluation), seeded per (run seed,
        prompt) so every checkpoint and every algorithm at this seed draws the same random
        numbers. A multi-turn env plays episodes instead (greedy: every turn greedy; the
        sampled ones seeded per turn as in training), rewarded by the env, and adds
        eval_turns_mean, eval_tool_calls_mean and eval_tool_success_rate of the greedy
        episodes."""
        start = time.perf_counter()
        prompts, encoded, n, seeds = self._eval_requests(sampled)
        greedy = self.rollouts.sample(prompts, encoded, n=1, greedy=True)
        drawn = self.rollouts.sample(prompts, encoded, n, seeds) if n else None
        record, rows = self._eval_record(prompts, greedy, drawn)
        self.kept_samples += rows
        record["eval_seconds"] = time.perf_counter() - start
        return record

    def _eval_requests(self, sampled: bool) -> tuple[list[Prompt], list[list[int]], int, list[int]]:
        """The held-out prompts, their ids, the samples per prompt (0: greedy only) and
        their seeds."""
        s, n = self.s, self.cfg.eval_samples if sampled else 0
        prompts = s.env.eval_split(self.cfg.eval_split)
        eval_seed = self.cfg.seed + EVAL_SEED_OFFSET
        seeds = [sampling_seed(eval_seed, i) for i in range(len(prompts))]
        return prompts, [s.encode(p) for p in prompts], n, seeds

    def _eval_record(
        self,
        prompts: list[Prompt],
        greedy: list[list[Completion]],
        drawn: list[list[Completion]] | None,
    ) -> tuple[dict[str, float], list[dict[str, Any]]]:
        """An evaluation's record from its greedy completions and, if any, its n sampled
        completions per prompt; and its sample rows for samples.jsonl."""
        rewards = self.rollouts.rewards(prompts, greedy)
        record = {"eval_reward": statistics.fmean(rewards)}
        record.update({f"eval_{k}": v for k, v in self.rollouts.metrics(greedy).items()})
        rows = [
            {"kind": "eval", "index": p.index, "prompt": p.text, "completion": _shown(g[0]),
             "reference": self.s.env.reference_answer(p), "reward": float(r),
             "finish_reason": g[0].finish_reason, "policy_version": g[0].policy_version}
            for p, g, r in zip(prompts[:EVAL_SAMPLES], greedy, rewards, strict=False)
        ]  # fmt: skip
        if drawn is not None:
            n = len(drawn[0])
            flat = self.rollouts.rewards(prompts, drawn)
            record.update(sampled_metrics([flat[i * n : (i + 1) * n] for i in range(len(prompts))]))
        return record, rows

    def _submit_eval(self, sampled: bool) -> EvalInFlight:
        """Send an evaluation's requests to the generators without waiting for them
        (``eval_overlap``): the same requests ``evaluate`` makes, greedy and sampled."""
        start = time.perf_counter()
        prompts, encoded, n, seeds = self._eval_requests(sampled)
        generator, sampling = self.s.generator, self.sampling
        assert isinstance(generator, AsyncGeneratorService)  # (checked in __init__)
        greedy = generator.submit(encoded, n=1, sampling=sampling, greedy=True)
        drawn = generator.submit(encoded, n=n, sampling=sampling, seeds=seeds) if n else None
        return EvalInFlight(prompts, greedy, drawn, time.perf_counter() - start)

    def _collect_eval(self, flight: EvalInFlight) -> tuple[dict[str, float], list[dict[str, Any]]]:
        """Wait for an evaluation sent by ``_submit_eval``; its record and sample rows.
        Its ``eval_seconds`` are the wall seconds it added to the run: sending, waiting
        for what training did not hide, and scoring."""
        start = time.perf_counter()
        drawn = flight.drawn.result() if flight.drawn is not None else None
        record, rows = self._eval_record(flight.prompts, flight.greedy.result(), drawn)
        record["eval_seconds"] = flight.send_seconds + time.perf_counter() - start
        return record, rows

    def spent(self, step: int) -> float:
        """How much of the run's budget is used, in its unit."""
        unit, _ = self.cfg.budget
        return {"flops": self.s.ledger.total_flops, "samples": self.samples,
                "seconds": self.train_seconds, "steps": step}[unit]  # fmt: skip

    def sampled_eval_due(self, step: int) -> bool:
        """Is the evaluation made at ``step`` (after ``eval_due``) one of the last
        ``sampled_eval_points``? Step mode: of step 0, the multiples of ``eval_every`` and
        the last step. Budget mode: of the K + 1 points (0, 1/K, ..., K/K of the budget),
        by the highest point the spend has crossed."""
        last = self.cfg.sampled_eval_points
        if not last:
            return True
        unit, amount = self.cfg.budget
        if unit != "steps":
            return self.evals_done > self.cfg.eval_points - last
        points = sorted({0, *range(self.cfg.eval_every, int(amount), self.cfg.eval_every),
                         int(amount)})  # fmt: skip
        return step >= points[-min(last, len(points))]

    def eval_due(self, step: int) -> bool:
        """Evaluate now? Step mode: every ``eval_every`` steps and at the end. Budget mode:
        whenever the spend crosses the next of K evenly spaced points."""
        unit, amount = self.cfg.budget
        if unit == "steps":
            return step % self.cfg.eval_every == 0 or step >= amount
        due = self.spent(step) >= amount * (self.evals_done + 1) / self.cfg.eval_points
        if due:
            while self.spent(step) >= amount * (self.evals_done + 1) / self.cfg.eval_points:
                self.evals_done += 1  # one evaluation even if a step crossed two points
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
        _, amount = cfg.budget
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
            if checkpoint and cfg.checkpoint_every and step % cfg.checkpoint_every == 0:
                checkpoint(step)
            if on_step:
                on_step(record)

        if self.step_index == 0:
            first = {"step": 0, "samples": 0, "flops": 0.0, "seconds": 0.0,
                     **self.evaluate(self.sampled_eval_due(0))}  # fmt: skip
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
        Not at the last step (there is no next one), nor at a checkpoint's step (a
        checkpoint never holds a step whose record is not written), nor after a
        non-finite figure (the run stops there)."""
        cfg = self.cfg
        return (
            cfg.eval_overlap == "on"
            and not last
            and not (cfg.checkpoint_every and step % cfg.checkpoint_every == 0)
            and not non_finite(record)
        )

    def _taken_rows(self) -> list[dict[str, Any]]:
        """The sample rows kept since last taken (``kept_samples``), now handed over."""
        rows, self.kept_samples = self.kept_samples, []
        return rows

    def state(self) -> dict[str, Any]:
        """Everything needed to continue this run exactly (with the trainer's state)."""
        ledger = self.s.ledger
        return {
            # prompts requested but not yet trained on are requested again after a resume
            "step_index": self.step_index, "samples": self.samples,
            "cursor": self.in_flight[0][0] if self.in_flight else self.cursor,
            "train_seconds": self.train_seconds, "evals_done": self.evals_done,
            "ledger": {"flops": dict(ledger.flops), "tokens": dict(ledger.tokens),
                       "seconds": dict(ledger.seconds)},
            # the adaptive KL weight of the next step (a plain float: exact on resume)
            **({"kl_coef": self.s.algorithm.kl_coef}
               if self.s.algorithm.options.kl_target > 0 else {}),
            # the algorithm's own (a plugin's running baseline, say); none: no key, so a
            # checkpoint of a stateless algorithm holds what it always held
            **({"algorithm": kept} if (kept := algorithm_state(self.s.algorithm)) else {}),
        }  # fmt: skip

    def load_state(self, state: dict[str, Any]) -> None:
        for key in ("step_index", "cursor", "samples", "train_seconds", "evals_done"):
            setattr(self, key, state[key])
        if "kl_coef" in state:
            self.s.algorithm.set_kl_coef(state["kl_coef"])
        algo = self.s.algorithm
        if "algorithm" in state:
            algo.load_state_dict(state["algorithm"])
        elif algo.state_dict():  # it keeps state, and this checkpoint has none of it
            raise ConfigError(
                f"the checkpoint holds no state of algorithm {algo.name!r}, which keeps some "
                f"({', '.join(sorted(map(str, algo.state_dict())))}; written by a version "
                "that kept none?): resuming would restart it from scratch; start the run "
                "afresh in another --out"
            )
        ledger = self.s.ledger
        for name in ("flops", "tokens", "seconds"):
            getattr(ledger, name).update(state["ledger"][name])
        ledger.step_delta()  # the next step's delta starts from the restored totals


PLAIN_STATE = (str, int, float, bool, type(None), torch.Tensor)
"""What an algorithm's ``state_dict`` may hold besides dicts, lists and tuples: what a
checkpoint read with ``weights_only=True`` gives back."""


def algorithm_state(algorithm: Algorithm) -> dict[str, Any]:
    """``algorithm.state_dict()``, checked to hold only what a checkpoint restores
    (``PLAIN_STATE`` in dicts with str keys, lists and tuples): an object the resume could
    not read back fails the save that would write it, naming where it sits."""
    state = algorithm.state_dict()

    def check(value: Any, where: str) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(key, str):
                    raise ConfigError(
                        f"algorithm {algorithm.name!r}: state_dict(){where} has the key "
                        f"{key!r}; a checkpoint keeps str keys only"
                    )
                check(item, f"{where}[{key!r}]")
        elif isinstance(value, list | tuple):
            for i, item in enumerate(value):
                check(item, f"{where}[{i}]")
        elif not isinstance(value, PLAIN_STATE):
            raise ConfigError(
                f"algorithm {algorithm.name!r}: state_dict(){where} holds a "
                f"{type(value).__name__}; a checkpoint keeps tensors, str, int, float, bool "
                "and None in dicts, lists and tuples"
            )

    check(state, "")
    return state


def non_finite(record: dict[str, Any]) -> list[str]:
    """The names of a step record's figures that are NaN or infinite (the run stops there)."""
    return [k for k, v in record.items() if isinstance(v, float) and not math.isfinite(v)]


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


def check_greedy_baseline(cfg: RunConfig, algorithm: Algorithm) -> None:
    """Refuse a run whose algorithm needs a greedy baseline (``needs_greedy_baseline``)
    in a mode that does not generate one: async mode requests each batch's samples steps
    ahead, and no greedy completion is requested with them (ConfigError naming the
    setting)."""
    if algorithm.needs_greedy_baseline and cfg.mode != "sync":
        raise ConfigError(
            f"algorithm {algorithm.name!r} generates a greedy baseline completion per prompt, "
            f"which runs in sync mode only; got mode {cfg.mode!r}: use --mode sync"
        )


def baseline_metrics(rewards: list[float], lengths: list[int]) -> dict[str, float]:
    """The greedy baseline's completions of a step (every sampling round):
    ``baseline_reward_mean``, their mean task reward (before any shaping), to set beside
    ``reward_mean`` of the samples, and ``baseline_len_mean``, their mean length in tokens
    after the prompt."""
    return {"baseline_reward_mean": statistics.fmean(rewards),
            "baseline_len_mean": statistics.fmean(lengths)}  # fmt: skip


def train_samples(
    prompts: list[Prompt], groups: list[list[Completion]], rewards: torch.Tensor,
    advantages: torch.Tensor, keep: torch.Tensor,
) -> list[dict[str, Any]]:  # fmt: skip
    """samples.jsonl rows of ``prompts`` (the first of a sampling round) and their groups:
    the env's reward, the algorithm's advantage, whether the algorithm kept the group, and
    the sampler's finish reason and policy version."""
    rows = []
    for i, p in enumerate(prompts):
        for j, c in enumerate(groups[i]):
            rows.append({
                "kind": "train", "index": p.index, "prompt": p.text, "completion": _shown(c),
                "reward": float(rewards[i, j]), "advantage": _advantage(advantages[i, j], c),
                "kept": bool(keep[i]), "finish_reason": c.finish_reason,
                "policy_version": c.policy_version,
            })  # fmt: skip
    return rows


def length_metrics(lengths: list[int], rewards: list[float]) -> dict[str, float]:
    """Response lengths (tokens after the prompt) of every sample a step drew:
    ``response_len_mean``, and over the samples whose task reward is > 0 (correct) and
    those whose reward is <= 0 (incorrect) ``response_len_correct_mean`` and
    ``response_len_incorrect_mean`` (each left out when a step has no such sample).
    Dr. GRPO's claim (arXiv 2503.20783, Sec. 3.1) is about the last: under GRPO's
    per-sequence mean a long wrong answer is penalised less per token, so wrong answers
    grow longer."""
    out = {}
    for name, keep in (("", lambda r: True), ("_correct", lambda r: r > 0),
                       ("_incorrect", lambda r: r <= 0)):  # fmt: skip
        chosen = [n for n, r in zip(lengths, rewards, strict=True) if keep(r)]
        if chosen:
            out[f"response_len{name}_mean"] = statistics.fmean(chosen)
    return out


def _advantage(advantage: torch.Tensor, c: Completion) -> float | list[float]:
    """A sample's advantage in samples.jsonl: a number, or one per turn of its episode."""
    return float(advantage) if advantage.dim() == 0 else advantage[: c.turns].tolist()


def _shown(c: Completion) -> str:
    """A sample's text in samples.jsonl: a multi-turn episode's whole transcript."""
    return c.text if c.transcript is None else c.transcript


def _ratio(a: float, b: float) -> float:
    return a / b if b > 0 else 0.0


def resolved_config(cfg: RunConfig, services: Services) -> dict[str, Any]:
    """The run config with every default filled in, for config.json: the model's folder
    and the device as the run's plan resolved them (services assembled without a plan:
    resolved here)."""
    plan = services.plan
    spec = plan.spec if plan is not None and plan.spec is not None else cfg.model_spec()
    return {
        "run": dataclasses.asdict(cfg),
        "algorithm": services.algorithm.describe(),
        "env": services.env.describe(),
        "model_path": str(Path(spec.path)),
        "device": plan.device if plan is not None else cfg.resolved_device(),
        "seed": cfg.seed,
    }
