"""The rows and the row length of every step: a batch-size ramp and a sequence-length warmup at the start.

Both are pretraining ideas from the time-to-loss races (docs/speedrun.md). Early in a run the gradient is
large and consistent, so a smaller batch already points the right way and buys more updates per token
(a **batch-size ramp**); and the first steps learn short-range statistics, which short rows teach as well
as long ones at a smaller attention cost (a **sequence-length warmup**).

Both work in two halving stages, so each alone gives a run three shapes (a compiled block recompiles once
per shape, not once per step; both together, of different lengths, give up to five). Over the first N
steps of either, a step is shrunk by a divisor d:

    d = 4 for steps [0, N/2),  d = 2 for steps [N/2, N),  d = 1 after

- batch ramp: `batch_size / d` rows of `seq_len`: a step of the ramp carries 1/d of the tokens, so a
  token budget takes more steps, and those are planned (`steps_for`);
- sequence warmup: rows of `seq_len / d`, `batch_size * d` of them: the same tokens every step, so the
  token count, the step count and the learning-rate schedule are what they would be without it.

The plan is a pure function of the step number, which is all exact resume needs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tinylm.errors import TinyLMError


def check_quarters(batch_size: int, seq_len: int | None, ramp_steps: int, seq_warmup_steps: int) -> None:
    """Refuse a batch or a row length that a warmup asked for cannot quarter (a row length of None, the
    model's context, is checked when the plan is made)."""
    if ramp_steps and batch_size % 4:
        raise TinyLMError(f"--batch-ramp-steps starts at a quarter of the batch: --batch-size {batch_size} "
                          "must be a multiple of 4 (or --batch-ramp-steps 0)")
    if seq_warmup_steps and seq_len is not None and seq_len % 4:
        raise TinyLMError(f"--seq-len-warmup-steps starts with rows a quarter as long: the row length "
                          f"{seq_len} must be a multiple of 4 (or --seq-len-warmup-steps 0)")


def shrink(step: int, steps: int) -> int:
    """The divisor of `step` in a two-stage warmup over `steps` steps: 4, then 2, then 1."""
    if step >= steps:
        return 1
    return 4 if step < steps // 2 else 2


@dataclass(frozen=True)
class BatchPlan:
    """Per-rank micro-batch shapes step by step; `per_step` is micro-batches x ranks (each of that shape)."""

    batch_size: int
    seq_len: int
    per_step: int = 1
    ramp_steps: int = 0  # --batch-ramp-steps
    seq_warmup_steps: int = 0  # --seq-len-warmup-steps (unset: see stages/pretrain/warmups.py)
    note: str = ""  # a header line on how the warmup was chosen, where that is not the option as given

    def __post_init__(self) -> None:
        check_quarters(self.batch_size, self.seq_len, self.ramp_steps, self.seq_warmup_steps)

    @property
    def reshapes(self) -> bool:
        """Whether any step differs from the plain full batch."""
        return bool(self.ramp_steps or self.seq_warmup_steps)

    @property
    def full_tokens(self) -> int:
        """Tokens of a step after both warmups: batch x seq_len x micro-batches x ranks."""
        return self.batch_size * self.seq_len * self.per_step

    def shape(self, step: int) -> tuple[int, int]:
        """(rows, row length) of each micro-batch of optimizer step `step` (0-based)."""
        rows = self.batch_size // shrink(step, self.ramp_steps)
        d = shrink(step, self.seq_warmup_steps)
        return rows * d, self.seq_len // d

    def shapes(self, start: int, end: int) -> int:
        """How many distinct micro-batch shapes steps start .. end-1 use (what a static compile compiles)."""
        last = min(end, max(self.ramp_steps, self.seq_warmup_steps) + 1)
        seen = {self.shape(s) for s in range(start, last)}
        if end > start:
            seen.add(self.shape(end - 1))
        return max(1, len(seen))

    def micro_batch_tokens(self, step: int) -> int:
        """Tokens of one micro-batch of step `step` on one rank (what its forward processes)."""
        rows, length = self.shape(step)
        return rows * length

    def step_tokens(self, step: int) -> int:
        """Training tokens of step `step`, all micro-batches and ranks."""
        return self.micro_batch_tokens(step) * self.per_step

    def tokens_before(self, step: int) -> int:
        """Training tokens of steps 0 .. step-1."""
        ramp = min(step, self.ramp_steps)
        return sum(self.step_tokens(s) for s in range(ramp)) + (step - ramp) * self.full_tokens

    def tokens_ratio(self, step: int, other: int) -> float:
        """Step `step`'s tokens over step `other`'s (negative steps count as step 0): to first order, how much
        longer one step takes than the other (2 where a ramp doubles the batch; 1 through a sequence warmup)."""
        return self.step_tokens(max(step, 0)) / self.step_tokens(max(other, 0))

    def steps_for(self, tokens: int) -> int:
        """The fewest steps whose tokens reach `tokens` (a --max-tokens budget)."""
        ramp_tokens = self.tokens_before(self.ramp_steps)
        if tokens > ramp_tokens:
            return self.ramp_steps + math.ceil((tokens - ramp_tokens) / self.full_tokens)
        steps, seen = 0, 0
        while seen < tokens:
            seen += self.step_tokens(steps)
            steps += 1
        return steps

    def describe(self) -> list[str]:
        """Header lines, only for what is not the plain full batch."""
        lines = []
        if self.ramp_steps:
            full_steps = self.tokens_before(self.ramp_steps) / self.full_tokens
            lines.append(f"batch ramp: {_stages(self.batch_size, self.ramp_steps, 'rows')}; its "
                         f"{self.ramp_steps:,} steps carry the tokens of {full_steps:g} full ones")
        if self.seq_warmup_steps:
            lines.append(f"sequence warmup: {_stages(self.seq_len, self.seq_warmup_steps, 'tokens per row')} (as many "
                         "tokens per step: more, shorter rows)")
        if self.note:
            lines.append(self.note)
        return lines


def _stages(full: int, steps: int, unit: str) -> str:
    """'4 rows for steps 1-50, 8 for 51-100, then 16' for a warmup of `steps` steps to `full`."""
    parts, start = [], 0
    for divisor in (4, 2):
        end = next((s for s in range(start, steps + 1) if s == steps or shrink(s, steps) != divisor), steps)
        if end > start:
            parts.append(f"{full // divisor} for steps {start + 1}-{end}")
        start = end
    return f"{', '.join(parts)}, then {full} {unit}"
