"""On-policy distillation (GKD, Agarwal et al. 2024): the student learns on its own samples, scored by the teacher.

Trained on the data alone, the student only ever sees prefixes the data wrote; at generation time it
conditions on its own, and its mistakes compound (the train-test mismatch of imitation learning). On an
on-policy micro-batch the student continues prompts itself, with the RL stage's rollouts (the same
KV-cache sampler, the same per-row seeds), and the teacher's distribution at every sampled position is
the target: the loss is the divergence on the student's own tokens. `--on-policy LAMBDA` is the share of
micro-batches drawn this way (0: purely supervised, 1: purely on-policy, as GKD's lambda).

Which micro-batches are on-policy, which prompts they take and the seeds they sample with are pure
functions of (seed, step, micro-batch, row of the global batch): a resumed run draws exactly what the
uninterrupted one would, and torchrun's ranks together what one process draws.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from tinylm.data.packing import IGNORE
from tinylm.inference.sampling import SamplingParams
from tinylm.stages.rl.rollout import sample_rollouts, stable_seed  # the RL stage's exact rollouts, shared

SAMPLING = SamplingParams(temperature=1.0)  # the student's own distribution, untruncated


def on_policy_draw(seed: int, step: int, micro: int, share: float) -> bool:
    """Whether micro-batch `micro` of step `step` is on-policy: the same answer on every rank and every resume."""
    return share > 0 and stable_seed(seed, step, micro) / 2**63 < share


def prompt_picks(seed: int, step: int, micro: int, rank: int, world_size: int, n_prompts: int, batch_size: int
                 ) -> list[tuple[int, int]]:
    """(row of the global batch, prompt) for this rank's share: the global batch is drawn once, so two processes
    with half the batch each sample exactly what one process with all of it does."""
    picks = np.random.default_rng([seed, step, micro]).integers(0, n_prompts, size=batch_size * world_size)
    first = rank * batch_size
    return [(first + i, int(p)) for i, p in enumerate(picks[first:first + batch_size])]


def sample_batch(student: nn.Module, prompts: Sequence[Sequence[int]], seeds: Sequence[int], max_new_tokens: int,
                 stop_ids: Sequence[int], pad_id: int) -> dict[str, torch.Tensor]:
    """The student's continuations of `prompts` as a training batch: only its sampled tokens are targets."""
    rollouts = sample_rollouts(student, prompts, 1, max_new_tokens, SAMPLING, seeds, stop_ids, pad_id)
    ids = rollouts.ids
    targets = ids[:, 1:].clone()
    targets[rollouts.response_mask == 0] = IGNORE
    return {"idx": ids[:, :-1].contiguous(), "targets": targets, "sample_logprobs": rollouts.logprobs}
