"""Does a passkey at depth 0 fail on its distance, or on being the prompt's first tokens?

    python benchmarks/passkey_first_tokens.py RUN [RUN ...] [--shifts 0 5 20 60] [--keys 100]

For each shift S: the depth-0 prompt of `passkey:1024` built S tokens shorter, with S tokens of the
evaluation's filler put before the needle, so the key is S tokens into the prompt and about as far from
the question. Equal accuracy at every S says the distance decides, not the position. Prints one JSON
line per run: accuracy by shift.
"""

from __future__ import annotations

import argparse
import json
import random

import torch

from tinylm.checkpoint import load_model
from tinylm.data.passkey_words import FILLER
from tinylm.errors import TinyLMError
from tinylm.evaluate.long_context import answered, greedy_text, passkey_prompt


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+")
    parser.add_argument("--shifts", type=int, nargs="+", default=[0, 5, 20, 60])
    parser.add_argument("--keys", type=int, default=100)
    parser.add_argument("--length", type=int, default=1024)
    args = parser.parse_args()
    for run in args.runs:
        try:
            model, tokenizer, _ = load_model(run)
        except TinyLMError as error:  # a missing or damaged run: one line, as the tinylm commands say it
            raise SystemExit(f"passkey_first_tokens.py: {error}") from None
        model.eval()
        unit = tokenizer.encode(FILLER)
        accuracy = {}
        for shift in args.shifts:
            rng, right = random.Random(0), 0  # the same keys at every shift
            for _ in range(args.keys):
                key = rng.randrange(10_000, 100_000)
                before = (unit * (shift // len(unit) + 1))[:shift]
                ids = before + passkey_prompt(tokenizer, args.length - shift, 0.0, key)
                with torch.no_grad():
                    right += answered(greedy_text(model, tokenizer, torch.tensor([ids]), 8), key)
            accuracy[shift] = right / args.keys
        print(json.dumps({"run": run, "length": args.length, "keys": args.keys, "accuracy_by_shift": accuracy}))


if __name__ == "__main__":
    main()
