"""Parity with TRL 1.16's GRPOTrainer: is forge-zoo's grpo / dr_grpo / dapo the GRPO a
researcher knows? (issue 59; docs/parity.md.)

- ``settings``: every forge-zoo setting of the running_sum / tiny-sum run beside its TRL
  ``GRPOConfig`` field, and the settings that cannot be matched;
- level a (``levels.loss_parity``, ``levels.logprob_parity``): the same log-probs and
  advantages into TRL's ``compute_loss`` and forge-zoo's ``loss``: loss and gradient
  differences; each side's log-probs from its own model code;
- level b (``levels.update_parity``): one rollout batch's update (4 AdamW steps) on each
  side from the same weights, TRL's row order reproduced: relative L2 distance;
- level c (``learning``): each algorithm trained by forge-zoo and by TRL's
  ``GRPOTrainer`` over seeds at the board's budget, both sides' checkpoints scored by
  forge-zoo's held-out evaluation, the headlines compared by harness.verdicts;
- ``step1``: the step-1 training reward of each side's sampler from the start weights on
  the same prompts, and the factors (prompt ids, stop and decode, reward call, RNG scheme)
  swapped one at a time (``python -m benchmarks.parity.step1``).

    python -m benchmarks.parity --levels a,b
    python -m benchmarks.parity --levels c [--fz-from results/running-sum-paper]
"""
