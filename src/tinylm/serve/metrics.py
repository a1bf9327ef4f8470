"""The server's numbers in Prometheus' text format: latency histograms, queue gauges, token counters.

Written by hand (the exposition format is a few lines per metric) rather than adding a dependency.
The scheduler thread records, the /metrics route reads; one lock keeps them consistent.
"""

from __future__ import annotations

import bisect
import threading
from collections import Counter

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class Histogram:
    def __init__(self, buckets: tuple[float, ...] = LATENCY_BUCKETS) -> None:
        self.buckets = buckets
        self.counts = [0] * (len(buckets) + 1)  # the last one is +Inf
        self.total = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.buckets, value)] += 1
        self.total += value

    def lines(self, name: str) -> list[str]:
        out, cumulative = [], 0
        for bound, count in zip((*map(str, self.buckets), "+Inf"), self.counts):
            cumulative += count
            out.append(f'{name}_bucket{{le="{bound}"}} {cumulative}')
        return [*out, f"{name}_sum {self.total}", f"{name}_count {cumulative}"]


class ServerMetrics:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.time_to_first_token = Histogram()
        self.time_per_output_token = Histogram()
        self.running = 0
        self.waiting = 0
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.finished: Counter[str] = Counter()

    def render(self) -> str:
        with self.lock:
            lines = [
                "# HELP tinylm_time_to_first_token_seconds Time from arrival to the first generated token.",
                "# TYPE tinylm_time_to_first_token_seconds histogram",
                *self.time_to_first_token.lines("tinylm_time_to_first_token_seconds"),
                "# HELP tinylm_time_per_output_token_seconds Time between consecutive generated tokens.",
                "# TYPE tinylm_time_per_output_token_seconds histogram",
                *self.time_per_output_token.lines("tinylm_time_per_output_token_seconds"),
                "# HELP tinylm_requests_running Requests holding a batch slot (prefilling or decoding).",
                "# TYPE tinylm_requests_running gauge",
                f"tinylm_requests_running {self.running}",
                "# HELP tinylm_requests_waiting Requests queued for a free slot.",
                "# TYPE tinylm_requests_waiting gauge",
                f"tinylm_requests_waiting {self.waiting}",
                "# HELP tinylm_prompt_tokens_total Prompt tokens computed.",
                "# TYPE tinylm_prompt_tokens_total counter",
                f"tinylm_prompt_tokens_total {self.prompt_tokens}",
                "# HELP tinylm_generation_tokens_total Tokens generated.",
                "# TYPE tinylm_generation_tokens_total counter",
                f"tinylm_generation_tokens_total {self.generation_tokens}",
                "# HELP tinylm_requests_finished_total Requests that left the batch, by why.",
                "# TYPE tinylm_requests_finished_total counter",
                *(f'tinylm_requests_finished_total{{reason="{reason}"}} {self.finished[reason]}'
                  for reason in ("stop", "length", "cancelled", "failed")),
            ]
        return "\n".join(lines) + "\n"


def metric_value(text: str, name: str) -> float:
    """One sample's value from an exposition (`name` with its labels, as written), for tests and benchmarks."""
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    raise KeyError(name)
