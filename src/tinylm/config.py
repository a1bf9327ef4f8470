"""ModelConfig: one validated dataclass that describes every model tinylm can build.

Both architectures read the same fields, so a preset, a checkpoint's `config.json` and a
`--set n_kv_head=2` override all speak one language. Fields that only one architecture uses are
ignored by the other. An impossible combination raises `ValueError` naming the field and the rule,
before any tensor is allocated.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field, fields
from typing import Any, Literal, get_args, get_type_hints

Arch = Literal["classic", "modern"]
RopeRule = Literal["none", "linear", "dynamic", "yarn", "llama3"]
ROPE_RULES: tuple[str, ...] = get_args(RopeRule)  # each one a file of models/modern/rope_scaling/


def swiglu_hidden(n_embed: int, multiple_of: int = 64) -> int:
    """8/3 * n_embed rounded up to a multiple: three SwiGLU matrices cost what two 4x ReLU ones do."""
    return multiple_of * math.ceil(8 * n_embed / 3 / multiple_of)


@dataclass
class ModelConfig:
    arch: Arch = "modern"
    vocab_size: int = 4096
    context_length: int = 256
    n_embed: int = 128
    n_head: int = 4
    n_blocks: int = 4
    dropout: float = 0.0
    init_std: float = 0.02
    tie_embeddings: bool = True
    zero_init_head: bool = False  # an untied head starts at zero (modded-nanogpt); initialization only
    logit_softcap: float | None = None  # logits = c * tanh(head(x) / c) (Gemma 2, modded-nanogpt); None = off
    gradient_checkpointing: bool = False

    # classic (GPT-2 style) only
    attn_impl: Literal["manual", "sdpa"] = "manual"
    qkv_bias: bool = False
    head_bias: bool = False  # GPT-2's head has none; the seed's 13m preset had one (see presets.py)
    layer_norm_eps: float = 1e-5
    mlp_activation: Literal["relu", "gelu"] = "relu"  # gelu: GPT-2's own, tanh-approximated (what llama.cpp runs)

    # modern only
    n_kv_head: int | None = None  # None = n_head (MHA); 1 = MQA; in between = GQA
    head_dim: int | None = None  # None = n_embed // n_head
    mlp_hidden: int | None = None  # None = swiglu_hidden(n_embed, mlp_multiple_of)
    mlp_multiple_of: int = 64
    mlp_type: Literal["swiglu", "relu2"] = "swiglu"  # relu2: down(relu(up(x))^2), 3/2 the hidden width
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    # RoPE scaling, to read past the context a model was trained at (models/modern/rope_scaling/)
    rope_scaling: RopeRule = "none"
    rope_factor: float = 1.0  # how many times longer a window the rule stretches RoPE over
    rope_original_context: int | None = None  # the context pretraining used; None = context_length (not extended)
    yarn_beta_fast: float = 32.0  # YaRN: pairs turning more than this many times over the original context are kept
    yarn_beta_slow: float = 1.0  # YaRN: pairs turning fewer times are interpolated (divided by the factor)
    yarn_attention_factor: float | None = None  # YaRN: cos and sin scale; None = 0.1 ln(factor) + 1
    llama3_low_freq_factor: float = 1.0  # Llama 3.1: wavelengths over original_context / this are divided
    llama3_high_freq_factor: float = 4.0  # Llama 3.1: wavelengths under original_context / this are kept
    qk_norm: bool = False
    sliding_window: int | None = None  # a query sees itself and the window-1 tokens before it
    attn_output_gate: bool = False

    # multi-head latent attention (DeepSeek-V2/V3); used when attention == "mla"
    attention: Literal["standard", "mla"] = "standard"
    kv_lora_rank: int = 32
    q_lora_rank: int | None = None
    qk_nope_head_dim: int | None = None  # None = head_dim
    qk_rope_head_dim: int = 16
    v_head_dim: int | None = None  # None = head_dim

    # mixture of experts; dense when n_experts == 0
    n_experts: int = 0
    n_experts_per_token: int = 2
    n_shared_experts: int = 0
    moe_hidden: int | None = None  # None = mlp_hidden
    moe_aux_loss_coef: float = 0.01
    moe_norm_topk_prob: bool = True
    moe_shared_expert_gate: bool = False

    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.validate()

    # ---- derived sizes -------------------------------------------------------------------------
    @property
    def kv_heads(self) -> int:
        return self.n_head if self.n_kv_head is None else self.n_kv_head

    @property
    def dim_per_head(self) -> int:
        return self.head_dim if self.head_dim is not None else self.n_embed // self.n_head

    @property
    def mlp_width(self) -> int:
        if self.arch == "classic":
            return 4 * self.n_embed
        if self.mlp_hidden is not None:
            return self.mlp_hidden
        width = swiglu_hidden(self.n_embed, self.mlp_multiple_of)
        return width * 3 // 2 if self.mlp_type == "relu2" else width  # two matrices as wide hold what three did

    @property
    def expert_width(self) -> int:
        return self.moe_hidden if self.moe_hidden is not None else self.mlp_width

    @property
    def nope_dim(self) -> int:
        return self.qk_nope_head_dim if self.qk_nope_head_dim is not None else self.dim_per_head

    @property
    def value_dim(self) -> int:
        return self.v_head_dim if self.v_head_dim is not None else self.dim_per_head

    @property
    def is_moe(self) -> bool:
        return self.n_experts > 0

    @property
    def rope_base_context(self) -> int:
        """The context the model was pretrained at: the rule stretches RoPE from this length."""
        return self.rope_original_context if self.rope_original_context is not None else self.context_length

    # ---- validation ----------------------------------------------------------------------------
    def validate(self) -> None:
        def need(ok: bool, name: str, rule: str) -> None:
            if not ok:
                raise ValueError(f"invalid config: {name}={getattr(self, name)!r}: {rule}")

        need(self.arch in ("classic", "modern"), "arch", "must be 'classic' or 'modern'")
        for name in ("vocab_size", "context_length", "n_embed", "n_head", "n_blocks"):
            need(isinstance(getattr(self, name), int) and getattr(self, name) >= 1, name, "must be an integer >= 1")
        need(0.0 <= self.dropout < 1.0, "dropout", "must be in [0, 1)")
        need(self.init_std > 0, "init_std", "must be > 0")
        need(self.logit_softcap is None or (math.isfinite(self.logit_softcap) and self.logit_softcap > 0),
             "logit_softcap", "must be a positive number or None")
        need(not (self.zero_init_head and self.tie_embeddings), "zero_init_head",
             "needs tie_embeddings=False: a tied head is the embedding, which cannot start at zero")
        need(self.attn_impl in ("manual", "sdpa"), "attn_impl", "must be 'manual' or 'sdpa'")
        need(self.attention in ("standard", "mla"), "attention", "must be 'standard' or 'mla'")
        need(self.mlp_activation in ("relu", "gelu"), "mlp_activation", "must be 'relu' or 'gelu'")
        if self.head_dim is None:
            need(self.n_embed % self.n_head == 0, "n_head", f"must divide n_embed={self.n_embed}")
        else:
            need(self.head_dim >= 2, "head_dim", "must be >= 2")
        if self.arch == "classic":
            need(self.rope_scaling == "none", "rope_scaling",
                 "the classic model's positions are a learned table of context_length rows, with no RoPE to "
                 "rescale: a context can be extended on a modern model only")
            need(self.n_embed % self.n_head == 0, "n_head", f"must divide n_embed={self.n_embed}")
            for name in ("n_experts", "qk_norm", "sliding_window", "attn_output_gate", "mlp_type"):
                need(getattr(self, name) == _field_default(name), name, "is a modern-only feature (use arch=modern)")
            need(self.attention == "standard", "attention", "MLA is a modern-only feature (use arch=modern)")
            return
        need(1 <= self.kv_heads <= self.n_head, "n_kv_head", f"must be in [1, n_head={self.n_head}]")
        need(self.n_head % self.kv_heads == 0, "n_kv_head", f"must divide n_head={self.n_head}")
        if self.attention == "standard":
            need(self.dim_per_head % 2 == 0, "head_dim", "must be even for RoPE (n_embed // n_head is odd)")
        need(self.rope_theta > 0, "rope_theta", "must be > 0")
        self._validate_rope_scaling(need)
        need(self.norm_eps > 0, "norm_eps", "must be > 0")
        need(self.mlp_multiple_of >= 1, "mlp_multiple_of", "must be >= 1")
        need(self.mlp_hidden is None or self.mlp_hidden >= 1, "mlp_hidden", "must be >= 1")
        need(self.mlp_type in ("swiglu", "relu2"), "mlp_type", "must be 'swiglu' or 'relu2'")
        need(self.mlp_type == "swiglu" or not self.n_experts, "mlp_type",
             "relu2 is the dense MLP's; the experts of a mixture are SwiGLU")
        need(self.sliding_window is None or self.sliding_window >= 1, "sliding_window", "must be >= 1 or None")
        if self.attention == "mla":
            need(self.kv_lora_rank >= 1, "kv_lora_rank", "must be >= 1")
            need(self.q_lora_rank is None or self.q_lora_rank >= 1, "q_lora_rank", "must be >= 1 or None")
            need(self.qk_rope_head_dim >= 2 and self.qk_rope_head_dim % 2 == 0, "qk_rope_head_dim",
                 "must be even and >= 2")
            need(self.nope_dim >= 1, "qk_nope_head_dim", "must be >= 1")
            need(self.value_dim >= 1, "v_head_dim", "must be >= 1")
            need(not self.attn_output_gate, "attn_output_gate", "is not supported together with MLA")
        if self.n_experts:
            need(self.n_experts >= 2, "n_experts", "must be 0 (dense) or >= 2")
            need(1 <= self.n_experts_per_token <= self.n_experts, "n_experts_per_token",
                 f"must be in [1, n_experts={self.n_experts}]")
            need(self.n_shared_experts >= 0, "n_shared_experts", "must be >= 0")
            need(self.moe_aux_loss_coef >= 0, "moe_aux_loss_coef", "must be >= 0")
            need(not self.moe_shared_expert_gate or self.n_shared_experts > 0, "moe_shared_expert_gate",
                 "needs n_shared_experts > 0")

    def _validate_rope_scaling(self, need: Any) -> None:
        rule = self.rope_scaling
        need(rule in ROPE_RULES, "rope_scaling", f"must be one of {', '.join(ROPE_RULES)}")
        need(math.isfinite(self.rope_factor) and self.rope_factor >= 1, "rope_factor",
             "must be >= 1: a factor below 1 would shrink the window, not extend it")
        need(self.rope_original_context is None or 1 <= self.rope_original_context <= self.context_length,
             "rope_original_context", f"must be in [1, context_length={self.context_length}]: the context a model "
             "is extended to cannot be shorter than the one it was trained at")
        if rule == "none":  # rope_original_context may stay: a plain-RoPE extension's first training length
            need(self.rope_factor == 1, "rope_factor", "needs a rope_scaling rule (linear, dynamic, yarn or llama3)")
        rule_fields = {"yarn": ("YaRN", ("yarn_beta_fast", "yarn_beta_slow", "yarn_attention_factor")),
                       "llama3": ("Llama 3.1", ("llama3_low_freq_factor", "llama3_high_freq_factor"))}
        for owner, (title, names) in rule_fields.items():
            for name in names:
                need(rule == owner or getattr(self, name) == _field_default(name), name,
                     f"is a {title} field: set rope_scaling={owner}")
        need(0 < self.yarn_beta_slow < self.yarn_beta_fast, "yarn_beta_fast",
             f"must be above yarn_beta_slow={self.yarn_beta_slow}, which must be > 0")
        need(self.yarn_attention_factor is None or self.yarn_attention_factor > 0, "yarn_attention_factor",
             "must be > 0 or None")
        need(0 < self.llama3_low_freq_factor < self.llama3_high_freq_factor, "llama3_high_freq_factor",
             f"must be above llama3_low_freq_factor={self.llama3_low_freq_factor}, which must be > 0")

    # ---- (de)serialization ---------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelConfig:
        """A saved config; classic ones written before `head_bias` existed all had the bias."""
        if data.get("arch") == "classic" and "head_bias" not in data:
            data = {**data, "head_bias": True}
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"invalid config: unknown field(s) {', '.join(unknown)}")
        return cls(**data)

    def replace(self, **changes: Any) -> ModelConfig:
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)

    def diff(self, other: ModelConfig) -> dict[str, tuple[Any, Any]]:
        """Fields whose values differ, for error messages such as a mismatched checkpoint."""
        a, b = self.to_dict(), other.to_dict()
        return {k: (a[k], b[k]) for k in a if a[k] != b[k]}


def _field_default(name: str) -> Any:
    return next(f.default for f in fields(ModelConfig) if f.name == name)


def parse_override(text: str) -> tuple[str, Any]:
    """Parse one `--set name=value` into a typed pair, using the field's declared type."""
    if "=" not in text:
        raise ValueError(f"invalid override {text!r}: expected name=value")
    name, raw = (s.strip() for s in text.split("=", 1))
    by_name = {f.name: f for f in fields(ModelConfig)}
    if name not in by_name or name == "extra":
        raise ValueError(f"invalid override {text!r}: unknown model field {name!r}")
    if name == "arch":  # a preset's shape depends on its arch, so it cannot be patched onto a built config
        raise ValueError(f"invalid override {text!r}: arch is its own option: use --arch {raw}, not --set arch={raw}")
    default = getattr(ModelConfig(), name)
    annotation = str(by_name[name].type)
    if raw.lower() in ("none", "null"):
        if "none" in get_args(get_type_hints(ModelConfig)[name]):  # a choice named none (rope_scaling=none)
            return name, "none"
        if "None" not in annotation:
            raise ValueError(f"invalid override {text!r}: {name} cannot be None")
        return name, None
    if isinstance(default, bool) or annotation.startswith("bool"):
        if raw.lower() not in ("true", "false", "1", "0", "yes", "no"):
            raise ValueError(f"invalid override {text!r}: {name} expects true/false")
        return name, raw.lower() in ("true", "1", "yes")
    try:
        if annotation.startswith("int"):
            return name, int(raw)
        if annotation.startswith("float"):
            return name, float(raw)
    except ValueError:
        raise ValueError(f"invalid override {text!r}: {name} expects a number") from None
    return name, raw

