"""Speculative decoding: greedy output equals the target's, sampled tokens follow the target's distribution."""

from __future__ import annotations

import itertools

import pytest
import torch

from model_variants import all_configs, modern_config
from tinylm.errors import TinyLMError
from tinylm.inference.engine import Engine
from tinylm.inference.sampling import GREEDY, SamplingParams
from tinylm.inference.speculative import SpeculativeDecoder, SpeculativeStats, speculative_generate
from tinylm.models.factory import build_model


def _model(config, seed: int, std: float = 0.4) -> torch.nn.Module:
    torch.manual_seed(seed)
    return build_model(config.replace(init_std=std)).eval()


@pytest.mark.parametrize("copy", ["trainable", "decodes-only"])
@pytest.mark.parametrize(("target_name", "draft_name"), [("gqa", "mqa"), ("mla", "gqa"), ("classic", "gqa")])
def test_greedy_speculative_equals_greedy_target(target_name: str, draft_name: str, copy: str) -> None:
    """Also on inference copies, as `tinylm generate --draft` loads them: the target's weights packed for k + 1 rows."""
    configs = all_configs()
    target = _model(configs[target_name], 0).requires_grad_(copy == "trainable")
    draft = _model(configs[draft_name].replace(n_blocks=1), 1).requires_grad_(copy == "trainable")
    prompt = [3, 1, 4, 1, 5]
    expected = Engine(target).generate([prompt], 60, GREEDY)[0]  # 60 tokens: past the 32-token window
    stats = SpeculativeStats()
    assert speculative_generate(target, draft, prompt, 60, k=3, sampling=GREEDY, stats=stats) == expected
    assert stats.emitted == 60 and stats.proposed > 0


@pytest.mark.parametrize(("target_context", "draft_context"), [(32, 12), (32, 5), (16, 32)])
def test_a_draft_with_another_context_length_still_gives_the_targets_own_text(target_context: int,
                                                                              draft_context: int) -> None:
    """Each model keeps its own window: the target's as the engine keeps it (a draft with a shorter one used to cut
    the target's context to the draft's, changing its text), the draft's re-encoded from its last half."""
    target = _model(modern_config("gqa").replace(context_length=target_context), 0).requires_grad_(False)
    draft = _model(modern_config("mqa").replace(n_blocks=1, context_length=draft_context), 1).requires_grad_(False)
    prompt = [3, 1, 4, 1, 5, 9, 2, 6]
    expected = Engine(target).generate([prompt], 70, GREEDY)[0]
    stats = SpeculativeStats()
    assert speculative_generate(target, draft, prompt, 70, k=4, sampling=GREEDY, stats=stats) == expected
    assert stats.proposed > 0


def test_one_decoder_serves_many_prompts_as_a_fresh_one_would() -> None:
    """SpeculativeDecoder builds both caches once; each prompt starts from empty ones (greedy and sampled)."""
    target = _model(modern_config("gqa"), 0).requires_grad_(False)
    draft = _model(modern_config("mqa").replace(n_blocks=1), 1).requires_grad_(False)
    decoder = SpeculativeDecoder(target, draft, k=3)
    sampled = SamplingParams(temperature=1.0)
    for prompt, sampling in [([5, 6, 7], GREEDY), ([1, 2], sampled), ([9, 9, 9, 9], GREEDY), ([5, 6, 7], sampled)]:
        fresh = speculative_generate(target, draft, prompt, 45, k=3, sampling=sampling, seed=4)
        assert list(decoder.stream(prompt, 45, sampling, seed=4)) == fresh


def test_a_perfect_draft_is_always_accepted() -> None:
    target = _model(modern_config("gqa"), 0)
    stats = SpeculativeStats()
    out = speculative_generate(target, target, [1, 2, 3], 40, k=4, sampling=GREEDY, stats=stats)
    assert out == Engine(target).generate([[1, 2, 3]], 40, GREEDY)[0]
    assert stats.acceptance_rate == 1.0 and stats.tokens_per_target_pass > 3


def _chi_square(counts: torch.Tensor, probs: torch.Tensor) -> float:
    expected = probs * counts.sum()
    return float(((counts - expected) ** 2 / expected).sum())


def test_sampled_tokens_follow_the_target_distribution() -> None:
    """Chi-square goodness of fit of each of the first three tokens against the target's exact marginals.

    The draft disagrees strongly with the target (different random weights), so rejections and
    residual draws happen often; the same counts tested against the draft's marginals must fail.
    """
    vocab = 5
    config = modern_config("gqa", vocab_size=vocab)
    target, draft = _model(config, 0, std=0.1), _model(config.replace(n_blocks=1), 7, std=0.1)
    prompt, n, samples = [0, 1], 3, 1500
    params = SamplingParams(temperature=1.0)

    def marginals(model: torch.nn.Module) -> torch.Tensor:
        """Exact distribution [n, vocab] of each of the next n = 3 tokens, from the full joint."""
        out = torch.zeros(n, vocab, dtype=torch.float64)
        with torch.inference_mode():
            for x1, x2 in itertools.product(range(vocab), repeat=2):
                logits, _ = model(torch.tensor([prompt + [x1, x2]]))
                rows = torch.softmax(logits[0, len(prompt) - 1 :].double(), dim=-1)  # P(x1), P(x2|x1), P(x3|x1,x2)
                joint = rows[0, x1] * rows[1, x2]
                out[0, x1] += joint
                out[1, x2] += joint
                out[2] += joint * rows[2]
        return out

    counts = torch.zeros(n, vocab, dtype=torch.float64)
    stats = SpeculativeStats()
    for seed in range(samples):
        tokens = speculative_generate(target, draft, prompt, n, k=2, sampling=params, seed=seed, stats=stats)
        for j, token in enumerate(tokens):
            counts[j, token] += 1
    assert 0.05 < stats.acceptance_rate < 0.95  # both branches of accept/reject are exercised
    critical = 18.47  # chi-square, 4 degrees of freedom, p = 0.001
    target_marginals, draft_marginals = marginals(target), marginals(draft)
    for j in range(n):
        assert _chi_square(counts[j], target_marginals[j]) < critical
    assert max(_chi_square(counts[j], draft_marginals[j]) for j in range(n)) > 5 * critical


def test_mismatched_vocabularies_are_refused() -> None:
    target = _model(modern_config("gqa"), 0)
    draft = _model(modern_config("gqa", vocab_size=50), 0)
    with pytest.raises(TinyLMError, match="vocabulary"):
        speculative_generate(target, draft, [1], 5)
