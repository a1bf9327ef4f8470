"""Learning-rate schedules, checked against hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from tinylm.errors import TinyLMError
from tinylm.train.schedule import LRSchedule, apply_lr


def test_warmup_is_linear_from_one_over_warmup() -> None:
    s = LRSchedule("cosine", total=100, warmup=10, min_ratio=0.1)
    assert [s.factor(i) for i in range(10)] == pytest.approx([(i + 1) / 10 for i in range(10)])


def test_cosine_values() -> None:
    s = LRSchedule("cosine", total=110, warmup=10, min_ratio=0.1)  # 99 steps of decay after warmup
    assert s.factor(10) == pytest.approx(1.0)
    mid = 10 + 99 / 2
    assert s.factor(int(mid)) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (int(mid) - 10) / 99)))
    assert s.factor(109) == pytest.approx(0.1)  # the last update lands on the minimum
    assert s.factor(500) == pytest.approx(0.1)  # and it stays there past the schedule
    values = [s.factor(i) for i in range(10, 110)]
    assert all(a >= b for a, b in zip(values, values[1:]))


def test_cosine_halfway_is_halfway() -> None:
    s = LRSchedule("cosine", total=101, warmup=0, min_ratio=0.0)
    assert s.factor(50) == pytest.approx(0.5)


def test_linear_values() -> None:
    s = LRSchedule("linear", total=11, warmup=0, min_ratio=0.0)
    assert [s.factor(i) for i in range(11)] == pytest.approx([1 - i / 10 for i in range(11)])


def test_wsd_holds_then_decays_linearly() -> None:
    s = LRSchedule("wsd", total=100, warmup=10, min_ratio=0.0, decay_fraction=0.2)  # decay = 18 steps
    assert [s.factor(i) for i in range(10, 82)] == [1.0] * 72
    assert s.factor(82) == pytest.approx(1 - 1 / 18)
    assert s.factor(90) == pytest.approx(1 - 9 / 18)
    assert s.factor(99) == pytest.approx(0.0)


def test_constant_after_warmup() -> None:
    s = LRSchedule("constant", total=50, warmup=5)
    assert s.factor(4) == pytest.approx(1.0)
    assert s.factor(2) == pytest.approx(0.6)
    assert {s.factor(i) for i in range(5, 80)} == {1.0}


def test_bad_settings_are_user_errors() -> None:
    for kwargs in ({"kind": "step"}, {"total": 0}, {"warmup": 20, "total": 10}, {"min_ratio": 2.0},
                   {"decay_fraction": 0.0}):
        with pytest.raises(TinyLMError):
            LRSchedule(**kwargs)


def test_round_trip_and_apply() -> None:
    s = LRSchedule("wsd", total=30, warmup=3, min_ratio=0.05, decay_fraction=0.5)
    assert LRSchedule.from_dict(s.to_dict()) == s
    p = torch.nn.Parameter(torch.zeros(2))
    opt = torch.optim.SGD([{"params": [p], "lr": 0.5, "initial_lr": 0.5}])
    apply_lr(opt, s.factor(0))
    assert opt.param_groups[0]["lr"] == pytest.approx(0.5 / 3)
