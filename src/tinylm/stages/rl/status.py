"""The console line of each RL evaluation: the held-out score, then what the last rollouts looked like."""

from __future__ import annotations


def status_line(step: int, exact_match: float, rollouts: dict[str, float]) -> str:
    """`rollouts`: the last round's logged means (empty before the first round: the line has the score only)."""
    line = f"step {step}: held-out exact-match {exact_match:.1%}"
    if rollouts:
        r = rollouts
        line += (f" | samples: reward {r['reward']:.3f}, accuracy {r['accuracy']:.1%}, length "
                 f"{r['response_length']:.1f}, informative groups {r['informative_frac']:.0%} | rollout "
                 f"{r['rollout_s']:.1f} s ({r['rollout_tokens_per_s']:.0f} tokens/s), update {r['update_s']:.1f} s")
    return line
