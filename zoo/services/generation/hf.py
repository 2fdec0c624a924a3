"""Generation with transformers' ``generate`` (KV cache, batched): the backend for small
models on CPU, where it is faster than vLLM (``--generator by_size``, the default), and
for places without vLLM (macOS, some clusters, the GPU check machine). Same fields as the
vLLM backend: token ids, the sampler's logprob of each token, finish reason, policy
version, and the same text for the same tokens; the same sampling distribution
(tests/test_hf_generator.py).

Differences, stated plainly: prompts are left-padded into one batch; sampling draws from
a torch generator seeded once per call (from the first prompt's seed), so samples depend
on batch composition, unlike vLLM's per-request seeds; there is no prefix cache, so a
multi-turn episode's later turns are charged their whole context.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from zoo.core.types import Completion
from zoo.services.sampling import SamplingConfig, counts_busy


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
        if init == "random":
            self.model = AutoModelForCausalLM.from_config(config, dtype=dtype)
        else:
            self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=dtype)
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
        # generate samples from torch's global generator: seed it for this call, and
        # give the caller (the trainer, in the same process) its own stream back after.
        with torch.random.fork_rng(devices=[self.device] if self.device.type == "cuda" else []):
            torch.manual_seed(seeds[0] if seeds else self.seed)
            return self._generate(prompts, n, sampling, greedy)

    def _generate(
        self, prompts: list[list[int]], n: int, sampling: SamplingConfig, greedy: bool
    ) -> list[list[Completion]]:
        width = max(map(len, prompts))
        rows = [p for p in prompts for _ in range(n)]
        ids = torch.tensor([[self.pad_id] * (width - len(p)) + list(p) for p in rows])
        attention = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in rows])
        out = self.model.generate(
            input_ids=ids.to(self.device),
            attention_mask=attention.to(self.device),
            do_sample=not greedy,
            temperature=None if greedy else sampling.temperature,
            top_p=None if greedy else sampling.top_p,
            top_k=None,
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


def completion_text(tokenizer: Any, prompt: list[int], ids: list[int]) -> str:
    """The text of the completion ``ids`` (the stop token left out) as vLLM writes it:
    decoded token by token after the prompt, bytes that do not yet make a character held
    back, and those still held at the end left out (a plain ``decode`` writes U+FFFD for
    them: "5" and a stray byte is "5" here, "5\ufffd" there). A slow tokenizer (no
    ``tokenizers`` backend) decodes plainly."""
    backend = getattr(tokenizer, "_tokenizer", None)
    if backend is None:
        return tokenizer.decode(ids, skip_special_tokens=True)
    from tokenizers.decoders import DecodeStream

    stream = DecodeStream(ids=list(prompt), skip_special_tokens=True)
    return "".join(stream.step(backend, token) or "" for token in ids)
