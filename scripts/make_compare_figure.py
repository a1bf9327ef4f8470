"""Draw docs/img/compare-loss.png: the loss curves of classic vs modern, trained on the same data and budget.

    python scripts/make_compare_figure.py                  # about 10 minutes on 2 CPU cores
    python scripts/make_compare_figure.py --max-steps 50   # a quick look

This is what `tinylm compare` does, spelled out: prepare the embedded corpus once, train the `tiny`
preset of each architecture with the same seed, data, steps and batch, then plot both runs'
metrics.jsonl with `tinylm.train.plot.plot_runs`. It is too slow for the test suite, so the PNG it
produces is committed; rerun it after a change that moves the curves, and update the numbers quoted
on docs/pipeline/compare.md from the table it prints.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from tinylm.train.metrics import read_metrics
from tinylm.train.plot import plot_runs

DOCS_IMG = Path(__file__).resolve().parents[1] / "docs" / "img"


def train(arch: str, out: Path, max_steps: int, seed: int) -> None:
    command = [sys.executable, "-m", "tinylm", "train", "--preset", "tiny", "--arch", arch, "--out", str(out),
               "--max-steps", str(max_steps), "--seed", str(seed)]
    print("$", " ".join(command[2:]), file=sys.stderr)
    subprocess.run(command, check=True)


def last(rows: list[dict], key: str) -> float | None:
    values = [r[key] for r in rows if isinstance(r.get(key), (int, float))]
    return values[-1] if values else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-steps", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=DOCS_IMG / "compare-loss.png")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        runs = [Path(tmp) / f"tiny-{arch}" for arch in ("classic", "modern")]
        for run in runs:
            train(run.name.split("-")[1], run, args.max_steps, args.seed)
        png = plot_runs(runs, Path(tmp) / "compare.png", title=f"tiny preset, {args.max_steps} steps, same data")
        args.out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(png, args.out)
        table = {run.name: {"loss": last(read_metrics(run), "loss"), "dev_loss": last(read_metrics(run), "dev_loss"),
                            "dev_bpb": last(read_metrics(run), "dev_bpb")} for run in runs}
    print(json.dumps(table, indent=2))
    print(args.out, file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
