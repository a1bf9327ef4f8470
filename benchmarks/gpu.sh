#!/usr/bin/env bash
# tinylm bench on one CUDA GPU (H100/H200 class): the 124m and 350m modern presets in bf16, eager and
# torch.compile, flash SDPA; prints tokens/s and MFU against the GPU's datasheet bf16 peak. ~4-5 minutes.
#
#   bash benchmarks/gpu.sh                 # results in ./gpu-bench/, summary on stdout
#   PYTHON=/path/to/python OUT=dir bash benchmarks/gpu.sh
#
# The eager runs also time the transformers twin (LlamaForCausalLM, same weights, batch, dtype); the
# compiled runs skip it (compiling both would double the compile time and break the 5-minute budget).
set -euo pipefail

cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python}
OUT=${OUT:-gpu-bench}
BATCH=${BATCH:-16}   # 16 x 1024 tokens per step for both presets
mkdir -p "$OUT"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"  # works from a clone without `pip install -e .`

"$PYTHON" - <<'PY'
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

assert torch.cuda.is_available(), "no CUDA device: this script is for a GPU machine"
print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, CUDA {torch.version.cuda}")
q = torch.randn(2, 12, 1024, 64, device="cuda", dtype=torch.bfloat16)
with sdpa_kernel(SDPBackend.FLASH_ATTENTION):  # raises if flash cannot run these shapes
    F.scaled_dot_product_attention(q, q, q, is_causal=True)
print("flash SDPA: available for bf16, head_dim 64, causal")
PY

run() {  # run NAME TIMEOUT_S ARGS...
    local name=$1 limit=$2
    shift 2
    echo "== $name" >&2
    if ! timeout "$limit" "$PYTHON" -m tinylm bench --device cuda --dtype bf16 --batch-size "$BATCH" \
        --repeats 5 --warmup 3 --json --out "$OUT/$name.json" "$@" > /dev/null; then
        echo "   $name failed or ran past ${limit}s" >&2
    fi
}

run 124m-eager    45 --preset 124m --only matmul,train
run 124m-compile  90 --preset 124m --only train --compile --no-reference
run 350m-eager    55 --preset 350m --only train
run 350m-compile 110 --preset 350m --only train --compile --no-reference

"$PYTHON" - "$OUT" <<'PY'
import json
import sys
from pathlib import Path

out = Path(sys.argv[1])
print("\n| run | tokens/s (min-max) | MFU (6N) | transformers tokens/s | ratio |")
print("|---|---|---|---|---|")
peaks = None
for name in ("124m-eager", "124m-compile", "350m-eager", "350m-compile"):
    path = out / f"{name}.json"
    if not path.is_file():
        print(f"| {name} | (no result) | | | |")
        continue
    r = json.loads(path.read_text())
    t = r["train"]
    ref = r.get("reference_train_tokens_per_s")
    ratio = r.get("train_ratio_vs_transformers")
    print(f"| {name} | {t['median']:,.0f} ({t['min']:,.0f}-{t['max']:,.0f}) | {r['mfu']:.1%} "
          f"| {'-' if ref is None else f'{ref:,.0f}'} | {'-' if ratio is None else f'{ratio:.2f}x'} |")
    if "matmul_peak_flops_bf16" in r:
        peaks = (r["matmul_peak_flops_bf16"], r["matmul_peak_flops_fp32"], r["peak_flops"], r["peak_flops_source"])
if peaks:
    print(f"\nmeasured matmul peak: bf16 {peaks[0] / 1e12:.0f} TFLOP/s, tf32 {peaks[1] / 1e12:.0f} TFLOP/s; "
          f"MFU denominator: {peaks[2] / 1e12:.0f} TFLOP/s ({peaks[3]} bf16 peak)")
PY
