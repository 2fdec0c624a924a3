"""``python -m harness doctor --plan``: a capacity plan for a run on N GPUs, before any GPU.

For the run that the flags describe it predicts, per rollout step:

- memory per GPU: ``zoo.models.memory.memory_estimate`` in bf16 (what the pre-flight check
  asks on cuda), with the trainer's weights, gradients and AdamW state split over the N
  GPUs (``MemoryEstimate.trainer_split``: FSDP2); the rest stays whole on each GPU;
- time: the ledger's FLOPs of the step (zoo/services/ledger.py, as ``RunPlan.with_estimate``
  counts them) over N x the chip's nominal dense bf16 peak x an efficiency. The default
  efficiencies are the ones measured on one H200 (leaderboards/gpu_check.md; see
  ``GPU_CHECK`` below).

The one real measurement it is checked against is that GPU check: ``gpu_check_comparison``
(tests/test_capacity.py; docs/running.md, "Capacity plan").
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from zoo.core.config import ConfigError
from zoo.envs import Env, MultiTurnEnv, Prompt
from zoo.models.memory import MemoryEstimate, memory_estimate
from zoo.models.presets import QWEN3_COMMON, QWEN3_SHAPES, ModelShape
from zoo.run.plan import RunPlan
from zoo.run.run_config import RunConfig
from zoo.services.ledger import Ledger


@dataclass(frozen=True)
class GPUKind:
    name: str
    peak_flops: float
    """Nominal dense bf16 peak, FLOP/s (the data sheet's figure without sparsity)."""
    memory_bytes: int
    """Device memory, bytes."""
    source: str


GPUS = {
    # H200 SXM data sheet: 1,979 TFLOP/s bf16 with 2:4 sparsity, so 989.4 dense; 141 GB.
    # The memory is what the GPU check's H200 reported: 143,771 MiB.
    "h200": GPUKind("H200", 989.4e12, 143_771 * 2**20, "H200 data sheet; memory as measured"),
    # H100 SXM data sheet: 1,979 TFLOP/s bf16 sparse (989 dense), 80 GB HBM3 (nominal).
    "h100": GPUKind("H100", 989.4e12, 80 * 10**9, "H100 SXM data sheet (nominal 80 GB)"),
    # A100 SXM data sheet: 312 TFLOP/s bf16 dense, 80 GB HBM2e (nominal).
    "a100": GPUKind("A100", 312e12, 80 * 10**9, "A100 80GB SXM data sheet (nominal)"),
}
"""GPU kinds a plan can be made for, by ``--gpu`` name."""

# ---- The measurement the default efficiencies come from: leaderboards/gpu_check.md ----
# qwen3-1.7b with random weights, bf16 autocast, ONE H200, trained with transformers'
# Qwen3ForCausalLM (not TorchTitan) and generated with transformers `generate` (not
# vLLM). vLLM generates several times faster than `generate`, TorchTitan's compiled
# model may train faster: these efficiencies are the figures of that stack only. Scaling
# to N GPUs is assumed linear (no communication, no imbalance): an upper bound on speed.
GPU_CHECK = {
    "model": "qwen3-1.7b",
    "gpu": "h200",
    "train_sequences": 16,  # per optimizer step
    "prompt_tokens": 256,
    "response_tokens": 768,
    "micro_batch": 4,
    "train_step_s": 0.607,  # median of 4 steps
    "train_achieved_flops": 275.4e12,  # the ledger's model FLOPs / step seconds
    "train_peak_gib": 31.9,  # torch.cuda.max_memory_allocated
    "gen_sequences": 256,  # 64 prompts x 4 samples
    "gen_prompt_tokens": 256,
    "gen_new_tokens": 128,
    "gen_tokens_per_s": 8_599,  # new tokens/s, transformers generate, KV cache
}
TRAIN_EFFICIENCY = GPU_CHECK["train_achieved_flops"] / GPUS["h200"].peak_flops
"""Model FLOPs utilisation of training (forward and backward), 27.8% of the nominal peak."""
GPU_CHECK_SHAPE = ModelShape.from_config({**QWEN3_COMMON, **QWEN3_SHAPES["qwen3-1.7b"]})
"""The shape the GPU check built (zoo.models.presets.qwen3_config_dir)."""


def _gpu_check_generation_efficiency() -> float:
    """Generation's FLOPs utilisation in the GPU check: the ledger's FLOPs of its 256
    completions of 128 tokens after 256-token prompts, over the seconds that 8,599 new
    tokens/s took, over the nominal peak (~8%: decoding is memory-bound; the figure holds
    near that concurrency, 256 sequences at once, and is a crude model elsewhere)."""
    g = GPU_CHECK
    flops = g["gen_sequences"] * Ledger(GPU_CHECK_SHAPE).generation_flops(
        g["gen_prompt_tokens"], g["gen_new_tokens"]
    )
    seconds = g["gen_sequences"] * g["gen_new_tokens"] / g["gen_tokens_per_s"]
    return flops / seconds / GPUS["h200"].peak_flops


GENERATION_EFFICIENCY = _gpu_check_generation_efficiency()
MEMORY_HEADROOM = 0.9
"""A plan fits when its minimum memory is at most this share of the GPU's (as the
pre-flight check: harness.experiment.check_memory)."""


@dataclass(frozen=True)
class Workload:
    """One rollout step's work, in sequences, tokens and passes."""

    shape: ModelShape
    sequences: int
    """Sampled sequences per step (prompts per step x group size)."""
    prompt: int
    """Prompt tokens of a sequence."""
    response: int
    """Response tokens of a typical sequence (the FLOPs, hence the time)."""
    max_len: int
    """Prompt plus the longest response, tokens (the memory)."""
    micro_batch: int
    epochs: int = 1
    old_logprobs: bool = True
    """The trainer's forward with the weights that sampled the batch (once per step)."""
    reference: bool = False
    critic: bool = False
    """A learned critic (PPO): its forward and, per epoch, its forward and backward."""
    greedy_prompts: int = 0
    """Greedy completions generated for a baseline (ReMax: one per prompt)."""
    kept_versions: int = 0
    """Async mode: earlier weight versions the trainer keeps (max_policy_age)."""

    @classmethod
    def of_plan(cls, plan: RunPlan) -> Workload:
        """A run's step as the pre-flight checks count it: the ledger's prompt and typical
        response (``StepEstimate``), the memory at the full response (or episode) budget."""
        plan = plan.with_estimate()
        cfg, algorithm, step = plan.cfg, plan.algorithm, plan.step
        assert plan.shape is not None and step is not None
        return cls(
            shape=plan.shape,
            sequences=step.samples,
            prompt=step.prompt,
            response=step.response,
            max_len=step.prompt + plan.episode_budget,
            micro_batch=cfg.regime.micro_batch_size or step.samples,
            epochs=cfg.regime.epochs,
            old_logprobs=not cfg.skips_old_logprob_pass(algorithm),
            reference=algorithm.needs_reference,
            critic=algorithm.needs_values,
            greedy_prompts=cfg.sampling.prompts_per_step if algorithm.needs_greedy_baseline else 0,
            kept_versions=cfg.placement.max_policy_age if cfg.placement.mode == "async" else 0,
        )

    def phase_flops(self) -> dict[str, float]:
        """The step's model FLOPs by phase, as the ledger charges them."""
        ledger = Ledger(self.shape)
        score = self.sequences * ledger.scoring_flops(self.prompt, self.response)
        generate = ledger.generation_flops(self.prompt, self.response)
        flops = {
            "generate": (self.sequences + self.greedy_prompts) * generate,
            "old_logprobs": score if self.old_logprobs else 0.0,
            "reference": score if self.reference else 0.0,
            "train": 3 * self.epochs * score,
        }
        if self.critic:
            value = self.sequences * ledger.value_flops(self.prompt, self.response)
            flops["critic"] = value + 3 * self.epochs * value
        return flops

    def memory(self, compute_bytes: int = 2) -> MemoryEstimate:
        """One process's memory, before the trainer is split: in bf16 (2 bytes, a GPU) by
        default; 4 is float32, as on the CPU. The pre-flight check, ``doctor``'s memory
        check and ``list models`` ask memory_estimate the same of the same run."""
        return memory_estimate(
            self.shape,
            sequences=self.sequences,
            seq_len=self.max_len,
            micro_batch=self.micro_batch,
            reference=self.reference,
            compute_bytes=compute_bytes,
            kept_versions=self.kept_versions,
        )


@dataclass(frozen=True)
class CapacityPlan:
    gpu: GPUKind
    gpus: int
    memory: MemoryEstimate
    """Per GPU: the trainer's state split over ``gpus`` (FSDP2), the rest whole."""
    flops: dict[str, float]
    """Per step, by ledger phase."""
    train_efficiency: float
    generation_efficiency: float

    @property
    def train_flops(self) -> float:
        """Every pass but generation: old log-probs, reference, training, critic."""
        return sum(v for k, v in self.flops.items() if k != "generate")

    @property
    def train_seconds(self) -> float:
        return self.train_flops / (self.gpus * self.gpu.peak_flops * self.train_efficiency)

    @property
    def generation_seconds(self) -> float:
        rate = self.gpus * self.gpu.peak_flops * self.generation_efficiency
        return self.flops["generate"] / rate

    @property
    def step_seconds(self) -> float:
        """Generation, then training (sync mode; async mode overlaps them)."""
        return self.generation_seconds + self.train_seconds

    @property
    def fits(self) -> bool:
        return self.memory.minimum <= MEMORY_HEADROOM * self.gpu.memory_bytes


def capacity_plan(
    work: Workload,
    gpus: int = 1,
    gpu: str | GPUKind = "h200",
    train_efficiency: float = TRAIN_EFFICIENCY,
    generation_efficiency: float = GENERATION_EFFICIENCY,
) -> CapacityPlan:
    """Memory per GPU and seconds per step of ``work`` on ``gpus`` GPUs of kind ``gpu`` (a
    name of GPUS, or a kind such as ``detect_gpu``'s)."""
    if gpus < 1:
        raise ConfigError(f"--gpus must be >= 1, got {gpus}")
    if isinstance(gpu, str) and gpu not in GPUS:
        raise ConfigError(f"unknown --gpu {gpu!r}; valid: {', '.join(GPUS)}")
    return CapacityPlan(
        gpu=GPUS[gpu] if isinstance(gpu, str) else gpu,
        gpus=gpus,
        memory=work.memory().trainer_split(gpus),
        flops=work.phase_flops(),
        train_efficiency=train_efficiency,
        generation_efficiency=generation_efficiency,
    )


def gpus_needed(work: Workload, gpu: str | GPUKind, most: int = 1024) -> int | None:
    """The fewest GPUs whose split holds ``work``; None when no split does (the unsplit
    parts alone, activations, generator and KV cache, exceed one GPU)."""
    kind = GPUS[gpu] if isinstance(gpu, str) else gpu
    memory, cap = work.memory(), MEMORY_HEADROOM * kind.memory_bytes
    return next((n for n in range(1, most + 1) if memory.trainer_split(n).minimum <= cap), None)


@dataclass(frozen=True)
class Comparison:
    """The plan of the GPU check's training step against what it measured."""

    predicted_step_s: float
    """Training step from the nominal peak and TRAIN_EFFICIENCY: 0.607 s by construction."""
    measured_step_s: float
    ledger_flops: float
    """The plan's training FLOPs of the step (3 x forward over 16 x (256 + 768) tokens)."""
    measured_flops: float
    """275.4 TFLOP/s x 0.607 s, the check's published figures multiplied back."""
    trainer_memory_gib: float
    """The estimate's trainer parts: weights, gradients, AdamW state, activations."""
    static_memory_gib: float
    """Of which the float32 weights, gradients and AdamW moments (16 bytes a parameter)."""
    minimum_memory_gib: float
    """The whole estimate at the smallest KV cache (with the generator's copy)."""
    measured_memory_gib: float


def gpu_check_workload() -> Workload:
    """The GPU check's training step: one optimizer step over 16 sequences of 256 + 768
    tokens in micro-batches of 4, one epoch, no old-log-prob pass, no reference (GRPO,
    beta 0)."""
    g = GPU_CHECK
    return Workload(
        shape=GPU_CHECK_SHAPE,
        sequences=g["train_sequences"],
        prompt=g["prompt_tokens"],
        response=g["response_tokens"],
        max_len=g["prompt_tokens"] + g["response_tokens"],
        micro_batch=g["micro_batch"],
        old_logprobs=False,
    )


def gpu_check_comparison() -> Comparison:
    g = GPU_CHECK
    plan = capacity_plan(gpu_check_workload(), gpus=1, gpu="h200")
    m = plan.memory
    return Comparison(
        predicted_step_s=plan.train_seconds,
        measured_step_s=g["train_step_s"],
        ledger_flops=plan.train_flops,
        measured_flops=g["train_achieved_flops"] * g["train_step_s"],
        trainer_memory_gib=(m.weights + m.gradients + m.optimizer + m.activations) / 2**30,
        static_memory_gib=(m.weights + m.gradients + m.optimizer) / 2**30,
        minimum_memory_gib=m.minimum / 2**30,
        measured_memory_gib=g["train_peak_gib"],
    )


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.3g} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def plan_rows(run: RunPlan, plan: CapacityPlan, work: Workload) -> list[tuple[str, str, str]]:
    """The table ``doctor --plan`` prints: (quantity, value, how it is counted)."""
    gib, m, n = 2**-30, plan.memory, plan.gpus
    cfg = run.cfg
    steps = run_steps(run, plan, work)
    evaluation = evaluation_seconds(run, plan, work)
    need = gpus_needed(work, plan.gpu)
    names = {
        "old_logprobs": "old log-probs",
        "reference": "reference",
        "train": "3x forward per epoch",
        "critic": "critic",
    }
    passes = ", ".join(names[k] for k, v in plan.flops.items() if k != "generate" and v)
    rows = [
        (
            "run",
            f"{cfg.run.algorithm} on {cfg.run.env}, {cfg.run.model} "
            f"({work.shape.params / 1e9:.2f}B parameters)",
            "shape by name, no weights read",
        ),
        (
            "GPUs",
            f"{n} x {plan.gpu.name}",
            f"{plan.gpu.peak_flops / 1e12:.1f} TFLOP/s bf16 "
            f"dense, {plan.gpu.memory_bytes * gib:.1f} GiB each ({plan.gpu.source})",
        ),
        (
            "batch",
            f"{work.sequences} sequences x ({work.prompt} + {work.response}) tokens",
            f"prompt + typical response (half of the budget, {work.max_len - work.prompt}); "
            f"micro-batch {work.micro_batch}, {work.epochs} epoch(s)",
        ),
        (
            "memory per GPU",
            f"{m.minimum * gib:.1f} GiB of {plan.gpu.memory_bytes * gib:.1f}"
            f" ({'fits' if plan.fits else 'does NOT fit'})",
            f"smallest KV cache; {m.total * gib:.1f} GiB with the whole step's; "
            f"fits at <= {MEMORY_HEADROOM:.0%}",
        ),
        (
            "  trainer state",
            f"{(m.weights + m.gradients + m.optimizer + m.kept_weights) * gib:.1f} GiB",
            f"float32 weights, gradients, AdamW moments split over {n} (FSDP2)",
        ),
        ("  activations", f"{m.activations * gib:.1f} GiB", "one micro-batch, kept for backward"),
        (
            "  generator + KV",
            f"{(m.generator + m.kv_cache_minimum) * gib:.1f} GiB",
            f"bf16 weights, one micro-batch's KV ({m.kv_cache * gib:.1f} GiB for the step's)",
        ),
        (
            "GPUs needed",
            "none holds it" if need is None else str(need),
            "the fewest whose split fits (the unsplit parts stay whole)",
        ),
        (
            "generation",
            f"{_duration(plan.generation_seconds)} per step",
            f"{plan.flops['generate'] / 1e12:.1f} TFLOP at {plan.generation_efficiency:.1%} "
            "of peak per GPU",
        ),
        (
            "training",
            f"{_duration(plan.train_seconds)} per step",
            f"{plan.train_flops / 1e12:.1f} TFLOP ({passes}) at {plan.train_efficiency:.1%} "
            "of peak per GPU",
        ),
        ("step", f"{_duration(plan.step_seconds)}", "generation then training (sync mode)"),
        (
            "evaluation",
            f"{_duration(evaluation)} per run",
            f"{evaluation_text(run)}, generated at the generation row's rate",
        ),
        (
            "run",
            f"{_duration(steps * plan.step_seconds + evaluation)} for {steps:,.0f} steps",
            f"budget: {run.budget[1]:g} {run.budget[0]}; steps and evaluations, start-up (loading "
            "the weights, starting the engine) not counted",
        ),
    ]
    return rows


def run_steps(run: RunPlan, plan: CapacityPlan, work: Workload) -> float:
    """Rollout steps the run's budget buys by the plan (DAPO's refills not counted: under
    a FLOPs budget they spend the same FLOPs in fewer steps, so the time holds)."""
    unit, amount = run.budget
    if unit == "steps":
        return amount
    if unit == "samples":
        return amount / work.sequences
    if unit == "flops":
        return amount / sum(plan.flops.values())
    return amount / plan.step_seconds  # seconds of training


def evaluations(run: RunPlan) -> tuple[int, int]:
    """(greedy, sampled) held-out evaluations of a run: one at the start and one per eval
    point under a budget (every eval_every steps, and the last, under --steps); the
    eval_samples samples per prompt at the last sampled_eval_points of them (0: all)."""
    cfg = run.cfg
    if run.budget[0] == "steps":
        steps = int(run.budget[1])
        greedy = steps // cfg.evaluation.eval_every + 1 + bool(steps % cfg.evaluation.eval_every)
    else:
        greedy = cfg.evaluation.eval_points + 1
    sampled = (
        min(cfg.evaluation.sampled_eval_points or greedy, greedy)
        if cfg.evaluation.eval_samples
        else 0
    )
    return greedy, sampled


def evaluation_text(run: RunPlan) -> str:
    greedy, sampled = evaluations(run)
    prompts = len(run.env.eval_split(run.cfg.evaluation.eval_split))
    text = f"{greedy} evaluations of {prompts} held-out prompts"
    return text + (
        f", {run.cfg.evaluation.eval_samples} samples each at {sampled} of them" if sampled else ""
    )


def evaluation_seconds(run: RunPlan, plan: CapacityPlan, work: Workload) -> float:
    """A run's held-out evaluations (not charged to its budget): each prompt's greedy
    completion, and its samples where due, of the step's typical length, on the plan's
    GPUs at the generation efficiency."""
    greedy, sampled = evaluations(run)
    prompts = len(run.env.eval_split(run.cfg.evaluation.eval_split))
    completions = prompts * (greedy + sampled * run.cfg.evaluation.eval_samples)
    flops = completions * Ledger(work.shape).generation_flops(work.prompt, work.response)
    return flops / (plan.gpus * plan.gpu.peak_flops * plan.generation_efficiency)


ASSUMED_PROMPT_TOKENS = 256
"""A prompt's length in an estimate where the env's data is not at hand (offline, never
downloaded): gsm8k's questions with their instruction, ~100-250 tokens by Qwen's
tokenizer, rounded up. ``list models`` assumes it for the Qwen3 presets too."""


class AssumedPrompts(Env):
    """Stands in, for an estimate only, for a single-turn env whose data is not here: its
    prompts are ASSUMED_PROMPT_TOKENS bytes long (a byte a token at most) and its held-out
    split has the env config's ``eval_size`` of them (none where the config has none)."""

    def __init__(self, name: str, config: object) -> None:
        self.name = name  # (the estimate's rows name the env the run would use)
        self.config = config
        self.text = "x" * ASSUMED_PROMPT_TOKENS

    def train_prompt(self, index: int, seed: int) -> Prompt:
        return Prompt(self.text, None, index, "train")

    def eval_prompts(self) -> list[Prompt]:
        size = getattr(self.config, "eval_size", 0)
        return [Prompt(self.text, None, i, "eval") for i in range(size)]

    def validation_prompts(self) -> list[Prompt]:
        return self.eval_prompts()

    def score(self, prompt: Prompt, completion: str) -> float:
        raise NotImplementedError("a stand-in for estimates: it scores nothing")


def estimate_plan(cfg: RunConfig) -> tuple[RunPlan, str]:
    """``cfg`` resolved for an estimate (no weights read), with its step estimate, and a
    note that says what was assumed ("" when nothing was). An estimate needs the env's
    prompt lengths only: where a single-turn env's data is not at hand (gsm8k offline,
    before its first download) its prompts are taken to be ASSUMED_PROMPT_TOKENS long,
    and the note says so and why, rather than refusing a plan that needs no data. The
    config, the algorithm and the env's config are checked as a run checks them first
    (``RunPlan.resolve``, which builds the env here with ``env_or_standin``)."""
    from zoo.core.config import make_config
    from zoo.envs import ENVS, get_env

    notes = []

    def env_or_standin(cfg: RunConfig) -> Env:
        env_class = ENVS.load(cfg.run.env)
        env_config = make_config(
            env_class.config_class, dict(cfg.run.env_config), owner=f"env {cfg.run.env!r}"
        )
        try:
            return get_env(cfg.run.env, **cfg.run.env_config)
        except ConfigError as exc:
            if issubclass(env_class, MultiTurnEnv):  # (turns and observations: not assumable)
                raise
            reason = str(exc).split(". ")[0].removeprefix(f"{cfg.run.env}: ")
            notes.append(
                f"prompts of {ASSUMED_PROMPT_TOKENS} tokens assumed: {cfg.run.env}'s data "
                f"is not here ({reason}); a run needs it, a plan does not"
            )
            return AssumedPrompts(cfg.run.env, env_config)

    plan = RunPlan.resolve(cfg, spec=False, env=env_or_standin).with_estimate()
    return plan, "".join(notes)


def detect_gpu() -> GPUKind | None:
    """This machine's first CUDA GPU as a kind to plan for (its name, its memory as the
    driver reports it, the data sheet's peak of the class its name names), or None when
    torch sees none. A GPU of no class in GPUS is planned at the A100's peak, said so."""
    import torch

    if not torch.cuda.is_available():
        return None
    props = torch.cuda.get_device_properties(0)
    known = next((k for key, k in GPUS.items() if key in props.name.lower()), None)
    peak = known.peak_flops if known is not None else GPUS["a100"].peak_flops
    source = (
        f"this machine's GPU; {known.source.split(';')[0]} peak"
        if known is not None
        else "this machine's GPU; peak unknown, planned at the A100's"
    )
    return GPUKind(props.name, peak, props.total_memory, source)


ASSUMPTIONS = (
    "Efficiencies measured on one H200 with transformers (training and `generate`), not "
    "TorchTitan or vLLM (leaderboards/gpu_check.md); N GPUs are assumed to scale linearly "
    "(no communication cost): an upper bound on speed. Memory is zoo/models/memory.py's "
    "rough upper estimate (1.4x the measured training peak in the GPU check)."
)


def cmd_plan(cfg: RunConfig, gpus: int, gpu: str) -> int:
    """``doctor --plan``: print the plan; exit 1 when it does not fit in memory."""
    from rich.console import Console
    from rich.table import Table

    run, note = estimate_plan(cfg)
    work = Workload.of_plan(run)
    plan = capacity_plan(work, gpus, gpu)
    table = Table(title=f"forge-zoo capacity plan: {gpus} x {plan.gpu.name}")
    for col in ("quantity", "predicted", "how"):
        table.add_column(col, overflow="fold")
    for row in plan_rows(run, plan, work):
        table.add_row(*row)
    if note:
        table.add_row("assumed", note.split(":")[0], note.split(": ", 1)[1])
    console = Console()  # (rich reads the terminal's width; a pipe gets 80 columns)
    console.print(table)
    console.print(ASSUMPTIONS)
    if not plan.fits:
        # a smaller micro-batch first: memory only, the same numbers (H100: qwen3-1.7b at 4)
        smaller = next(
            (
                m
                for m in (8, 4, 2, 1)
                if m < work.micro_batch
                and capacity_plan(dataclasses.replace(work, micro_batch=m), gpus, gpu).fits
            ),
            None,
        )
        need = gpus_needed(work, gpu)
        tries = ([f"--micro-batch-size {smaller}"] if smaller else []) + (
            [f"--gpus {need}"] if need is not None else []
        )
        more = (
            " or ".join(tries)
            if tries
            else "a smaller --micro-batch-size, fewer "
            "--prompts-per-step or a shorter --max-response-len"
        )
        print(f"doctor: the plan does not fit {gpus} x {plan.gpu.name}; try {more}")
        return 1
    return 0
