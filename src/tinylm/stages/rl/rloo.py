"""RLOO: REINFORCE with a leave-one-out baseline (Kool et al., 2019; Ahmadian et al., 2024).

Each response's baseline is the mean reward of the *other* G - 1 responses to the same prompt, so the
baseline never depends on the response it judges and the estimate stays unbiased:

    A_i = r_i - (1 / (G - 1)) sum_{j != i} r_j

With one epoch the clipped surrogate is exactly REINFORCE; more epochs reuse the batch with PPO clipping.
"""

from __future__ import annotations

from tinylm.stages.rl.algorithm import Algorithm

RLOO = Algorithm("rloo", advantage="rloo", aggregation="seq-mean-token-mean",
                 summary="REINFORCE with a leave-one-out baseline")
FAMILY = (RLOO,)  # what algorithms.py registers, in this order
