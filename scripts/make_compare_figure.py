"""Draw docs/img/compare-loss.png: the dev-loss curves of classic vs modern, same data, seed and budget.

    python scripts/make_compare_figure.py                 # 300 steps each: a few minutes on 2 CPU cores
    python scripts/make_compare_figure.py --steps 50      # a quick look

It runs exactly the command shown on docs/pipeline/compare.md,

    tinylm compare --preset tiny --archs classic,modern --steps 300 --eval-every 25 --out DIR

in a temporary folder, copies DIR/compare.png to docs/img/compare-loss.png and prints DIR/compare.md
(the table quoted on the page). Training is too slow for the test suite, so the PNG is committed;
rerun this after a change that moves the curves and update the page from what it prints.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

DOCS_IMG = Path(__file__).resolve().parents[1] / "docs" / "img"


def compare_command(steps: int, eval_every: int, out: Path) -> list[str]:
    """The `tinylm compare` arguments for the figure (what the docs page shows, with out = DIR)."""
    return ["compare", "--preset", "tiny", "--archs", "classic,modern", "--steps", str(steps),
            "--eval-every", str(eval_every), "--out", str(out)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--eval-every", type=int, default=25)
    parser.add_argument("--out", type=Path, default=DOCS_IMG / "compare-loss.png")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        command = compare_command(args.steps, args.eval_every, Path(tmp) / "compare")
        print("$ tinylm", " ".join(command), file=sys.stderr)
        subprocess.run([sys.executable, "-m", "tinylm", *command], check=True, stdout=subprocess.DEVNULL)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(Path(tmp) / "compare" / "compare.png", args.out)
        print((Path(tmp) / "compare" / "compare.md").read_text(encoding="utf-8"))
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
