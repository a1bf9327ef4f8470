"""Optimizers: who gets weight decay, Muon's Newton–Schulz orthogonalization, state round trips."""

from __future__ import annotations

import io

import pytest
import torch

from tinylm.errors import TinyLMError
from tinylm.models.factory import build_model
from tinylm.presets import preset_config
from tinylm.train.muon import NS_COEFFS, Muon, newton_schulz
from tinylm.train.optim import OptimizerList, build_optimizer, split_params

pytestmark = pytest.mark.usefixtures("one_thread")


def micro(arch: str, **kw: object):
    torch.manual_seed(0)
    base = dict(vocab_size=64, context_length=16, n_embed=32, n_head=2, n_blocks=2)
    if arch == "modern":
        base["n_kv_head"] = 1
    base.update(kw)
    return build_model(preset_config("tiny", arch, **base))


def names(pairs) -> set[str]:
    return {n for n, _ in pairs}


@pytest.mark.parametrize("arch", ["modern", "classic"])
def test_every_parameter_has_exactly_one_role(arch: str) -> None:
    model = micro(arch)
    split = split_params(model)
    ids = [id(p) for group in (split.matrices, split.embeddings, split.head, split.vectors) for _, p in group]
    assert len(ids) == len(set(ids))
    assert set(ids) == {id(p) for p in model.parameters()}


def test_roles_classic() -> None:
    split = split_params(micro("classic"))
    assert names(split.embeddings) == {"token_embed.weight", "pos_embed.weight"}
    assert names(split.head) == {"lm_head.weight"}  # untied: its own matrix
    assert all(p.ndim == 1 for _, p in split.vectors)
    assert "ln_f.weight" in names(split.vectors) and "blocks.0.mlp.hidden.bias" in names(split.vectors)
    assert all(p.ndim == 2 for _, p in split.matrices)


def test_tied_head_counts_as_embedding() -> None:
    split = split_params(micro("modern"))
    assert names(split.embeddings) == {"token_embed.weight"}
    assert split.head == []


def test_heads_inside_wrappers_and_scalar_readouts_are_heads_not_hidden_matrices() -> None:
    """PPO's policy-with-value and a reward model: the wrapped untied lm_head and the 1 x d value and score
    heads are readouts (AdamW's head group), not hidden matrices for Muon to orthogonalise."""
    from tinylm.models.reward_model import RewardModel
    from tinylm.stages.rl.ppo import PolicyWithValue

    split = split_params(PolicyWithValue(micro("classic")))
    assert names(split.head) == {"policy.lm_head.weight", "value_head.weight"}
    assert all(p.shape[0] > 1 for _, p in split.matrices) and not any("head" in n for n in names(split.matrices))
    reward = split_params(RewardModel(micro("modern")))  # tied: the embedding trains, the score is the head
    assert names(reward.head) == {"score.weight"} and names(reward.embeddings) == {"backbone.token_embed.weight"}
    optimizer = build_optimizer(PolicyWithValue(micro("classic")), "muon", lr=1e-3, weight_decay=0.1,
                                device=torch.device("cpu"))
    muon = next(o for o in optimizer.optimizers if isinstance(o, Muon))
    assert all(p.shape[0] > 1 for g in muon.param_groups for p in g["params"])


@pytest.mark.parametrize("arch", ["modern", "classic"])
def test_adamw_decays_only_matrices(arch: str) -> None:
    model = micro(arch)
    opt = build_optimizer(model, "adamw", weight_decay=0.1)
    decayed = {id(p) for g in opt.param_groups if g["weight_decay"] > 0 for p in g["params"]}
    for name, p in model.named_parameters():
        is_embedding = "embed" in name
        assert (id(p) in decayed) == (p.ndim >= 2 and not is_embedding), name
    assert isinstance(opt, torch.optim.AdamW) and opt.defaults["foreach"] is True


def test_adamw_no_decay_group_really_is_not_decayed() -> None:
    """With zero gradients, AdamW moves only decayed weights (they shrink); norms and embeddings stay put."""
    model = micro("modern")
    opt = build_optimizer(model, "adamw", lr=0.1, weight_decay=0.5)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    opt.step()
    for n, p in model.named_parameters():
        moved = not torch.equal(before[n], p)
        assert moved == (p.ndim >= 2 and "embed" not in n), n


def test_muon_split_and_state_round_trip() -> None:
    model = micro("classic")
    opt = build_optimizer(model, "muon", lr=1e-3, muon_lr=0.02)
    assert isinstance(opt, OptimizerList)
    muon, adamw = opt.optimizers
    assert isinstance(muon, Muon) and isinstance(adamw, torch.optim.AdamW)
    muon_ids = {id(p) for g in muon.param_groups for p in g["params"]}
    for name, p in model.named_parameters():
        assert (id(p) in muon_ids) == (p.ndim == 2 and "embed" not in name and "lm_head" not in name), name
    x = torch.randint(0, 64, (2, 16))
    _, loss = model(x, x)
    loss.backward()
    opt.step()
    buf = io.BytesIO()
    torch.save(opt.state_dict(), buf)
    buf.seek(0)
    state = torch.load(buf, weights_only=True)
    fresh = build_optimizer(model, "muon", lr=1e-3, muon_lr=0.02)
    fresh.load_state_dict(state)
    p0 = muon.param_groups[0]["params"][0]
    assert torch.equal(fresh.optimizers[0].state[p0]["momentum_buffer"], muon.state[p0]["momentum_buffer"])
    assert [g["lr"] for g in opt.param_groups] == [0.02, 1e-3, 1e-3]


def test_unknown_optimizer_is_a_user_error() -> None:
    with pytest.raises(TinyLMError, match="unknown optimizer"):
        build_optimizer(micro("modern"), "lion")


def _scalar_map(s: torch.Tensor, steps: int = 5) -> torch.Tensor:
    a, b, c = NS_COEFFS
    for _ in range(steps):
        s = a * s + b * s**3 + c * s**5
    return s


def _matrix(rows: int, cols: int, singular: torch.Tensor, seed: int) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    u, _ = torch.linalg.qr(torch.randn(rows, rows, generator=g, dtype=torch.float64))
    v, _ = torch.linalg.qr(torch.randn(cols, cols, generator=g, dtype=torch.float64))
    k = min(rows, cols)
    return u[:, :k] @ torch.diag(singular) @ v[:, :k].T, u[:, :k], v[:, :k]


@pytest.mark.parametrize("shape", [(48, 48), (64, 24), (24, 80)])
def test_newton_schulz_singular_values_land_in_the_quintic_band(shape: tuple[int, int]) -> None:
    """Singular values spread over 2 decades all end in [0.68, 1.21], the band Muon's quintic targets."""
    k = min(shape)
    sigma = torch.logspace(0, -2, k, dtype=torch.float64)
    g, u, v = _matrix(*shape, sigma, seed=sum(shape))
    out = newton_schulz(g.float()).double()
    s = torch.linalg.svdvals(out)
    assert s.min() > 0.68 and s.max() < 1.21, (s.min(), s.max())
    # it acts on singular values only: U f(S) V^T with f the scalar quintic iterated 5 times
    expected = u @ torch.diag(_scalar_map(sigma / sigma.norm())) @ v.T
    assert torch.allclose(out, expected, atol=2e-4)
    # and it points where the exact polar factor U V^T points
    cos = torch.nn.functional.cosine_similarity(out.flatten(), (u @ v.T).flatten(), dim=0)
    assert cos > 0.97


def test_newton_schulz_on_random_gradients_and_batches() -> None:
    g = torch.randn(3, 40, 20, generator=torch.Generator().manual_seed(1))
    out = newton_schulz(g)
    assert out.shape == g.shape
    for i in range(3):  # a batch of matrices is orthogonalized one by one
        assert torch.allclose(out[i], newton_schulz(g[i]), atol=1e-5)
        s = torch.linalg.svdvals(out[i])
        assert s.min() > 0.68 and s.max() < 1.21
    with pytest.raises(ValueError):
        newton_schulz(torch.ones(5))


def test_muon_step_is_orthogonalized_momentum() -> None:
    torch.manual_seed(0)
    w = torch.nn.Parameter(torch.randn(32, 16))
    start = w.detach().clone()
    opt = Muon([w], lr=0.1, momentum=0.9, nesterov=False)
    w.grad = torch.randn(32, 16)
    grad = w.grad.clone()
    opt.step()
    update = (start - w.detach()) / 0.1
    expected = newton_schulz(grad * 0.1) * (32 / 16) ** 0.5  # buffer = 0.1 * grad after one lerp
    assert torch.allclose(update, expected, atol=1e-5)
    with pytest.raises(ValueError, match="matrices"):
        Muon([torch.nn.Parameter(torch.zeros(3))])


def test_muon_trains_a_model() -> None:
    model = micro("modern")
    opt = build_optimizer(model, "muon", lr=3e-3, muon_lr=0.02)
    x = torch.randint(0, 64, (4, 16), generator=torch.Generator().manual_seed(0))
    losses = []
    for _ in range(15):
        _, loss = model(x, x.roll(-1, dims=1))
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    assert losses[-1] < losses[0] - 1.0
