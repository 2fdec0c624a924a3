"""Generation with transformers' ``generate`` (KV cache, batched): the backend for small
models on CPU, where it is faster than vLLM (``--generator by_size``, the default), and
for places without vLLM (macOS, some clusters, the GPU check machine). Same fields as the
vLLM backend: token ids, the sampler's logprob of each token, finish reason, policy
version, and the same text for the same tokens; the same sampling distribution
(tests/test_hf_generator.py).

Each sample has its own seeded generator (SeededSampling), as each vLLM request does, so
a sample does not depend on the batch it is drawn in (its log-probs, on some CPUs, to
float32 rounding: tests/test_hf_generator.py); the samples themselves differ from
vLLM's (another way of drawing). Differences, stated plainly: prompts are left-padded into
one batch, and there is no prefix cache, so a multi-turn episode's later turns are
computed, and charged, in full.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from zoo.core.types import Completion
from zoo.services.sampling import SamplingConfig, completion_text, counts_busy


class HFGenerator:
    replicas = 1

    def __init__(
        self,
        model_path: Path,
        *,
        seed: int,
        device: str = "cpu",
        dtype: torch.dtype = torch.float32,
        init: str = "pretrained",
    ) -> None:
        from transformers import AutoConfig, AutoModelForCausalLM
        from transformers.utils import logging as hf_logging

        if os.environ.get("TQDM_DISABLE"):  # `harness run` without --verbose: no load bar
            hf_logging.disable_progress_bar()  # (transformers' tqdm reads it at import)
        config = AutoConfig.from_pretrained(model_path)
        # On CPU, torch's fused attention rounds differently with 1 and 2 threads (2.6e-6
        # in a tiny model's log-probs), so a run of `compare --jobs 2` (one thread per
        # worker) would not reproduce in a process with two; eager attention does not
        # depend on the thread count on the AMD EPYC class, and is as fast at the sizes this
        # backend runs on CPU. (On an Intel Xeon the matmuls still move log-probs by ~1e-6
        # with the thread count and batch rows; `reproduce` runs with the recorded threads.)
        attention = "eager" if torch.device(device).type == "cpu" else None
        if init == "random":
            self.model = AutoModelForCausalLM.from_config(
                config, dtype=dtype, attn_implementation=attention
            )
        else:
            self.model = AutoModelForCausalLM.from_pretrained(
                model_path, dtype=dtype, attn_implementation=attention
            )
        self.model.to(device).eval().requires_grad_(False)
        self.device = torch.device(device)
        self.seed = seed
        self.eos_id = config.eos_token_id
        self.pad_id = config.pad_token_id if config.pad_token_id is not None else 0
        self.tokenizer = None
        if (Path(model_path) / "tokenizer.json").exists():
            from transformers import AutoTokenizer

            self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        self.policy_version = 0
        self.busy_seconds = 0.0
        self.unseeded_calls = 0

    @counts_busy
    @torch.no_grad()
    def generate(
        self,
        prompts: list[list[int]],
        n: int,
        sampling: SamplingConfig,
        seeds: list[int] | None = None,
        greedy: bool = False,
    ) -> list[list[Completion]]:
        width = max(map(len, prompts))
        rows = [p for p in prompts for _ in range(n)]
        ids = torch.tensor([[self.pad_id] * (width - len(p)) + list(p) for p in rows])
        attention = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in rows])
        sampler = []
        if not greedy:
            if seeds is None:  # a fresh stream per call, reproducible per generator
                self.unseeded_calls += 1
                seeds = [
                    self.seed + self.unseeded_calls * 1_000_003 + i for i in range(len(prompts))
                ]
            if sampling.top_p < 1.0:
                raise ValueError("the transformers backend samples with top_p 1 only")
            if len(seeds) != len(prompts):
                raise ValueError(f"one seed per prompt: {len(seeds)} for {len(prompts)}")
            row_seeds = [seed + j for seed in seeds for j in range(n)]  # as vLLM seeds n samples
            sampler = [SeededSampling(row_seeds, sampling.temperature, self.device)]
        out = self.model.generate(
            input_ids=ids.to(self.device),
            attention_mask=attention.to(self.device),
            do_sample=False,  # the argmax of SeededSampling's noisy logits, when sampling
            logits_processor=sampler,
            max_new_tokens=sampling.max_tokens,
            min_new_tokens=sampling.max_tokens if sampling.ignore_eos else None,
            eos_token_id=self.eos_id,
            pad_token_id=self.pad_id,
            output_logits=True,
            return_dict_in_generate=True,
        )
        new = out.sequences[:, width:]
        # Log-probabilities of the distribution sampled from, softmax(logits / T) (top-p is
        # 1 in runs), as the vLLM backend reports them; one step at a time, so float32
        # log-softmax never holds [rows, steps, vocab] at once.
        temperature = 1.0 if greedy else sampling.temperature
        picked = torch.stack(
            [
                (step.float() / temperature).log_softmax(-1).gather(-1, tok[:, None]).squeeze(-1)
                for step, tok in zip(out.logits, new.T, strict=True)
            ],
            dim=1,
        ).cpu()
        result: list[list[Completion]] = [[] for _ in prompts]
        for row, (tokens, lps) in enumerate(zip(new.cpu().tolist(), picked.tolist(), strict=True)):
            finished = self.eos_id in tokens and not sampling.ignore_eos
            stop = tokens.index(self.eos_id) + 1 if finished else len(tokens)
            token_ids = tokens[:stop]
            text_ids = token_ids[:-1] if finished else token_ids
            text = completion_text(self.tokenizer, rows[row], text_ids) if self.tokenizer else ""
            result[row // n].append(
                Completion(
                    prompt_ids=list(rows[row]),
                    token_ids=token_ids,
                    logprobs=lps[:stop],
                    text=text,
                    finish_reason="stop" if finished else "length",
                    policy_version=self.policy_version,
                )
            )
        return result

    def update_weights(self, hf_state_dict: dict[str, torch.Tensor], version: int) -> None:
        """Load new weights (Hugging Face naming). Tied weights may be absent."""
        missing, unexpected = self.model.load_state_dict(hf_state_dict, strict=False)
        tied = {"lm_head.weight"} if self.model.config.tie_word_embeddings else set()
        if unexpected or set(missing) - tied:
            raise KeyError(f"weight update mismatch: missing {missing}, unexpected {unexpected}")
        self.policy_version = version


class SeededSampling:
    """Sampling from softmax(logits / T) by the Gumbel-max trick, each row with its own
    seeded generator: the token is argmax(logits / T - log E), E ~ Exp(1) per token, drawn
    from the row's generator one vocabulary-wide draw per step. A sample depends on its
    seed and the model only, not on the other rows of the batch nor on torch's thread
    count (the global generator's ``multinomial`` depends on both), as vLLM's seeded
    requests do. A logits processor of transformers' ``generate`` run greedily.

    On a GPU (where this backend stands in for vLLM only, and a draw per row would be a
    kernel launch per row and token) the whole batch draws from the first row's generator:
    the same distribution, but samples that depend on the batch."""

    def __init__(self, seeds: list[int], temperature: float, device: torch.device) -> None:
        self.per_row = device.type == "cpu"
        self.generators = [torch.Generator(device).manual_seed(s) for s in seeds]
        self.temperature = temperature

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        noise = torch.empty(scores.shape, dtype=torch.float32, device=scores.device)
        if self.per_row:
            for row, generator in zip(noise, self.generators, strict=True):
                row.exponential_(generator=generator)
        else:
            noise.exponential_(generator=self.generators[0])
        return scores.float() / self.temperature - noise.log()
