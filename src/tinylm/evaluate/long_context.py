"""Evaluations that need the length: passkey retrieval, and bits per byte by position.

Passkey retrieval (Mohtashami & Jaggi 2023): a five-digit number is hidden at a chosen depth of filler
text `length` tokens long, and asked for at the end; the first number of the model's greedy continuation
must be it.
Filler carries no information, so only attention that reaches back `depth * length` tokens can answer.

Bits per byte by position: the dev split's documents read in windows of `length` tokens that each lie
inside one document (data/document_windows.py), each target token's loss summed into the bucket of its
position (and its bytes with it), so a learner sees the loss climb past
the window a model was trained at, and come back down after its context is extended.
"""

from __future__ import annotations

import math
import random
import re
from pathlib import Path

import numpy as np
import torch
from torch import nn

from tinylm.data.document_windows import DocumentWindows
from tinylm.data.loader import windows
from tinylm.data.passkey_words import FILLER, NEEDLE, QUESTION
from tinylm.data.shards import open_shard, read_sidecar
from tinylm.errors import TinyLMError
from tinylm.evaluate.bpb import checked_dev_data
from tinylm.tokenizer.tokenizer import Tokenizer

DEPTHS = (0.0, 0.25, 0.5, 0.75, 1.0)


def passkey_prompt(tokenizer: Tokenizer, length: int, depth: float, key: int) -> list[int]:
    """Token ids of about `length` tokens: filler, the key at `depth` of the filler, filler, the question."""
    needle = tokenizer.encode(NEEDLE.format(key=key))
    question, unit = tokenizer.encode(QUESTION), tokenizer.encode(FILLER)
    room = length - len(needle) - len(question)
    if room < len(unit):
        raise TinyLMError(f"passkey:{length} is too short to hide a key in filler (at least "
                          f"{len(needle) + len(question) + len(unit)} tokens)")
    filler = (unit * (room // len(unit) + 1))[:room]
    before = round(depth * room)
    return filler[:before] + needle + filler[before:] + question


def check_length(model: nn.Module, length: int, what: str) -> None:
    config = model.config
    if config.arch == "classic" and length > config.context_length:
        raise TinyLMError(f"{what}:{length}: the classic model has {config.context_length} learned positions and "
                          "cannot read past them")


@torch.no_grad()
def passkey_accuracy(model: nn.Module, tokenizer: Tokenizer, length: int, trials: int, seed: int = 0,
                     depths: tuple[float, ...] = DEPTHS) -> dict[str, float]:
    """{"passkey": accuracy over every depth, "passkey@D": accuracy at depth D} from `trials` keys per depth."""
    check_length(model, length, "passkey")
    device = next(model.parameters()).device
    rng = random.Random(seed)
    scores: dict[str, float] = {}
    for depth in depths:
        right = 0
        for _ in range(trials):
            key = rng.randrange(10_000, 100_000)
            ids = torch.tensor([passkey_prompt(tokenizer, length, depth, key)], device=device)
            right += answered(greedy_text(model, tokenizer, ids, 8), key)
        scores[f"passkey@{depth:g}"] = right / trials
    scores["passkey"] = sum(scores.values()) / len(depths)
    return scores


def answered(text: str, key: int) -> bool:
    """The continuation's first number is the key: "70913." and "70913 is" are right, "7091313" is not."""
    number = re.match(r"\s*(\d+)", text)
    return number is not None and number.group(1) == str(key)


def greedy_text(model: nn.Module, tokenizer: Tokenizer, ids: torch.Tensor, new_tokens: int) -> str:
    """The greedy continuation of one prompt, through the model's KV cache when it has one.

    Not the `Engine`: it keeps a prompt inside the model's window, and passkey must read past it.
    """
    produced: list[int] = []
    if hasattr(model, "new_cache"):
        cache = model.new_cache(1, ids.shape[1] + new_tokens)
        logits = model.logits(model.forward_hidden(ids, cache=cache))[:, -1]
        for _ in range(new_tokens):
            token = int(logits.argmax(-1))
            produced.append(token)
            step = torch.tensor([[token]], device=ids.device)
            logits = model.logits(model.forward_hidden(step, cache=cache))[:, -1]
    else:
        for _ in range(new_tokens):
            token = int(model(ids)[0][:, -1].argmax(-1))
            produced.append(token)
            ids = torch.cat((ids, torch.tensor([[token]], device=ids.device)), dim=1)
    return tokenizer.decode(produced)


def position_buckets(length: int, trained: int) -> list[tuple[int, int]]:
    """[start, end) position ranges: halving towards the start, and a cut at the trained context."""
    edges = {0, length, *(length >> k for k in range(1, 4))}
    if 0 < trained < length:
        edges.add(trained)
    ordered = sorted(e for e in edges if 0 <= e <= length)
    return list(zip(ordered, ordered[1:]))


@torch.no_grad()
def bpb_by_position(model: nn.Module, tokenizer: Tokenizer, data_dir: Path, length: int, batch_size: int,
                    max_batches: int) -> dict[str, float]:
    """{"bpb@A-B": bits per byte of the targets at positions [A, B)} over dev windows of `length` tokens,
    each inside one document and starting where it starts or where the previous window ended: for each
    position bucket, then for all positions below the trained context and all past it."""
    check_length(model, length, "bpb_positions")
    data_dir = checked_dev_data(data_dir, tokenizer, "bpb_positions")
    tokens, _ = open_shard(data_dir / "dev.bin")
    documents = DocumentWindows(tokens, int(read_sidecar(data_dir, "dev")["eot_id"]))
    tiles = documents.tiles(length)[: batch_size * max_batches]
    if not len(tiles):
        raise TinyLMError(f"bpb_positions:{length}: no dev document holds {length + 1} tokens (the longest has "
                          f"{int(documents.lengths.max())}): ask for a shorter length")
    device = next(model.parameters()).device
    token_bytes = np.array([len(tokenizer.token_bytes(i)) for i in range(tokenizer.n_vocab)], dtype=np.int64)
    nats, count = np.zeros(length), np.zeros(length, dtype=np.int64)
    model.eval()
    for first in range(0, len(tiles), batch_size):
        x, y = (torch.from_numpy(part).to(device) for part in windows(tokens, tiles[first:first + batch_size], length))
        logits = model(x)[0].float()
        losses = torch.nn.functional.cross_entropy(logits.transpose(1, 2), y, reduction="none")
        nats += losses.sum(0).cpu().double().numpy()
        count += token_bytes[y.cpu().numpy()].sum(0)
    trained = model.config.rope_base_context
    ranges = position_buckets(length, trained)
    if 0 < trained < length:  # and the two sides of the trained context, whole
        ranges += [r for r in ((0, trained), (trained, length)) if r not in ranges]
    out = {}
    for start, end in ranges:
        n_bytes = int(count[start:end].sum())
        if n_bytes:
            out[f"bpb@{start}-{end}"] = float(nats[start:end].sum() / math.log(2) / n_bytes)
    return out
