"""Rollouts: the sampler's log-probs equal the trainer's recompute, a row's sample depends only on its seed,
responses stop where they should, and a reused engine decodes with the weights it has now."""

from __future__ import annotations

import pytest
import torch

from tinylm.config import ModelConfig
from tinylm.inference.engine import Engine
from tinylm.inference.sampling import GREEDY, SamplingParams, inverse_cdf_sample
from tinylm.models.factory import build_model
from tinylm.stages.rl.rollout import policy_logprobs, sample_rollouts

pytestmark = pytest.mark.usefixtures("one_thread")

MICRO = dict(vocab_size=64, context_length=32, n_embed=32, n_head=4, n_blocks=2, n_kv_head=2)
PROMPTS = [[1, 5, 9], [2, 7], [3, 3, 3, 4, 8], [6]]


def micro_model(arch: str = "modern", **changes: object) -> torch.nn.Module:
    torch.manual_seed(0)
    extra = {} if arch == "modern" else {"n_kv_head": None}
    config = ModelConfig(arch=arch, **{**MICRO, **extra, **changes})  # type: ignore[arg-type]
    model = build_model(config)
    with torch.no_grad():  # logits spread enough that sampling is not uniform
        for p in model.parameters():
            p.mul_(3.0)
    return model


@pytest.mark.parametrize(("arch", "sampling"), [
    ("modern", SamplingParams(temperature=0.7, top_k=8)),
    ("modern", SamplingParams(temperature=1.3, top_p=0.9)),
    ("classic", SamplingParams(temperature=0.5, top_k=5, top_p=0.8)),
])
def test_sampling_logprobs_equal_the_training_recompute(arch: str, sampling: SamplingParams) -> None:
    model = micro_model(arch, qk_norm=True) if arch == "modern" else micro_model(arch)
    rollouts = sample_rollouts(model, PROMPTS, group_size=3, max_new_tokens=8, sampling=sampling,
                               seeds=[11, 12, 13, 14], stop_ids=[0], pad_id=0)
    model.train()
    recomputed, _ = policy_logprobs(model, rollouts.ids, sampling.temperature)
    mask = rollouts.response_mask.bool()
    assert mask.sum() > 20
    gap = (recomputed - rollouts.logprobs)[mask].abs().max().item()
    assert gap < 1e-5
    ratio = torch.exp(recomputed - rollouts.logprobs)[mask]  # exp(gap) - 1 ~ gap: 1 +- 1e-5
    assert (ratio - 1).abs().max().item() < 1e-5
    head_on_responses, _ = policy_logprobs(model, rollouts.ids, sampling.temperature, rollouts.response_mask)
    assert (head_on_responses - rollouts.logprobs)[mask].abs().max().item() < 1e-5  # what `tinylm rl` computes


@pytest.mark.parametrize("arch", ["modern", "classic"])
def test_the_head_on_response_tokens_only_gives_the_same_logprobs_and_gradients(arch: str) -> None:
    """`policy_logprobs(..., mask)` runs the output head on the masked positions only (`logits_at`)."""
    model = micro_model(arch)
    rollouts = sample_rollouts(model, PROMPTS, group_size=2, max_new_tokens=6, sampling=SamplingParams(),
                               seeds=[1, 2, 3, 4], stop_ids=[0], pad_id=0)
    mask = rollouts.response_mask
    model.train()
    results = []
    for wanted in (None, mask):
        model.zero_grad()
        logp, logits = policy_logprobs(model, rollouts.ids, 0.8, wanted)
        logp = logp * mask  # what the losses see
        (logp.sum() + (logp**2).sum()).backward()
        results.append((logp.detach(), logits.detach(), [p.grad.clone() for p in model.parameters()]))
    (full, full_logits, full_grads), (part, part_logits, part_grads) = results
    assert part_logits.shape == (int(mask.sum()), MICRO["vocab_size"])
    torch.testing.assert_close(part_logits, full_logits[mask.bool()], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(part, full, rtol=1e-6, atol=1e-6)
    assert (part[~mask.bool()] == 0).all()
    for a, b in zip(part_grads, full_grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_a_rows_sample_depends_only_on_its_seed() -> None:
    model = micro_model()
    sampling = SamplingParams(temperature=1.0)
    together = sample_rollouts(model, PROMPTS, 2, 6, sampling, seeds=[5, 6, 7, 8], stop_ids=[0], pad_id=0)
    alone = sample_rollouts(model, PROMPTS[2:3], 2, 6, sampling, seeds=[7], stop_ids=[0], pad_id=0)
    assert together.responses[4:6] == alone.responses
    again = sample_rollouts(model, PROMPTS, 2, 6, sampling, seeds=[5, 6, 7, 8], stop_ids=[0], pad_id=0)
    assert again.responses == together.responses and torch.equal(again.logprobs, together.logprobs)
    other = sample_rollouts(model, PROMPTS, 2, 6, sampling, seeds=[9, 6, 7, 8], stop_ids=[0], pad_id=0)
    assert other.responses[:2] != together.responses[:2]


def test_responses_stop_at_a_stop_id_or_their_limit_and_the_mask_covers_them() -> None:
    model = micro_model()
    stop_ids = list(range(0, 64, 3))  # common enough that some rows stop early
    r = sample_rollouts(model, PROMPTS, 4, 6, SamplingParams(temperature=1.0), seeds=[1, 2, 3, 4],
                        stop_ids=stop_ids, pad_id=63)
    rows = [p for p in PROMPTS for _ in range(4)]
    assert r.stopped.any() and (~r.stopped).any()
    for i, (prompt, response) in enumerate(zip(rows, r.responses)):
        assert 1 <= len(response) <= 6
        assert all(t not in stop_ids for t in response[:-1])
        assert (response[-1] in stop_ids) == bool(r.stopped[i]) or len(response) == 6
        assert r.ids[i, :len(prompt)].tolist() == prompt
        assert r.ids[i, len(prompt):len(prompt) + len(response)].tolist() == response
        assert r.response_mask[i].sum() == len(response)
        assert r.response_mask[i, len(prompt) - 1] == 1
        assert len(prompt) < 2 or r.response_mask[i, len(prompt) - 2] == 0


def test_inverse_cdf_sampling_draws_the_distribution_and_never_a_zero_probability_token() -> None:
    probs = torch.tensor([[0.5, 0.0, 0.2, 0.3, 0.0]]).expand(20_000, -1)
    uniforms = torch.rand(20_000, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    uniforms[0] = 0.0
    draws = inverse_cdf_sample(probs, uniforms)
    counts = torch.bincount(draws, minlength=5).double() / 20_000
    assert counts[1] == 0 and counts[4] == 0
    assert torch.allclose(counts, probs[0].double(), atol=0.015)


def test_a_reused_engine_decodes_with_the_weights_after_an_in_place_update() -> None:
    """An optimizer changes weights in place; the engine kept across steps must see every change (the QK-norm
    weights included, which the fast decoder used to copy when it was built)."""
    model = micro_model(qk_norm=True)
    engine = Engine(model)
    before = engine.generate(PROMPTS, max_new_tokens=8, sampling=GREEDY)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.5)
        for block in model.blocks:
            block.attn.q_norm.weight.mul_(-3.0)
            block.attn.k_norm.weight.mul_(2.0)
    reused = engine.generate(PROMPTS, max_new_tokens=8, sampling=GREEDY)
    fresh = Engine(model).generate(PROMPTS, max_new_tokens=8, sampling=GREEDY)
    assert reused == fresh and reused != before
