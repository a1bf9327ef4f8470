"""The frozen reference pi_ref of RL's KL term: the base (or --reference), on the device, without gradients.

It is loaded when the algorithm's KL coefficient is above 0, or when --reference names one (the KL is
then logged even if it is not in the loss). It must share the policy's vocabulary: the KL compares
the two distributions token by token.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from tinylm.checkpoint import checkpoint_model_config, load_weights, resolve_checkpoint
from tinylm.errors import TinyLMError
from tinylm.models.factory import build_model


def load_reference(reference: str | None, needed: bool, base: Path, vocab_size: int, device: torch.device
                   ) -> nn.Module | None:
    """The model `reference` names (default: `base`) in eval mode on `device`; None when nothing asks for one."""
    if not needed and reference is None:
        return None
    path = resolve_checkpoint(reference) if reference else base
    ref_cfg = checkpoint_model_config(path)
    if ref_cfg.vocab_size != vocab_size:
        raise TinyLMError(f"reference {path} has a vocabulary of {ref_cfg.vocab_size} tokens, the policy "
                          f"{vocab_size}: the KL needs the same vocabulary")
    model = build_model(ref_cfg)
    load_weights(model, path)
    model.requires_grad_(False)
    return model.eval().to(device)
