"""Controls for a board: algorithms whose place on it is known before it is run.

``grpo_twin`` is GRPO under another name: the same class, the same defaults, nothing
changed. A board runs it with seeds offset from GRPO's (``harness compare --controls``),
so it is an independent sample of the same algorithm, and the board must find no
difference between the twins: a board that separates them would separate identical
algorithms, and its other separations are not to be trusted (a false-positive check).

The positive control needs no class of its own: it is the tuned GRPO at a quarter of its
selected learning rate, which learns less within the same budget, and a board that cannot
separate it from GRPO has too little power to rank anything (harness/controls.py).
"""

from __future__ import annotations

from zoo.algorithms.grpo import GRPO


class GRPOTwin(GRPO):
    name = "grpo_twin"
    paper = "the negative control: an exact copy of grpo (Shao et al., arXiv 2402.03300)"
    family = "control"
