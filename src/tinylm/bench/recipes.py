"""Training recipes `tinylm speedrun` races: each a set of changes to `tinylm train`'s defaults, defined here only.

A recipe is written as changes joined by `+`: `muon+wsd+untied`. A change is a name from `CHANGES` or a
plain `field=value`, where the field is a `PretrainConfig` option (`lr=0.006`, `batch_size=8`) or a model
field (`qk_norm=true`, `n_blocks=6`), so a new idea can be raced before it has a name. `default` is
`tinylm train` as it is; `adamw-default` is what it was before the record became it (AdamW on every
parameter, no sequence-length warmup), the speedrun's reference, so the record table stays reproducible;
`nanogpt` is the classic GPT-2 architecture with AdamW and cosine, the reference the field measures from;
`record` is the best recipe the record table in docs/speedrun.md kept (today's default).

Changes apply left to right, so a later one wins where two set the same field.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from tinylm.config import ModelConfig, parse_override
from tinylm.errors import TinyLMError
from tinylm.options import option_specs

# tinylm train's defaults until the record became them; every row of the record table was raced against these
_ADAMW_DEFAULT: dict[str, Any] = {"optimizer": "adamw", "lr": 3e-3, "muon_momentum": 0.95,
                                  "seq_len_warmup_steps": 0}

# name -> (what it is, the PretrainConfig fields it sets; model fields under "overrides")
CHANGES: dict[str, tuple[str, dict[str, Any]]] = {
    "default": ("tinylm train's defaults", {}),
    "adamw-default": ("tinylm train's defaults before the record: AdamW at 3e-3 on every parameter, no sequence-"
                      "length warmup (and Muon's momentum then, 0.95)", _ADAMW_DEFAULT),
    "nanogpt": ("the classic GPT-2-style decoder (learned positions, LayerNorm, ReLU MLP, untied head), AdamW, "
                "cosine", {**_ADAMW_DEFAULT, "arch": "classic"}),
    "muon": ("Muon for the hidden matrices, AdamW for embeddings, head and norms", {"optimizer": "muon"}),
    "wsd": ("warmup-stable-decay schedule: full lr until the last 20%, then linear to 10%", {"schedule": "wsd"}),
    "linear": ("linear decay from the peak to zero", {"schedule": "linear", "min_lr_ratio": 0.0}),
    "no-warmup": ("no warmup steps", {"warmup_steps": 0}),
    "untied": ("an output head of its own instead of the embedding's transpose",
               {"overrides": {"tie_embeddings": False}}),
    "zero-head": ("an untied output head that starts at zero", {"overrides": {"tie_embeddings": False,
                                                                             "zero_init_head": True}}),
    "qknorm": ("RMSNorm on queries and keys", {"overrides": {"qk_norm": True}}),
    "half-batch": ("8 rows per step instead of 16: twice the steps for the same tokens", {"batch_size": 8}),
    "double-batch": ("32 rows per step: half the steps for the same tokens", {"batch_size": 32}),
    "no-decay": ("no weight decay", {"weight_decay": 0.0}),
    "relu2": ("the ungated ReLU^2 MLP instead of SwiGLU, at the same parameters",
              {"overrides": {"mlp_type": "relu2"}}),
    "softcap": ("logits soft-capped at 15 (15 tanh(logits / 15))", {"overrides": {"logit_softcap": 15.0}}),
    "z-loss": ("PaLM's z-loss, 1e-4 * logsumexp^2 per token", {"z_loss": 1e-4}),
    "batch-ramp": ("a batch-size ramp: a quarter of the rows for 50 steps, half for 50, then all",
                   {"batch_ramp_steps": 100}),
    "seq-warmup": ("a sequence-length warmup: rows a quarter as long for 75 steps, half for 75, then whole "
                   "(as many tokens per step)", {"seq_len_warmup_steps": 150}),
    "wd-linear": ("the weight-decay coefficient falls linearly to 0 over the run",
                  {"weight_decay_schedule": "linear"}),
}

# the best recipe docs/speedrun.md's record table kept (each change there measured on its own row); since it won at
# 3x the steps, at `small` and in bf16 too, it is tinylm train's default, and the speedrun races against the old one
RECORD = "muon+lr=0.06+muon_momentum=0.9+seq-warmup"
REFERENCE = "adamw-default"


@dataclass(frozen=True)
class Recipe:
    """A named set of PretrainConfig changes (model fields under `overrides`)."""

    spec: str
    changes: dict[str, Any] = field(default_factory=dict)
    description: str = ""

    def config_changes(self, common_overrides: dict[str, Any] | None = None) -> dict[str, Any]:
        """The fields to `replace` on a PretrainConfig: model overrides merged over the common ones."""
        out = {k: v for k, v in self.changes.items() if k != "overrides"}
        out["overrides"] = {**(common_overrides or {}), **self.changes.get("overrides", {})}
        return out


def _train_field_value(name: str, raw: str, spec_text: str) -> Any:
    """`raw` as the PretrainConfig option `name` expects it (int, float, bool or text)."""
    spec = next(s for s in option_specs(_train_config_class()) if s.name == name)
    if spec.optional and raw.lower() in ("none", "null"):
        return None
    try:
        if spec.kind == "bool":
            if raw.lower() not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError
            return raw.lower() in ("true", "1", "yes")
        if spec.kind == "int":
            return int(raw)
        if spec.kind == "float":
            return float(raw)
    except ValueError:
        raise TinyLMError(f"recipe {spec_text!r}: {name} expects {'true/false' if spec.kind == 'bool' else spec.kind}, "
                          f"got {raw!r}") from None
    return raw


def _train_config_class() -> type:
    from tinylm.stages.pretrain.config import PretrainConfig  # here: train.config imports the engine's option table

    return PretrainConfig


# PretrainConfig fields a recipe may not set: where the run goes and what decides its budget belong to the speedrun
_NOT_RECIPE = ("out", "data", "seed", "resume", "max_steps", "max_tokens", "time_budget", "device", "threads",
               "progress", "overrides", "preset", "eval_every", "eval_batches", "eval_batch_size", "log_every",
               "checkpoint_every", "keep_last", "sample_tokens")


def parse_recipe(spec: str) -> Recipe:
    """`muon+wsd+lr=0.006` -> its changes; `record` -> the record recipe; one line naming any bad part."""
    text = spec.strip()
    if text == "record":
        return dataclasses.replace(parse_recipe(RECORD), spec="record")
    # `record` inside a recipe stands for its changes, in its place (`record+qknorm`)
    parts = [piece.strip() for part in text.split("+") for piece in (RECORD.split("+") if part.strip() == "record"
                                                                       else [part])]
    if not text or any(not part for part in parts):
        raise TinyLMError(f"recipe {spec!r}: expected changes joined by '+', e.g. muon+wsd or muon+lr=0.006")
    changes: dict[str, Any] = {"overrides": {}}
    descriptions = []
    train_fields = {s.name for s in option_specs(_train_config_class())}
    model_fields = {f.name for f in dataclasses.fields(ModelConfig)}
    for part in parts:
        if "=" in part:
            name, _, raw = (s.strip() for s in part.partition("="))
            name = name.replace("-", "_")
            if name in train_fields and name not in _NOT_RECIPE:
                changes[name] = _train_field_value(name, raw, spec)
            elif name in model_fields:
                try:
                    key, value = parse_override(f"{name}={raw}")
                except ValueError as exc:
                    raise TinyLMError(f"recipe {spec!r}: {exc}") from None
                changes["overrides"][key] = value
            elif name in train_fields:
                raise TinyLMError(f"recipe {spec!r}: {name} is the speedrun's to set, not a recipe's "
                                  "(see tinylm speedrun --help)")
            else:
                raise TinyLMError(f"recipe {spec!r}: {name!r} is neither a training option nor a model field")
            descriptions.append(f"{name}={raw}")
            continue
        if part not in CHANGES:
            raise TinyLMError(f"recipe {spec!r}: unknown change {part!r}: choose from {', '.join(CHANGES)}, "
                              "record, or FIELD=VALUE")
        description, fields = CHANGES[part]
        for key, value in fields.items():
            if key == "overrides":
                changes["overrides"].update(value)
            else:
                changes[key] = value
        descriptions.append(description)
    if not changes["overrides"]:
        del changes["overrides"]
    return Recipe(text, changes, "; ".join(descriptions))
