"""Sampling filters on known distributions, checked by hand and against `transformers`' logits processors."""

from __future__ import annotations

import math

import pytest
import torch

from tinylm.errors import TinyLMError
from tinylm.inference.sampling import (
    GREEDY,
    SamplingParams,
    apply_repetition_penalty,
    check_sampling_options,
    min_p_filter,
    probabilities,
    process_logits,
    sample,
    top_k_filter,
    top_p_filter,
)

PROBS = torch.tensor([[0.5, 0.25, 0.15, 0.07, 0.03]])
LOGITS = PROBS.log()


def _kept(logits: torch.Tensor) -> list[int]:
    return torch.isfinite(logits[0]).nonzero().flatten().tolist()


def test_top_k_keeps_the_k_largest() -> None:
    assert _kept(top_k_filter(LOGITS, 2)) == [0, 1]
    assert _kept(top_k_filter(LOGITS, 10)) == [0, 1, 2, 3, 4]


@pytest.mark.parametrize(("p", "kept"), [(0.5, [0]), (0.6, [0, 1]), (0.75, [0, 1]), (0.8, [0, 1, 2]),
                                         (0.95, [0, 1, 2, 3]), (1.0, [0, 1, 2, 3, 4]), (0.01, [0])])
def test_top_p_keeps_the_smallest_set_reaching_p(p: float, kept: list[int]) -> None:
    assert _kept(top_p_filter(LOGITS, p)) == kept


def test_top_p_works_on_unsorted_logits() -> None:
    shuffled = LOGITS[:, [3, 0, 4, 2, 1]]
    assert _kept(top_p_filter(shuffled, 0.8)) == [1, 3, 4]


@pytest.mark.parametrize(("p", "kept"), [(0.5, [0, 1]), (0.3, [0, 1, 2]), (0.1, [0, 1, 2, 3]), (0.0, [0, 1, 2, 3, 4])])
def test_min_p_keeps_tokens_at_least_p_times_the_best(p: float, kept: list[int]) -> None:
    assert _kept(min_p_filter(LOGITS, p)) == kept


def test_temperature_sharpens_and_flattens() -> None:
    cold = probabilities(LOGITS, SamplingParams(temperature=0.5))
    hot = probabilities(LOGITS, SamplingParams(temperature=2.0))
    expected_cold = PROBS**2 / (PROBS**2).sum()
    torch.testing.assert_close(cold, expected_cold)
    assert hot[0, 0] < PROBS[0, 0] < cold[0, 0]
    torch.testing.assert_close(probabilities(LOGITS, SamplingParams()), PROBS)


def test_greedy_is_argmax_and_temperature_zero() -> None:
    logits = torch.tensor([[0.1, 2.0, -1.0], [3.0, 0.0, 2.9]])
    assert sample(logits, GREEDY).tolist() == [1, 0]
    assert SamplingParams(temperature=0) == GREEDY


def test_repetition_penalty_divides_positive_and_multiplies_negative_logits() -> None:
    logits = torch.tensor([[2.0, -1.0, 0.5]])
    seen = torch.tensor([[True, True, False]])
    assert apply_repetition_penalty(logits, seen, 2.0).tolist() == [[1.0, -2.0, 0.5]]


def test_filters_compose() -> None:
    params = SamplingParams(temperature=1.0, top_k=4, top_p=0.8, min_p=0.5)
    assert _kept(process_logits(LOGITS, params)) == [0, 1]


def test_filters_match_transformers_logits_processors() -> None:
    """Reference we did not write: `transformers` repetition penalty, temperature, top-k, top-p, min-p."""
    from transformers.generation.logits_process import (
        MinPLogitsWarper,
        RepetitionPenaltyLogitsProcessor,
        TemperatureLogitsWarper,
        TopKLogitsWarper,
        TopPLogitsWarper,
    )

    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(4, 50, generator=generator) * 2
    history = torch.randint(0, 50, (4, 7), generator=generator)
    seen = torch.zeros(4, 50, dtype=torch.bool).scatter(1, history, True)
    params = SamplingParams(temperature=0.7, top_k=20, top_p=0.9, min_p=0.05, repetition_penalty=1.3)
    expected = logits.clone()
    for processor in (RepetitionPenaltyLogitsProcessor(1.3), TemperatureLogitsWarper(0.7), TopKLogitsWarper(20),
                      TopPLogitsWarper(0.9), MinPLogitsWarper(0.05)):
        expected = processor(history, expected)
    ours = process_logits(logits, params, seen)
    assert torch.equal(torch.isfinite(ours), torch.isfinite(expected))
    torch.testing.assert_close(ours[torch.isfinite(ours)], expected[torch.isfinite(expected)])


def test_sampling_is_seeded_and_follows_the_distribution() -> None:
    params = SamplingParams(top_k=3)
    draw = lambda seed: sample(LOGITS.expand(4000, -1), params, torch.Generator().manual_seed(seed))  # noqa: E731
    assert torch.equal(draw(7), draw(7))
    counts = torch.bincount(draw(7), minlength=5).float() / 4000
    expected = torch.tensor([0.5, 0.25, 0.15, 0, 0]) / 0.9
    assert counts[3:].sum() == 0
    assert (counts - expected).abs().max() < 4 * math.sqrt(0.25 / 4000)


@pytest.mark.parametrize("bad", [dict(temperature=-0.1), dict(top_p=0.0), dict(top_p=1.5), dict(top_k=0),
                                 dict(min_p=1.5), dict(repetition_penalty=0.0)])
def test_invalid_values_are_refused_with_a_clear_message(bad: dict) -> None:
    name = next(iter(bad))
    with pytest.raises(TinyLMError, match=name):
        SamplingParams(**bad)


@pytest.mark.parametrize("bad, name", [
    (dict(temperature=float("nan")), "temperature"), (dict(temperature=float("inf")), "temperature"),
    (dict(temperature=-1.0), "temperature"), (dict(top_k=0), "top_k"), (dict(top_p=float("nan")), "top_p"),
    (dict(min_p=float("nan")), "min_p"), (dict(min_p=-0.1), "min_p"),
])
def test_check_sampling_options_refuses_what_cannot_sample_in_one_line(bad: dict, name: str) -> None:
    options = {"temperature": 0.8, "top_k": None, **bad}
    with pytest.raises(TinyLMError, match=name) as refused:
        check_sampling_options(**options)
    assert "\n" not in str(refused.value)


def test_check_sampling_options_accepts_what_generate_accepts() -> None:
    for options in (dict(temperature=0.0, top_k=None), dict(temperature=1.5, top_k=1, top_p=1.0, min_p=0.0),
                    dict(temperature=0.8, top_k=50, top_p=0.9, min_p=1.0)):
        assert check_sampling_options(**options) is None
        SamplingParams(**options)  # the same rule: the params build too
