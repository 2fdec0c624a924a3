"""The no-framework floor: one on-policy GRPO step in plain torch + transformers.

Hand-written KV-cache sampling, group-normalized advantages, one forward/backward over the
whole batch, AdamW with gradient clipping. No KL term (beta = 0), no reference model, no
micro-batching. It is what the step costs with nothing in the way, the bar that forge-zoo's
loop and TRL are compared to.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer


class BareGRPO:
    def __init__(self, model_path: str | Path, lr: float = 2e-4, seed: int = 0) -> None:
        torch.manual_seed(seed)
        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        self.eos = self.tokenizer.eos_token_id
        self.pad = self.tokenizer.pad_token_id
        # weight_decay=0 as in forge-zoo's trainer and TRL's default.
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=lr, weight_decay=0.0)
        self.rng = torch.Generator().manual_seed(seed)
        self.temperature = 1.0

    @torch.no_grad()
    def generate(self, prompts: list[list[int]], max_new_tokens: int) -> list[list[int]]:
        """Sample one response per prompt row; each ends at its EOS (kept) or at the limit."""
        n, width = len(prompts), max(len(p) for p in prompts)
        ids = torch.full((n, width), self.pad)
        mask = torch.zeros(n, width, dtype=torch.long)
        for i, p in enumerate(prompts):  # left-pad, so every row's next token is at the end
            ids[i, width - len(p) :] = torch.tensor(p)
            mask[i, width - len(p) :] = 1
        pos = (mask.cumsum(-1) - 1).clamp(min=0)  # positions count real tokens only
        # logits_to_keep=1: only the last position's logits are needed for sampling.
        out = self.model(
            input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True, logits_to_keep=1
        )
        next_pos = pos[:, -1:] + 1
        done = torch.zeros(n, dtype=torch.bool)
        steps = []
        for t in range(max_new_tokens):
            probs = torch.softmax(out.logits[:, -1].float() / self.temperature, dim=-1)
            tok = torch.multinomial(probs, 1, generator=self.rng).squeeze(1)
            tok = torch.where(done, self.pad, tok)  # finished rows keep emitting pad
            steps.append(tok)
            done |= tok == self.eos
            if done.all() or t == max_new_tokens - 1:
                break
            mask = torch.cat([mask, torch.ones(n, 1, dtype=torch.long)], dim=1)
            out = self.model(
                input_ids=tok[:, None],
                attention_mask=mask,
                position_ids=next_pos,
                past_key_values=out.past_key_values,
                use_cache=True,
            )
            next_pos = next_pos + 1
        responses = []
        for row in torch.stack(steps, dim=1).tolist():
            cut = row.index(self.eos) + 1 if self.eos in row else len(row)
            responses.append(row[:cut])
        return responses

    def loss(
        self, prompts: list[list[int]], responses: list[list[int]], advantages: torch.Tensor
    ) -> torch.Tensor:
        """GRPO at ratio 1 with beta 0: -A * logp, mean over each response's tokens (EOS
        included), then over sequences. exp(logp - logp.detach()) is 1 in value but gives
        the gradient of PPO-clip's surrogate at ratio 1."""
        seqs = [p + r for p, r in zip(prompts, responses, strict=True)]
        width = max(len(s) for s in seqs)
        ids = torch.full((len(seqs), width), self.pad)
        attn = torch.zeros_like(ids)
        resp = torch.zeros(len(seqs), width - 1)  # marks targets (shifted by one) to score
        for i, (p, s) in enumerate(zip(prompts, seqs, strict=True)):  # right-pad
            ids[i, : len(s)] = torch.tensor(s)
            attn[i, : len(s)] = 1
            resp[i, len(p) - 1 : len(s) - 1] = 1
        logits = self.model(input_ids=ids, attention_mask=attn).logits[:, :-1].float()
        logp = torch.log_softmax(logits, dim=-1).gather(-1, ids[:, 1:, None]).squeeze(-1)
        per_token = -torch.exp(logp - logp.detach()) * advantages[:, None]
        per_seq = (per_token * resp).sum(-1) / resp.sum(-1)
        return per_seq.mean()

    def step(
        self,
        prompts: list[list[int]],
        rewards_fn: Callable[[list[str]], list[float]],
        group_size: int,
        max_new_tokens: int,
    ) -> dict:
        """One GRPO step on ``prompts`` (token ids). ``rewards_fn`` gets the completion texts
        in prompt-major order: prompt 0's ``group_size`` samples, then prompt 1's, ..."""
        t0 = time.perf_counter()
        self.model.eval()
        rows = [p for p in prompts for _ in range(group_size)]
        responses = self.generate(rows, max_new_tokens)
        texts = [self.tokenizer.decode([t for t in r if t != self.eos]) for r in responses]
        t1 = time.perf_counter()
        rewards = torch.tensor(rewards_fn(texts), dtype=torch.float32).view(-1, group_size)
        adv = (rewards - rewards.mean(1, keepdim=True)) / (rewards.std(1, keepdim=True) + 1e-6)
        t2 = time.perf_counter()
        self.model.train()
        loss = self.loss(rows, responses, adv.flatten())
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.opt.step()
        t3 = time.perf_counter()
        return {
            "generate_seconds": t1 - t0,
            "train_seconds": t3 - t2,
            "step_seconds": t3 - t0,
            "reward_mean": rewards.mean().item(),
            "loss": loss.item(),
        }
