"""Growing a trained model's vocabulary: old logits unchanged, new rows the mean, tied stays tied, trainable."""

from __future__ import annotations

import pytest
import torch

from tinylm.config import ModelConfig
from tinylm.models.factory import build_model
from tinylm.models.vocab_growth import grow_vocab, init_token_rows

OLD, NEW, N_EMBED = 60, 64, 32
VARIANTS = [("classic", True), ("classic", False), ("modern", True), ("modern", False)]


def tiny(arch: str, tied: bool, vocab: int = OLD) -> torch.nn.Module:
    torch.manual_seed(0)
    extra = {"head_bias": not tied} if arch == "classic" else {}
    config = ModelConfig(arch=arch, vocab_size=vocab, context_length=16, n_embed=N_EMBED, n_head=2, n_blocks=1,
                         tie_embeddings=tied, **extra)
    model = build_model(config).eval()
    with torch.no_grad():  # a trained model's rows and bias differ from their init
        for param in model.parameters():
            param.add_(0.1 * torch.randn_like(param))
    return model


@pytest.mark.parametrize(("arch", "tied"), VARIANTS)
def test_growth_keeps_old_logits_and_starts_new_rows_at_the_mean(arch: str, tied: bool, one_thread: None) -> None:
    model = tiny(arch, tied)
    idx = torch.randint(0, OLD, (2, 12))
    before, params_before = model(idx)[0], model.num_params()
    embed_before = model.token_embed.weight.detach().clone()
    head_before = model.lm_head.weight.detach().clone()

    config = grow_vocab(model, NEW)

    assert config.vocab_size == NEW and model.config is config
    after = model(idx)[0]
    assert after.shape[-1] == NEW
    torch.testing.assert_close(after[..., :OLD], before, rtol=1e-5, atol=1e-6)
    embed = model.token_embed.weight
    torch.testing.assert_close(embed[:OLD], embed_before, rtol=0, atol=0)
    torch.testing.assert_close(embed[OLD:], embed_before.mean(0).expand(NEW - OLD, -1))
    assert (model.lm_head.weight is embed) == tied
    if not tied:
        torch.testing.assert_close(model.lm_head.weight[OLD:], head_before.mean(0).expand(NEW - OLD, -1))
    # a mean row scores the mean logit: logit_new = h . mean(W) + mean(b) = mean over old ids of h . W_i + b_i
    torch.testing.assert_close(after[..., OLD:], before.mean(-1, keepdim=True).expand(-1, -1, NEW - OLD),
                               rtol=1e-4, atol=1e-5)
    per_row = N_EMBED * (1 if tied else 2) + (1 if model.lm_head.bias is not None else 0)
    assert model.num_params() == params_before + (NEW - OLD) * per_row


@pytest.mark.parametrize(("arch", "tied"), VARIANTS)
def test_grown_rows_are_registered_and_learn(arch: str, tied: bool, one_thread: None) -> None:
    model = tiny(arch, tied)
    grow_vocab(model, NEW)
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    names = {name for name, _ in model.named_parameters()}
    assert "token_embed.weight" in names and (tied or "lm_head.weight" in names)
    new_id = NEW - 1
    idx = torch.tensor([[1, new_id, 2, 3]])
    targets = torch.tensor([[new_id, 2, 3, new_id]])
    _, loss = model(idx, targets)
    loss.backward()
    assert model.token_embed.weight.grad[new_id].abs().sum() > 0
    assert model.lm_head.weight.grad[new_id].abs().sum() > 0
    before = model.token_embed.weight[new_id].detach().clone()
    optimizer.step()
    assert not torch.equal(model.token_embed.weight[new_id], before)


def test_no_growth_when_the_rows_exist(one_thread: None) -> None:
    model = tiny("modern", tied=False)
    embed, head = model.token_embed.weight, model.lm_head.weight
    assert grow_vocab(model, OLD - 5).vocab_size == OLD
    assert model.token_embed.weight is embed and model.lm_head.weight is head  # the same Parameter objects


@pytest.mark.parametrize(("arch", "tied"), VARIANTS)
def test_new_tokens_in_padding_rows_are_reset_to_the_mean(arch: str, tied: bool, one_thread: None) -> None:
    """An r50k-style model: the vocabulary is padded, so new ids land in rows it already has."""
    model = tiny(arch, tied, vocab=NEW)
    known, new_ids = 50, [50, 51, 52]
    embed_before = model.token_embed.weight.detach().clone()
    head_before = model.lm_head.weight.detach().clone()
    config = init_token_rows(model, new_ids, known_rows=known)
    assert config.vocab_size == NEW and model.token_embed.weight.shape[0] == NEW
    embed = model.token_embed.weight
    torch.testing.assert_close(embed[new_ids], embed_before[:known].mean(0).expand(3, -1))
    untouched = [i for i in range(NEW) if i not in new_ids]
    torch.testing.assert_close(embed[untouched], embed_before[untouched], rtol=0, atol=0)
    if not tied:
        torch.testing.assert_close(model.lm_head.weight[new_ids], head_before[:known].mean(0).expand(3, -1))
    if model.lm_head.bias is not None:
        assert torch.allclose(model.lm_head.bias[new_ids], model.lm_head.bias[:known].mean())


def test_init_token_rows_grows_when_ids_lie_past_the_vocabulary(one_thread: None) -> None:
    model = tiny("classic", tied=False)
    embed_before = model.token_embed.weight.detach().clone()
    config = init_token_rows(model, [OLD, OLD + 1], known_rows=OLD)
    assert config.vocab_size == OLD + 2 and model.lm_head.out_features == OLD + 2
    torch.testing.assert_close(model.token_embed.weight[OLD:], embed_before.mean(0).expand(2, -1))
