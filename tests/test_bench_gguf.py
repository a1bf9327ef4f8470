"""benchmarks/bench_gguf.py: both engines at each number type in one run, the ratios and the memory wall derived.

A random modern model (speed does not depend on the weights) decodes a few tokens at every type in tinylm and in
a real llama.cpp; the JSON's ratios, bytes per token and bandwidth shares must follow from its own figures, and
every tinylm type must decode what the model's own forward decodes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gguf_support import VOCAB, bpe_tokenizer, needs_llama_cpp, random_checkpoint
from model_variants import modern_config

pytestmark = needs_llama_cpp()
REPO = Path(__file__).resolve().parents[1]


def test_the_same_type_ratios_and_the_bytes_per_token_follow_from_the_runs_own_figures(tmp_path: Path) -> None:
    tokenizer_file = bpe_tokenizer(tmp_path)
    config = modern_config("gqa", vocab_size=VOCAB, n_embed=64, context_length=64)  # 64: one q8_0 block per row
    checkpoint = random_checkpoint(tmp_path, "run", config, tokenizer_file, scale=0.3)
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_gguf.py"), "--checkpoint", str(checkpoint),
                           "--new-tokens", "8", "--agree-tokens", "0", "--repeats", "1", "--types", "f32,bf16,q8_0"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    r = json.loads(done.stdout)
    tinylm, gguf = r["tinylm"], r["types"]
    assert set(r["ratio_same_type"]) == {"f32", "bf16", "int8_vs_q8_0"}
    for key, mine, theirs in (("f32", "f32", "f32"), ("bf16", "bf16", "bf16"), ("int8_vs_q8_0", "int8", "q8_0")):
        expected = tinylm[mine]["tokens_per_s"] / gguf[theirs]["llama_cpp_tokens_per_s"]
        assert r["ratio_same_type"][key] == pytest.approx(expected, rel=2e-3, abs=2e-3), key
    # float32: the fast decoder's greedy tokens are the model's own; in bf16 the two round in other orders, so a
    # near-tie of a random model may go either way (the trained models of docs/benchmarks.md decode identically)
    assert tinylm["f32"]["identical_to_reference_path"] is True
    assert all(isinstance(row["identical_to_reference_path"], bool) for row in tinylm.values())
    # bytes per token: the weights and the mean cache over P + t positions, t < n (K and V, every block)
    c = config
    positions = r["prompt_tokens"] + (r["new_tokens"] - 1) / 2
    cache_fp32 = 2 * c.n_blocks * c.kv_heads * c.dim_per_head * 4 * positions
    assert tinylm["f32"]["bytes_per_token"] == round(tinylm["f32"]["weight_bytes"] + cache_fp32)
    assert tinylm["bf16"]["weight_bytes"] * 2 == tinylm["f32"]["weight_bytes"]
    wall = r["bandwidth"]["one_thread_bytes_per_s"]  # --threads 1
    for row in (*tinylm.values(), *gguf.values()):
        speed = row.get("tokens_per_s", row.get("llama_cpp_tokens_per_s"))
        assert row["share_of_bandwidth"] == pytest.approx(speed * row["bytes_per_token"] / wall, abs=2e-3)
    assert r["tinylm_generate_tokens_per_s"] == tinylm["auto"]["tokens_per_s"]
