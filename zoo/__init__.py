"""forge-zoo: a PyTorch-native algorithm zoo and benchmark harness for RL on language models.

Where things live:
    zoo.core        the shared infra: types, models, generator (vLLM), trainer (TorchTitan),
                    reference, compute ledger, and the RL loop (zoo/core/loop.py)
    zoo.algorithms  one file per algorithm plugin, plus the base class and registry
    zoo.envs        one file per environment, plus the base class and registry
"""

__version__ = "0.1.0"
