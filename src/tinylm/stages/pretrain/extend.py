"""Context extension: continue a trained checkpoint at a longer context, with a RoPE scaling rule.

`tinylm train --extend RUN --set context_length=1024 --set rope_scaling=yarn` is pretraining started from
RUN's weights (a fresh optimizer, step 0) with one thing changed: the window. Everything else about the model
must stay the checkpoint's, so the only fields `--set` may change are the context, RoPE's scaling rule and
RoPE's base `rope_theta` (Code Llama's "adjusted base frequency": 10,000 raised to 1,000,000 for a 4x longer
window, every pair slowed, the fast ones hardly at all).
Unset, the rule's factor is the new context over the one the model was trained at, and that trained context
becomes `rope_original_context` (models/modern/rope_scaling/). Without a rule the run is plain RoPE asked to
extrapolate: the baseline every rule is measured against.
"""

from __future__ import annotations

from typing import Any

from tinylm.config import ModelConfig
from tinylm.errors import TinyLMError

CONTEXT_FIELDS = ("context_length", "rope_theta", "rope_scaling", "rope_factor", "rope_original_context",
                  "yarn_beta_fast", "yarn_beta_slow", "yarn_attention_factor", "llama3_low_freq_factor",
                  "llama3_high_freq_factor")
RUNTIME = ("gradient_checkpointing",)  # how the model is run, not what it computes


def extended_config(base: ModelConfig, overrides: dict[str, Any]) -> tuple[ModelConfig, list[str]]:
    """The checkpoint's config at its new context, and what was decided for the user (one line each)."""
    if base.arch == "classic":
        raise TinyLMError("--extend: the classic model's positions are a learned table of "
                          f"{base.context_length} rows, with no RoPE to rescale: extend a modern model")
    other = sorted(set(overrides) - set(CONTEXT_FIELDS) - set(RUNTIME))
    if other:
        raise TinyLMError(f"--extend changes the context only: {', '.join(other)} stays the checkpoint's "
                          f"(--set may change {', '.join(CONTEXT_FIELDS)})")
    target = overrides.get("context_length")
    if target is None or target <= base.context_length:
        given = f"context_length={target}" if target is not None else "no --set context_length"
        raise TinyLMError(f"--extend needs a longer context than the checkpoint's {base.context_length} tokens "
                          f"({given}): pass --set context_length=N with N > {base.context_length}")
    changes, notes = dict(overrides), []
    rule = changes.get("rope_scaling", base.rope_scaling)
    # the first training length stays on record, with a rule or without (where evaluations cut by position)
    original = changes.setdefault("rope_original_context", base.rope_base_context)
    if rule != "none":
        if "rope_factor" not in changes:
            changes["rope_factor"] = target / original
            notes.append(f"rope_factor={changes['rope_factor']:g}: {target} tokens over the {original} the model "
                         "was trained at (set rope_factor to choose another)")
    elif changes.get("rope_theta", base.rope_theta) != base.rope_theta:
        notes.append(f"rope_theta {base.rope_theta:g} -> {changes['rope_theta']:g}: plain RoPE on a raised base "
                     "(Code Llama's adjusted base frequency)")
    else:
        notes.append("no rope_scaling: plain RoPE asked to read positions it never saw (the baseline; "
                     "--set rope_scaling=linear|dynamic|yarn|llama3 to rescale)")
    try:
        return base.replace(**changes), notes
    except ValueError as exc:
        raise TinyLMError(str(exc)) from None

