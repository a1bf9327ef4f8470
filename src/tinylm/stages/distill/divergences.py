"""How far the student's next-token distribution is from the teacher's, per token: the three divergences of
distillation, with a temperature and, for cached logits, on the teacher's top-k only.

With p the teacher's and q the student's distribution over the vocabulary, both at temperature T
(softmax(logits / T)):

    forward KL   KL(p || q) = sum_v p_v (log p_v - log q_v)     mode-covering: q must put mass wherever p does
    reverse KL   KL(q || p) = sum_v q_v (log q_v - log p_v)     mode-seeking: q may drop some of p's modes
    JSD(beta)    beta KL(p || m) + (1 - beta) KL(q || m),   m = beta p + (1 - beta) q

Which end of beta is which KL is where the field disagrees. tinylm names beta as TRL's GKDTrainer does
(`generalized_jsd_loss`, after its rework in TRL PR #3043): **beta = 0 is the forward KL(p || q), beta = 1
the reverse KL(q || p)**, taken exactly at the ends (not as the limit of the mixture, which goes to 0
there). The GKD paper (Agarwal et al. 2024) writes the mixture with its weights the other way round; the
docs (docs/distill.md) give both conventions side by side with numbers. Every divergence is >= 0 and 0
only where the two distributions agree.

Top-k. A logit cache keeps the teacher's k most likely ids per position (`logit_cache.py`). The
divergence is then taken on those k ids only, both distributions renormalised over them, which is the
full divergence when k is the vocabulary size (tests/test_distill_divergences.py proves it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

DIVERGENCES = ("forward_kl", "reverse_kl", "jsd")


@dataclass(frozen=True)
class TeacherTopK:
    """The teacher's k most likely ids at each position and their log-probs at temperature 1, as cached."""

    ids: torch.Tensor  # [..., k] long
    logprobs: torch.Tensor  # [..., k] float: log softmax of the full logits, gathered at `ids`


def kl(log_a: torch.Tensor, log_b: torch.Tensor) -> torch.Tensor:
    """KL(a || b) over the last dimension, from finite log-probabilities (log softmax of finite logits)."""
    return (log_a.exp() * (log_a - log_b)).sum(-1)


def generalized_jsd(teacher_logp: torch.Tensor, student_logp: torch.Tensor, beta: float) -> torch.Tensor:
    """JSD(beta) per position from log-probs over the last dimension: beta 0 = KL(p || q), beta 1 = KL(q || p)."""
    if beta == 0.0:
        return kl(teacher_logp, student_logp)
    if beta == 1.0:
        return kl(student_logp, teacher_logp)
    # log m = logsumexp(log p + log beta, log q + log(1 - beta)): no probability is formed outside the logs
    mixture = torch.logaddexp(teacher_logp + math.log(beta), student_logp + math.log1p(-beta))
    return beta * kl(teacher_logp, mixture) + (1 - beta) * kl(student_logp, mixture)


def divergence_beta(divergence: str, beta: float) -> float:
    """The JSD beta that is `divergence`: forward KL is beta 0, reverse KL beta 1, jsd its own beta."""
    if divergence not in DIVERGENCES:
        raise ValueError(f"unknown divergence {divergence!r}: choose {', '.join(DIVERGENCES)}")
    return {"forward_kl": 0.0, "reverse_kl": 1.0}.get(divergence, beta)


def token_divergence(student_logits: torch.Tensor, teacher: torch.Tensor | TeacherTopK, divergence: str,
                     beta: float = 0.5, temperature: float = 1.0) -> torch.Tensor:
    """The divergence at each position [...] between the student's logits [..., V] and the teacher's (full
    logits [..., V], or its top-k), both at `temperature`; in float32 at least (bf16 logits are upcast)."""
    student = _upcast(student_logits) / temperature
    if isinstance(teacher, TeacherTopK):
        # renormalised over the teacher's k ids: log softmax of (log p_v / T) equals that of (logit_v / T)
        teacher_logp = F.log_softmax(_upcast(teacher.logprobs) / temperature, dim=-1)
        student_logp = F.log_softmax(student.gather(-1, teacher.ids), dim=-1)
    else:
        teacher_logp = F.log_softmax(_upcast(teacher) / temperature, dim=-1)
        student_logp = F.log_softmax(student, dim=-1)
    return generalized_jsd(teacher_logp, student_logp, divergence_beta(divergence, beta))


def _upcast(x: torch.Tensor) -> torch.Tensor:
    """float32 for half-precision logits; float64 stays (the reference tests compare in it)."""
    return x if x.dtype in (torch.float32, torch.float64) else x.float()


def top_k_of(logits: torch.Tensor, k: int) -> TeacherTopK:
    """The k most likely ids of logits [..., V] and their full log-probs (what a cache stores); ties by id."""
    logprobs = F.log_softmax(_upcast(logits), dim=-1)
    values, ids = logprobs.topk(min(k, logits.shape[-1]), dim=-1, sorted=True)
    return TeacherTopK(ids, values)


def top1_agreement(student_logits: torch.Tensor, teacher: torch.Tensor | TeacherTopK) -> torch.Tensor:
    """1.0 where the student's most likely token is the teacher's, per position."""
    teacher_top = teacher.ids[..., 0] if isinstance(teacher, TeacherTopK) else teacher.argmax(-1)
    return (student_logits.argmax(-1) == teacher_top).float()
