"""The two readings of a phase change in benchmarks/induction_heads.py, on curves whose answer is known."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import induction_heads  # noqa: E402  (a script, not a package: found through the path above)

STEPS = list(range(50, 5001, 50))


def logistic(middle: float, width: float, low: float, high: float) -> list[float]:
    return [low + (high - low) / (1 + math.exp(-(s - middle) / width)) for s in STEPS]


def test_a_sharp_rise_with_the_icl_fall_in_its_window_appears() -> None:
    # the head rises from 0.005 to 0.2 around step 2000, a tenth to nine tenths over 4.4 * 50 * 2 = 440 steps;
    # the ICL score falls by 0.3 in the same place and by 0.1 early on
    head = logistic(2000, 50, 0.005, 0.2)
    icl = [a + b for a, b in zip(logistic(2000, 50, 0.0, -0.3), logistic(300, 50, 0.1, 0.0))]
    change = induction_heads.phase_change(STEPS, head, icl, window=10, floor=0.055)
    assert change["appears"] and 1700 <= change["from_step"] <= 2000 <= change["to_step"] <= 2300
    assert change["rise_share"] > 0.9 and change["icl_fall_share"] > 0.6
    span = induction_heads.rise_span(STEPS, head, icl)
    assert 1850 <= span["tenth_step"] <= 1900 and 2100 <= span["nine_tenths_step"] <= 2150
    assert span["steps_ratio"] == pytest.approx(span["nine_tenths_step"] / span["tenth_step"])
    assert span["icl_fall_share_in_span"] > 0.75


def test_a_slow_rise_or_a_head_below_the_floor_does_not() -> None:
    icl = logistic(2500, 400, 0.0, -0.3)
    slow = logistic(2500, 600, 0.005, 0.2)  # a tenth to nine tenths over 2,600 steps: half of training
    assert not induction_heads.phase_change(STEPS, slow, icl, window=10, floor=0.055)["appears"]
    assert induction_heads.rise_span(STEPS, slow, icl)["steps_ratio"] > 2
    weak = logistic(2000, 50, 0.005, 0.04)  # sharp, but never 5 times chance
    assert not induction_heads.phase_change(STEPS, weak, icl, window=10, floor=0.055)["appears"]


def test_the_rise_is_measured_from_the_heads_lowest_point() -> None:
    # heads first learn to look away from the earlier copy (0.011 to 0.001), then the induction head forms
    head = [0.011 - 0.01 * min(1.0, s / 500) for s in STEPS]
    head = [h + r for h, r in zip(head, logistic(3000, 50, 0.0, 0.15))]
    span = induction_heads.rise_span(STEPS, head, [0.0] * len(STEPS))
    assert 2850 <= span["tenth_step"] <= 2900 and span["icl_fall_share_in_span"] == 0.0
