"""Induction heads, and watching them form during pretraining (Olsson et al. 2022).

An induction head completes patterns: having seen `A B` once, at the next `A` it attends to the token
after the earlier `A` (that `B`) and predicts it. Measured on sequences that carry no meaning:

    induction score of a head = on [r_1 .. r_n, r_1 .. r_n] (r random tokens), the mean attention
                                from position n + i of the second copy to position i + 1 of the first

A head that does nothing else scores 1; an ordinary head about 1 / (n + i). The same model's
in-context-learning score is what the heads buy on real text:

    ICL score = mean loss at late positions (the second half of the window)
              - mean loss at early positions (T/32 to T/16: 8 to 15 of 256)   (negative: context helps)

Olsson et al. found the two change together in a short window of training, the "phase change", for
every model with two or more layers. `induction_curve` measures both on every checkpoint and
snapshot of a run (`tinylm train --snapshot-every N` saves cheap weights-only ones).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from tinylm.checkpoint.layout import SNAPSHOTS, list_checkpoints
from tinylm.errors import TinyLMError
from tinylm.interpret.loading import DEV_WINDOWS, Inspected, dev_batches, load_for_inspection
from tinylm.models.hooks.attention_pattern import record_attention


@torch.no_grad()
def induction_scores(inspected: Inspected, length: int = 0, sequences: int = 8, seed: int = 0) -> torch.Tensor:
    """[n_blocks, n_head]: each head's induction score on `sequences` random sequences repeated twice
    (`length` tokens each, default: as long as half the context allows, at most 64)."""
    model = inspected.model
    n = length or min(64, model.config.context_length // 2)
    if not 2 <= n <= model.config.context_length // 2:
        raise TinyLMError(f"induction: sequences of {n} tokens do not fit twice in a context of "
                          f"{model.config.context_length}")
    generator = torch.Generator().manual_seed(seed)
    half = torch.randint(0, inspected.tokenizer.n_vocab, (sequences, n), generator=generator)
    with record_attention(model) as patterns:
        model(torch.cat([half, half], dim=1))
    return repeated_sequence_score(torch.stack(patterns), n)


def repeated_sequence_score(attention: torch.Tensor, n: int) -> torch.Tensor:
    """[L, H] from patterns [L, B, H, 2n, 2n] over sequences repeated twice: the mean attention from position
    n + i (the second copy of token i) to position i + 1 (what followed its first copy), for i < n - 1."""
    queries = torch.arange(n, 2 * n - 1)
    return attention[..., queries, queries - n + 1].mean(dim=(1, 3))


@torch.no_grad()
def icl_score(inspected: Inspected, data_dir: str | Path | None = None, windows: int = DEV_WINDOWS) -> float:
    """Mean loss over the second half of each context-long dev window minus that over positions T/32 to T/16
    (Olsson et al. take token 500 minus token 50 of longer windows: late against early, early not the very
    first tokens, which no model predicts well)."""
    T = inspected.model.config.context_length
    losses = []
    for x, y in dev_batches(inspected, data_dir, windows, "induction")[1]:
        logits = inspected.model(x)[0]
        losses.append(F.cross_entropy(logits.transpose(1, 2), y, reduction="none"))
    loss = torch.cat(losses).mean(dim=0)  # [T]: mean loss at each position
    late, early = loss[T // 2 :], loss[T // 32 : T // 16]
    return float(late.mean() - early.mean())


def saved_models(run: str | Path) -> list[Path]:
    """Every checkpoint and weights-only snapshot of a run, by step (a checkpoint wins a tie)."""
    run = Path(run)
    if not run.is_dir():
        raise TinyLMError(f"run not found: {run}")
    by_step = {_step(p): p for p in list_checkpoints(run / SNAPSHOTS)}
    by_step.update({_step(p): p for p in list_checkpoints(run)})
    if not by_step:
        raise TinyLMError(f"no checkpoint in {run}: induction curves read a run folder's checkpoints and snapshots")
    return [by_step[step] for step in sorted(by_step)]


def _step(path: Path) -> int:
    return int(path.name.removeprefix("step_"))


def induction_curve(run: str | Path, data_dir: str | Path | None = None, seed: int = 0,
                    windows: int = DEV_WINDOWS) -> dict[str, Any]:
    """{"steps": [...], "induction": I[checkpoint][layer][head], "icl": [...], "best_head": (layer, head),
    "windows": the dev windows each ICL score read}."""
    steps, scores, icl = [], [], []
    for path in saved_models(run):
        inspected = load_for_inspection(path)
        steps.append(_step(path))
        scores.append(induction_scores(inspected, seed=seed).tolist())
        icl.append(icl_score(inspected, data_dir, windows))
    final = torch.tensor(scores[-1])
    layer, head = divmod(int(final.argmax()), final.shape[1])
    return {"run": str(run), "steps": steps, "induction": scores, "icl": icl, "best_head": [layer, head],
            "windows": windows}
