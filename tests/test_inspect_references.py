"""Inspection proved against what we did not write: `transformers` and `nnsight` on tinylm's own export,
and a NumPy recompute of attention from the weights.

- Every block's residual stream equals `transformers`' `output_hidden_states`, and every head's attention
  probabilities its `output_attentions` (eager attention), to 1e-5, for a grouped-query (Llama), a classic
  (GPT-2), a QK-norm (Qwen 3), a sliding-window (Mistral) and an MLA (DeepSeek-V3) model.
- MLA and the sliding window also against layer 0's attention recomputed in NumPy float64 from the weights.
- Activation patching (residual stream at every layer and position, every head's output, every MLP's
  output) equals the same interventions written with `nnsight` on the exported model, to 1e-5.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from model_variants import classic_config, modern_config
from tinylm.interop.hf import to_hf_model
from tinylm.interpret.attention import attention_patterns
from tinylm.interpret.loading import Inspected
from tinylm.interpret.patching import activation_patching
from tinylm.models.factory import build_model
from tinylm.models.hooks.residual import record_residual
from tinylm.models.hooks.sites import final_norm

transformers = pytest.importorskip("transformers")

TOLERANCE = 1e-5
CONFIGS = {
    "gqa": lambda: modern_config("gqa"),
    "classic": lambda: classic_config(),
    "qknorm": lambda: modern_config("qknorm"),
    "window": lambda: modern_config("window"),
    "mla": lambda: modern_config("mla", norm_eps=1e-6),
}


class ByteLabels:
    """Enough of a tokenizer for labels: every id is its own number."""

    n_vocab = 97
    eot_id = 0

    def token_bytes(self, token_id: int) -> bytes:
        return str(token_id).encode()


def randomized(name: str, seed: int = 0) -> torch.nn.Module:
    """A model in eval mode whose every parameter (norms and biases too) is random."""
    torch.manual_seed(seed)
    model = build_model(CONFIGS[name]()).eval()
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if pname.endswith("lm_head.bias"):
                continue
            p.add_(torch.randn_like(p) * 0.2)
    for module in model.modules():
        if hasattr(module, "impl"):
            module.impl = "sdpa"
    return model


def eager(model: torch.nn.Module) -> torch.nn.Module:
    hf = to_hf_model(model)
    hf.set_attn_implementation("eager")  # the implementation that returns its attention probabilities
    return hf


@pytest.mark.parametrize("name", list(CONFIGS))
def test_hidden_states_and_attention_equal_transformers(name: str) -> None:
    model = randomized(name)
    hf = eager(model)
    idx = torch.randint(0, 97, (2, 24), generator=torch.Generator().manual_seed(1))
    with torch.no_grad(), record_residual(model) as stream:
        model(idx)
        theirs = hf(idx, output_hidden_states=True, output_attentions=True)
    # transformers: the embedding, every block's output but the last, then the last one after the final norm
    assert len(theirs.hidden_states) == len(stream) == model.config.n_blocks + 1
    for ours, reference in zip(stream[:-1], theirs.hidden_states[:-1]):
        assert (ours - reference).abs().max().item() < TOLERANCE
    assert (final_norm(model)(stream[-1]) - theirs.hidden_states[-1]).abs().max().item() < TOLERANCE
    inspected = Inspected(model, ByteLabels(), {"path": "."})
    for row in range(2):
        ours = attention_patterns(inspected, idx[row].tolist())
        reference = torch.stack([layer[row] for layer in theirs.attentions])
        assert ours.shape == reference.shape
        assert (ours - reference).abs().max().item() < TOLERANCE


def _rms(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt((x**2).mean(-1, keepdims=True) + eps) * w


def _rope(x: np.ndarray, theta: float) -> np.ndarray:
    """Rotate x [T, ..., d] by position, halves paired (Llama's layout)."""
    T, d = x.shape[0], x.shape[-1]
    inv = theta ** (-np.arange(0, d, 2) / d)
    angles = np.arange(T)[:, None] * inv[None, :]
    cos, sin = np.cos(np.concatenate([angles] * 2, -1)), np.sin(np.concatenate([angles] * 2, -1))
    shape = (T,) + (1,) * (x.ndim - 2) + (d,)
    half = np.concatenate([-x[..., d // 2 :], x[..., : d // 2]], -1)
    return x * cos.reshape(shape) + half * sin.reshape(shape)


def _softmax_masked(scores: np.ndarray, allowed: np.ndarray) -> np.ndarray:
    scores = np.where(allowed, scores, -np.inf)
    scores = scores - scores.max(-1, keepdims=True)
    e = np.exp(scores)
    return e / e.sum(-1, keepdims=True)


def numpy_layer0_attention(model: torch.nn.Module, ids: list[int]) -> np.ndarray:
    """[H, T, T]: layer 0's attention probabilities from the weights alone, in float64."""
    c = model.config
    W = {k: v.detach().double().numpy() for k, v in model.state_dict().items()}
    x = W["token_embed.weight"][ids]
    h = _rms(x, W["blocks.0.attn_norm.weight"], c.norm_eps)
    T = len(ids)
    allowed = np.tril(np.ones((T, T), dtype=bool))
    if c.sliding_window:
        allowed &= (np.arange(T)[:, None] - np.arange(T)[None, :]) < c.sliding_window
    if c.attention == "mla":
        nope, rope_dim, rank = c.nope_dim, c.qk_rope_head_dim, c.kv_lora_rank
        q = (h @ W["blocks.0.attn.q_proj.weight"].T).reshape(T, c.n_head, nope + rope_dim)
        q = np.concatenate([q[..., :nope], _rope(q[..., nope:], c.rope_theta)], -1)
        kv_a = h @ W["blocks.0.attn.kv_a_proj.weight"].T
        latent = _rms(kv_a[:, :rank], W["blocks.0.attn.kv_a_norm.weight"], c.norm_eps)
        k_rope = _rope(kv_a[:, rank:], c.rope_theta)  # [T, rope_dim], one for all heads
        kv = (latent @ W["blocks.0.attn.kv_b_proj.weight"].T).reshape(T, c.n_head, -1)
        k = np.concatenate([kv[..., :nope], np.broadcast_to(k_rope[:, None], (T, c.n_head, rope_dim))], -1)
        scale = (nope + rope_dim) ** -0.5
    else:
        d, groups = c.dim_per_head, c.n_head // c.kv_heads
        q = _rope((h @ W["blocks.0.attn.q_proj.weight"].T).reshape(T, c.n_head, d), c.rope_theta)
        k = _rope((h @ W["blocks.0.attn.k_proj.weight"].T).reshape(T, c.kv_heads, d), c.rope_theta)
        k = np.repeat(k, groups, axis=1)
        scale = d**-0.5
    scores = np.einsum("qhd,khd->hqk", q, k) * scale
    return _softmax_masked(scores, allowed[None])


@pytest.mark.parametrize("name", ["window", "mla"])
def test_sliding_window_and_mla_attention_equal_a_numpy_recompute(name: str) -> None:
    model = randomized(name, seed=3)
    ids = torch.randint(0, 97, (20,), generator=torch.Generator().manual_seed(2)).tolist()
    ours = attention_patterns(Inspected(model, ByteLabels(), {"path": "."}), ids)[0].double().numpy()
    reference = numpy_layer0_attention(model, ids)
    assert np.abs(ours - reference).max() < TOLERANCE
    if name == "window":  # nothing beyond the window: a query at 10 sees keys 6..10 only
        assert ours[:, 10, :6].max() == 0.0 and ours[:, 10, 6:11].sum(-1) == pytest.approx(1.0)


def nnsight_patching(hf: torch.nn.Module, arch: str, clean: list[int], corrupt: list[int], answer: int, wrong: int,
                     n_head: int) -> dict[str, list[list[float]]]:
    """The three patching grids written with nnsight's interventions on a `transformers` model."""
    from nnsight import NNsight

    model = NNsight(hf.requires_grad_(False))
    inner = model.transformer if arch == "classic" else model.model
    blocks = inner.h if arch == "classic" else inner.layers
    embedding = inner.drop if arch == "classic" else inner.embed_tokens

    def o_proj(layer: int):  # where the heads' outputs enter, side by side
        return blocks[layer].attn.c_proj if arch == "classic" else blocks[layer].self_attn.o_proj

    def value(output):
        return output[0] if isinstance(output, tuple) else output

    n = len(blocks)
    residual, heads, mlps = [], [], []
    with model.trace(torch.tensor([clean])):  # nnsight reads the sites in the order the forward reaches them
        residual.append(embedding.output.save())
        for i in range(n):
            heads.append(o_proj(i).input.save())
            mlps.append(blocks[i].mlp.output.save())
            residual.append(value(blocks[i].output).save())
        clean_logits = model.output.logits.save()
    with model.trace(torch.tensor([corrupt])):
        corrupt_logits = model.output.logits.save()

    def metric(logits: torch.Tensor) -> float:
        return float(logits[0, -1, answer].double() - logits[0, -1, wrong].double())

    m_clean, m_corrupt = metric(clean_logits), metric(corrupt_logits)

    def restored(intervene) -> float:
        with model.trace(torch.tensor([corrupt])):
            intervene()
            logits = model.output.logits.save()
        return (metric(logits) - m_corrupt) / (m_clean - m_corrupt)

    T = len(clean)
    grid_residual, grid_mlp, grid_heads = [], [], []
    for layer in range(n + 1):
        row = []
        for p in range(T):
            def swap(layer=layer, p=p):
                site = embedding.output if layer == 0 else value(blocks[layer - 1].output)
                site[:, p, :] = residual[layer][:, p, :]
            row.append(restored(swap))
        grid_residual.append(row)
    for layer in range(n):
        row = []
        for p in range(T):
            def swap_mlp(layer=layer, p=p):
                blocks[layer].mlp.output[:, p, :] = mlps[layer][:, p, :]
            row.append(restored(swap_mlp))
        grid_mlp.append(row)
        d = heads[layer].shape[-1] // n_head
        row = []
        for h in range(n_head):
            def swap_head(layer=layer, h=h, d=d):
                o_proj(layer).input[:, :, h * d : (h + 1) * d] = heads[layer][:, :, h * d : (h + 1) * d]
            row.append(restored(swap_head))
        grid_heads.append(row)
    return {"residual": grid_residual, "mlp": grid_mlp, "heads": grid_heads}


@pytest.mark.parametrize("name", ["gqa", "classic"])
def test_activation_patching_equals_nnsight_on_the_export(name: str) -> None:
    pytest.importorskip("nnsight")
    model = randomized(name, seed=5)
    hf = to_hf_model(model)
    clean = torch.randint(1, 97, (8,), generator=torch.Generator().manual_seed(4)).tolist()
    corrupt = list(clean)
    corrupt[2] = (corrupt[2] + 7) % 97
    ours = activation_patching(Inspected(model, ByteLabels(), {"path": "."}), clean, corrupt, "logit_diff", 3, 5)
    theirs = nnsight_patching(hf, model.config.arch, clean, corrupt, 3, 5, model.config.n_head)
    for grid in ("residual", "mlp", "heads"):
        assert np.abs(np.array(ours[grid]) - np.array(theirs[grid])).max() < TOLERANCE, grid
