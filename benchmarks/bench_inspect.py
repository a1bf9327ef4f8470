"""How long each `tinylm inspect` view takes on a `tiny` model (1.31M parameters); prints one JSON object.

    python benchmarks/bench_inspect.py [--tokens 16] [--repeats 5] [--threads 2]

The model is the `tiny` modern preset with its initial weights (the work per view does not depend on what
the weights are), the prompt `--tokens` random ids. Each view runs `--repeats` times after one warm-up;
the figures are milliseconds, median and best, model already loaded (what the studio's Inside page
waits for on each question). The patching grid is the whole analysis: residual stream at every (layer,
position), every head, every MLP at every (layer, position).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    import torch

    from tinylm.interpret.attention import attention_view
    from tinylm.interpret.attribution import logit_attribution
    from tinylm.interpret.induction import induction_scores
    from tinylm.interpret.lens import logit_lens
    from tinylm.interpret.loading import Inspected
    from tinylm.interpret.patching import activation_patching
    from tinylm.models.factory import build_model
    from tinylm.presets import preset_config

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = build_model(preset_config("tiny", "modern")).eval()

    class Labels:
        n_vocab = model.config.vocab_size

        def token_bytes(self, token_id: int) -> bytes:
            return str(token_id).encode()

    inspected = Inspected(model, Labels(), {"path": "tiny"})
    clean = torch.randint(0, Labels.n_vocab, (args.tokens,), generator=torch.Generator().manual_seed(1)).tolist()
    corrupt = [*clean[:-4], (clean[-4] + 1) % Labels.n_vocab, *clean[-3:]]
    views = {
        "lens": lambda: logit_lens(inspected, clean),
        "attention": lambda: attention_view(inspected, clean),
        "attribution": lambda: logit_attribution(inspected, clean, 7),
        "patch": lambda: activation_patching(inspected, clean, corrupt, "logit_diff", 3, 5),
        "induction_scores": lambda: induction_scores(inspected),
    }
    out = {"model": "tiny modern", "params": model.num_params(), "tokens": args.tokens, "threads": args.threads,
           "repeats": args.repeats, "ms": {}}
    for name, view in views.items():
        view()
        times = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            view()
            times.append((time.perf_counter() - start) * 1000)
        out["ms"][name] = {"median": round(statistics.median(times), 1), "best": round(min(times), 1)}
    config = model.config
    out["patch_forward_rows"] = (config.n_blocks + 1) * args.tokens + config.n_blocks * (config.n_head + args.tokens)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
