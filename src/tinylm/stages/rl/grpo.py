"""The GRPO family: group-relative advantages, no value model (Shao et al., 2024, and its descendants).

    grpo     A_i = (r_i - mean_g r) / std_g r; clipped surrogate; + beta * k3 KL to the reference;
             each response's token-mean loss, averaged over responses
    dr_grpo  (Liu et al., 2025) no std division and a constant length normaliser: the two biases of GRPO
             (easy/hard prompts reweighted, short wrong answers preferred) removed; beta = 0
    dapo     (Yu et al., 2025) clip-higher (eps_high = 0.28 > eps_low = 0.2), dynamic sampling of groups
             whose rewards all agree, token-level loss, a soft penalty for overlong responses; beta = 0
    gspo     (Zheng et al., 2025) the importance ratio and its clipping per sequence (geometric mean of
             the token ratios), with GSPO's tight clip range

How a batch becomes a loss is `stages/rl/stage.py` (rounds: collect.py, the loss: update.py); the formulas are
in advantages.py and policy_losses.py.
"""

from __future__ import annotations

from tinylm.stages.rl.algorithm import Algorithm

GRPO = Algorithm("grpo", advantage="group", aggregation="seq-mean-token-mean", beta=0.04,
                 summary="group-normalised advantages, clipped surrogate, k3 KL to the reference")
DR_GRPO = Algorithm("dr_grpo", advantage="group-mean", aggregation="seq-sum-constant",
                    summary="GRPO without std scaling, summed over a constant length")
DAPO = Algorithm("dapo", advantage="group", aggregation="token-mean", clip_low=0.2, clip_high=0.28,
                 dynamic_sampling=True, overlong_shaping=True,
                 summary="clip-higher, dynamic sampling, token-level loss, overlong shaping")
GSPO = Algorithm("gspo", advantage="group", aggregation="seq-mean-token-mean", clip_low=3e-4, clip_high=4e-4,
                 sequence_ratio=True, summary="sequence-level importance ratio and clipping")
FAMILY = (GRPO, DR_GRPO, DAPO, GSPO)  # what algorithms.py registers, in this order
