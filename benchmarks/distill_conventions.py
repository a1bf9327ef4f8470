"""The generalized JSD's beta under the conventions in use, on one pair of distributions, as a Markdown table.

    python benchmarks/distill_conventions.py

p (the teacher) and q (the student) are fixed three-token distributions. Columns:
- tinylm = TRL since PR #3043: m = beta p + (1 - beta) q, beta KL(p||m) + (1 - beta) KL(q||m), and exactly the
  forward KL(p||q) at beta 0 and the reverse KL(q||p) at beta 1;
- TRL before PR #3043: the same weights with the mixture the other way, m = beta q + (1 - beta) p;
- interpolating: m = beta p + (1 - beta) q, (1 - beta) KL(p||m) + beta KL(q||m), continuous from the forward
  KL (beta 0) to the reverse KL (beta 1), as ms-swift's PR #10213 proposed.
docs/distill.md shows this table; tests/test_distill_divergences.py checks that the page's numbers are these.
"""

from __future__ import annotations

import math

import torch

from tinylm.stages.distill.divergences import generalized_jsd, kl

TEACHER = (0.7, 0.2, 0.1)
STUDENT = (0.2, 0.5, 0.3)
BETAS = (0.0, 0.01, 0.1, 0.5, 0.9, 0.99, 1.0)


def _logs(values: tuple[float, ...]) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64).log()


def conventions(beta: float) -> tuple[float, float, float]:
    """(tinylm and TRL now, TRL before #3043, interpolating) at `beta` for TEACHER and STUDENT."""
    p, q = _logs(TEACHER), _logs(STUDENT)
    ours = float(generalized_jsd(p, q, beta))

    def mixture(a: float) -> torch.Tensor:  # log(a p + (1 - a) q), a in [0, 1]
        return torch.logsumexp(torch.stack([p + math.log(a) if a else p - math.inf,
                                            q + math.log(1 - a) if a < 1 else q - math.inf]), dim=0)

    before = float(beta * kl(p, mixture(1 - beta)) + (1 - beta) * kl(q, mixture(1 - beta)))
    interpolating = float((1 - beta) * kl(p, mixture(beta)) + beta * kl(q, mixture(beta)))
    return ours, before, interpolating


def table() -> list[str]:
    lines = ["| beta | tinylm = TRL (since #3043) | TRL before #3043 | interpolating |", "|---|---|---|---|"]
    for beta in BETAS:
        ours, before, interpolating = conventions(beta)
        lines.append(f"| {beta:g} | {ours:.4f} | {before:.4f} | {interpolating:.4f} |")
    return lines


if __name__ == "__main__":
    print("\n".join(table()))
