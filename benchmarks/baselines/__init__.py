"""Reference points for forge-zoo's RL step benchmarks.

``bare_grpo``: one GRPO step in plain torch + transformers (the no-framework floor).
``trl_grpo``: the same step through TRL's ``GRPOTrainer`` (the widely used framework).

Both take the tiny model's directory and the same step settings as forge-zoo's own loop
(prompts per step, group size, max new tokens, lr, one optimizer step per batch), so the
numbers are comparable. They are imported lazily by their users: ``trl_grpo`` needs the
``bench`` extra (trl).
"""
