"""RoPE scaling rules: frequencies equal a NumPy recompute from the papers' formulas, factor 1 is plain RoPE,
and a model with each rule gives transformers' logits (its own rope code, loaded from our export) at positions
past the original window. Bad settings are one line each."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from tinylm.config import ModelConfig
from tinylm.inference.fast_decode_support import fast_decode_refusal
from tinylm.interop.gguf_layout import gguf_architecture
from tinylm.interop.hf import hf_config_dict, to_hf_model
from tinylm.interop.hf_config_reader import config_from_hf
from tinylm.models.factory import build_model
from tinylm.models.modern.rope_scaling import RULES, RopeScaling, inverse_frequencies, plain_inverse_frequencies

transformers = pytest.importorskip("transformers")

# trained at 32 tokens, read at 128: every rule stretched by 4
EXTENDED = dict(vocab_size=97, context_length=128, n_embed=32, n_head=4, n_kv_head=2, n_blocks=2, mlp_hidden=64,
                rope_factor=4.0, rope_original_context=32)
RULE_FIELDS = {
    "linear": {},
    "dynamic": {},
    "yarn": {"yarn_beta_fast": 24.0, "yarn_beta_slow": 1.5},
    "yarn_given_temperature": {"yarn_attention_factor": 1.25},
    "yarn_wide_ramp": {"yarn_beta_fast": 1.0, "yarn_beta_slow": 0.05, "rope_theta": 100.0},  # ramp over pairs 0-3
    "llama3": {"llama3_low_freq_factor": 1.0, "llama3_high_freq_factor": 4.0},
    "llama3_narrow": {"llama3_low_freq_factor": 2.0, "llama3_high_freq_factor": 3.0},
}


# DeepSeek's latent attention: the rule rotates only its decoupled rotary dimensions (DeepseekV3 in transformers)
MLA = dict(attention="mla", kv_lora_rank=8, q_lora_rank=12, qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=8,
           norm_eps=1e-6)
ATTENTIONS = {"standard": {}, "mla": MLA}


def extended(name: str, **changes) -> ModelConfig:
    rule = name.split("_")[0]
    return ModelConfig(arch="modern", rope_scaling=rule, **{**EXTENDED, **RULE_FIELDS[name], **changes})


# ---- the papers' formulas, in NumPy ------------------------------------------------------------------
def numpy_plain(dim: int, theta: float) -> np.ndarray:
    return theta ** (-np.arange(0, dim, 2, dtype=np.float64) / dim)


def numpy_frequencies(s: RopeScaling, dim: int, seq_len: int) -> tuple[np.ndarray, float]:
    plain = numpy_plain(dim, s.theta)
    if s.rule == "linear":  # Chen et al. 2023: position p read as p / s
        return plain / s.factor, 1.0
    if s.rule == "dynamic":  # NTK-aware base, grown with the length read past L0
        length = max(seq_len, s.original_context)
        base = s.theta * (s.factor * length / s.original_context - s.factor + 1) ** (dim / (dim - 2))
        return numpy_plain(dim, base), 1.0
    if s.rule == "yarn":  # Peng et al. 2023, eqs. 17-20: a ramp over the number of turns r(d) = L0 / lambda_d
        def dimension(turns: float) -> float:  # the d where a pair turns `turns` times over L0
            return dim * math.log(s.original_context / (2 * math.pi * turns)) / (2 * math.log(s.theta))
        low = max(math.floor(dimension(s.yarn_beta_fast)), 0)
        high = min(math.ceil(dimension(s.yarn_beta_slow)), dim - 1)
        gamma = np.clip((np.arange(dim // 2) - low) / max(high - low, 1e-3), 0, 1)  # 1: interpolate fully
        temperature = s.yarn_attention_factor or (0.1 * math.log(s.factor) + 1 if s.factor > 1 else 1.0)
        return (1 - gamma) * plain + gamma * plain / s.factor, temperature
    if s.rule == "llama3":  # Llama 3.1: bands by wavelength against L0
        wavelength = 2 * math.pi / plain
        ratio = s.original_context / wavelength
        smooth = (ratio - s.llama3_low_freq_factor) / (s.llama3_high_freq_factor - s.llama3_low_freq_factor)
        out = np.where(ratio < s.llama3_low_freq_factor, plain / s.factor, plain)
        middle = (ratio >= s.llama3_low_freq_factor) & (ratio <= s.llama3_high_freq_factor)
        return np.where(middle, (1 - smooth) * plain / s.factor + smooth * plain, out), 1.0
    return plain, 1.0


@pytest.mark.parametrize("name", list(RULE_FIELDS))
@pytest.mark.parametrize(("dim", "theta", "factor", "original"), [
    (16, 10000.0, 4.0, 32), (64, 500000.0, 8.0, 8192), (32, 1e6, 2.5, 4096), (128, 10000.0, 16.0, 256)])
def test_frequencies_equal_a_numpy_recompute_of_the_papers_formulas(name: str, dim: int, theta: float, factor: float,
                                                                      original: int) -> None:
    config = extended(name, rope_theta=theta, rope_factor=factor, rope_original_context=32,
                      context_length=max(128, int(32 * factor)))
    scaling = RopeScaling.of(config)
    scaling = RopeScaling(**{**scaling.__dict__, "original_context": original})
    for seq_len in (original // 2, original, 3 * original):
        ours, temperature = inverse_frequencies(scaling, dim, seq_len)
        reference, expected = numpy_frequencies(scaling, dim, seq_len)
        np.testing.assert_allclose(ours.double().numpy(), reference, rtol=2e-6)
        assert temperature == pytest.approx(expected)


@pytest.mark.parametrize("rule", [r for r in RULES if r != "none"])
def test_at_factor_one_every_rule_is_plain_rope(rule: str) -> None:
    """Dynamic NTK up to its original context only: past it, its formula (transformers', vLLM's) raises theta by
    (L / L0)^(d / (d - 2)) even at factor 1, which is what "dynamic" means."""
    scaling = RopeScaling(rule=rule, theta=10000.0, factor=1.0, original_context=64)
    for seq_len in (32, 64) if rule == "dynamic" else (32, 64, 256):
        frequencies, temperature = inverse_frequencies(scaling, 32, seq_len)
        torch.testing.assert_close(frequencies, plain_inverse_frequencies(32, 10000.0), rtol=1e-6, atol=0)
        assert temperature == 1.0
    if rule == "dynamic":
        longer, _ = inverse_frequencies(scaling, 32, 256)
        torch.testing.assert_close(longer, plain_inverse_frequencies(32, 10000.0 * 4 ** (32 / 30)))


def test_the_rules_really_differ_past_the_window() -> None:
    """Each rule slows some frequencies and not others: no two give the same table (so parity below means something)."""
    tables = {name: inverse_frequencies(RopeScaling.of(extended(name)), 32, 128) for name in RULE_FIELDS}
    names = list(tables)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            same = torch.equal(tables[a][0], tables[b][0]) and tables[a][1] == tables[b][1]
            assert not same, (a, b)
    plain = plain_inverse_frequencies(32, 10000.0)
    yarn = tables["yarn"][0]
    assert yarn[0] == plain[0] and yarn[-1] == pytest.approx(plain[-1] / 4)  # kept fast, interpolated slow


def randomized(config: ModelConfig) -> torch.nn.Module:
    torch.manual_seed(0)
    model = build_model(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    return model


@pytest.mark.parametrize("attention", list(ATTENTIONS))
@pytest.mark.parametrize("name", list(RULE_FIELDS))
def test_logits_past_the_original_window_equal_transformers(name: str, attention: str) -> None:
    """128 tokens through a model trained at 32: transformers computes the rule with its own code
    (`modeling_rope_utils`), from the rope_parameters our export writes (LlamaForCausalLM, DeepseekV3ForCausalLM)."""
    model = randomized(extended(name, **ATTENTIONS[attention]))
    hf_model = to_hf_model(model).eval()
    torch.manual_seed(1)
    idx = torch.randint(0, 97, (2, 128))
    with torch.no_grad():
        ours, theirs = model(idx)[0], hf_model(idx).logits
    assert (ours - theirs).abs().max().item() < 1e-5
    assert (ours[:, 32:] - theirs[:, 32:]).abs().max().item() < 1e-5  # the positions past the original window
    with torch.no_grad():
        plain = randomized(extended(name, **ATTENTIONS[attention]).replace(
            rope_scaling="none", rope_factor=1.0, rope_original_context=None, **_defaults(name)))(idx)[0]
    assert (plain[:, 40:] - ours[:, 40:]).abs().max().item() > 1e-3  # the rule changed what the model computes


def _defaults(name: str) -> dict:
    return {field: getattr(ModelConfig(), field) for field in RULE_FIELDS[name]}


@pytest.mark.parametrize("attention", list(ATTENTIONS))
@pytest.mark.parametrize("name", list(RULE_FIELDS))
def test_the_rule_round_trips_through_a_transformers_config(name: str, attention: str) -> None:
    config = extended(name, **ATTENTIONS[attention])
    back = config_from_hf(transformers.AutoConfig.for_model(**hf_config_dict(config)))
    ignored = {"init_std", "dropout"} | ({"rope_original_context"} if name == "linear" else set())  # linear's rule
    if attention == "mla":  # sizes the import leaves to be derived (None), as a config written by hand would
        ignored |= {"n_kv_head", "qk_nope_head_dim", "v_head_dim"}
        assert (back.nope_dim, back.value_dim) == (8, 8)
    assert {k: v for k, v in back.diff(config).items() if k not in ignored} == {}  # never reads the original length


@pytest.mark.parametrize("attention", list(ATTENTIONS))
@pytest.mark.parametrize("name", ["linear", "yarn", "llama3"])
def test_a_kv_cache_decode_equals_the_whole_sequence(name: str, attention: str) -> None:
    model = randomized(extended(name, **ATTENTIONS[attention]))
    idx = torch.randint(0, 97, (1, 100), generator=torch.Generator().manual_seed(2))
    cache = model.new_cache(1)
    with torch.no_grad():
        whole = model(idx)[0]
        model.forward_hidden(idx[:, :60], cache=cache)
        steps = [model.logits(model.forward_hidden(idx[:, t:t + 1], cache=cache)) for t in range(60, 100)]
    torch.testing.assert_close(torch.cat(steps, dim=1), whole[:, 60:], rtol=1e-4, atol=1e-5)


def test_the_fast_decoder_takes_fixed_rules_and_says_why_not_dynamic() -> None:
    for name in ("linear", "yarn", "llama3"):
        assert fast_decode_refusal(extended(name)) is None
    assert "rope_scaling='dynamic'" in fast_decode_refusal(extended("dynamic"))


@pytest.mark.parametrize(("changes", "message"), [
    (dict(rope_scaling="linear", rope_factor=0.5), "rope_factor=0.5: must be >= 1: a factor below 1 would shrink"),
    (dict(yarn_beta_fast=16.0), "yarn_beta_fast=16.0: is a YaRN field: set rope_scaling=yarn"),
    (dict(rope_scaling="linear", yarn_attention_factor=1.2), "is a YaRN field"),
    (dict(rope_scaling="yarn", llama3_high_freq_factor=8.0), "is a Llama 3.1 field: set rope_scaling=llama3"),
    (dict(rope_scaling="yarn", rope_factor=4.0, rope_original_context=512),
     "rope_original_context=512: must be in [1, context_length=128]: the context a model is extended to cannot be "
     "shorter than the one it was trained at"),
    (dict(rope_factor=2.0), "rope_factor=2.0: needs a rope_scaling rule"),
    (dict(rope_scaling="ntk"), "rope_scaling='ntk': must be one of none, linear, dynamic, yarn, llama3"),
    (dict(rope_scaling="llama3", llama3_low_freq_factor=4.0), "must be above llama3_low_freq_factor=4.0"),
    (dict(arch="classic", rope_scaling="yarn"), "the classic model's positions are a learned table"),
])
def test_bad_settings_are_one_line_each(changes: dict, message: str) -> None:
    base = dict(vocab_size=97, context_length=128, n_embed=32, n_head=4)
    with pytest.raises(ValueError) as error:
        ModelConfig(**{**base, **changes})
    assert message in str(error.value) and "\n" not in str(error.value)


def test_the_cli_takes_the_rule_with_set() -> None:
    from tinylm.config import parse_override

    assert parse_override("rope_scaling=yarn") == ("rope_scaling", "yarn")
    assert parse_override("rope_factor=4") == ("rope_factor", 4.0)
    assert parse_override("rope_original_context=256") == ("rope_original_context", 256)
    assert parse_override("yarn_attention_factor=none") == ("yarn_attention_factor", None)
    assert parse_override("rope_scaling=none") == ("rope_scaling", "none")  # the choice, not Python's None
    assert parse_override("rope_scaling=None") == ("rope_scaling", "none")


@pytest.mark.parametrize(("name", "changes", "message"), [
    ("dynamic", {}, "rope_scaling='dynamic'.*no dynamic NTK"),
    ("llama3", {"qk_norm": True}, "rope_scaling='llama3' with qk_norm.*qwen3 graph is not verified"),
    ("yarn", {}, "yarn_beta_fast=24, yarn_beta_slow=1.5.*32 and 1"),
    ("yarn_given_temperature", {}, "yarn_attention_factor=1.25"),
])
def test_gguf_refuses_what_llama_cpp_would_compute_otherwise_in_one_line(name: str, changes: dict,
                                                                         message: str) -> None:
    from tinylm.errors import TinyLMError

    with pytest.raises(TinyLMError, match=message):
        gguf_architecture(extended(name, **changes))
    assert gguf_architecture(extended("linear")) == "llama"  # linear and default-beta YaRN are written
    assert gguf_architecture(extended("yarn", yarn_beta_fast=32.0, yarn_beta_slow=1.0)) == "llama"
    assert gguf_architecture(extended("llama3")) == "llama"  # written as a rope_freqs tensor


def test_llama3_is_written_as_the_frequency_factors_llama_cpp_divides_by() -> None:
    """rope_freqs: per pair, the plain frequency over the scaled one, from the Llama 3.1 formula in NumPy."""
    from tinylm.interop.gguf_layout import hyperparameters
    from tinylm.interop.gguf_tensors import gguf_tensors

    config = extended("llama3_narrow", rope_theta=40.0)
    model = randomized(config)
    tensors = gguf_tensors(model.state_dict(), config, "llama")
    plain = numpy_plain(config.dim_per_head, config.rope_theta)
    expected, _ = numpy_frequencies(RopeScaling.of(config), config.dim_per_head, config.context_length)
    factors = tensors["rope_freqs.weight"].numpy()
    assert factors.dtype == np.float32 and factors.shape == (config.dim_per_head // 2,)
    np.testing.assert_allclose(factors, plain / expected, rtol=1e-6)
    assert factors[0] == 1.0 and 1 < factors[1] < 4 and factors[-1] == pytest.approx(4.0)  # kept, mixed, slow
    assert not any(key.startswith("rope.scaling") for key in hyperparameters(config, "llama"))


@pytest.mark.parametrize("name", ["linear", "yarn", "llama3", "dynamic"])
def test_generation_past_the_original_window_is_the_same_on_every_path(name: str) -> None:
    """A 10-token prompt and 100 greedy tokens (positions up to 110, trained at 32): the engine's fast decoder
    (fixed rules), its cached and uncached model paths and speculative decoding with a smaller extended draft all
    give the tokens of a plain argmax loop over whole-sequence forwards. Dynamic NTK: the uncached path only. Its
    frequencies change with the length, so a cached key keeps the rotation of the length it was written at (as in
    transformers' cached generation) and a cached decode reads other numbers than a full recompute."""
    from tinylm.inference.engine import Engine
    from tinylm.inference.sampling import SamplingParams
    from tinylm.inference.speculative import speculative_generate

    model = randomized(extended(name))
    prompt = torch.randint(1, 97, (10,), generator=torch.Generator().manual_seed(3)).tolist()
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(100):
            ids.append(int(model(torch.tensor([ids]))[0][0, -1].argmax()))
    reference = ids[10:]
    greedy = SamplingParams(temperature=0.0)
    uncached = Engine(model, use_cache=False, fast=False)
    engines = [uncached] if name == "dynamic" else [Engine(model), Engine(model, fast=False), uncached]
    for engine in engines:
        assert engine.generate([prompt], 100, greedy)[0] == reference
    if name == "dynamic":
        return
    draft = randomized(extended(name, n_blocks=1))
    assert speculative_generate(model, draft, prompt, 100, k=4, sampling=greedy) == reference


@pytest.mark.parametrize("name", ["linear", "yarn"])
def test_the_server_reads_and_writes_past_the_original_window(name: str, tmp_path) -> None:
    """A model trained at 16 tokens and extended to 128, served: a 40-token prompt and 60 greedy tokens (positions
    up to 100) come back as a plain argmax loop over whole-sequence forwards writes them, through the official
    client; a prompt past the extended window is a 400 and the server keeps serving."""
    import openai

    from serve_support import make_checkpoint, serving

    run = make_checkpoint(tmp_path, context_length=128, rope_scaling=name, rope_factor=8.0,
                          rope_original_context=16, **RULE_FIELDS[name])
    with serving(run) as (url, served, _):
        model, tokenizer = served.model, served.tokenizer
        prompt = torch.randint(10, 320, (40,), generator=torch.Generator().manual_seed(5)).tolist()
        ids = list(prompt)
        with torch.no_grad():
            while len(ids) < 100 and (len(ids) == 40 or ids[-1] != tokenizer.eot_id):
                ids.append(int(model(torch.tensor([ids]))[0][0, -1].argmax()))
        produced = [i for i in ids[40:] if i not in set(tokenizer.special_tokens.values())]
        client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=60)
        reply = client.completions.create(model="micro", prompt=prompt, max_tokens=60, temperature=0)
        assert reply.choices[0].text == tokenizer.decode(produced)
        assert len(ids) > 60  # the comparison reached well past the 16 trained positions
        with pytest.raises(openai.BadRequestError):
            client.completions.create(model="micro", prompt=[11] * 129, max_tokens=1)
        after = client.completions.create(model="micro", prompt=prompt[:5], max_tokens=2, temperature=0)
        assert after.choices[0].finish_reason in ("stop", "length")
