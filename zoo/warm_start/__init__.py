"""The supervised warm start of the tiny presets: how their shipped start weights were
made, and how ``python -m harness warm-start PRESET`` remakes them. Runs never import
this package: they start from the shipped weights (zoo.models.tiny).

Each preset's recipe (``zoo.models.tiny.TINY_PRESETS``) names a task, an env of the
registry. A short supervised stage on that env's format (``supervised``) stops at the first
evaluation whose greedy result on a validation split of its own reaches the recipe's
``target_accuracy`` (``greedy``; multi-turn episodes through the run layer's episode
runner), so RL starts with room to improve and signal to learn from. The validation
problems come from the env's train stream with a seed of their own (``VALIDATION_SEED``)
and are never trained on; the held-out split, on which runs are evaluated and compared,
plays no part (choosing start weights on it would select on the test set).

- ``tiny`` (arithmetic): "37+45=82<|endoftext|>", the reference answers.
- ``tiny-code`` (pyfunc): "f(0..4)=1,3,5,7,9 f(x)=2*x+1", the reference answers, scored by
  running the model's expressions in the sandbox; its data and validation functions come
  from pyfunc's warm-start split (``data="warm_start"``), 400 functions RL never trains or
  is evaluated on.
- ``tiny-tool`` (tool_arithmetic): a share ``tool_fraction`` of the train problems shown
  as calculator episodes (the env's ``warm_start_trace``: prompt, call, EOS, observation,
  answer, EOS; loss on the assistant's tokens and EOS only), the rest as direct answers.
  It stops at the first evaluation whose greedy episodes reach ``target_accuracy`` with
  the tool called in at most ``max_tool_rate`` of them; the recipe file records both
  (``validation_reward``, ``validation_tool_rate``).
- ``tiny-code-feedback`` (pyfunc_feedback): half the train functions shown as a revision (a
  near miss taken from another function of the batch, as context, not learned; the env's
  feedback; the right answer), the rest as direct answers; stops like ``tiny-code``.
- ``tiny-sum`` (running_sum): chains of partial sums, a share ``merge_fraction`` of their
  steps shown merged with the next, so RL can move the answer's length either way.
"""

from zoo.warm_start.build import build_tiny_model, rebuild_start_weights, warm_start_task

__all__ = ["build_tiny_model", "rebuild_start_weights", "warm_start_task"]
