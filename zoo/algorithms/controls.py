"""``grpo_twin``: GRPO under another name, the negative control of the boards made before
2026-12-06.

The same class, the same defaults, nothing changed. Those boards ran it at GRPO's seeds +
1000 as an independent sample of the same algorithm, which the board had to find no
different from GRPO. It stays registered so that they reproduce. A board made now runs its
A/A control as the baseline row itself at the same seeds with another ``noise_seed``
(row ``<baseline>@twin``, harness/controls.py), paired like every other row, and its
positive controls at fractions of the baseline's learning rate.
"""

from __future__ import annotations

import dataclasses

from zoo.algorithms.grpo import GRPO


class GRPOTwin(GRPO):
    name = "grpo_twin"
    card = dataclasses.replace(  # GRPO's card (its mechanism), under another paper line
        GRPO.card,
        paper="the negative control: an exact copy of grpo (Shao et al., arXiv 2402.03300)",
        family="control",
    )
