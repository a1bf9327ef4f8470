"""A training-memory estimate: what must fit on the device before the first step can run.

weights + gradients (4 bytes each per parameter in fp32) + AdamW state (two fp32 moments: 8 bytes; the
default Muon keeps one on the hidden matrices, so for it this is an upper bound) + activations kept
for the backward pass. The activation term counts, per token and block, the
tensors autograd saves (norm inputs, q/k/v, attention output, MLP intermediates, residuals; the
hand-written classic attention also keeps its T x T score and probability matrices), plus the
logits and their gradient at the output. It is an estimate (allocator slack, temporary buffers and
framework overhead come on top), meant to tell 1 GB from 10 GB, not 1.0 from 1.1.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from tinylm.config import ModelConfig


@dataclass
class MemoryEstimate:
    weights: int
    gradients: int
    optimizer: int
    activations: int

    @property
    def total(self) -> int:
        return self.weights + self.gradients + self.optimizer + self.activations

    def to_dict(self) -> dict[str, int]:
        return {**asdict(self), "total": self.total}


def activation_elements_per_token(config: ModelConfig, seq_len: int) -> int:
    C = config.n_embed
    if config.arch == "classic":
        attention = 4 * C + 3 * C  # norm input, qkv, attention output, o_proj input
        if config.attn_impl == "manual":
            attention += 2 * config.n_head * seq_len  # scores and softmax probabilities
        mlp = C + 2 * 4 * C  # norm input, hidden pre/post ReLU
        return config.n_blocks * (attention + mlp + 2 * C)
    if config.attention == "mla":
        qkv = config.n_head * (2 * (config.nope_dim + config.qk_rope_head_dim) + config.value_dim)
        qkv += config.kv_lora_rank + config.qk_rope_head_dim
    else:
        qkv = (config.n_head + 2 * config.kv_heads) * config.dim_per_head
    attention = C + qkv + config.n_head * config.dim_per_head + C
    if config.is_moe:
        width = config.expert_width * (config.n_experts_per_token + config.n_shared_experts)
    else:
        width = config.mlp_width
    mlp = C + 4 * width  # norm input, gate, up, silu(gate), product
    return config.n_blocks * (attention + mlp + 2 * C)


def training_memory(
    config: ModelConfig, n_params: int, batch_size: int, seq_len: int, activation_bytes: int = 4
) -> MemoryEstimate:
    tokens = batch_size * seq_len
    activations = tokens * activation_elements_per_token(config, seq_len) * activation_bytes
    activations += tokens * config.vocab_size * 4 * 2  # float32 logits and their gradient
    return MemoryEstimate(weights=4 * n_params, gradients=4 * n_params, optimizer=8 * n_params,
                          activations=activations)
