"""How fast this device reads memory: the ceiling of batch-1 decoding once the weights leave the cache.

Generating one token at batch 1 reads every weight once and does two FLOPs per weight read, far too
few to keep the multipliers busy: past the size of the last-level cache, tokens/s can be at most
(bytes read per second) / (bytes of weights). `read_bandwidth` measures the first number the way
decoding reads (a streaming reduction over a buffer several times larger than any cache), so
`tinylm bench --only decode` can say how close a decoder is to that roofline, not only how it
compares with another implementation that may be as far from it.

The bytes a step reads are the weights and the KV cache so far: at token t of a generation after a
prompt of P, every block reads its cached keys and values for P + t positions. `decode_read_bytes`
adds the mean of that over the generation to the weights, and `read_bandwidths` measures the wall at
one thread (what batch-1 decoding with `--threads 1` can reach) and at all of them.
"""

from __future__ import annotations

import torch
from torch import nn

from tinylm.bench.timing import Measurement, rate
from tinylm.config import ModelConfig
from tinylm.inference.int8 import Int8Linear


def read_bandwidth(device: torch.device, megabytes: int = 512, repeats: int = 5) -> float:
    """Best bytes/s of summing a `megabytes` fp32 buffer on `device` (read once per call)."""
    n = megabytes * (1 << 20) // 4
    buffer = torch.ones(n, dtype=torch.float32, device=device)
    buffer.sum()  # warm-up: pages touched, thread pool up
    return Measurement([rate(lambda: buffer.sum(), float(buffer.numel() * 4), device, iterations=3)
                        for _ in range(repeats)]).high


def weight_bytes(model: nn.Module) -> int:
    """Bytes of the weights one decoding step reads (`parameters()` yields a tied head once).

    int8 layers keep their rows and scales as buffers (`inference/int8.py`); they are read too.
    """
    int8 = sum(t.numel() * t.element_size() for m in model.modules() if isinstance(m, Int8Linear)
               for t in (m.qweight, m.scale))
    return int8 + sum(p.numel() * p.element_size() for p in model.parameters())


def read_bandwidths(device: torch.device, megabytes: int = 512) -> dict[str, float]:
    """Bytes/s read by one thread and by all of torch's threads (the setting is restored)."""
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = read_bandwidth(device, megabytes)
    finally:
        torch.set_num_threads(threads)
    return {"one_thread_bytes_per_s": one, "all_threads_bytes_per_s": read_bandwidth(device, megabytes),
            "all_threads": threads}


def kv_bytes_per_position(config: ModelConfig, element_bytes: int) -> int:
    """Bytes one cached position holds over every block: keys and values, or MLA's latent and rotary key."""
    if config.attention == "mla":
        return config.n_blocks * (config.kv_lora_rank + config.qk_rope_head_dim) * element_bytes
    return 2 * config.n_blocks * config.kv_heads * config.dim_per_head * element_bytes


def decode_read_bytes(weights: int, config: ModelConfig, prompt: int, new_tokens: int, kv_element_bytes: int) -> float:
    """Mean bytes read per generated token: the weights, and the cache over P + t positions at token t (t < n)."""
    mean_positions = prompt + (new_tokens - 1) / 2
    return weights + kv_bytes_per_position(config, kv_element_bytes) * mean_positions
