"""Evaluation batching: does one engine call for an evaluation's greedy and sampled
completions cost less than the two calls a run makes? On the tiny arithmetic board's
evaluation (the tiny model, the 500 held-out problems, one greedy completion and 8 samples
each, at most 6 new tokens, vLLM): the two calls as ``RLLoop.evaluate`` makes them
(greedy, then seeded samples) against the same requests sent as one call, alternated
over rounds on one engine; and whether the one call gave the same tokens (per-request
seeds make samples independent of batch composition; greedy rows could still differ by
a float's rounding in a batch of another shape).

    python -m benchmarks.evaluation [--quick]
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

from benchmarks.common import model_dir, script_main
from zoo.services.sampling import SamplingConfig


def evaluation_table(root: Path, quick: bool = False) -> list[dict[str, Any]]:
    from zoo.envs import get_env
    from zoo.run.rollout import EVAL_SEED_OFFSET, sampling_seed
    from zoo.services.generation.vllm import VLLMGenerator

    path, _ = model_dir("tiny", root)
    generator = VLLMGenerator(path, seed=0)
    problems = get_env("arithmetic").eval_split("heldout")[: 50 if quick else None]
    prompts = [list(p.text.encode()) for p in problems]
    n, sampling = 8, SamplingConfig(max_tokens=6)
    seeds = [sampling_seed(EVAL_SEED_OFFSET, i, samples=n) for i in range(len(prompts))]
    greedy = generator.requests(prompts, 1, sampling, greedy=True)
    sampled = generator.requests(prompts, n, sampling, seeds)

    def engine_call(params: list[Any], requests: list[Any]) -> tuple[float, list[Any]]:
        start = time.perf_counter()
        outputs = generator.llm.generate(requests, params, use_tqdm=False)
        return time.perf_counter() - start, outputs

    def tokens(outputs: list[Any]) -> list[list[int]]:
        return [list(out.outputs[0].token_ids) for out in outputs]

    engine_call(*sampled)  # warm-up
    two_calls, one_call, same = [], [], True
    for _ in range(2 if quick else 5):
        greedy_s, greedy_out = engine_call(*greedy)
        sampled_s, sampled_out = engine_call(*sampled)
        both_s, both_out = engine_call(greedy[0] + sampled[0], greedy[1] + sampled[1])
        two_calls.append((greedy_s, sampled_s))
        one_call.append(both_s)
        same &= tokens(both_out) == tokens(greedy_out) + tokens(sampled_out)
    greedy_s = statistics.median(g for g, _ in two_calls)
    sampled_s = statistics.median(s for _, s in two_calls)
    separate = statistics.median(g + s for g, s in two_calls)
    one = statistics.median(one_call)
    return [
        {
            "setting": f"tiny arithmetic, {len(prompts)} problems x (greedy + {n} samples)",
            "greedy call s": greedy_s,
            "sampled call s": sampled_s,
            "two calls s": separate,
            "one call s": one,
            "two calls s / one call s": separate / one,
            "same tokens": "yes" if same else "no",
        }
    ]


if __name__ == "__main__":
    script_main(__doc__, evaluation_table, ".3f")
