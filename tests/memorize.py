"""A small model that plays given episodes: the tiny model's weights fine-tuned until greedy
decoding reproduces chosen assistant tokens after given contexts. Tests use it to drive
real generators (vLLM, transformers) through exact turns, e.g. a Qwen3 tool call or a
stray byte, which the shipped tiny models never write."""

from __future__ import annotations

from contextlib import contextmanager

import torch


@contextmanager
def one_thread():
    """Torch on one thread: on a shared 2-core machine two threads are many times slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def memorize(
    model: torch.nn.Module,
    sequences: list[tuple[list[int], list[int]]],
    max_steps: int = 800,
    lr: float = 1e-2,
    margin: float = 4.0,
) -> torch.nn.Module:
    """Train ``model`` (in place, seeded) on ``sequences`` of (token ids, loss mask) until at
    every masked position the target's logit leads every other by ``margin`` (so greedy
    decoding in another backend gives the same tokens); returns it in eval mode. Raises if
    ``max_steps`` are not enough."""
    torch.manual_seed(0)
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    rows = [(torch.tensor([ids]), torch.tensor(m[1:], dtype=torch.bool)) for ids, m in sequences]
    with one_thread():
        for _ in range(max_steps):
            optimizer.zero_grad()
            learned = True
            for ids, where in rows:
                logits = model(input_ids=ids).logits[0, :-1].float()[where]
                targets = ids[0, 1:][where, None]
                torch.nn.functional.cross_entropy(logits, targets[:, 0]).backward()
                lead = logits.gather(-1, targets) - logits.scatter(-1, targets, float("-inf"))
                learned &= bool((lead.detach().min(-1).values >= margin).all())
            if learned:
                return model.eval()
            optimizer.step()
    raise AssertionError(f"memorize: not learned in {max_steps} steps")
