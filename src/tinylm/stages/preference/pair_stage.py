"""What the reward and DPO stages share on top of `FromBaseStage`: preference pairs as fixed-width rows.

Both read pairs from a spec (stages/preference/data.py), hold out a share for evaluation (a builtin
task's own test split, --eval-data, or a stable hash of the pair), encode them as fixed-width rows
(stages/preference/pair_rows.py) and draw them through the one resumable RowLoader. One unit of their loss is
a pair (a row): the engine divides the summed loss by the step's number of pairs, so accumulation and
torchrun equal one big batch. The base, the chat tokens, LoRA and the lineage are `FromBaseStage`'s.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import torch
from torch import nn

from tinylm.data.row_loader import RowLoader
from tinylm.errors import TinyLMError
from tinylm.runtime.device import autocast
from tinylm.runtime.distributed import all_reduce_sum
from tinylm.stages.from_base import FromBaseStage, held_out
from tinylm.stages.preference.config import PreferenceConfig
from tinylm.stages.preference.data import PreferenceRow, load_preferences
from tinylm.stages.preference.pair_rows import EncodedPairs, encode_pairs
from tinylm.tasks.preference_pairs import task_pairs
from tinylm.tasks.registry import get_task
from tinylm.train.stage import Batch

PrefConfigT = TypeVar("PrefConfigT", bound=PreferenceConfig)  # DPOConfig or RewardConfig


def _key(row: PreferenceRow) -> list[Any]:
    return [row.prompt, row.chosen, row.rejected]


class PairStage(FromBaseStage[PrefConfigT]):
    """Pairs in, rows out; subclasses give the model, the loss and the evaluation."""

    width_extra = 1  # a row holds seq_len + 1 tokens: inputs [:-1], next-token targets [1:]

    def setup_data(self, cfg: PrefConfigT) -> None:
        train, dev = self._pairs(cfg)
        self.train_rows, train_line = self._encode(train, "train")
        self.dev_rows, dev_line = self._encode(dev, "dev")
        self.report += [train_line, dev_line]

    def _pairs(self, cfg: PrefConfigT) -> tuple[list[PreferenceRow], list[PreferenceRow]]:
        spec = cfg.data or ""
        if spec.startswith("builtin:"):
            self.task = get_task(spec)
            train = load_preferences(spec, "train", seed=cfg.seed, limit=cfg.train_examples).rows
            self.eval_problems = self.task.examples("test", cfg.eval_examples, cfg.seed)
            dev = [PreferenceRow(tuple(p.example.prompt), p.chosen, p.rejected)
                   for p in task_pairs(self.task, self.eval_problems, cfg.seed)]
            return train, dev
        loaded = load_preferences(spec, "train", seed=cfg.seed, on_error=cfg.on_error)
        if loaded.skipped:
            self.ctx.say(f"skipped {len(loaded.skipped)} malformed row(s) of {spec}; first: {loaded.skipped[0]}")
        for note in loaded.notes:  # bytes that were not UTF-8, with file:line
            self.ctx.say(note)
        self.check_rows(loaded.rows, spec)
        if cfg.eval_data:
            held = load_preferences(cfg.eval_data, "test", seed=cfg.seed, on_error=cfg.on_error)
            for note in held.notes:
                self.ctx.say(note)
            return loaded.rows, held.rows
        train = [r for r in loaded.rows if not held_out(_key(r), cfg.dev_fraction)]
        if not train:
            raise TinyLMError(f"{spec}: every pair fell into the held-out share; lower --dev-fraction")
        return train, [r for r in loaded.rows if held_out(_key(r), cfg.dev_fraction)]

    def check_rows(self, rows: list[PreferenceRow], spec: str) -> None:
        """Refuse rows this stage cannot learn from (pair losses need both sides)."""
        unpaired = sum(not r.paired for r in rows)
        if unpaired:
            raise TinyLMError(f"{spec}: {unpaired} unpaired prompt/completion/label row(s): only --loss kto "
                              "learns from unpaired answers")

    def _encode(self, rows: list[PreferenceRow], split: str) -> tuple[EncodedPairs, str]:
        width = self.seq_len + self.width_extra
        encoded = encode_pairs(rows, self.chat, width)
        if not len(encoded) and split == "train":
            raise TinyLMError(f"{self.ctx.cfg.data}: no pair fits --seq-len {self.seq_len} "
                              f"({encoded.dropped} answers longer than a row)")
        line = f"{split}: {len(encoded):,} pairs in rows of {width} tokens per side"
        if encoded.truncated:
            line += f"; {encoded.truncated} prompts cut from the left to fit"
        if encoded.dropped:
            line += f"; {encoded.dropped} dropped (an answer longer than a row)"
        return encoded, line

    def make_loader(self) -> None:
        """The loader over the training rows (made once the rows are final: DPO adds cached reference log-probs)."""
        ctx, cfg = self.ctx, self.ctx.cfg
        self.loader = RowLoader(self.train_rows.tensors, cfg.batch_size, seed=cfg.seed, rank=ctx.env.rank,
                                world_size=ctx.env.world_size, device=ctx.device)

    # ---- batches --------------------------------------------------------------------------------
    def next_batch(self) -> Batch:
        return self.loader.next_batch()

    def batch_weight(self, batch: Batch) -> int:
        return len(batch["chosen_ids"])

    def batch_tokens(self, batch: Batch) -> int:
        """Both sides go through one forward cut to the longest row of the pair batch."""
        longest = int(torch.cat([batch["chosen_length"], batch["rejected_length"]]).max())
        return 2 * len(batch["chosen_ids"]) * longest

    def state_dict(self) -> dict[str, Any]:
        return self.loader.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.loader.load_state_dict(state)

    @torch.no_grad()
    def held_out_means(self, model: nn.Module, names: tuple[str, ...],
                       batch_sums: Callable[[nn.Module, Batch], list[torch.Tensor]]) -> dict[str, float]:
        """{"dev_" + name: mean over every held-out pair} of the per-pair sums `batch_sums` gives for a batch
        (one value per name), in eval mode, each rank a share, all-reduced."""
        ctx = self.ctx
        totals = torch.zeros(len(names) + 1, dtype=torch.float64, device=ctx.device)
        was_training = model.training
        model.eval()
        try:
            for batch in self.dev_batches():
                with autocast(ctx.device, ctx.dtype):
                    sums = batch_sums(model, batch)
                pairs = torch.tensor(len(batch["chosen_ids"]), device=ctx.device)
                totals += torch.stack([*(t.double() for t in sums), pairs.double()])
        finally:
            model.train(was_training)
        all_reduce_sum(totals, ctx.env)
        if totals[-1] == 0:
            return {}
        return {f"dev_{name}": float(totals[i] / totals[-1]) for i, name in enumerate(names)}

    def dev_batches(self) -> list[dict[str, torch.Tensor]]:
        """This rank's share of the held-out rows, in batches, on the device."""
        tensors, env, batch = self.dev_rows.tensors, self.ctx.env, self.ctx.cfg.batch_size
        if not tensors:
            return []
        n = len(tensors["chosen_ids"])
        return [{k: v[first:first + batch].to(self.ctx.device) for k, v in tensors.items()}
                for first in range(env.rank * batch, n, batch * env.world_size)]
