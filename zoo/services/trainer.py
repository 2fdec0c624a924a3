"""The trainer: TorchTitan's Qwen3 model, AdamW, gradient clipping and micro-batching.

This is where an algorithm's loss is called. One rollout batch trains in ``Trainer.train``:

    old = trainer.logprobs(batch)        once, before any update, with the weights that
                                         sampled each row (the caller stores it in the batch)
    for each of ``epochs`` passes:
        for each of ``mini_batches`` mini-batches (whole groups, or rows shuffled):
            trainer.step(mini_batch)     one optimizer step; micro-batched for memory
    version += 1                         the policy version the generators get next

So the first mini-batch sees a ratio pi_theta / pi_old of 1 and every later one a ratio
that moved: that is where the algorithms' clips, caps and gates act. Every pass scores
tokens at the run's sampling temperature (logits / T), like the sampler.

Batches come as ``RolloutBatch`` (zoo/services/batch.py, with ``response_logprobs``, the
log-probs every pass computes). Weights come in and go out in Hugging Face naming, the
interchange format with the generator.

Several processes: when the caller has initialised a torch.distributed process group of
more than one rank before building the Trainer, ``parallelize`` (zoo/models/parallelism.py)
splits the model over them from outside the step: FSDP2 data parallelism by default,
TorchTitan's Qwen3 tensor parallelism with ``tensor_parallel`` ranks per group, or both.
The step itself is the one-process loop; what differs per rank comes from the object
``parallelize`` returns (``self.parallel``): which rows this rank computes, the passes
without rows that keep the ranks' collectives in step, and how per-rank results combine.
Every rank gets the same whole batch; each data-parallel rank computes on its own
contiguous slice of rows, which the ranks of its tensor-parallel group share. The update
equals the one-process update, and all public methods are collectives: every rank calls
them together, in the same order.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields
from pathlib import Path

import numpy as np
import torch
from torch.distributed.tensor import DTensor

from zoo.core.config import ConfigError
from zoo.core.losses import SEQUENCE_SHARE_PREFIX, k3_kl
from zoo.core.types import LossOutput, TrainBatch
from zoo.models import parallelism
from zoo.models.parallelism import parallelize
from zoo.models.titan import build_titan_model
from zoo.services.batch import RolloutBatch, response_logprobs, response_logprobs_and_entropy
from zoo.services.settings import OptimizerSection, RegimeSection  # (torch-free: fast --help)


@dataclass
class TrainerConfig:
    """What the trainer (and the critic, zoo.services.value) is built with: the run's
    optimizer and regime sections themselves (``cfg.optimizer``, ``cfg.regime``; not
    copies of their fields), and what the run resolves from the rest of its config
    (``zoo.run.wiring.trainer_config_of``). The sampling temperature and the async policy
    age come to ``Trainer`` as arguments, from the run's other sections."""

    optimizer: OptimizerSection = field(default_factory=OptimizerSection)
    regime: RegimeSection = field(default_factory=RegimeSection)
    decay_steps: int = 0
    """Optimizer steps of the decay after the warm-up: ``optimizer.decay_steps``, or where
    that is 0 the rest of the run's optimizer steps (0 here: those of the section)."""
    schedule_over_budget: bool = False
    """The learning rate follows the share of the run's budget spent (``lr_at_budget``,
    from each batch's ``budget_spent``), not the optimizer steps (``lr_at``)."""
    mixed_precision: str = "none"
    """"bf16": compute in bfloat16 under autocast, float32 master weights and optimizer
    state (TorchTitan's FSDP2 mixed-precision policy, on one device). Sharded: FSDP2's
    MixedPrecisionPolicy (bf16 parameters in compute, float32 gradient reduction)."""
    shuffle_seed: int = 0
    """The run's seed: with ``regime.mini_batch_rows`` "shuffled", pass e over the batch
    policy version v trains on draws its row order from (shuffle_seed, v, e)."""

    @classmethod
    def of(cls, **settings) -> TrainerConfig:
        """A config from flat names (``TrainerConfig.of(lr=1e-3, mini_batches=2)``), each
        into its section, and this class's own fields: for tests and benchmarks that build
        a trainer without a run."""
        own = {f.name for f in fields(cls)} - {"optimizer", "regime"}
        parts: dict[str, dict] = {"optimizer": {}, "regime": {}, "own": {}}
        for name, value in settings.items():
            if name in own:
                parts["own"][name] = value
            elif name in {f.name for f in fields(OptimizerSection)}:
                parts["optimizer"][name] = value
            elif name in {f.name for f in fields(RegimeSection)}:
                parts["regime"][name] = value
            else:
                raise TypeError(f"TrainerConfig has no setting {name!r}")
        return cls(
            optimizer=OptimizerSection(**parts["optimizer"]),
            regime=RegimeSection(**parts["regime"]),
            **parts["own"],
        )

    @property
    def decay_length(self) -> int:
        """The decay's optimizer steps: as resolved, else as the section says."""
        return self.decay_steps or self.optimizer.decay_steps


def lr_at(step: int, config: TrainerConfig) -> float:
    """The learning rate of optimizer step ``step`` (0-based): a linear warm-up from
    lr / warmup_steps to lr over the first ``warmup_steps``, then constant, or a linear or
    cosine decay to ``min_lr_ratio * lr`` over the next ``decay_steps`` (and that floor
    after), as in transformers' get_{linear,cosine}_schedule_with_warmup."""
    optimizer = config.optimizer
    if step < optimizer.warmup_steps:
        return optimizer.lr * (step + 1) / optimizer.warmup_steps
    done = min(1.0, (step - optimizer.warmup_steps) / max(1, config.decay_length))
    return decayed(done, optimizer)


def lr_at_budget(spent: float, config: TrainerConfig) -> float:
    """The learning rate when ``spent`` (0 < spent <= 1) of the run's budget is used, in
    the budget's unit: a linear warm-up to lr over the first ``warmup_ratio``, then
    constant, or a linear or cosine decay to ``min_lr_ratio * lr`` over the rest (TRL's
    warmup_ratio and verl's lr_warmup_steps_ratio, for any budget)."""
    optimizer = config.optimizer
    if spent < optimizer.warmup_ratio:
        return optimizer.lr * spent / optimizer.warmup_ratio
    done = min(1.0, (spent - optimizer.warmup_ratio) / (1.0 - optimizer.warmup_ratio))
    return decayed(done, optimizer)


def decayed(done: float, config: OptimizerSection) -> float:
    """lr after ``done`` (0-1) of the decay: constant, linear or cosine to the floor."""
    lr, floor = config.lr, config.min_lr_ratio * config.lr
    if config.lr_schedule == "constant":
        return lr
    if config.lr_schedule == "linear":
        return floor + (lr - floor) * (1.0 - done)
    return floor + (lr - floor) * 0.5 * (1.0 + math.cos(math.pi * done))


def mini_batch_slices(rows: int, group_size: int, count: int) -> list[slice]:
    """``count`` contiguous, group-aligned slices of ``rows`` rows, as even as whole groups
    allow: the first ``groups % count`` get one group more (fewer slices when there are
    fewer groups than ``count``)."""
    group_size = group_size if group_size > 0 and rows % group_size == 0 else 1
    groups = rows // group_size
    count = max(1, min(count, groups))
    base, extra = divmod(groups, count)
    sizes = [(base + (i < extra)) * group_size for i in range(count)]
    bounds = [0, *itertools.accumulate(sizes)]
    return [slice(lo, hi) for lo, hi in itertools.pairwise(bounds)]


def mini_batch_rows(
    rows: int, group_size: int, count: int, order: str, seed: tuple[int, ...]
) -> list[slice] | list[torch.Tensor]:
    """The rows of each mini-batch of a batch of ``rows`` (RegimeSection.mini_batch_rows):
    "groups", ``mini_batch_slices``; "shuffled", a permutation of all rows drawn from
    ``seed`` (a numpy SeedSequence entropy: the same on every rank and after a resume),
    cut into ``count`` index tensors as even as rows allow, the first ``rows % count`` one
    row longer. One mini-batch is the batch as it is: its order changes nothing."""
    if order == "groups" or min(count, rows) <= 1:
        return mini_batch_slices(rows, group_size, count)
    permutation = torch.from_numpy(np.random.default_rng(seed).permutation(rows))
    return list(torch.tensor_split(permutation, min(count, rows)))


def combine_updates(updates: list[dict[str, float]]) -> dict[str, float]:
    """Per-update metrics -> one record: the mean over updates, the max of ``*_max`` keys."""
    out: dict[str, float] = {}
    for key in updates[0]:
        values = [u[key] for u in updates if key in u]
        out[key] = max(values) if key.endswith("_max") else sum(values) / len(values)
    return out


class Trainer:
    def __init__(
        self,
        model_path: Path,
        config: TrainerConfig,
        max_response_len: int,
        init: str = "pretrained",
        device: str = "cpu",
        tensor_parallel: int = 1,
        temperature: float = 1.0,
        max_policy_age: int = 0,
    ) -> None:
        """``temperature``: the sampling temperature, at which every pass scores tokens
        (log softmax(logits / T)), like the sampler. ``max_policy_age``: ``logprobs`` can be
        asked for the weights of up to this many versions back (async mode), at the cost of
        one copy of the parameters per version kept."""
        if config.mixed_precision not in ("none", "bf16"):
            raise ValueError(
                f"mixed_precision must be none or bf16, not {config.mixed_precision!r}"
            )
        self.config = config
        self.temperature = temperature
        self.max_policy_age = max_policy_age
        self.max_response_len = max_response_len
        self.device = torch.device(device)
        self.world = parallelism.world_size()
        self.rank = torch.distributed.get_rank() if self.world > 1 else 0
        if tensor_parallel < 1 or self.world % tensor_parallel:
            raise ConfigError(
                f"tensor_parallel {tensor_parallel} must divide the trainer's {self.world} "
                "processes"
            )
        self.model, self.adapter = build_titan_model(
            model_path, init=init, device=self.device, tensor_parallel=tensor_parallel
        )
        self.parallel = parallelize(
            self.model,
            self.device,
            tensor_parallel,
            bf16=config.mixed_precision == "bf16",
            empty_pass=self._empty_pass,
        )
        """How the model and each batch are split over the ranks (``OneProcess``: not)."""
        self.model.train()
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(),
            lr=lr_at(0, config),
            betas=(config.optimizer.adam_beta1, config.optimizer.adam_beta2),
            eps=config.optimizer.adam_eps,
            weight_decay=config.optimizer.weight_decay,
        )
        self.version = 0
        self.kept_weights: dict[int, list[torch.Tensor]] = {}
        """Parameters of earlier versions (async mode), by version: ``logprobs`` scores
        rows with the weights that sampled them."""
        self.loss_fn: Callable[[TrainBatch], LossOutput] | None = None

    @property
    def sharded(self) -> bool:
        """FSDP2 data parallelism: each data-parallel rank trains on its own rows."""
        return self.parallel.fsdp

    def _logprobs(self, batch: RolloutBatch, width: int) -> torch.Tensor:
        with self.parallel.autocast(self.device, self.config.mixed_precision == "bf16"):
            return response_logprobs(
                self.model,
                batch.tokens,
                batch.response_start,
                width,
                self.parallel,
                self.temperature,
            )

    def _logprobs_and_entropy(
        self, batch: RolloutBatch, width: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``_logprobs`` and the policy's per-token entropy over its whole distribution,
        from the same forward (zoo/core/entropy.py)."""
        with self.parallel.autocast(self.device, self.config.mixed_precision == "bf16"):
            return response_logprobs_and_entropy(
                self.model,
                batch.tokens,
                batch.response_start,
                width,
                self.parallel,
                self.temperature,
            )

    @torch.no_grad()
    def logprobs(self, batch: RolloutBatch) -> torch.Tensor:
        """[B, T] log pi_old: each row's response log-probs (at the run's temperature)
        under the weights that sampled it (``batch.policy_versions``; current weights for
        rows without one), before any update on this batch: the "old" policy of the
        ratio. Sharded: every rank gets the whole batch's."""
        width = batch.mask.shape[1]
        versions = batch.policy_versions
        if versions is None:
            versions = torch.full((batch.size,), self.version)
        out = torch.zeros(batch.size, width)
        for version in sorted(set(versions.tolist())):  # same order on every rank
            rows = torch.nonzero(versions == version).flatten()
            with self._weights_of(version):
                out[rows] = self._logprobs_of_rows(batch.rows(rows), width)
        return out

    def _logprobs_of_rows(self, batch: RolloutBatch, width: int) -> torch.Tensor:
        out = torch.zeros(batch.size, width, device=self.device)
        for first, mb in self.parallel.micro_batches(batch, self.config.regime.micro_batch_size):
            out[first : first + mb.size] = self._logprobs(mb.to(self.device), width).float()
        return self.parallel.gather_rows(out).cpu()

    @contextlib.contextmanager
    def _weights_of(self, version: int) -> Iterator[None]:
        """Run the block with the parameters of ``version`` (kept by ``train``), then put
        the current ones back."""
        if version == self.version:
            yield
            return
        if version not in self.kept_weights:
            raise RuntimeError(
                f"no weights of policy version {version} (current {self.version}, kept "
                f"{sorted(self.kept_weights)}): raise max_policy_age"
            )
        params = self._parameters()
        with torch.no_grad():
            self.parallel.reshard()
            current = [p.detach().clone() for p in params]
            for p, old in zip(params, self.kept_weights[version], strict=True):
                p.copy_(old)
        try:
            yield
        finally:
            with torch.no_grad():
                self.parallel.reshard()
                for p, now in zip(params, current, strict=True):
                    p.copy_(now)

    def _parameters(self) -> list[torch.Tensor]:
        """The parameters as the optimizer holds them (FSDP2's sharded ones when split)."""
        return [p for group in self.optimizer.param_groups for p in group["params"]]

    def train(self, batch: RolloutBatch, loss_fn: Callable[[TrainBatch], LossOutput]) -> dict:
        """Train on one rollout batch: ``epochs`` passes, each over ``mini_batches``
        mini-batches (``mini_batch_rows``), one optimizer step each; then the policy version
        advances by one. ``batch.old_logprobs`` must be set when there is more than one
        update (``logprobs`` gives them); without them the one update's own forward is
        pi_old, and the result holds it too, as ``old_logprobs`` ([B, T], what ``logprobs``
        would have given). Returns the updates' metrics combined (``combine_updates``),
        ``updates``, ``staleness_kl`` (the policy KL at the first update, before any step on
        this batch: 0 when the batch was sampled by the current weights) and
        ``response_tokens`` of the whole batch."""
        regime = self.config.regime
        passes = [  # each pass's mini-batches (the same split each pass unless shuffled)
            mini_batch_rows(
                batch.size,
                batch.group_size,
                regime.mini_batches,
                regime.mini_batch_rows,
                seed=(self.config.shuffle_seed, self.version, epoch),
            )
            for epoch in range(regime.epochs)
        ]
        own_forward = batch.old_logprobs is None
        if own_forward and sum(map(len, passes)) > 1:
            raise ValueError("several updates per batch need batch.old_logprobs (logprobs())")
        if self.max_policy_age:  # later batches may have been sampled by this version
            self.kept_weights[self.version] = [p.detach().clone() for p in self._parameters()]
            oldest = self.version + 1 - self.max_policy_age
            self.kept_weights = {v: w for v, w in self.kept_weights.items() if v >= oldest}
        kept = None  # this rank's rows of the one update's log-probs, when they are pi_old
        if own_forward:
            kept = torch.zeros(batch.size, batch.mask.shape[1], device=self.device)
        updates = [self.step(batch.rows(rows), loss_fn, kept) for split in passes for rows in split]
        self.version += 1
        out = {
            **combine_updates(updates),
            "updates": len(updates),
            "staleness_kl": updates[0]["policy_kl"],
            "response_tokens": int(batch.mask.sum()),
        }
        if kept is not None:
            out["old_logprobs"] = self.parallel.gather_rows(kept).cpu()
        return out

    def step(
        self,
        batch: RolloutBatch,
        loss_fn: Callable[[TrainBatch], LossOutput],
        kept: torch.Tensor | None = None,
    ) -> dict:
        """One optimizer step on ``batch`` (the policy version is ``train``'s to change);
        returns the loss metrics, ``policy_kl`` (k3 estimate of KL(pi_old || pi_theta) on
        its tokens) and the gradient norm. ``kept`` ([rows of batch, T]): where to write
        the forward's log-probs (this rank's rows), when they are pi_old. Split: every rank
        passes the same whole batch, trains on its own rows (``self.parallel.micro_batches``),
        and gets the whole batch's metrics.

        Combining metrics: a loss reports each metric over the rows of its micro-batch;
        the batch's value is the sum over micro-batches (and ranks) of the value times
        the micro-batch's share of the batch's response tokens, or, for ``seq_*`` keys
        (shares of sequences, ``zoo.core.losses.SEQUENCE_SHARE_PREFIX``), its share of the
        batch's sequences with response tokens; ``*_max`` keys take the max. Shares of
        tokens and of sequences thus come out exactly as over the whole batch at once; a
        quantile only approximately (the weighted mean of the micro-batches' quantiles).

        Entropy: when the loss belongs to an algorithm whose ``needs_entropy`` is True
        (``wants_entropy``), each micro-batch's forward also gives the policy's per-token
        entropy (``TrainBatch.entropy``) and the record ``policy_entropy``, its mean over
        response tokens; otherwise neither is computed."""
        width = batch.mask.shape[1]
        with_entropy = wants_entropy(loss_fn)
        # Counts over the whole batch, on every rank: each micro-batch's loss divides by
        # them, so the losses of all micro-batches of all ranks add up to the batch loss.
        num_sequences = int((batch.mask.sum(-1) > 0).sum())
        num_tokens = int(batch.mask.sum())
        self.optimizer.zero_grad(set_to_none=True)
        sums: dict[str, float] = {}
        loss_total = 0.0  # micro-batch losses add up: each divides by whole-batch counts
        for first, mb in self.parallel.micro_batches(batch, self.config.regime.micro_batch_size):
            mb = mb.to(self.device)
            entropy = None
            if with_entropy:
                logprobs, entropy = self._logprobs_and_entropy(mb, width)
            else:
                logprobs = self._logprobs(mb, width)
            old = mb.old_logprobs if mb.old_logprobs is not None else logprobs.detach()
            if kept is not None:
                kept[first : first + mb.size] = old.float()
            train_batch = TrainBatch(
                logprobs=logprobs,
                old_logprobs=old,
                ref_logprobs=mb.ref_logprobs,
                advantages=mb.advantages,
                mask=mb.mask,
                num_sequences=num_sequences,
                num_tokens=num_tokens,
                max_response_len=self.max_response_len,
                entropy=entropy,
            )
            out = loss_fn(train_batch)
            out.loss.backward()
            loss_total += float(out.loss.detach())
            weight = float(mb.mask.sum()) / max(num_tokens, 1)
            seq_weight = int((mb.mask.sum(-1) > 0).sum()) / max(num_sequences, 1)
            # float64: early in a batch the ratio is within float32's resolution of 1
            kl = k3_kl(old.double(), logprobs.detach().double())
            metrics = {
                **out.metrics,
                "entropy_sampled": -_masked_mean(logprobs, mb.mask),
                "policy_kl": _masked_mean(kl, mb.mask.double()),
            }
            if entropy is not None:  # the exact entropy, beside the sampled estimate
                metrics["policy_entropy"] = _masked_mean(entropy, mb.mask)
            for k, v in metrics.items():
                if k == "loss":
                    continue
                if k.endswith("_max"):
                    sums[k] = max(sums.get(k, v), v)
                else:
                    w = seq_weight if k.startswith(SEQUENCE_SHARE_PREFIX) else weight
                    sums[k] = sums.get(k, 0.0) + w * v
        sums = self.parallel.sum_metrics({**sums, "loss": loss_total})  # the whole batch's
        loss_total = sums.pop("loss")
        # Over split gradients (DTensors) torch computes the global norm (the per-shard
        # norms are combined across ranks) and returns it as a DTensor.
        grad_norm = torch.nn.utils.clip_grad_norm_(
            self.model.parameters(), self.config.optimizer.grad_clip
        )
        if isinstance(grad_norm, DTensor):
            grad_norm = grad_norm.full_tensor()
        if self.config.schedule_over_budget:
            if batch.budget_spent is None:
                raise ValueError("a schedule over the budget needs batch.budget_spent")
            lr = lr_at_budget(batch.budget_spent, self.config)
        else:
            lr = lr_at(self.optimizer_steps(), self.config)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.optimizer.step()
        # grad_clip_frac: 1 when the norm clip bound this step; the step record's mean over
        # a batch's updates is the share of optimizer steps it rescaled
        out = {
            "loss": loss_total,
            **sums,
            "grad_norm": float(grad_norm),
            "grad_clip_frac": float(float(grad_norm) > self.config.optimizer.grad_clip),
            "response_tokens": num_tokens,
        }
        scheduled = (
            self.config.optimizer.lr_schedule != "constant" or self.config.optimizer.warmup_steps
        )
        if scheduled or self.config.optimizer.warmup_ratio:
            out["lr"] = lr  # (not logged at a constant lr: older records stay comparable)
        return out

    def _empty_pass(self, row: RolloutBatch) -> None:
        """A forward (and, when gradients are on, a backward) that changes nothing, for a
        rank with fewer rows than the others: FSDP2's collectives need the same passes on
        every rank (``parallel.micro_batches`` runs it). Any real row serves as input; the
        loss is zero times its log-probabilities, which leaves the algorithm's loss (and
        its handling of empty masks) out of it."""
        logprobs = self._logprobs(row.to(self.device), row.mask.shape[1])
        if torch.is_grad_enabled():
            (logprobs.sum() * 0.0).backward()

    def train_step(self, inputs: list[dict], targets: list[dict]) -> float:
        """torchforge-compatible step: ``inputs = [{"tokens": [B, L]}]``, ``targets =
        [{"response": [B, T], "ref_logprobs", "advantages", "padding_mask"}]``, one entry
        per micro-batch, responses occupying the last T positions of ``tokens``. One
        optimizer step with the loss function set in ``self.loss_fn`` (on-policy: the
        ratio is taken against this step's own log-probs); returns the loss as a float."""
        if self.loss_fn is None:
            raise RuntimeError("set trainer.loss_fn (e.g. algorithm.loss) before train_step")
        tokens = torch.cat([i["tokens"] for i in inputs])
        width = targets[0]["response"].shape[1]
        batch = RolloutBatch(
            tokens=tokens,
            response_start=torch.full((tokens.shape[0],), tokens.shape[1] - width),
            mask=torch.cat([t["padding_mask"] for t in targets]).float(),
            advantages=torch.cat([t["advantages"].reshape(-1) for t in targets]),
            ref_logprobs=torch.cat([t["ref_logprobs"] for t in targets])
            if targets[0].get("ref_logprobs") is not None
            else None,
        )
        saved = self.config  # (one micro-batch per input; the run's sections left as they are)
        whole = dataclasses.replace(saved.regime, micro_batch_size=inputs[0]["tokens"].shape[0])
        self.config = dataclasses.replace(saved, regime=whole)
        try:
            loss = float(self.step(batch, self.loss_fn)["loss"])
        finally:
            self.config = saved
        self.version += 1
        return loss

    def hf_state_dict(self) -> dict[str, torch.Tensor]:
        """Current weights in Hugging Face naming (detached, contiguous); whole tensors on
        every rank when split."""
        state = self.parallel.whole_state(
            {k: v.detach() for k, v in self.model.state_dict().items()}
        )
        return {k: v.contiguous() for k, v in self.adapter.to_hf(state).items()}

    def optimizer_steps(self) -> int:
        """Optimizer steps taken so far, read from AdamW's own state (so a resumed run
        continues its learning-rate schedule where it stopped)."""
        for state in self.optimizer.state.values():
            step = state.get("step")
            if step is not None:
                return int(step.full_tensor() if isinstance(step, DTensor) else step)
        return 0

    def optimizer_state_dict(self) -> dict:
        """``torch.optim`` layout (parameters by position) with whole tensors, sharded or
        not: a checkpoint resumes at any world size."""
        return self.parallel.optimizer_state(self.optimizer)

    def load_state(
        self, hf_state_dict: dict[str, torch.Tensor], optimizer_state: dict, version: int
    ) -> None:
        """Restore weights (Hugging Face naming), optimizer state and policy version.
        Split: every rank passes the same whole state and keeps its own part."""
        self.parallel.load_whole_state(self.model, self.adapter.from_hf(hf_state_dict))
        self.parallel.load_optimizer_state(self.optimizer, optimizer_state)
        self.version = version
        self.kept_weights = {}  # a resumed run samples again with these weights

    def save_hf(self, directory: Path, source: Path) -> None:
        """Write the current weights as a Hugging Face checkpoint (config and tokenizer
        copied from ``source``)."""
        write_hf_checkpoint(self.hf_state_dict(), directory, source)


def write_hf_checkpoint(state: dict[str, torch.Tensor], directory: Path, source: Path) -> None:
    """``state`` (Hugging Face names) as ``directory/model.safetensors``, beside the
    config and tokenizer files of the checkpoint ``source``."""
    import shutil

    from safetensors.torch import save_file

    directory.mkdir(parents=True, exist_ok=True)
    for f in Path(source).iterdir():
        if f.is_file() and f.suffix != ".safetensors":
            shutil.copy2(f, directory / f.name)
    save_file(state, str(directory / "model.safetensors"), metadata={"format": "pt"})


def wants_entropy(loss_fn: Callable[[TrainBatch], LossOutput]) -> bool:
    """True when ``loss_fn`` is the ``loss`` of an algorithm (a bound method, as the loop
    and the trainer actor pass it) whose ``needs_entropy`` is True, or a callable that
    itself carries ``needs_entropy = True``."""
    owner = getattr(loss_fn, "__self__", loss_fn)
    return bool(getattr(owner, "needs_entropy", False))


def _masked_mean(values: torch.Tensor, mask: torch.Tensor) -> float:
    return float((values.detach() * mask).sum() / mask.sum().clamp(min=1))
