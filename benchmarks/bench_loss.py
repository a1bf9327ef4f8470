"""The output head + cross-entropy alone: chunked (`tinylm.models.loss`) against the plain full-logits way.

    .venv/bin/python benchmarks/bench_loss.py [--repeats 7]

Forward and backward of `F.cross_entropy(F.linear(h, W, b).float(), y)` against
`chunked_cross_entropy(h, W, y, b)`, interleaved, at the shapes of the classic `13m` preset
(2,048 tokens, n_embed 128, vocabulary 50,304) and of `tiny` (4,096 tokens, 128, 4,096). Prints
one JSON object per shape with rows/s of each and their ratio.
"""

from __future__ import annotations

import argparse
import json

import torch
import torch.nn.functional as F

from tinylm.bench.timing import interleaved, ratio
from tinylm.models.loss import chunked_cross_entropy

SHAPES = {"13m": (2048, 128, 50304), "tiny": (4096, 128, 4096)}


def measure(rows: int, dim: int, vocab: int, repeats: int) -> dict[str, object]:
    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(rows, dim, generator=g, requires_grad=True)
    weight = (0.02 * torch.randn(vocab, dim, generator=g)).requires_grad_()
    bias = torch.zeros(vocab, requires_grad=True)
    targets = torch.randint(0, vocab, (rows,), generator=g)

    def plain() -> None:
        F.cross_entropy(F.linear(hidden, weight, bias).float(), targets).backward()

    def chunked() -> None:
        chunked_cross_entropy(hidden, weight, targets, bias).backward()

    measured = interleaved({"chunked": (chunked, rows), "plain": (plain, rows)}, torch.device("cpu"), repeats,
                           warmup=1)
    return {"chunked_rows_per_s": measured["chunked"].to_dict(), "plain_rows_per_s": measured["plain"].to_dict(),
            "ratio_chunked_vs_plain": ratio(measured["chunked"], measured["plain"])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    for name, (rows, dim, vocab) in SHAPES.items():
        row = {"shape": name, "rows": rows, "n_embed": dim, "vocab": vocab, **measure(rows, dim, vocab, args.repeats)}
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
