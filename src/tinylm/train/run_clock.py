"""The run's clock: its training seconds across resumes, which --time-budget counts and the schedule reads.

It also sums the steps' own seconds (`training`): the clock less evaluations, checkpoints and samples,
what time-to-quality comparisons count (`tinylm speedrun`) so that how often a run evaluates does not
change how fast it looks.

Rank 0's clock is the run's. Its reading travels with each step's all-reduced flags, so every rank sets
the same learning rate from it, and a checkpoint keeps it (with the last step's length, which predicts
the next one's), so a resumed run goes on where it stopped. The loop takes the readings itself
(`time.perf_counter`) and hands them here: this class only keeps the arithmetic in one place.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class RunClock:
    seconds: float = 0.0  # the agreed clock: rank 0's training seconds at its last reading
    step_seconds: float = 0.0  # the last step's length on that clock
    before: float = 0.0  # seconds spent before this invocation's loop began
    start: float = 0.0  # the perf_counter reading at which it began
    training: float = 0.0  # the steps' own seconds, across resumes (this process's; ranks step in lockstep)
    # the --time-budget the run stopped on, if it did: the loop stops when the *next* step would end past it, a
    # prediction the resumed run cannot redo from two numbers, so a budget no larger is spent without a retry
    spent_budget: float | None = None

    @classmethod
    def resumed(cls, state: dict[str, Any] | None) -> RunClock:
        """The clock a checkpoint's train state left (zero for a fresh run or a checkpoint without one)."""
        state = state or {}
        spent = state.get("spent_budget")
        return cls(float(state.get("train_seconds", 0.0)), float(state.get("step_seconds", 0.0)),
                   training=float(state.get("step_seconds_total", 0.0)),
                   spent_budget=float(spent) if spent is not None else None)

    def begin(self, reading: float) -> None:
        """The loop starts at `reading`: what came before is `before`."""
        self.before, self.start = self.seconds, reading

    def at(self, reading: float) -> float:
        """The run's seconds at a perf_counter reading of this invocation."""
        return self.before + reading - self.start

    def planned_end(self) -> float:
        """When the coming step should end: the last reading plus the last step's length."""
        return self.seconds + self.step_seconds

    def agree(self, seconds: float) -> None:
        """Take rank 0's reading (every rank gets the same one from the all-reduce)."""
        self.step_seconds, self.seconds = max(0.0, seconds - self.seconds), seconds

    def stepped(self, seconds: float) -> float:
        """One optimizer step took `seconds` (from its start to its end, nothing around it); returns them."""
        self.training += seconds
        return seconds

    def stopped(self, reason: str | None, budget: float | None) -> str | None:
        """Note a stop on the time budget (a resume with no larger budget then stops at once); returns `reason`."""
        if reason == "time_budget":
            self.spent_budget = budget
        return reason

    def spent(self, budget: float | None) -> bool:
        """True when the run already stopped on a time budget at least as large as `budget`."""
        return budget is not None and self.spent_budget is not None and budget <= self.spent_budget

    def state(self) -> dict[str, float | None]:
        return {"train_seconds": self.seconds, "step_seconds": self.step_seconds, "step_seconds_total": self.training,
                "spent_budget": self.spent_budget}
