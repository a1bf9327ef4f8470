"""The modern decoder (Llama 3 / Qwen 3 / DeepSeek-V3 family), assembled from one file per idea.

    tokens -> embedding -> [ModernBlock] x n_blocks -> RMSNorm -> lm_head (tied to the embedding)

Positions enter only through RoPE inside attention, so there is no position table. `forward` is the
training interface; `forward_hidden` with a `KVCache` (from `new_cache`) is the generation one.
For packed rows (several conversations per row), `positions` restart at 0 in each conversation and
`segments` confine attention to it (models/modern/mask.py).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from tinylm.config import ModelConfig
from tinylm.models.accounting import count_params, training_flops_per_token
from tinylm.models.init import init_gpt2
from tinylm.models.loss import output_head_loss, soft_cap
from tinylm.models.modern.block import ModernBlock
from tinylm.models.modern.kv_cache import KVCache
from tinylm.models.modern.mask import attention_mask
from tinylm.models.modern.norm import RMSNorm
from tinylm.models.modern.rope import RotaryEmbedding
from tinylm.models.modern.rope_scaling import RopeScaling


class ModernGPT(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        if config.arch != "modern":
            raise ValueError(f"invalid config: arch={config.arch!r}: ModernGPT needs arch='modern'")
        self.config = config
        self.token_embed = nn.Embedding(config.vocab_size, config.n_embed)
        self.dropout = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(ModernBlock(config, i) for i in range(config.n_blocks))
        self.norm = RMSNorm(config.n_embed, config.norm_eps)
        self.lm_head = nn.Linear(config.n_embed, config.vocab_size, bias=False)
        if config.tie_embeddings:
            self.lm_head.weight = self.token_embed.weight  # the same Parameter object
        rope_dim = config.qk_rope_head_dim if config.attention == "mla" else config.dim_per_head
        self.rope = RotaryEmbedding(rope_dim, config.context_length, config.rope_theta, RopeScaling.of(config))
        init_gpt2(self, config.n_blocks, config.init_std, config.zero_init_head)

    # ---- generation interface ------------------------------------------------------------------
    def new_cache(
        self, batch_size: int, max_len: int | None = None, dtype: torch.dtype | None = None,
        device: torch.device | str | None = None,
    ) -> KVCache:
        c = self.config
        if c.attention == "mla":
            shapes = {"latent": (c.kv_lora_rank,), "k_rope": (c.qk_rope_head_dim,)}
        else:
            shapes = {"k": (c.kv_heads, c.dim_per_head), "v": (c.kv_heads, c.dim_per_head)}
        weight = self.token_embed.weight
        return KVCache(c.n_blocks, batch_size, max_len or c.context_length, shapes,
                       dtype or weight.dtype, device or weight.device)

    def forward_hidden(
        self,
        idx: torch.Tensor,
        cache: KVCache | None = None,
        positions: torch.Tensor | None = None,
        valid: torch.Tensor | None = None,
        segments: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Final-norm hidden states [B, T, n_embed] for tokens idx [B, T].

        With a cache, the tokens continue what it holds. `positions` [B, T] (default: consecutive
        from the cache length) and `valid` [B, T] (False for left padding) serve batches of prompts
        of different lengths. `segments` [B, T] (no cache): a token attends only within its segment.
        """
        return self._hidden_and_aux(idx, cache, positions, valid, segments)[0]

    def _hidden_and_aux(
        self,
        idx: torch.Tensor,
        cache: KVCache | None = None,
        positions: torch.Tensor | None = None,
        valid: torch.Tensor | None = None,
        segments: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        T = idx.shape[1]
        start = cache.length if cache is not None else 0
        if segments is not None and cache is not None:
            raise ValueError("segments (packed rows) are for training; pass them without a KV cache")
        if positions is None:
            positions = torch.arange(start, start + T, device=idx.device)
        key_valid = cache.mark_valid(valid, T) if cache is not None else valid
        mask, is_causal = attention_mask(T, start, self.config.sliding_window, key_valid, idx.device, segments)
        x = self.dropout(self.token_embed(idx))
        cos, sin = self.rope(positions, x.dtype, upto=start + T)
        aux_total: torch.Tensor | None = None
        for block in self.blocks:
            if self.config.gradient_checkpointing and self.training and cache is None:
                x, aux = checkpoint(block, x, cos, sin, mask, is_causal, use_reentrant=False)
            else:
                x, aux = block(x, cos, sin, mask, is_causal, cache)
            if aux is not None:
                aux_total = aux if aux_total is None else aux_total + aux
        if cache is not None:
            cache.advance(T)
        return self.norm(x), aux_total

    # ---- training interface --------------------------------------------------------------------
    def forward(
        self,
        idx: torch.Tensor,
        targets: torch.Tensor | None = None,
        return_logits: bool = True,
        positions: torch.Tensor | None = None,
        segments: torch.Tensor | None = None,
        reduction: str = "mean",
        logits_at: torch.Tensor | None = None,
        z_loss: float = 0.0,
    ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """(logits [B, T, vocab], mean cross-entropy + MoE balance loss in training mode, or None).

        Training passes `return_logits=False`: the loss then goes through the output head in chunks
        (`models/loss.py`, same value and gradients) without ever holding the full logits, and the
        logits come back as None. Packed rows pass `positions` and `segments` [B, T].
        `reduction="sum"`: the cross-entropy summed over target tokens (the MoE balance loss then
        counts once per target token, so sum / n_targets is the mean loss).
        `logits_at` [B, T] bool: only those positions go through the head, logits come back [n, vocab]
        (RL scores the response tokens only: the prompt's logits would be computed and thrown away).
        `z_loss`: each target token's loss gains z * logsumexp(logits)^2 (pretraining's --z-loss).
        """
        hidden, aux = self._hidden_and_aux(idx, positions=positions, segments=segments)
        if logits_at is not None:
            hidden, targets = hidden[logits_at], None if targets is None else targets[logits_at]
        logits, loss = output_head_loss(self.lm_head, hidden, targets, return_logits, reduction, z_loss,
                                        self.config.logit_softcap)
        if loss is not None and aux is not None and self.training:
            loss = loss + (aux if reduction == "mean" else aux * (targets >= 0).sum())
        return logits, loss

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """The output head on final hidden states, soft-capped if the config says: what decoding samples from."""
        return soft_cap(self.lm_head(hidden), self.config.logit_softcap)

    def num_params(self, non_embedding: bool = False, active: bool = False) -> int:
        return count_params(self, non_embedding, active)

    def flops_per_token(self, seq_len: int | None = None) -> int:
        return training_flops_per_token(self, seq_len or self.config.context_length)
