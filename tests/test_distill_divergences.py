"""The distillation divergences against TRL's own GKDTrainer.generalized_jsd_loss, a NumPy float64 version
written from the formulas, and closed forms (the forward KL's gradient is (q - p) / T)."""

from __future__ import annotations

import math
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from tinylm.stages.distill.divergences import TeacherTopK, token_divergence, top1_agreement, top_k_of

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # trl.experimental says it is experimental
    from trl.experimental.gkd import GKDTrainer

BETAS = (0.0, 0.1, 0.5, 0.9, 1.0)


def _logits(seed: int, dtype: torch.dtype = torch.float64, shape: tuple[int, ...] = (3, 5, 11)
            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    student = (torch.randn(*shape, generator=g, dtype=torch.float64) * 2).to(dtype)
    teacher = (torch.randn(*shape, generator=g, dtype=torch.float64) * 2).to(dtype)
    labels = torch.randint(0, shape[-1], shape[:-1], generator=g)
    labels[0, :2] = -100  # masked-out positions (a prompt)
    labels[2, -1] = -100
    return student, teacher, labels


def _ours(student: torch.Tensor, teacher: torch.Tensor, labels: torch.Tensor, beta: float, temperature: float
          ) -> torch.Tensor:
    """tinylm's per-token divergence on the masked-in positions, as TRL's batchmean reduces it."""
    mask = labels != -100
    return token_divergence(student[mask], teacher[mask], "jsd", beta, temperature).sum() / mask.sum()


@pytest.mark.parametrize("temperature", [1.0, 2.0, 0.7])
@pytest.mark.parametrize("beta", BETAS)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_values_and_gradients_equal_trl_generalized_jsd_loss(beta: float, temperature: float, dtype: torch.dtype
                                                             ) -> None:
    student, teacher, labels = _logits(int(beta * 10) + int(temperature * 3), dtype)
    ours_in = student.clone().requires_grad_(True)
    trl_in = student.clone().requires_grad_(True)
    ours = _ours(ours_in, teacher, labels, beta, temperature)
    reference = GKDTrainer.generalized_jsd_loss(trl_in, teacher, labels=labels, beta=beta, temperature=temperature)
    ours.backward()
    reference.backward()
    tol = 1e-12 if dtype == torch.float64 else 1e-6
    assert abs(ours.item() - reference.item()) <= tol * max(1.0, abs(reference.item()))
    torch.testing.assert_close(ours_in.grad, trl_in.grad, rtol=tol, atol=tol)


def test_the_named_kls_are_the_ends_of_beta() -> None:
    student, teacher, labels = _logits(7)
    mask = labels != -100
    s, t = student[mask], teacher[mask]
    for name, beta in (("forward_kl", 0.0), ("reverse_kl", 1.0)):
        torch.testing.assert_close(token_divergence(s, t, name, beta=0.5), token_divergence(s, t, "jsd", beta=beta))
    p, q = F.softmax(t, -1), F.softmax(s, -1)
    torch.testing.assert_close(token_divergence(s, t, "forward_kl"), (p * (p.log() - q.log())).sum(-1))
    torch.testing.assert_close(token_divergence(s, t, "reverse_kl"), (q * (q.log() - p.log())).sum(-1))


def _numpy_jsd(student: np.ndarray, teacher: np.ndarray, beta: float, temperature: float) -> np.ndarray:
    """Written from the formulas alone, in float64: p teacher, q student, m = beta p + (1 - beta) q."""
    def softmax(z: np.ndarray) -> np.ndarray:
        e = np.exp(z - z.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)

    def kl(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.sum(a * np.log(a / b), axis=-1)

    p, q = softmax(teacher / temperature), softmax(student / temperature)
    if beta == 0.0:
        return kl(p, q)
    if beta == 1.0:
        return kl(q, p)
    m = beta * p + (1 - beta) * q
    return beta * kl(p, m) + (1 - beta) * kl(q, m)


@pytest.mark.parametrize("beta", BETAS)
def test_equals_an_independent_numpy_float64_version(beta: float) -> None:
    student, teacher, _ = _logits(11)
    ours = token_divergence(student, teacher, "jsd", beta, temperature=1.5)
    np.testing.assert_allclose(ours.numpy(), _numpy_jsd(student.numpy(), teacher.numpy(), beta, 1.5), rtol=1e-12,
                               atol=1e-14)


def test_closed_forms() -> None:
    """JSD(0.5) is symmetric and at most log 2; every divergence is 0 at equal logits; the forward KL's
    gradient with respect to the student's logits is (q - p) / T."""
    student, teacher, _ = _logits(3)
    half = token_divergence(student, teacher, "jsd", 0.5)
    torch.testing.assert_close(half, token_divergence(teacher, student, "jsd", 0.5))
    assert bool((half <= math.log(2)).all()) and bool((half >= 0).all())
    for name in ("forward_kl", "reverse_kl", "jsd"):
        assert float(token_divergence(teacher, teacher, name).abs().max()) < 1e-12
    x = student.clone().requires_grad_(True)
    temperature = 2.0
    token_divergence(x, teacher, "forward_kl", temperature=temperature).sum().backward()
    expected = (F.softmax(student / temperature, -1) - F.softmax(teacher / temperature, -1)) / temperature
    torch.testing.assert_close(x.grad, expected)


@pytest.mark.parametrize("name", ["forward_kl", "reverse_kl", "jsd"])
def test_top_k_at_the_vocabulary_size_is_the_full_divergence(name: str) -> None:
    student, teacher, _ = _logits(5)
    full = token_divergence(student, teacher, name, 0.3, temperature=1.7)
    top = token_divergence(student, top_k_of(teacher, teacher.shape[-1]), name, 0.3, temperature=1.7)
    torch.testing.assert_close(top, full)


def test_top_k_renormalises_both_sides_over_the_teachers_ids() -> None:
    student, teacher, _ = _logits(9)
    k = 4
    cached = top_k_of(teacher, k)
    ids = cached.ids.numpy()
    s = np.take_along_axis(student.numpy(), ids, -1)
    t = np.take_along_axis(teacher.numpy(), ids, -1)  # renormalised over the k ids: the logits themselves do
    for beta in BETAS:
        np.testing.assert_allclose(token_divergence(student, cached, "jsd", beta, 1.3).numpy(),
                                   _numpy_jsd(s, t, beta, 1.3), rtol=1e-10, atol=1e-12)
    assert not torch.allclose(token_divergence(student, cached, "forward_kl"),
                              token_divergence(student, teacher, "forward_kl"))


def test_top1_agreement_reads_the_teachers_best_token_either_way() -> None:
    student, teacher, _ = _logits(2)
    full = top1_agreement(student, teacher)
    torch.testing.assert_close(full, top1_agreement(student, top_k_of(teacher, 3)))
    torch.testing.assert_close(top1_agreement(teacher, teacher), torch.ones_like(full))
    assert isinstance(top_k_of(teacher, 3), TeacherTopK)


def test_the_conventions_table_on_the_page_is_the_scripts() -> None:
    """docs/posttrain/distill.md's table of the beta conventions is what benchmarks/distill_conventions.py prints,
    and its first column is TRL's own function (through tinylm's, proved equal above)."""
    root = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(root / "benchmarks"))
    import distill_conventions

    page = (root / "docs" / "posttrain" / "distill.md").read_text(encoding="utf-8")
    for line in distill_conventions.table():
        assert line in page, line
    p = torch.tensor(distill_conventions.TEACHER, dtype=torch.float64).log()
    q = torch.tensor(distill_conventions.STUDENT, dtype=torch.float64).log()
    for beta in distill_conventions.BETAS:
        trl = GKDTrainer.generalized_jsd_loss(q[None, None], p[None, None], beta=beta)  # batchmean over 1 position
        assert float(trl) == pytest.approx(distill_conventions.conventions(beta)[0], abs=1e-12)
