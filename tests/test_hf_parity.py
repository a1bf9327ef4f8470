"""Parity with references we did not write: our models mapped into Hugging Face `transformers`.

Every weight, norms included, is randomized before the comparison, so a swapped or mis-scaled
tensor cannot hide behind an initialization that happens to be symmetric (all-ones norms, zero
biases). Configs are built here, nothing is downloaded. Float32 logits must agree to 1e-5.
"""

from __future__ import annotations

import random

import pytest
import torch

from model_variants import BASE, classic_config, modern_config
from tinylm.config import ModelConfig
from tinylm.errors import TinyLMError
from tinylm.interop.hf import hf_architecture, hf_config_dict, to_hf_model
from tinylm.interop.hf_config_reader import config_from_hf
from tinylm.models.factory import build_model

transformers = pytest.importorskip("transformers")

TOLERANCE = 1e-5


def randomized(config: ModelConfig, seed: int = 0) -> torch.nn.Module:
    """A model in eval mode whose every parameter (norm weights and biases too) is random."""
    torch.manual_seed(seed)
    model = build_model(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("router.weight"):
                p.normal_(0.0, 1.0)  # decisive routing: top-k choices far from ties
            elif name.endswith("lm_head.bias"):
                p.zero_()  # GPT-2's head has no bias (a non-zero one is refused, see below)
            else:
                p.add_(torch.randn_like(p) * 0.1)
    return model


def max_logit_error(model: torch.nn.Module, hf_model: torch.nn.Module, seed: int = 1) -> float:
    torch.manual_seed(seed)
    idx = torch.randint(0, model.config.vocab_size, (2, model.config.context_length))
    with torch.no_grad():
        ours = model(idx)[0]
        theirs = hf_model(idx).logits
    return (ours - theirs).abs().max().item()


def random_dense_config(seed: int, qk_norm: bool) -> ModelConfig:
    """A random Llama/Qwen3-shaped config; the seed cycles n_kv_head over {1, 2, n_head}, tying and theta."""
    rng = random.Random(seed)
    n_head = rng.choice([4, 8])
    return ModelConfig(
        arch="modern", vocab_size=rng.choice([61, 97, 128]), context_length=24, n_embed=n_head * rng.choice([8, 16]),
        n_head=n_head, n_kv_head=(1, 2, n_head)[seed % 3], n_blocks=rng.choice([1, 2]),
        mlp_hidden=rng.choice([40, 64]), rope_theta=(500.0, 1e6, 12345.0, 3e5)[seed % 4],
        norm_eps=rng.choice([1e-5, 1e-6]), tie_embeddings=seed % 2 == 1, qk_norm=qk_norm,
    )


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("qk_norm", [False, True], ids=["llama", "qwen3"])
def test_dense_random_configs_match_llama_and_qwen3(seed: int, qk_norm: bool) -> None:
    config = random_dense_config(seed, qk_norm)
    model = randomized(config, seed)
    hf_model = to_hf_model(model)
    assert type(hf_model).__name__ == ("Qwen3ForCausalLM" if qk_norm else "LlamaForCausalLM")
    assert max_logit_error(model, hf_model) <= TOLERANCE


def test_untied_mqa_and_mha_both_covered() -> None:
    """The random configs above are random; pin the three KV layouts and untied embeddings explicitly."""
    for n_kv_head in (1, 2, 4):
        config = modern_config("mha", n_kv_head=n_kv_head, tie_embeddings=False, rope_theta=50000.0)
        model = randomized(config)
        assert max_logit_error(model, to_hf_model(model)) <= TOLERANCE


VARIANTS = {
    "window_mistral": (modern_config("window"), "MistralForCausalLM"),
    "window_qwen3": (modern_config("window", qk_norm=True), "Qwen3ForCausalLM"),
    "moe_mixtral": (modern_config("moe"), "MixtralForCausalLM"),
    "moe_qwen3": (modern_config("moe", qk_norm=True, moe_norm_topk_prob=False, tie_embeddings=False),
                  "Qwen3MoeForCausalLM"),
    "moe_qwen3_norm_topk": (modern_config("moe", qk_norm=True), "Qwen3MoeForCausalLM"),
    "moe_shared_qwen2": (modern_config("moe_shared"), "Qwen2MoeForCausalLM"),
    "moe_shared2_qwen2": (modern_config("moe_shared", n_shared_experts=2, n_experts_per_token=2,
                                        moe_norm_topk_prob=False), "Qwen2MoeForCausalLM"),
    "mla_deepseek": (modern_config("mla", norm_eps=1e-6, rope_theta=20000.0), "DeepseekV3ForCausalLM"),
    "mla_qlora_deepseek": (modern_config("mla_qlora", norm_eps=1e-6, tie_embeddings=False), "DeepseekV3ForCausalLM"),
    "classic_gpt2": (classic_config(), "GPT2LMHeadModel"),
    "classic_gelu_gpt2": (classic_config(mlp_activation="gelu"), "GPT2LMHeadModel"),  # gelu_new: GPT-2's own
    "classic_tied_qkv_bias_gpt2": (ModelConfig(arch="classic", qkv_bias=True, **BASE), "GPT2LMHeadModel"),
}


@pytest.mark.parametrize("name", VARIANTS)
def test_every_exportable_variant_matches_its_transformers_class(name: str) -> None:
    config, architecture = VARIANTS[name]
    model = randomized(config)
    hf_model = to_hf_model(model)
    assert type(hf_model).__name__ == architecture
    assert max_logit_error(model, hf_model) <= TOLERANCE


def test_window_is_really_exercised() -> None:
    """Sequences longer than the window, and the HF model would differ without its window."""
    config = modern_config("window")
    assert config.sliding_window < config.context_length
    model = randomized(config)
    data = hf_config_dict(config)
    data.pop("model_type")
    data["sliding_window"] = None
    full = transformers.MistralForCausalLM(transformers.MistralConfig(**data)).eval()
    full.load_state_dict(to_hf_model(model).state_dict())
    assert max_logit_error(model, full) > 1e-3


def test_routing_options_matter() -> None:
    """norm_topk_prob is really compared: flipping it on the HF side breaks parity."""
    config = modern_config("moe", qk_norm=True, moe_norm_topk_prob=False)
    model = randomized(config)
    hf_model = to_hf_model(model)
    hf_model.config.norm_topk_prob = True
    for layer in hf_model.model.layers:
        layer.mlp.gate.norm_topk_prob = True
    assert max_logit_error(model, hf_model) > 1e-3


@pytest.mark.parametrize("change, feature", [
    (dict(attn_output_gate=True), "attn_output_gate"),
    (dict(n_experts=4, n_shared_experts=1, moe_hidden=32), "ungated shared expert"),
    (dict(n_experts=4, n_shared_experts=1, moe_shared_expert_gate=True, qk_norm=True), "qk_norm with a shared"),
    (dict(n_experts=4, moe_norm_topk_prob=False), "moe_norm_topk_prob=false"),
    (dict(attention="mla"), "norm_eps"),
    (dict(attention="mla", norm_eps=1e-6, n_experts=4), "mixture of experts with MLA"),
])
def test_no_exact_counterpart_is_refused_naming_the_feature(change: dict, feature: str) -> None:
    config = ModelConfig(arch="modern", **{**BASE, **change})
    with pytest.raises(TinyLMError, match=feature):
        hf_architecture(config)


def test_classic_head_bias_must_be_zero() -> None:
    model = randomized(classic_config(head_bias=True))
    with torch.no_grad():
        model.lm_head.bias[3] = 0.5
    with pytest.raises(TinyLMError, match="lm_head bias"):
        to_hf_model(model)


@pytest.mark.parametrize("name", ["window_qwen3", "moe_shared_qwen2", "mla_qlora_deepseek", "classic_gpt2"])
def test_config_round_trips_through_transformers(name: str) -> None:
    config, _ = VARIANTS[name]
    back = config_from_hf(to_hf_model(build_model(config)).config)
    ignored = {"init_std", "qkv_bias", "dropout", "moe_aux_loss_coef"}
    assert {k: v for k, v in back.diff(config).items() if k not in ignored} == {}
