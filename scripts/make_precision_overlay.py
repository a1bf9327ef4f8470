"""Draw docs/img/precision-overlay.png: dev loss of fp32 and bf16 autocast, same data, seed and budget.

    python scripts/make_precision_overlay.py                       # tiny and small, 300 steps each
    python scripts/make_precision_overlay.py --presets tiny --steps 50   # a quick look

Each preset trains three times on the embedded corpus with `run_training` (what `tinylm train` calls):
fp32 with two seeds (their gap is the run-to-run noise) and bf16 autocast with the first seed, every
run evaluating the dev loss every `--eval-every` steps. The figure overlays the curves; the printed
JSON has each run's final dev loss and tokens/s, what docs/pipeline/precision.md quotes. Training is
too slow for the test suite (tests/test_train_device.py bounds a short run instead), so the PNG is
committed; rerun this on a quiet machine after a change that could move the curves.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

DOCS_IMG = Path(__file__).resolve().parents[1] / "docs" / "img"
BATCH = {"tiny": 16, "small": 8}
RUNS = (("fp32", 1337), ("fp32", 1338), ("bf16", 1337))  # two fp32 seeds: their gap is the noise


def dev_curve(run_dir: Path) -> list[tuple[int, float]]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [(r["step"], r["dev_loss"]) for r in rows if "dev_loss" in r]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--presets", default="tiny,small")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--eval-every", type=int, default=25)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--out", type=Path, default=DOCS_IMG / "precision-overlay.png")
    args = parser.parse_args(argv)

    import matplotlib.pyplot as plt

    from tinylm.stages.pretrain import pretrain
    from tinylm.stages.pretrain.config import PretrainConfig

    presets = [p.strip() for p in args.presets.split(",") if p.strip()]
    fig, axes = plt.subplots(1, len(presets), figsize=(6 * len(presets), 4), squeeze=False)
    summary: dict[str, dict[str, object]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for ax, preset in zip(axes[0], presets, strict=True):
            for dtype, seed in RUNS:
                name = f"{preset}-{dtype}-{seed}"
                print(f"training {name} ...", file=sys.stderr)
                result = pretrain(PretrainConfig(
                    preset=preset, dtype=dtype, seed=seed, max_steps=args.steps, eval_every=args.eval_every,
                    batch_size=BATCH.get(preset, 8), threads=args.threads, sample_tokens=0, progress=False,
                    out=str(Path(tmp) / name)))
                steps, losses = zip(*dev_curve(Path(result.run_dir)), strict=True)
                ax.plot(steps, losses, label=f"{dtype} seed {seed}", linestyle="-" if dtype == "fp32" else "--")
                summary[name] = {"dev_loss": result.dev_loss, "tokens_per_s": result.tokens_per_s}
            ax.set_title(f"{preset}: dev loss, fp32 vs bf16 autocast")
            ax.set_xlabel("step")
            ax.set_ylabel("dev loss (nats)")
            ax.legend()
    fig.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=110)
    print(json.dumps({"figure": str(args.out), "runs": summary}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
