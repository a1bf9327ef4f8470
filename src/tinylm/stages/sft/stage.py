"""Supervised fine-tuning (SFT) as a stage: learn the assistant's side of conversations.

The base model continues text; SFT teaches it a turn structure. Each conversation is rendered by
the chat format into ids and a loss mask (1 on assistant content and the end-of-turn token that
closes it, so the model learns what to say *and* when to stop), split at turn boundaries when it is
longer than a row (`data/turn_windows.py`), packed several to a row, and the loss is the
cross-entropy summed over masked-in targets only:

    L = - sum_{t : mask_t = 1} log p(x_t | x_<t, same conversation)   /   #{t : mask_t = 1}

where the division is by the step's whole count (`train/step.py`), so a long answer weighs as
many tokens as it has. Everything else (schedule, accumulation, checkpoints, exact resume,
torchrun) is the one engine's.

Starting from the base, adding the chat tokens where they are missing, LoRA and the checkpoints'
lineage are what every post-training stage shares (`stages/from_base.py`).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from tinylm.data.packing import IGNORE, as_tensors, pack, padding_waste, unpacked
from tinylm.data.row_loader import RowLoader
from tinylm.data.turn_windows import TurnWindows, conversation_windows
from tinylm.errors import TinyLMError
from tinylm.runtime.device import autocast
from tinylm.runtime.distributed import all_reduce_sum
from tinylm.stages.from_base import FromBaseStage, held_out
from tinylm.stages.sft.config import SFTConfig
from tinylm.stages.sft.data import load_conversations
from tinylm.tasks.registry import get_task
from tinylm.train.stage import Batch, StageLoss


def _split_note(long: int, pieces: TurnWindows) -> str:
    """What splitting conversations longer than a row did, for the run header ("" when none was)."""
    note = f"; {long:,} longer than a row split at turn boundaries into {len(pieces.examples):,} pieces" if long else ""
    if pieces.cut:
        note += (f"; {pieces.cut:,} turn(s) longer than a row cut: {pieces.dropped_tokens:,} assistant tokens "
                 "dropped")
    if pieces.left_out:
        note += f"; {pieces.left_out:,} prompt turn(s) left out: no room beside their answer"
    return note


class SFTStage(FromBaseStage[SFTConfig]):
    name = "sft"
    evaluate_at_start = True  # the base's score is the "before" of the run

    # ---- data ----------------------------------------------------------------------------------
    def setup_data(self, cfg: SFTConfig) -> None:
        train, dev = self._conversations(cfg)
        self.train_rows, train_report = self._rows(train, "train")
        self.dev_rows, dev_report = self._rows(dev, "dev")
        self.report += [train_report, dev_report]
        env = self.ctx.env
        self.loader = RowLoader(self.train_rows, cfg.batch_size, seed=cfg.seed, rank=env.rank,
                                world_size=env.world_size, device=self.ctx.device)

    def _conversations(self, cfg: SFTConfig) -> tuple[list[list[dict[str, str]]], list[list[dict[str, str]]]]:
        spec = cfg.data or ""
        if spec.startswith("builtin:"):
            self.task = get_task(spec)
            train = load_conversations(spec, "train", seed=cfg.seed, limit=cfg.train_examples).conversations
            self.eval_problems = self.task.examples("test", cfg.eval_examples, cfg.seed)
            dev = [list(map(dict, e.messages)) for e in self.eval_problems]
            return train, dev
        loaded = load_conversations(spec, "train", seed=cfg.seed, on_error=cfg.on_error)
        if loaded.skipped:
            self.ctx.say(f"skipped {len(loaded.skipped)} malformed row(s) of {spec}; first: {loaded.skipped[0]}")
        for note in loaded.notes:
            self.ctx.say(note)
        if cfg.eval_data:
            held = load_conversations(cfg.eval_data, "test", seed=cfg.seed, on_error=cfg.on_error)
            for note in held.notes:
                self.ctx.say(note)
            return loaded.conversations, held.conversations
        train = [c for c in loaded.conversations if not held_out(c, cfg.dev_fraction)]
        dev = [c for c in loaded.conversations if held_out(c, cfg.dev_fraction)]
        if not train:
            raise TinyLMError(f"{spec}: every conversation fell into the held-out share; lower --dev-fraction")
        return train, dev

    def _rows(self, conversations: list[list[dict[str, str]]], split: str) -> tuple[dict[str, torch.Tensor], str]:
        """Rendered, checked, split (when longer than a row), packed (or padded) rows as tensors, and a line that
        says what happened."""
        examples, nothing_to_learn, long, pieces = [], 0, 0, TurnWindows()
        for messages in conversations:
            rendered = self.chat.render(messages, learn_reasoning=self.ctx.cfg.learn_reasoning)
            if rendered.n_learn == 0:
                nothing_to_learn += 1  # counted and skipped, never silently trained on
            elif len(rendered.ids) <= self.seq_len + 1:
                examples.append((rendered.ids, rendered.mask))
            else:  # never cut after its first row: split at turn boundaries
                long += 1
                windows = conversation_windows(self.chat, messages, self.seq_len, self.ctx.cfg.learn_reasoning)
                examples += windows.examples
                pieces.add(windows)
        if not examples:
            if split == "dev":
                return {}, "dev: no held-out conversations"
            raise TinyLMError(f"{self.ctx.cfg.data}: no conversation has assistant content to learn "
                              f"({nothing_to_learn} skipped)")
        eot = self.tokenizer.eot_id
        packed, padded = pack(examples, self.seq_len, eot), unpacked(examples, self.seq_len, eot)
        rows = packed if self.ctx.cfg.packing else padded
        mode = "packed" if self.ctx.cfg.packing else "one per row"
        line = (f"{split}: {len(conversations) - nothing_to_learn:,} conversations -> {len(rows):,} rows of "
                f"{self.seq_len} ({mode}); padding {padding_waste(packed):.1%} packed vs "
                f"{padding_waste(padded):.1%} one per row")
        if nothing_to_learn:
            line += f"; {nothing_to_learn} with nothing to learn skipped"
        return as_tensors(rows), line + _split_note(long, pieces)

    # ---- batches and loss ----------------------------------------------------------------------
    def next_batch(self) -> Batch:
        return self.loader.next_batch()

    def batch_weight(self, batch: Batch) -> int:
        return int((batch["targets"] != IGNORE).sum())

    def loss(self, model: nn.Module, batch: Batch) -> StageLoss:
        _, total = model(batch["idx"], batch["targets"], return_logits=False, positions=batch["positions"],
                         segments=batch["segments"], reduction="sum")
        return StageLoss(total, {})

    def state_dict(self) -> dict[str, Any]:
        return self.loader.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.loader.load_state_dict(state)

    # ---- evaluation ----------------------------------------------------------------------------
    @torch.no_grad()
    def dev_loss(self, model: nn.Module) -> float | None:
        """Mean loss per assistant token over the held-out rows (each rank a share, summed)."""
        if not self.dev_rows:
            return None
        ctx = self.ctx
        env = ctx.env
        n = len(self.dev_rows["idx"])
        totals = torch.zeros(2, dtype=torch.float64, device=ctx.device)
        was_training = model.training
        model.eval()
        batch = ctx.cfg.batch_size
        for first in range(env.rank * batch, n, batch * env.world_size):
            rows = {k: v[first:first + batch].to(ctx.device) for k, v in self.dev_rows.items()}
            with autocast(ctx.device, ctx.dtype):
                out = self.loss(model, rows)
            totals[0] += out.total.double()
            totals[1] += self.batch_weight(rows)
        model.train(was_training)
        all_reduce_sum(totals, env)
        return float(totals[0] / totals[1]) if totals[1] > 0 else None

    def evaluate(self, model: nn.Module) -> dict[str, float]:
        result: dict[str, float] = {}
        loss = self.dev_loss(model)
        if loss is not None:
            result["dev_loss"] = loss
        return {**result, **self.held_out_exact_match(model)}
