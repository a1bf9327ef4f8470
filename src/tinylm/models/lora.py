"""LoRA: fine-tune a frozen model through a low-rank update of chosen weight matrices (Hu et al., 2021).

A linear layer's weight W [out, in] stays frozen; next to it train A [r, in] and B [out, r] with
r much smaller than in and out, and compute

    y = x W^T + (dropout(x) A^T B^T) * scale,    scale = alpha / r   (rsLoRA: alpha / sqrt(r))

which is the layer with weight W' = W + scale * B A. B starts at zero, so a fresh adapter changes
nothing and training starts from the base model exactly; A starts like an nn.Linear weight (Kaiming
uniform), so the gradient reaching B is not zero. Only A and B are trained and held by the
optimizer: r * (in + out) numbers per matrix instead of in * out, with no gradients or Adam moments
for the base. After training, `merge_lora` folds the update into W, and the model is a plain model
again, as fast as the base.

`LoRALinear` keeps the wrapped layer's own `weight` Parameter under the same name, so state-dict
names, tied weights and anything that reads `module.weight` are unchanged; the adapter adds only
`<layer>.lora_A` and `<layer>.lora_B`. Targets are named per projection (q, k, v, o, gate, up,
down) and mapped to each architecture's layers; "all-linear" takes every linear layer but the
output head, as PEFT does.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import asdict, dataclass, fields
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from tinylm.errors import TinyLMError


# The merge formula W' = W + scale * B A, shared by training (merging the adapters it holds) and loading
# (an adapter-only checkpoint rebuilt from its base): plain tensor algebra, no module needed.
def merged_weight(weight: torch.Tensor, lora_A: torch.Tensor, lora_B: torch.Tensor, scale: float) -> torch.Tensor:
    """W + scale * B A, summed in float32 and returned in W's dtype."""
    return (weight.float() + scale * (lora_B.float() @ lora_A.float())).to(weight.dtype)


def merged_weights(base: dict[str, torch.Tensor], lora: dict[str, torch.Tensor], scale: float
                   ) -> dict[str, torch.Tensor]:
    """A base state dict with every adapter of `lora` ({layer}.lora_A / .lora_B) folded into {layer}.weight."""
    layers = sorted({key.rpartition(".")[0] for key in lora})
    if set(lora) != {f"{layer}.{part}" for layer in layers for part in ("lora_A", "lora_B")}:
        raise TinyLMError("LoRA adapter is malformed: it must hold exactly one lora_A and one lora_B per layer")
    out = dict(base)
    for layer in layers:
        weight, lora_A, lora_B = base.get(f"{layer}.weight"), lora[f"{layer}.lora_A"], lora[f"{layer}.lora_B"]
        if weight is None:
            raise TinyLMError(f"LoRA adapter does not fit its base: the base has no {layer}.weight")
        if lora_A.shape[1] != weight.shape[1] or lora_B.shape != (weight.shape[0], lora_A.shape[0]):
            raise TinyLMError(f"LoRA adapter does not fit its base: {layer} is {tuple(weight.shape)}, the adapter "
                              f"has A {tuple(lora_A.shape)} and B {tuple(lora_B.shape)}")
        out[f"{layer}.weight"] = merged_weight(weight, lora_A, lora_B, scale)
    return out


DEFAULT_TARGETS: tuple[str, ...] = ("q", "k", "v", "o", "gate", "up", "down")
ALL_LINEAR = "all-linear"
OUTPUT_HEAD = "lm_head"

# target -> the layers it selects inside a block (a regex on the module name after "blocks.N."), per model family
_SWIGLU = r"mlp\.(?:experts\.\d+\.|shared\.)?"  # a dense SwiGLU, a routed expert or the shared expert
_FFN = {"gate": _SWIGLU + "gate", "up": _SWIGLU + "up", "down": _SWIGLU + "down"}
TARGET_LAYERS: dict[str, dict[str, str]] = {
    "standard": {"q": r"attn\.q_proj", "k": r"attn\.k_proj", "v": r"attn\.v_proj", "o": r"attn\.o_proj", **_FFN},
    # MLA computes keys and values together from one latent: k and v both select its two projections
    "mla": {"q": r"attn\.q_(?:a_|b_)?proj", "k": r"attn\.kv_[ab]_proj", "v": r"attn\.kv_[ab]_proj",
            "o": r"attn\.o_proj", **_FFN},
    # GPT-2 computes q, k and v with one matrix and has no gate
    "classic": {"q": r"attn\.qkv", "k": r"attn\.qkv", "v": r"attn\.qkv", "o": r"attn\.o_proj",
                "up": r"mlp\.hidden", "down": r"mlp\.proj"},
}


@dataclass(frozen=True)
class LoraConfig:
    """What to adapt and how much; `alpha=None` means alpha = rank (scale 1; PEFT's own default is alpha 8)."""

    rank: int
    alpha: float | None = None
    dropout: float = 0.0
    targets: tuple[str, ...] | str = DEFAULT_TARGETS
    rslora: bool = False

    @property
    def lora_alpha(self) -> float:
        return float(self.rank if self.alpha is None else self.alpha)

    @property
    def scale(self) -> float:
        """alpha / r, or alpha / sqrt(r) with rsLoRA (which keeps updates from shrinking as the rank grows)."""
        return self.lora_alpha / (math.sqrt(self.rank) if self.rslora else self.rank)

    def validate(self) -> None:
        if isinstance(self.rank, bool) or not isinstance(self.rank, int) or self.rank <= 0:
            raise TinyLMError(f"LoRA rank must be a positive integer, got {self.rank!r}")
        if self.alpha is not None and not self.alpha > 0:
            raise TinyLMError(f"LoRA alpha must be positive, got {self.alpha!r}")
        if not 0.0 <= self.dropout < 1.0:
            raise TinyLMError(f"LoRA dropout must be in [0, 1), got {self.dropout!r}")
        if self.targets == ALL_LINEAR:
            return
        choices = f"{', '.join(DEFAULT_TARGETS)} or {ALL_LINEAR}"
        if isinstance(self.targets, str) or not self.targets:
            raise TinyLMError(f"LoRA targets must be a list of {choices}, got {self.targets!r}")
        for target in self.targets:
            if target not in DEFAULT_TARGETS:
                raise TinyLMError(f"unknown LoRA target {target!r}: choose from {choices}")

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["targets"] = self.targets if isinstance(self.targets, str) else list(self.targets)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LoraConfig:
        unknown = sorted(set(data) - {f.name for f in fields(cls)})
        if unknown:
            raise TinyLMError(f"invalid LoRA config: unknown field(s) {', '.join(unknown)}")
        if "rank" not in data:
            raise TinyLMError("invalid LoRA config: it has no rank")
        targets = data.get("targets", DEFAULT_TARGETS)
        config = cls(**{**data, "targets": targets if isinstance(targets, str) else tuple(targets)})
        config.validate()
        return config


def parse_targets(text: str) -> tuple[str, ...] | str:
    """`--lora-targets` text: "q,v" -> ("q", "v"); "all-linear" stays a string."""
    text = text.strip()
    return ALL_LINEAR if text == ALL_LINEAR else tuple(t.strip() for t in text.split(",") if t.strip())


class LoRALinear(nn.Module):
    """A frozen nn.Linear plus a trainable low-rank update: y = x W^T + b + (dropout(x) A^T B^T) * scale."""

    def __init__(self, base: nn.Linear, rank: int, scale: float, dropout: float = 0.0) -> None:
        super().__init__()
        self.in_features, self.out_features, self.scale = base.in_features, base.out_features, scale
        self.weight = base.weight  # the same Parameter object: a tie or a view into it survives
        self.register_parameter("bias", base.bias)
        self.weight.requires_grad_(False)
        if self.bias is not None:
            self.bias.requires_grad_(False)
        like = dict(dtype=base.weight.dtype, device=base.weight.device)
        self.lora_A = nn.Parameter(torch.empty(rank, self.in_features, **like))
        self.lora_B = nn.Parameter(torch.zeros(self.out_features, rank, **like))  # zero: starts as the base
        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))  # what nn.Linear (and PEFT) use
        self.lora_dropout: nn.Module = nn.Dropout(dropout) if dropout > 0 else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        update = F.linear(F.linear(self.lora_dropout(x), self.lora_A), self.lora_B)
        return F.linear(x, self.weight, self.bias) + update * self.scale

    def extra_repr(self) -> str:
        rank = self.lora_A.shape[0]
        return f"in_features={self.in_features}, out_features={self.out_features}, rank={rank}, scale={self.scale:g}"


# ---- choosing the layers -----------------------------------------------------------------------
def _family(model: nn.Module) -> str:
    config = model.config
    if config.arch == "classic":
        return "classic"
    return "mla" if config.attention == "mla" else "standard"


def _is_output_head(model: nn.Module, name: str, module: nn.Linear) -> bool:
    embedding = getattr(model, "token_embed", None)
    return name == OUTPUT_HEAD or (embedding is not None and module.weight is embedding.weight)


def target_layer_names(model: nn.Module, cfg: LoraConfig) -> list[str]:
    """The names of the nn.Linear layers `cfg.targets` selects in `model`, or a TinyLMError saying why none."""
    linears = {name: m for name, m in model.named_modules() if type(m) is nn.Linear}
    if cfg.targets == ALL_LINEAR:
        return [name for name, m in linears.items() if not _is_output_head(model, name, m)]
    family = _family(model)
    table = TARGET_LAYERS[family]
    if family == "classic" and 0 < len({"q", "k", "v"} & set(cfg.targets)) < 3:
        raise TinyLMError("the classic model computes q, k and v with one matrix (attn.qkv): "
                          "target all three of q, k, v or none of them")
    chosen: list[str] = []
    for target in cfg.targets:
        found = []
        if target in table:
            pattern = re.compile(rf"blocks\.\d+\.(?:{table[target]})")
            found = [name for name in linears if pattern.fullmatch(name)]
        elif cfg.targets == DEFAULT_TARGETS:
            continue  # the default asks for every projection the architecture has
        if not found:
            raise TinyLMError(f"LoRA target {target!r} matches no layer of this {family} model "
                              f"(its targets: {', '.join([*table, ALL_LINEAR])})")
        chosen += [name for name in found if name not in chosen]
    return sorted(chosen, key=list(linears).index)


# ---- wrapping, merging, state ------------------------------------------------------------------
def lora_modules(model: nn.Module) -> Iterator[tuple[str, LoRALinear]]:
    for name, module in model.named_modules():
        if isinstance(module, LoRALinear):
            yield name, module


def has_lora(model: nn.Module) -> bool:
    return next(lora_modules(model), None) is not None


def _replace(model: nn.Module, name: str, new: nn.Module) -> None:
    parent_name, _, child = name.rpartition(".")
    setattr(model.get_submodule(parent_name) if parent_name else model, child, new)


def check_rank(model: nn.Module, names: list[str], cfg: LoraConfig) -> None:
    """Refuse a rank above the narrowest targeted projection's min(in, out): B A has that rank at most there, so
    the rest adds parameters (rank x (in + out) each) and no capacity, and a typo'd rank would build gigabytes.

    The projections (q, k, v, o, gate, up, down) set the limit; the routers and gates all-linear also adapts
    (a shared expert's gate is n_embed -> 1) do not, or all-linear could not take any rank above 1 on them.
    """
    projections = set(target_layer_names(model, LoraConfig(cfg.rank))) if cfg.targets == ALL_LINEAR else set(names)
    layers = [(name, model.get_submodule(name)) for name in names if name in projections] or \
        [(name, model.get_submodule(name)) for name in names]
    name, layer = min(layers, key=lambda item: min(item[1].in_features, item[1].out_features))
    limit = min(layer.in_features, layer.out_features)
    if cfg.rank > limit:
        raise TinyLMError(f"LoRA rank {cfg.rank} exceeds {limit}, the smallest min(in, out) of the targeted layers "
                          f"({name}: {layer.in_features} -> {layer.out_features}): choose a rank of at most {limit}")


def apply_lora(model: nn.Module, cfg: LoraConfig) -> list[str]:
    """Wrap the target layers in `LoRALinear` (in place), freeze everything else; return the wrapped names."""
    cfg.validate()
    if has_lora(model):
        raise TinyLMError("this model already has LoRA adapters: merge them (merge_lora) before adding new ones")
    names = target_layer_names(model, cfg)
    check_rank(model, names, cfg)  # before anything is allocated: a typo'd rank would build gigabytes
    for p in model.parameters():
        p.requires_grad_(False)
    for name in names:
        base = model.get_submodule(name)
        adapter = LoRALinear(base, cfg.rank, cfg.scale, cfg.dropout).train(base.training)  # eval stays eval
        _replace(model, name, adapter)
    return names


def lora_parameters(model: nn.Module) -> list[nn.Parameter]:
    """The adapter matrices, the only parameters an optimizer should be given."""
    return [p for _, m in lora_modules(model) for p in (m.lora_A, m.lora_B)]


def count_trainable(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


@torch.no_grad()
def merge_lora(model: nn.Module) -> nn.Module:
    """Fold every adapter into its weight (in place: W += scale * B A) and unwrap to nn.Linear; all trainable again.

    The weight is updated in place, so anything holding a view of it (a fused decoding matrix) sees the merge.
    """
    for name, module in list(lora_modules(model)):
        module.weight.copy_(merged_weight(module.weight, module.lora_A, module.lora_B, module.scale))
        plain = nn.Linear(module.in_features, module.out_features, bias=module.bias is not None, device="meta")
        plain.weight, plain.bias = module.weight, module.bias
        _replace(model, name, plain)
    for p in model.parameters():
        p.requires_grad_(True)
    return model


def lora_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """Only the adapters, under tinylm names: {"blocks.0.attn.q_proj.lora_A": [r, in], "...lora_B": [out, r]}."""
    return {f"{name}.{part}": getattr(m, part).detach() for name, m in lora_modules(model)
            for part in ("lora_A", "lora_B")}


def base_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """The frozen base weights under the plain model's names (the model's state dict without the adapters)."""
    return {k: v for k, v in model.state_dict().items() if not k.endswith((".lora_A", ".lora_B"))}


@torch.no_grad()
def load_lora_state_dict(model: nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Copy adapters saved by `lora_state_dict` into a model wrapped with the same LoraConfig."""
    expected = lora_state_dict(model)
    missing, unexpected = sorted(set(expected) - set(state)), sorted(set(state) - set(expected))
    if missing or unexpected:
        raise TinyLMError(f"LoRA adapter does not fit this model (missing {missing[:3]}, unexpected {unexpected[:3]})")
    for name, tensor in expected.items():
        if state[name].shape != tensor.shape:
            raise TinyLMError(f"LoRA adapter does not fit this model: {name} has shape {tuple(state[name].shape)}, "
                              f"the model expects {tuple(tensor.shape)}")
        tensor.copy_(state[name])
