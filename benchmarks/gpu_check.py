"""GPU check: trainer throughput and model FLOP utilisation, generation tokens/s, weight
export seconds, peak memory, and the trainer-sampler log-prob gap (bf16 on GPUs), for a
Qwen3 shape with random weights.

    python benchmarks/gpu_check.py --model qwen3-1.7b --device cuda --out DIR

Meant for a GPU machine that has torch and transformers but neither vLLM nor Monarch:
training uses TorchTitan's Qwen3 (our Trainer) when TorchTitan imports there, else
transformers' Qwen3ForCausalLM (the report says which); generation uses the transformers
backend (zoo/services/generation/hf.py). Every figure names its unit and denominator.
MFU = model FLOPs of the step (zoo/services/ledger.py) / step seconds / the chip's peak.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from zoo.algorithms import get_algorithm
from zoo.models.presets import ModelShape, qwen3_config_dir
from zoo.services.batch import RolloutBatch
from zoo.services.generation.hf import HFGenerator
from zoo.services.ledger import Ledger
from zoo.services.offpolicy import mismatch_metrics
from zoo.services.sampling import SamplingConfig
from zoo.services.trainer import Trainer, TrainerConfig

# Dense bf16 peak of the chips we expect (vendor data sheets, without sparsity).
BF16_PEAK = {"H200": 989.4e12, "H100": 989.4e12, "A100": 312e12}


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def timed(fn, device, repeats: int, warmup: int) -> list[float]:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        sync(device)
        start = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - start)
    return times


def matmul_peak(device: torch.device) -> float:
    """Achieved FLOP/s of a large matmul (bf16 on GPU, float32 on CPU): the measured peak."""
    n, dtype = (8192, torch.bfloat16) if device.type == "cuda" else (1024, torch.float32)
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    seconds = timed(lambda: a @ b, device, repeats=10, warmup=3)
    return 2 * n**3 / (sum(seconds) / len(seconds))


def random_batch(size: int, prompt: int, response: int, vocab: int) -> RolloutBatch:
    gen = torch.Generator().manual_seed(0)
    return RolloutBatch(
        tokens=torch.randint(0, vocab, (size, prompt + response), generator=gen),
        response_start=torch.full((size,), prompt),
        mask=torch.ones(size, response),
        advantages=torch.randn(size, generator=gen),
    )


def titan_available() -> str | None:
    try:
        import torchtitan.models.qwen3  # noqa: F401
    except Exception as exc:  # any import failure means: fall back, and say why
        return f"{type(exc).__name__}: {exc}"
    return None


def train_with_transformers(model_dir, args, device, batch, algo):
    """Fallback trainer: transformers' Qwen3ForCausalLM, same batch and loss."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from zoo.core.types import TrainBatch

    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(model_dir))
    model.to(device).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-6)
    width = batch.mask.shape[1]

    def step():
        opt.zero_grad(set_to_none=True)
        for start in range(0, batch.size, args.micro_batch):
            mb = batch.rows(slice(start, start + args.micro_batch)).to(device)
            with torch.autocast(device.type, dtype=torch.bfloat16):
                logits = model(input_ids=mb.tokens).logits[:, -width - 1 : -1].float()
            lp = logits.log_softmax(-1).gather(-1, mb.tokens[:, -width:, None]).squeeze(-1)
            tb = TrainBatch(
                lp,
                lp.detach(),
                None,
                mb.advantages,
                mb.mask,
                num_sequences=batch.size,
                num_tokens=int(batch.mask.sum()),
            )
            algo.loss(tb).loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    return step, model


def sampled_batch(groups) -> RolloutBatch:
    """Equal-length prompts and their sampled responses, right-padded (0 on padding)."""
    flat = [c for g in groups for c in g]
    width = max(len(c.token_ids) for c in flat)
    prompt = len(flat[0].prompt_ids)
    tokens = torch.zeros(len(flat), prompt + width, dtype=torch.long)
    mask, sampler = torch.zeros(len(flat), width), torch.zeros(len(flat), width)
    for i, c in enumerate(flat):
        tokens[i, : prompt + len(c.token_ids)] = torch.tensor(c.prompt_ids + c.token_ids)
        mask[i, : len(c.token_ids)] = 1.0
        sampler[i, : len(c.logprobs)] = torch.tensor(c.logprobs)
    return RolloutBatch(
        tokens,
        torch.full((len(flat),), prompt),
        mask,
        torch.zeros(len(flat)),
        sampler_logprobs=sampler,
    )


@torch.no_grad()
def hf_logprobs(model, batch: RolloutBatch, device: torch.device) -> torch.Tensor:
    """The transformers trainer's log-probs of the batch's responses (bf16 autocast on
    GPUs, like its training step)."""
    width, start = batch.mask.shape[1], int(batch.response_start[0])
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
        logits = model(input_ids=batch.tokens.to(device)).logits[:, start - 1 : start - 1 + width]
    targets = batch.tokens[:, start : start + width].to(device)
    return logits.float().log_softmax(-1).gather(-1, targets[..., None]).squeeze(-1).cpu()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--model",
        default="qwen3-1.7b",
        help="a Qwen3 shape name, or a "
        "local Hugging Face checkpoint directory (weights are re-initialised)",
    )
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--batch", type=int, default=16, help="sequences per optimizer step")
    parser.add_argument("--micro-batch", type=int, default=4)
    parser.add_argument("--prompt-len", type=int, default=256)
    parser.add_argument("--response-len", type=int, default=768)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--gen-prompts", type=int, default=64)
    parser.add_argument("--gen-samples", type=int, default=4)
    parser.add_argument("--gen-tokens", type=int, default=128)
    parser.add_argument(
        "--trainer",
        choices=["auto", "titan", "hf"],
        default="auto",
        help="auto: TorchTitan if it imports here, else transformers",
    )
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "gpu_check")))
    args = parser.parse_args()

    device = torch.device(args.device)
    args.out.mkdir(parents=True, exist_ok=True)
    model_dir = Path(args.model)
    if not (model_dir / "config.json").exists():
        model_dir = qwen3_config_dir(args.model, args.out / "configs")
    shape = ModelShape.from_hf_dir(model_dir)
    ledger = Ledger(shape)
    chip = torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu"
    report: dict = {
        "model": args.model,
        "device": chip,
        "torch": torch.__version__,
        "params_matmul": shape.body_params + shape.head_params,
        "args": {k: str(v) for k, v in vars(args).items()},
    }
    print(json.dumps(report, indent=2), flush=True)

    report["matmul_peak_flops"] = matmul_peak(device)
    nominal = next((v for k, v in BF16_PEAK.items() if k in chip), None)
    report["nominal_bf16_peak_flops"] = nominal
    print(f"measured matmul peak: {report['matmul_peak_flops'] / 1e12:.1f} TFLOP/s", flush=True)

    # ---- training step ----
    algo = get_algorithm("grpo", beta=0.0)
    batch = random_batch(args.batch, args.prompt_len, args.response_len, shape.vocab_size)
    why_not_titan = titan_available() if args.trainer != "hf" else "not requested (--trainer hf)"
    if why_not_titan and args.trainer == "titan":
        raise SystemExit(f"--trainer titan, but TorchTitan does not import: {why_not_titan}")
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    if why_not_titan is None:
        report["trainer_model"] = "torchtitan Qwen3 (zoo.services.trainer.Trainer)"
        trainer = Trainer(
            model_dir,
            TrainerConfig.of(
                lr=1e-6,
                micro_batch_size=args.micro_batch,
                mixed_precision="bf16" if device.type == "cuda" else "none",
            ),
            max_response_len=args.response_len,
            init="random",
            device=str(device),
        )

        def step():
            trainer.step(batch, algo.loss)
    else:
        report["trainer_model"] = f"transformers Qwen3ForCausalLM (TorchTitan: {why_not_titan})"
        step, hf_model = train_with_transformers(model_dir, args, device, batch, algo)
        trainer = None
    seconds = timed(step, device, repeats=args.steps, warmup=1)
    step_s = sorted(seconds)[len(seconds) // 2]
    flops = 3 * ledger.scoring_flops(args.prompt_len, args.response_len) * args.batch
    tokens = args.batch * (args.prompt_len + args.response_len)
    report.update(
        {
            "train_step_seconds_median": step_s,
            "train_tokens_per_s": tokens / step_s,
            "train_flops_per_step": flops,
            "train_achieved_flops": flops / step_s,
            "mfu_vs_nominal": flops / step_s / nominal if nominal else None,
            "mfu_vs_measured_matmul": flops / step_s / report["matmul_peak_flops"],
        }
    )
    if device.type == "cuda":
        report["train_peak_memory_gib"] = torch.cuda.max_memory_allocated() / 2**30
    print(
        json.dumps({k: v for k, v in report.items() if k.startswith("train")}, indent=2), flush=True
    )

    # ---- weight export (trainer -> Hugging Face naming, bf16, what a sync ships) ----
    exported = None

    def export():
        nonlocal exported
        if trainer is not None:  # TorchTitan names -> Hugging Face names
            state = trainer.hf_state_dict()
        else:  # the transformers model is in Hugging Face naming already
            state = {k: v.detach() for k, v in hf_model.state_dict().items()}
        exported = {k: v.to(torch.bfloat16) for k, v in state.items()}

    export_s = timed(export, device, repeats=3, warmup=1)
    report["weight_export_seconds_median"] = sorted(export_s)[1]
    report["weight_export_gib"] = sum(v.numel() * 2 for v in exported.values()) / 2**30
    del step  # (the trainer stays: it scores the generator's samples below)
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()

    # ---- generation through the transformers backend ----
    gen = HFGenerator(
        model_dir,
        seed=0,
        device=str(device),
        init="random",
        dtype=torch.bfloat16 if device.type == "cuda" else torch.float32,
    )
    if exported is not None:
        start = time.perf_counter()
        gen.update_weights(exported, version=1)
        sync(device)
        report["weight_load_into_generator_seconds"] = time.perf_counter() - start
    prompts = torch.randint(
        0,
        shape.vocab_size,
        (args.gen_prompts, args.prompt_len),
        generator=torch.Generator().manual_seed(1),
    ).tolist()
    sampling = SamplingConfig(max_tokens=args.gen_tokens)
    produced = []

    def generate():
        groups = gen.generate(
            prompts, n=args.gen_samples, sampling=sampling, seeds=list(range(len(prompts)))
        )
        produced.append(sum(len(c.token_ids) for g in groups for c in g))

    gen_s = timed(generate, device, repeats=2, warmup=1)
    report.update(
        {
            "generate_seconds_median": sorted(gen_s)[len(gen_s) // 2],
            "generate_new_tokens": produced[-1],
            "generate_tokens_per_s": produced[-1] / min(gen_s),
        }
    )
    if device.type == "cuda":
        report["generate_peak_memory_gib"] = torch.cuda.max_memory_allocated() / 2**30

    # ---- trainer-sampler log-prob gap: the generator (bf16 weights, KV-cache decoding)
    # against the trainer's forward (float32 masters under bf16 autocast) on the same
    # sampled tokens, with the same weights ----
    groups = gen.generate(prompts[:8], n=2, sampling=sampling, seeds=[2] * len(prompts[:8]))
    batch = sampled_batch(groups)
    if trainer is not None:
        trained = trainer.logprobs(batch)
    else:
        trained = hf_logprobs(hf_model, batch, device)
    gap = mismatch_metrics(trained, batch.sampler_logprobs, batch.mask)
    report.update({f"trainer_sampler_{k}": v for k, v in gap.items()})
    report["trainer_sampler_tokens"] = int(batch.mask.sum())

    (args.out / "gpu_check.json").write_text(json.dumps(report, indent=2))
    (args.out / "gpu_check.md").write_text(markdown(report))
    print(markdown(report), flush=True)
    return 0


def markdown(r: dict) -> str:
    def tf(x):
        return "n/a" if x is None else f"{x / 1e12:.1f} TFLOP/s"

    def pct(x):
        return "n/a" if x is None else f"{100 * x:.1f}%"

    lines = [
        f"## GPU check: {r['model']} (random init) on {r['device']}",
        "",
        f"torch {r['torch']}; trainer model: {r['trainer_model']}; "
        f"{r['params_matmul'] / 1e9:.2f}B matmul parameters.",
        "",
        "| metric | value | unit / denominator |",
        "|---|---|---|",
        f"| matmul peak (measured, 8192^3 bf16) | {tf(r['matmul_peak_flops'])} | FLOP/s |",
        f"| train step | {r['train_step_seconds_median']:.3f} | s per optimizer step (median) |",
        f"| train throughput | {r['train_tokens_per_s']:,.0f} | tokens/s (prompt+response) |",
        f"| train achieved | {tf(r['train_achieved_flops'])} | ledger model FLOPs / step s |",
        f"| MFU vs nominal bf16 peak | {pct(r['mfu_vs_nominal'])} | of "
        f"{tf(r['nominal_bf16_peak_flops'])} |",
        f"| MFU vs measured matmul | {pct(r['mfu_vs_measured_matmul'])} | of the matmul row |",
        f"| train peak memory | {r.get('train_peak_memory_gib', float('nan')):.1f} | GiB |",
        f"| weight export | {r.get('weight_export_seconds_median', float('nan')):.3f} | s "
        f"(trainer -> HF names, bf16, {r.get('weight_export_gib', float('nan')):.2f} GiB) |",
        f"| weight load into generator | "
        f"{r.get('weight_load_into_generator_seconds', float('nan')):.3f} | s |",
        f"| generation | {r['generate_tokens_per_s']:,.0f} | new tokens/s (transformers "
        f"backend, {r['generate_new_tokens']} tokens per call) |",
        f"| generation peak memory | {r.get('generate_peak_memory_gib', float('nan')):.1f} | GiB |",
        f"| trainer-sampler gap, mean | {r['trainer_sampler_mismatch_logprob_mean']:.2e} | nats "
        f"per token, |trainer - generator| log-prob, {r['trainer_sampler_tokens']} tokens |",
        f"| trainer-sampler gap, max | {r['trainer_sampler_mismatch_logprob_max']:.2e} | nats |",
        f"| trainer-sampler KL | {r['trainer_sampler_mismatch_kl']:.2e} | k3 estimate of "
        "KL(generator || trainer), per token |",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
