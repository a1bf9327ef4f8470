"""The modern model's forward pass with the module machinery stripped away, for fast decoding.

At batch 1 a small model spends most of a decode step in Python, not in arithmetic: every
`nn.Module` call, view and tiny kernel launch costs microseconds, and one step of the `tiny` preset
makes a few hundred of them. This file computes exactly what `ModernGPT.forward_hidden` + `lm_head`
compute (tests/test_fast_decode.py checks its logits against the model's for every test variant),
with fewer operations:

- q, k, v (and the output gate) come from one matrix product, gate and up from another: the weights
  are concatenated once, and the model's own parameters become views into the fused matrices, so no
  weight is stored twice.
- RoPE and QK-norm run once over the query and key heads together (they are adjacent in the fused
  projection). For a one-token step RoPE is a single matrix product with that position's rotation,
  x * cos + rotate_half(x) * sin = x @ R[pos], from a table built once from the model's cos/sin
  (`rotation_table`): one kernel instead of seven per block. Each column of R has two non-zeros, so
  the product adds the same two terms as the elementwise form. Float32 weights only: a CPU's bf16
  product of a [heads, D] x [D, D] pair measured 13-17 us, twice the seven elementwise kernels (8 us),
  where float32 takes 4-5 us.
- The cache is laid out [batch, kv_heads, slots, head_dim], what attention reads, so nothing is
  transposed or copied per step; grouped heads are shared by SDPA's `enable_gqa` instead of
  `repeat_interleave` copies of the whole cache, or, for one bf16 token, enter as several queries of
  their key/value head (`one_query_attention`).
- The two projections that write into the residual stream (attention output, MLP down) add into it
  in the same call: x + y W^T is one `addmm` with x as the accumulator (`residual_projection`).
- One float32 row is multiplied as a matrix-vector product (`mv`, `addmv`): under the `tinylm`
  command's strict MKL mode a one-row GEMM costs up to 1.7x a GEMV (`row_products.py`).
- bf16 weights (an inference copy) go through oneDNN's packed layout, up to 2x faster per product
  at batch 1 with the same outputs (`packed_bf16.py`); that costs a second copy of them.
- A decoder built for several rows a call (`rows_per_call`: speculative decoding's verifier) packs an
  inference copy's float32 weights for oneDNN too: five rows then cost 1.1x one, where MKL's GEMM
  took 2-3x (`packed_float.py`).
- Norms are single `F.rms_norm` calls, except for one row (batch-1 decoding), where that composite
  op costs 7-9 us of dispatch for a few hundred numbers: there the mean square is one 1x1 `addmm`
  (x x^T / D + eps, in float32) and the norm three kernels in all (`FastDecoder.norm`), 4 us (five
  and 6 us in bf16). Only the positions whose logits are wanted go through the final norm and `lm_head`.

What it computes is declared per `ModelConfig` field in fast_decode_support.py; a model with a
feature it does not handle (multi-head latent attention, with its own cache layout, or the classic
architecture) goes through the model's generic path (`runners.ModelCacheRunner`) instead.
"""

from __future__ import annotations

from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from tinylm.inference.fast_decode_support import fast_decode_refusal
from tinylm.inference.int8 import Int8Linear
from tinylm.inference.packed_bf16 import can_pack, packed_linear
from tinylm.inference.packed_float import can_pack_float, packed_float_product
from tinylm.inference.row_products import (
    Projection,
    ResidualProjection,
    column_major,
    decodes_only,
    float_product,
    float_residual_product,
)
from tinylm.models.loss import soft_cap
from tinylm.models.modern.mask import attention_mask
from tinylm.models.modern.relu2 import ReLUSquared
from tinylm.models.modern.rope import apply_rope

ROTATION_TABLE_BYTES = 32 << 20  # above this (long contexts x wide heads) one-token steps rotate elementwise


def refusal(model: nn.Module) -> str | None:
    """Why `FastDecoder` would not compute this model's logits exactly (one line), or None when it would."""
    return fast_decode_refusal(getattr(model, "config", None))


def supports_fast_decode(model: nn.Module) -> bool:
    return refusal(model) is None


def weight_product(weight: torch.Tensor, rows: int = 1) -> Projection:
    """x -> F.linear(x, weight): through oneDNN's packed layout for bf16 CPU weights (`packed_bf16.py`) and for float32
    inference weights multiplied `rows` > 1 rows a call (`packed_float.py`), one row of a float32 CPU weight as a
    matrix-vector product (`row_products.py`)."""
    if can_pack_float(weight, rows):
        return packed_float_product(weight, rows)
    if can_pack(weight):
        return packed_linear(weight)
    if weight.dtype == torch.float32 and weight.device.type == "cpu":
        return float_product(weight)
    return partial(F.linear, weight=weight)


def fuse_projections(linears: list[nn.Module], rows: int = 1) -> Projection:
    """One callable computing cat([l(x) for l in linears], -1) with a single matrix product.

    Float weights are concatenated and each layer's weight becomes a view of its rows, so the model
    and the fused matrix share memory (bf16 ones, and an inference copy's float32 ones for several rows,
    are then packed, a copy: `weight_product`). Int8 layers concatenate their int8 rows and scales.
    """
    if all(type(lin) is nn.Linear and lin.bias is None for lin in linears):
        inference_copy = decodes_only(linears[0].weight)  # (asked of the model's weight: `fused` has no gradient)
        packs = can_pack_float(linears[0].weight, rows)  # then oneDNN's copy is read, not a column-major one
        with torch.inference_mode(False), torch.no_grad():  # ordinary tensors: the model stays trainable
            fused = torch.cat([lin.weight.detach() for lin in linears])
            if inference_copy and not packs:  # column-major, faster to stream (row_products.py)
                fused = column_major(fused)
            for lin, part in zip(linears, fused.split([lin.out_features for lin in linears]), strict=True):
                lin.weight.data = part
        return weight_product(fused, rows if inference_copy else 1)  # a trainable model's weights are never packed
    if all(isinstance(lin, Int8Linear) and lin.bias is None for lin in linears):
        qweight = torch.cat([lin.qweight for lin in linears])
        scale = torch.cat([lin.scale for lin in linears])
        return Int8Linear(qweight, scale, None).forward
    return lambda x: torch.cat([lin(x) for lin in linears], dim=-1)


def residual_projection(linear: nn.Module, rows: int = 1) -> ResidualProjection:
    """(x, y) -> x + linear(y) for rows x [N, out], y [N, in]; one `addmm` for a plain float32 Linear (`addmv` for one
    row on a CPU, `row_products.py`).

    The transposed weight is a view taken once: the model's own weight, updated in place by training.
    (A bf16 `addmm` measured slower than its product and add apart; bf16, and an inference copy's float32
    for several rows, go through `weight_product`'s packed copy.)
    """
    if type(linear) is not nn.Linear or linear.bias is not None:
        return lambda x, y: x + linear(y)
    if not can_pack_float(linear.weight, rows):  # several rows: `weight_product`'s packed copy instead
        lay_out_for_decoding(linear)
        if linear.weight.dtype == torch.float32:
            if linear.weight.device.type == "cpu":
                return float_residual_product(linear.weight)
            return partial(torch.addmm, mat2=linear.weight.t())
    product = weight_product(linear.weight, rows)
    return lambda x, y: x + product(y)


def lay_out_for_decoding(linear: nn.Module) -> None:
    """Store an inference copy's float32 weight column-major (`row_products.py`); the module keeps a view of it."""
    if decodes_only(linear.weight):
        with torch.inference_mode(False), torch.no_grad():
            linear.weight.data = column_major(linear.weight.detach())


def one_query_attention(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """Attention of one new token q [B, H, 1, D] over every cached key [B, K, S, D]; heads out as rows [B, H * D].

    With grouped heads in bf16, the G query heads that share a key/value head go in as G queries of
    that head ([B, K, G, D]) rather than as H one-query heads with `enable_gqa`. Bit-identical to
    `enable_gqa`; on an AVX512-BF16 CPU 1.8x faster at 16 cached keys and 7x at 500 (18 against
    127 us per block at `small`'s shapes). In float32 SDPA's one-query kernel is the faster of the
    two (4 against 9 us at 16 keys), so float32 keeps `enable_gqa`.
    """
    B, H, _, D = q.shape
    K = keys.shape[1]
    if K != H and q.dtype == torch.bfloat16:
        return F.scaled_dot_product_attention(q.reshape(B, K, H // K, D), keys, values).reshape(B, H * D)
    return F.scaled_dot_product_attention(q, keys, values, enable_gqa=K != H).reshape(B, H * D)


def rotation_table(cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """R [n, D, D] with x @ R[p] == x * cos[p] + rotate_half(x) * sin[p] for cos, sin [n, D].

    rotate_half(x) = cat(-x2, x1) = x @ Q with Q[i + D/2, i] = -1 and Q[i, i + D/2] = 1 (i < D/2), and
    multiplying column j by sin[p, j] is Q * sin[p] broadcast over rows.
    """
    half = cos.shape[-1] // 2
    eye = torch.eye(half, dtype=cos.dtype, device=cos.device)
    q = torch.zeros(2 * half, 2 * half, dtype=cos.dtype, device=cos.device)
    q[half:, :half], q[:half, half:] = -eye, eye
    return torch.diag_embed(cos) + q * sin[:, None, :]


class _FusedBlock:
    """One decoder block's weights, arranged for `FastDecoder`."""

    def __init__(self, block: nn.Module, rows: int = 1) -> None:
        attn = block.attn
        parts = [attn.q_proj, attn.k_proj, attn.v_proj]
        if attn.gate_proj is not None:
            parts.append(attn.gate_proj)
        self.qkv = fuse_projections(parts, rows)
        self.add_o_proj = residual_projection(attn.o_proj, rows)
        self.attn_norm, self.mlp_norm = block.attn_norm.weight, block.mlp_norm.weight
        # the model's own QK-norm weights, not a copy: an optimizer step between two calls updates them in place
        self.q_norm: torch.Tensor | None = None if attn.q_norm is None else attn.q_norm.weight
        self.k_norm: torch.Tensor | None = None if attn.k_norm is None else attn.k_norm.weight
        self.n_head, self.n_kv_head = attn.n_head, attn.n_kv_head
        self._qk_norm_rows: torch.Tensor | None = None
        self.moe: nn.Module | None = None
        self.relu2 = isinstance(block.mlp, ReLUSquared)  # one projection up, no gate
        if hasattr(block.mlp, "router"):
            self.moe = block.mlp
        else:
            self.gate_up = fuse_projections([block.mlp.up] if self.relu2 else [block.mlp.gate, block.mlp.up], rows)
            self.add_down = residual_projection(block.mlp.down, rows)

    def qk_norm_weight(self) -> torch.Tensor:
        """One weight row per head (n_head query rows, then n_kv_head key rows), from the current weights; built
        once for an inference copy (no gradient: nothing updates them)."""
        assert self.q_norm is not None and self.k_norm is not None
        if self._qk_norm_rows is not None:
            return self._qk_norm_rows
        rows = torch.cat([self.q_norm.expand(self.n_head, -1), self.k_norm.expand(self.n_kv_head, -1)])
        if not (self.q_norm.requires_grad or self.k_norm.requires_grad):
            self._qk_norm_rows = rows
        return rows


class FastDecoder:
    """A KV-cached runner for standard-attention modern models: `extend` tokens, get their logits."""

    def __init__(self, model: nn.Module, batch_size: int, capacity: int | None = None, rows_per_call: int = 1) -> None:
        """`rows_per_call`: how many tokens a typical `extend` brings (speculative decoding's verifier: k + 1); above
        one, float32 inference weights are packed for that many rows (`packed_float.py`)."""
        reason = refusal(model)
        if reason is not None:
            raise ValueError(f"FastDecoder cannot decode this model: {reason}")
        c = model.config
        weight = model.token_embed.weight
        self.model, self.device, self.dtype = model, weight.device, weight.dtype
        self.n_head, self.n_kv_head, self.head_dim = c.n_head, c.kv_heads, c.dim_per_head
        self.n_embed, self.eps, self.window = c.n_embed, c.norm_eps, c.sliding_window
        self.eps_tensor = torch.tensor(c.norm_eps, dtype=torch.float32, device=self.device)
        self.batch_size, self.capacity = batch_size, capacity or c.context_length
        self.blocks = [_FusedBlock(block, rows_per_call) for block in model.blocks]
        self.final_norm = model.norm.weight
        head = model.lm_head
        plain_head = type(head) is nn.Linear and head.bias is None
        self.lm_head: Projection = (weight_product(self._head_weight(head, weight, rows_per_call), rows_per_call)
                                    if plain_head else head.forward)
        self.softcap = c.logit_softcap
        self._allocate()
        self.rotation: torch.Tensor | None = None  # one-token RoPE as a matrix product, when the table is small
        if self.dtype == torch.float32 and self.capacity * self.head_dim**2 * 4 <= ROTATION_TABLE_BYTES:
            cos, sin = model.rope(self.slots, torch.float32, upto=self.capacity)
            self.rotation = rotation_table(cos[0, 0], sin[0, 0])

    @staticmethod
    def _head_weight(head: nn.Linear, embedding: torch.Tensor, rows: int) -> torch.Tensor:
        """The head's weight, column-major for an inference copy (`row_products.py`): its own, or, tied to the
        embedding table (which is read by rows), a column-major copy, the largest matrix read twice as fast. For
        several rows a call, an inference copy's weight as it is: `weight_product` packs a copy of it."""
        if can_pack_float(head.weight, rows):
            return head.weight
        if head.weight is not embedding:
            lay_out_for_decoding(head)
            return head.weight
        return column_major(embedding.detach()) if decodes_only(embedding) else embedding

    @classmethod
    def sharing(cls, other: FastDecoder, batch_size: int, capacity: int) -> FastDecoder:
        """A decoder with its own cache over `other`'s fused weights (fusing them again would cost a copy), and
        its RoPE table (positions up to `capacity` <= other's)."""
        if capacity > other.capacity:
            raise ValueError(f"a sharing decoder holds at most {other.capacity} slots, asked for {capacity}")
        decoder = cls.__new__(cls)
        own = ("keys", "values", "valid", "slots")
        decoder.__dict__.update({k: v for k, v in other.__dict__.items() if k not in own})
        decoder.batch_size, decoder.capacity = batch_size, capacity
        decoder._allocate()
        return decoder

    def _allocate(self) -> None:
        """The cache [batch, kv_heads, slots, head_dim] per block and the padding mask."""
        batch_size = self.batch_size
        shape = (batch_size, self.n_kv_head, self.capacity, self.head_dim)
        self.keys = [torch.zeros(shape, dtype=self.dtype, device=self.device) for _ in self.blocks]
        self.values = [torch.zeros(shape, dtype=self.dtype, device=self.device) for _ in self.blocks]
        self.valid = torch.ones(batch_size, self.capacity, dtype=torch.bool, device=self.device)
        self.slots = torch.arange(self.capacity, device=self.device)  # default positions, allocated once
        self._row_views: dict[int, tuple[list[torch.Tensor], list[torch.Tensor], torch.Tensor]] = {}
        self.length = 0
        self.padded = False

    def reset(self) -> None:
        self.length = 0
        self.padded = False

    def _first_rows(self, rows: int) -> tuple[list[torch.Tensor], list[torch.Tensor], torch.Tensor]:
        """Views of the cache's first `rows` rows, made once per row count (the server's batch asks every step)."""
        views = self._row_views.get(rows)
        if views is None:
            views = self._row_views[rows] = ([k[:rows] for k in self.keys], [v[:rows] for v in self.values],
                                             self.valid[:rows])
        return views

    def truncate(self, length: int) -> None:
        """Forget everything after `length` slots (speculative decoding rolls back rejected drafts)."""
        if not 0 <= length <= self.length:
            raise ValueError(f"cannot truncate a cache of length {self.length} to {length}")
        self.length = length

    def extend(
        self,
        idx: torch.Tensor,
        positions: torch.Tensor | None = None,
        valid: torch.Tensor | None = None,
        last_only: bool = True,
        first_key: int | None = None,
    ) -> torch.Tensor:
        """Append tokens idx [B, T] to the cache; logits [B, 1 or T, vocab] of the last or all of them.

        B may be fewer than the cache's rows: the first B rows are used (the server's batch grows and shrinks).
        `first_key`: every row's tokens begin at this column (rows that joined together), so one new token
        attends over [first_key, end) without a mask, at position column - first_key.
        """
        B, T = idx.shape
        keys, values, valid_rows = self.keys, self.values, self.valid
        if self.batch_size != B:
            keys, values, valid_rows = self._first_rows(B)
        start, end = self.length, self.length + idx.shape[1]
        if end > self.capacity:
            raise ValueError(f"KV cache full: {start} + {T} tokens > capacity {self.capacity}")
        default_positions = positions is None
        offset = first_key or 0
        if positions is None:
            positions = self.slots[start - offset : end - offset]
        if valid is not None:
            valid_rows[:, start:end] = valid
            self.padded = True
        elif self.padded:
            valid_rows[:, start:end] = True
        lo = 0
        if T == 1 and (first_key is not None or not self.padded):  # one query sees every key from lo on
            mask, is_causal, lo = None, False, offset
            if self.window is not None:
                lo = max(lo, end - self.window)
        else:
            key_valid = valid_rows[:, :end] if self.padded else None
            mask, is_causal = attention_mask(T, start, self.window, key_valid, self.device)
        if T == 1 and self.rotation is not None:  # [1 or B, 1, D, D]: a view for the default positions
            rotation = self.rotation[start - offset : end - offset] if default_positions else self.rotation[positions]
        else:
            cos, sin = self.model.rope(positions, self.dtype, upto=end)
        H, K, D = self.n_head, self.n_kv_head, self.head_dim
        gqa = K != H

        x = F.embedding(idx.reshape(-1), self.model.token_embed.weight)  # the residual stream as rows [B*T, C]
        for i, block in enumerate(self.blocks):
            h = self.norm(x, block.attn_norm)
            proj = block.qkv(h)
            gated = proj.shape[-1] > (H + 2 * K) * D  # sigmoid output gate, fused into the same product
            qkv = (proj[:, : (H + 2 * K) * D] if gated else proj).view(B, T, H + 2 * K, D)
            qk = qkv[:, :, : H + K]
            if block.q_norm is not None and block.k_norm is not None:
                qk = F.rms_norm(qk, (D,), None, self.eps) * block.qk_norm_weight()
            if T == 1 and self.rotation is not None:
                qk = qk.transpose(1, 2) @ rotation  # [B, H + K, 1, D]
            else:
                qk = apply_rope(qk.transpose(1, 2), cos, sin)  # [B, H + K, T, D]
            q, k = qk.narrow(1, 0, H), qk.narrow(1, H, K)
            keys[i].narrow(2, start, T).copy_(k)
            values[i].narrow(2, start, T).copy_(qkv[:, :, H + K :].transpose(1, 2))
            seen_k, seen_v = keys[i].narrow(2, lo, end - lo), values[i].narrow(2, lo, end - lo)
            if T == 1 and mask is None:
                y = one_query_attention(q, seen_k, seen_v)
            else:
                y = F.scaled_dot_product_attention(q, seen_k, seen_v, attn_mask=mask, is_causal=is_causal,
                                                   enable_gqa=gqa)
                y = y.transpose(1, 2).reshape(B * T, H * D)
            if gated:
                y = y * torch.sigmoid(proj[:, (H + 2 * K) * D :])
            x = block.add_o_proj(x, y)
            h = self.norm(x, block.mlp_norm)
            if block.moe is not None:
                x = x + block.moe(h)[0]
            elif block.relu2:
                x = block.add_down(x, F.relu(block.gate_up(h)).square())
            else:
                gate, up = block.gate_up(h).chunk(2, dim=-1)
                x = block.add_down(x, F.silu(gate) * up)
        self.length = end
        x = x.view(B, T, self.n_embed)
        if last_only:
            x = x[:, -1:]
        return soft_cap(self.lm_head(self.norm(x, self.final_norm)), self.softcap)

    def norm(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """RMSNorm of x [rows, n_embed]; one row takes three kernels (five in bf16) instead of the composite op.

        The bf16 row is normalized in float32 and cast back before the weight multiplies it, the order
        of the model's own `RMSNorm`.
        """
        if x.numel() != self.n_embed:
            return F.rms_norm(x, (self.n_embed,), weight, self.eps)
        row = x.view(1, -1) if x.dtype == torch.float32 else x.view(1, -1).float()
        mean_square = torch.addmm(self.eps_tensor, row, row.T, alpha=1.0 / self.n_embed)  # x x^T / D + eps
        if x.dtype == torch.float32:
            return x * mean_square.rsqrt_() * weight
        return (row * mean_square.rsqrt_()).to(x.dtype).view(x.shape) * weight
