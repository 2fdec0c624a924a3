"""The RL run: its settings, the services wired for it, the loop that drives them, and
what a run leaves on disk.

run_config.py   ``RunConfig``: every setting of a run, validated, with its defaults
plan.py         ``RunPlan``: a config resolved once (algorithm, env, device, budgets, model)
services.py     ``Services``: what the loop calls, whichever placement built it
wiring.py       ``build_services``: the run's services, placed locally or on Monarch
rollout.py      ``Rollouts``: what a step samples; single-turn completions, prompt seeds,
                packing completions into a training batch
episodes.py     ``EpisodeRollouts``: a multi-turn env's episodes, turn by turn
loop.py         ``RLLoop``: one step (collect, train, sync, account), and the run
rounds.py       a step's sampling rounds: dynamic sampling, greedy baseline, turn credit
update.py       the optimizer update of a packed batch
kl_control.py   fixed and adaptive KL controllers
evaluation.py   evaluations: when due, in place or overlapped with training
algorithm_state.py  an algorithm's own state in a checkpoint
checkpoint.py   resumable checkpoints (written by the loop's process)
runlog.py       provenance, metrics.jsonl, samples.jsonl
trackers.py     ``--report-to``: TensorBoard, W&B, MLflow
"""
