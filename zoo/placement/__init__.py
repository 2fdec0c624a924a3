"""Where the services run (one file per concern: ``actors.py`` the Monarch actors,
``remote.py`` the proxies and replicas, ``weight_sync.py`` RDMA weight slots, ``spawn.py``
processes, hosts and core pinning, ``calls.py`` call results and failures, ``config.py``
placement files). Nothing is imported here, so reading a placement file does not start
Monarch.

Placements: ``local``: everything in this process (the fast default).
``monarch``: the generator, the trainer, the reference model (and, when the placement file
asks, the scorer) in processes of their own, as Monarch actors on this host or on the
hosts of a placement file (zoo.placement.config); the loop and the ledger stay in the
calling process.

The loop does not know which it has: a ``Remote*`` proxy has the same methods as the local
service and forwards each call to its actors, so in sync mode the same seed gives the
same numbers in both placements.

- Generators and scorers can have replicas (``Replicas``): a call's items are split
  across them, and a dead one is replaced (its slice re-run) or stops the run.
- The trainer can span several processes: they form a process group and the Trainer
  shards the model with FSDP2 (zoo.models.parallelism); every call goes to all of them.
- Weight sync: ``RDMAWeightSync`` (generators read the trainer's registered buffers) or
  the state dict in messages (``RemoteGenerator.update_weights``).
- Async mode: ``RemoteGenerator.submit`` returns at once and updates are not waited for;
  each actor handles its messages in order, which is what bounds the policy age.
"""
