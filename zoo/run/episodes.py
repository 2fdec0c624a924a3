"""Multi-turn rollouts: episodes of a ``MultiTurnEnv`` (zoo.envs.episode), sampled turn by
turn, each returned as one ``Completion`` of its group.

The first turn of every episode is one ``generate`` call for the whole batch (``n``
samples per prompt, the prompt's seed), exactly as a single-turn step samples. Each later
turn sends every episode still running in one more call, one sample each, seeded per
(prompt seed, group member, turn), so an episode's tokens do not depend on which others
are still running. A later turn's context is the prompt's ids, every earlier turn's
tokens as sampled and the observations' ids: the model's own tokens are never decoded and
re-encoded (token in, token out). ``EpisodeRollouts`` gives a run these episodes in the
shape of single-turn rollouts (zoo.run.rollout.Rollouts), with their own rewards, per-turn
rewards, the states each turn starts from (``per_turn_states``) and figures;
``make_rollouts`` picks one or the other for a run's env.

An episode ends when the env says so (its reward, the finish reason of its last turn),
at the env's turn limit, or when the next observation and at least one sampled token no
longer fit in the run's token limit for an episode; a cut episode gets
``episode.final_reward()`` and finish reason "length". Its trajectory ends with an
assistant turn: the observation that would have followed is not part of it.

The env acts on exactly the decoded text of the trained tokens, or the episode ends as
malformed. A turn's text is not the generator's ``Completion.text`` (its detokenizer may
skip special tokens, or hold back or replace the bytes of an incomplete character) but its
``token_ids``, less the end-of-turn token, decoded once here by the run's tokenizer
(``Conversation.turn_text`` in zoo.services.conversation); that text is what the env, the
chat template's checks, the transcript and the episode's ``Completion.text`` get. The
decoding must be faithful: the text re-encodes to the same tokens, or to another split of
the same content (a model may sample a non-canonical split of a text; the env then acts
on that very text). When it is not (a token the decoder drops, such as an id outside the
vocabulary, or a byte-level token of part of a multi-byte character, which decodes to
U+FFFD), the env is not called: the turn's tokens stay in the trajectory (trained on, as
sampled), the episode ends with reward 0 and finish reason "malformed", and the env's
``final_reward()`` is called only so it can release what it holds (its value is not used).
``malformed_rate`` in a step's metrics (``eval_malformed_rate`` in an evaluation's) is the
share of episodes that ended so.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from zoo.core.config import ConfigError
from zoo.core.types import Completion
from zoo.envs import Env, Episode, Prompt, Reply, is_multi_turn
from zoo.run.plan import episode_budget as episode_budget  # (its old home, still imported)
from zoo.run.rollout import CompletionRollouts, Rollouts, turn_index
from zoo.services.conversation import ChatTemplateError
from zoo.services.protocols import GeneratorService
from zoo.services.sampling import SamplingConfig

if TYPE_CHECKING:  # (the wiring builds the services; a rollout only calls them)
    from zoo.run.services import Services

Observe = Callable[[Prompt, list[str], str], list[int]]
"""(prompt, assistant turns so far, observation text) -> the observation's token ids
(zoo.services.conversation.observation_ids with the run's tokenizer). The rollout also
needs its ``turn_text`` method: a ``zoo.services.conversation.Conversation``."""
MALFORMED = "malformed"
"""Finish reason of an episode whose last turn's tokens do not decode faithfully."""


class EpisodeError(RuntimeError):
    """The env's own code raised during an episode: a bug in the env, not a model error
    (a malformed tool call is answered with an observation)."""


def make_rollouts(services: Services, sampling: SamplingConfig, token_limit: int) -> Rollouts:
    """The run's rollouts, chosen once for its env: episodes of a multi-turn env, each at
    most ``token_limit`` tokens after its prompt (``episode_budget``), else single-turn
    completions (``sampling.max_tokens`` each)."""
    if is_multi_turn(services.env):
        return EpisodeRollouts(services, sampling, token_limit)
    return CompletionRollouts(services, sampling)


class EpisodeRollouts:
    """Multi-turn rollouts (``zoo.run.rollout.Rollouts``): each sample an episode played by
    ``rollout_episodes`` with the services' generator, env and observation encoder (read
    at each call, so ones set on the services later are used); rewarded by the env when
    it ended (no scoring call); its per-turn rewards (``per_turn_rewards``); and the turns and
    tool calls of the episodes as figures (``episode_metrics``)."""

    def __init__(self, services: Services, sampling: SamplingConfig, token_limit: int) -> None:
        self.s = services
        self.sampling = sampling  # the loop's own object: a change to it applies here
        self.token_limit = token_limit

    def sample(
        self,
        prompts: list[Prompt],
        encoded: list[list[int]],
        n: int,
        seeds: list[int] | None = None,
        greedy: bool = False,
    ) -> list[list[Completion]]:
        s = self.s
        return rollout_episodes(
            s.env,
            s.generator,
            s.observe,
            prompts,
            encoded,
            n,
            self.sampling,
            self.token_limit,
            seeds,
            greedy,
        )

    def rewards(self, prompts: list[Prompt], groups: list[list[Completion]]) -> list[float]:
        return [c.reward for g in groups for c in g]  # each set when its episode ended

    def turn_rewards(self, groups: list[list[Completion]], rewards: torch.Tensor) -> torch.Tensor:
        return per_turn_rewards(groups, rewards)

    def turn_states(self, groups: list[list[Completion]]) -> torch.Tensor:
        return per_turn_states(groups)

    def metrics(self, groups: list[list[Completion]]) -> dict[str, float]:
        out = episode_metrics([(c.turns, c.tool_calls, c.tool_ok) for g in groups for c in g])
        ended = [c.finish_reason for g in groups for c in g]
        out["malformed_rate"] = ended.count(MALFORMED) / len(ended) if ended else 0.0
        return out


def turn_seed(prompt_seed: int, member: int, turn: int) -> int:
    """Sampler seed of turn ``turn`` (0-based, > 0) of group member ``member``."""
    return (prompt_seed * 1_000_003 + member * 1_009 + turn) % (2**31)


@dataclass
class _Trajectory:
    """One episode in progress: every token after the prompt so far."""

    prompt: Prompt
    prompt_ids: list[int]
    episode: Episode
    member: int
    seed: int | None  # the prompt's sampler seed (None: greedy)
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)  # assistant turns
    requests: list[tuple[int, int, int]] = field(default_factory=list)  # Completion.turn_requests
    transcript: list[str] = field(default_factory=list)  # turns and observations
    turn_rewards: list[float] = field(default_factory=list)
    tool_calls: int = 0
    tool_ok: int = 0
    version: int = 0
    finish_reason: str = ""
    reward: float | None = None

    def completion(self) -> Completion:
        return Completion(
            prompt_ids=self.prompt_ids,
            token_ids=self.tokens,
            logprobs=self.logprobs,
            text=self.texts[-1],
            finish_reason=self.finish_reason,
            policy_version=self.version,
            assistant_mask=self.mask,
            reward=self.reward,
            turn_rewards=self.turn_rewards,
            turns=len(self.texts),
            tool_calls=self.tool_calls,
            tool_ok=self.tool_ok,
            transcript="".join(self.transcript),
            turn_requests=self.requests,
        )


def rollout_episodes(
    env: Env,
    generator: GeneratorService,
    observe: Observe | None,
    prompts: Sequence[Prompt],
    encoded: Sequence[list[int]],
    n: int,
    sampling: SamplingConfig,
    token_limit: int,
    seeds: list[int] | None = None,
    greedy: bool = False,
) -> list[list[Completion]]:
    """``n`` episodes of each prompt (``encoded``: its token ids), one group per prompt,
    each turn at most ``sampling.max_tokens`` tokens and each episode at most
    ``token_limit`` tokens after its prompt (>= ``sampling.max_tokens``). ``seeds``: one
    per prompt (None with ``greedy``)."""
    if observe is None or not callable(getattr(observe, "turn_text", None)):
        raise ConfigError(
            f"env {env.name!r} is multi-turn, but the services give no conversation (Services."
            "observe: a zoo.services.conversation.Conversation, which encodes observations "
            "and decodes turns)"
        )
    turn_limit = env.turn_limit()
    groups = [
        [_Trajectory(p, list(ids), _call(env, _on(p, 0), env.start, p), j, s) for j in range(n)]
        for p, ids, s in zip(prompts, encoded, seeds or [None] * len(prompts), strict=True)
    ]
    first = generator.generate(list(encoded), n=n, sampling=sampling, seeds=seeds, greedy=greedy)
    sampled = [
        (t, c) for g, cs in zip(groups, first, strict=True) for t, c in zip(g, cs, strict=True)
    ]
    turn = 0
    while sampled:
        turn += 1
        sampled = _decoded(env, sampled, observe, turn)  # (malformed turns end here)
        if not sampled:
            break
        # One env call for the turn of every running episode (an env runs their tool
        # calls together); the replies are the same as stepping them one by one.
        where = f"turn {turn} of {len(sampled)} episodes (the first on {_on(sampled[0][0].prompt)})"
        replies = _call(
            env,
            where,
            env.step_batch,
            [t.episode for t, _ in sampled],
            [c.text for _, c in sampled],
        )
        limits = (turn, turn_limit, token_limit)
        ongoing = [
            t
            for (t, c), reply in zip(sampled, replies, strict=True)
            if _take_turn(env, t, c, reply, *limits, observe)
        ]
        # The next turn of every ongoing episode. Its budget is max_tokens but near the
        # token limit, so there is one call per distinct budget (usually one): no turn is
        # sampled past its episode's limit.
        by_budget: dict[int, list[_Trajectory]] = {}
        for t in ongoing:
            budget = min(sampling.max_tokens, token_limit - len(t.tokens))
            by_budget.setdefault(budget, []).append(t)
        sampled = []
        for budget, batch in sorted(by_budget.items()):
            out = generator.generate(
                [t.prompt_ids + t.tokens for t in batch],
                n=1,
                sampling=dataclasses.replace(sampling, max_tokens=budget),
                greedy=greedy,
                seeds=None if seeds is None else [turn_seed(t.seed, t.member, turn) for t in batch],
            )
            sampled += [(t, g[0]) for t, g in zip(batch, out, strict=True)]
    return [[t.completion() for t in g] for g in groups]


def _decoded(
    env: Env, sampled: list[tuple[_Trajectory, Completion]], observe: Any, turn: int
) -> list[tuple[_Trajectory, Completion]]:
    """The sampled turns with their text decoded from their tokens (the module docstring);
    an episode whose turn does not decode faithfully takes the turn and ends as malformed,
    without the env seeing it."""
    kept = []
    for t, c in sampled:
        text, faithful = observe.turn_text(c.token_ids, c.finish_reason)
        c = dataclasses.replace(c, text=text)
        if faithful:
            kept.append((t, c))
            continue
        _take_turn(env, t, c, Reply(done=True), turn, turn, 0, observe)  # reward 0, ended
        _call(env, _on(t.prompt, turn), t.episode.final_reward)  # (to release what it holds)
        t.finish_reason = MALFORMED
    return kept


def _take_turn(
    env: Env,
    t: _Trajectory,
    c: Completion,
    reply: Reply,
    turn: int,
    turn_limit: int,
    token_limit: int,
    observe: Observe,
) -> bool:
    """Append the sampled turn ``c`` to ``t`` and the env's ``reply`` to it; True if the
    episode goes on (its observation appended), False if it ended."""
    t.tokens += c.token_ids
    t.logprobs += c.logprobs
    t.mask += [1] * len(c.token_ids)
    t.texts.append(c.text)
    t.requests.append((len(c.prompt_ids), c.cached_tokens, len(c.token_ids)))
    t.transcript.append(c.text)
    t.version = c.policy_version  # every turn of one rollout samples with one version
    t.turn_rewards.append(float(reply.reward))
    t.tool_calls += int(reply.tool_call)
    t.tool_ok += int(reply.tool_call and reply.tool_ok)
    if reply.done:
        t.reward, t.finish_reason = float(reply.reward), c.finish_reason
        return False
    try:
        obs = [] if turn >= turn_limit else observe(t.prompt, t.texts, reply.observation)
    except ChatTemplateError:
        # The chat template would render this turn otherwise than the model sampled it
        # (e.g. Qwen3 drops an empty think block once a message follows): the episode
        # cannot go on token for token, so it ends here, as if cut by a limit.
        obs, turn_limit = [], turn
    if turn >= turn_limit or len(t.tokens) + len(obs) + 1 > token_limit:
        t.reward = float(_call(env, _on(t.prompt, turn), t.episode.final_reward))
        t.finish_reason = "length"
        t.turn_rewards[-1] = t.reward
        return False
    t.tokens += obs
    t.logprobs += [0.0] * len(obs)
    t.mask += [0] * len(obs)
    t.transcript.append(reply.observation)
    return True


def _on(prompt: Prompt, turn: int | None = None) -> str:
    where = f"{prompt.split} prompt {prompt.index}"
    return where if turn is None else f"turn {turn} of the episode on {where}"


def _call(env: Env, where: str, fn: Callable, *args: object) -> Any:
    """``fn(*args)``, an exception from the env's code re-raised naming the env and
    ``where`` in the episodes: a run stops on an env bug instead of training on what it
    left behind."""
    try:
        return fn(*args)
    except Exception as exc:
        raise EpisodeError(
            f"env {env.name!r} raised {type(exc).__name__}: {exc} in {fn.__name__} ({where}); "
            "an env answers a malformed tool call with an observation, so this is a bug in "
            "the env"
        ) from exc


def per_turn_rewards(groups: list[list[Completion]], rewards: torch.Tensor) -> torch.Tensor:
    """[groups, G, K] per-turn rewards of multi-turn episodes (K: the most turns of any),
    NaN after an episode's last turn, whose entry is its (possibly shaped) reward in
    ``rewards`` [groups, G]."""
    k = max(c.turns for g in groups for c in g)
    out = torch.full((*rewards.shape, k), float("nan"))
    for i, g in enumerate(groups):
        for j, c in enumerate(g):
            per_turn = list(c.turn_rewards or [0.0] * c.turns)
            per_turn[-1] = float(rewards[i, j])
            out[i, j, : len(per_turn)] = torch.tensor(per_turn)
    return out


def per_turn_states(groups: list[list[Completion]]) -> torch.Tensor:
    """[groups, G, K] ids of the history each turn of multi-turn episodes starts from
    (K: the most turns of any): the prompt's ids and every token of the episode before the
    turn's first sampled token, earlier turns and observations included, exactly as the
    model was given them. Within a group, equal ids mean equal token sequences (ids count
    from 0 in order of first appearance); -1 after an episode's last turn."""
    k = max(c.turns for g in groups for c in g)
    out = torch.full((len(groups), len(groups[0]), k), -1, dtype=torch.long)
    for i, g in enumerate(groups):
        ids: dict[tuple[int, ...], int] = {}
        for j, c in enumerate(g):
            # each turn's first token: where the turn index (zoo.run.rollout) moves on
            index = turn_index(c).tolist()
            starts = [0] + [t for t in range(1, len(index)) if index[t] != index[t - 1]]
            for turn, start in enumerate(starts[: c.turns]):
                history = tuple(c.prompt_ids) + tuple(c.token_ids[:start])
                out[i, j, turn] = ids.setdefault(history, len(ids))
    return out


def episode_metrics(stats: list[tuple[int, int, int]]) -> dict[str, float]:
    """turns_mean, tool_calls_mean and tool_success_rate (successful tool calls over all
    tool calls, 0 when there were none) of episodes' (turns, tool calls, successful)."""
    if not stats:
        return {"turns_mean": 0.0, "tool_calls_mean": 0.0, "tool_success_rate": 0.0}
    turns, calls, ok = (sum(column) for column in zip(*stats, strict=True))
    return {
        "turns_mean": turns / len(stats),
        "tool_calls_mean": calls / len(stats),
        "tool_success_rate": ok / calls if calls else 0.0,
    }
