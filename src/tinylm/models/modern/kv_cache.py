"""A preallocated key/value cache: prefill the prompt once, then decode one token per step.

Without a cache, generating token t recomputes keys and values for all t previous tokens. With it,
each step computes them only for the new token and appends them to buffers allocated once for the
whole generation: no per-step reallocation or concatenation. Buffers are [batch, max_len, ...] per
layer and per name ("k", "v" for standard attention; "latent", "k_rope" for MLA, which caches a
compressed latent instead of full keys and values). `valid` marks which slots hold real tokens, so
left-padded batches of different prompt lengths mask their padding.
"""

from __future__ import annotations

import math

import torch


class KVCache:
    def __init__(
        self,
        n_layers: int,
        batch_size: int,
        max_len: int,
        per_token_shapes: dict[str, tuple[int, ...]],
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
    ) -> None:
        self.max_len = max_len
        self.batch_size = batch_size
        self.per_token_shapes = per_token_shapes
        self.buffers: list[dict[str, torch.Tensor]] = [
            {name: torch.zeros(batch_size, max_len, *shape, dtype=dtype, device=device)
             for name, shape in per_token_shapes.items()}
            for _ in range(n_layers)
        ]
        self.valid = torch.ones(batch_size, max_len, dtype=torch.bool, device=device)
        self.length = 0  # slots filled so far (the same for every sequence in the batch)
        self.padded = False  # True once some slot was written as padding: masks are needed from then on

    def write(self, layer: int, name: str, value: torch.Tensor) -> torch.Tensor:
        """Store `value` [B, T, ...] at the next T slots; return everything cached so far [B, S, ...]."""
        t = value.shape[1]
        if self.length + t > self.max_len:
            raise ValueError(f"KV cache full: {self.length} + {t} tokens > max_len {self.max_len}")
        buffer = self.buffers[layer][name]
        buffer[:, self.length : self.length + t] = value
        return buffer[:, : self.length + t]

    def mark_valid(self, valid: torch.Tensor | None, t: int) -> torch.Tensor | None:
        """Record which of the next t slots are real tokens; validity of all slots so far, or None if all are."""
        if valid is None:
            self.valid[:, self.length : self.length + t] = True
        else:
            self.valid[:, self.length : self.length + t] = valid
            self.padded = True
        return self.valid[:, : self.length + t] if self.padded else None

    def advance(self, t: int) -> None:
        self.length += t

    def truncate(self, length: int) -> None:
        """Forget everything after `length` slots (speculative decoding rolls back rejected tokens)."""
        if not 0 <= length <= self.length:
            raise ValueError(f"cannot truncate a cache of length {self.length} to {length}")
        self.length = length

    def reset(self) -> None:
        self.length = 0
        self.padded = False

    def bytes_per_token(self) -> int:
        """Bytes cached per token of one sequence, summed over layers."""
        element = self.buffers[0][next(iter(self.per_token_shapes))].element_size() if self.buffers else 4
        per_layer = sum(math.prod(shape) for shape in self.per_token_shapes.values())
        return per_layer * len(self.buffers) * element
