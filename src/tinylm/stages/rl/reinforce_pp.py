"""REINFORCE++ with baseline (Hu et al., 2025): group-mean baseline, then whitening over the whole batch.

    A_i = whiten_batch(r_i - mean_g r)

Subtracting the group mean removes the prompt's difficulty; normalising with the *batch's* standard
deviation (not each group's, as GRPO does) keeps the scale stable without over-weighting groups whose
rewards barely differ. The loss is token-level with the clipped surrogate and a k3 KL term.
"""

from __future__ import annotations

from tinylm.stages.rl.algorithm import Algorithm

REINFORCE_PP = Algorithm("reinforce_pp", advantage="group-mean-whitened", aggregation="token-mean", beta=0.01,
                         summary="REINFORCE++: group-mean baseline, batch-whitened advantages, k3 KL")
FAMILY = (REINFORCE_PP,)  # what algorithms.py registers, in this order
