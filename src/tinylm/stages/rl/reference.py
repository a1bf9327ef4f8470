"""The frozen models RL compares its policy with, on the device, without gradients: the reference pi_ref of the
KL term (the base, or --reference) and the teacher of on-policy distillation (--teacher).

The reference is loaded when the algorithm's KL coefficient is above 0, or when --reference names one (the
KL is then logged even if it is not in the loss). Both must share the policy's vocabulary: a KL compares
two distributions token by token; the teacher must also split text as the policy does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from tinylm.checkpoint import TOKENIZER, checkpoint_model_config, load_weights, resolve_checkpoint
from tinylm.checkpoint.read import read_checkpoint_config, refuse_reward_model
from tinylm.errors import TinyLMError
from tinylm.models.factory import build_model
from tinylm.tokenizer import load_tokenizer


def load_reference(reference: str | None, needed: bool, base: Path, vocab_size: int, device: torch.device
                   ) -> nn.Module | None:
    """The model `reference` names (default: `base`) in eval mode on `device`; None when nothing asks for one."""
    if not needed and reference is None:
        return None
    path = resolve_checkpoint(reference) if reference else base
    ref_cfg = checkpoint_model_config(path)
    if ref_cfg.vocab_size != vocab_size:
        raise TinyLMError(f"{path} has a vocabulary of {ref_cfg.vocab_size} tokens, the policy "
                          f"{vocab_size}: a KL needs the same vocabulary")
    model = build_model(ref_cfg)
    load_weights(model, path)
    model.requires_grad_(False)
    return model.eval().to(device)


def load_teacher(teacher: str, tokenizer: Any, vocab_size: int, device: torch.device) -> nn.Module:
    """--teacher in eval mode on `device`: a language model with the policy's tokenizer and vocabulary."""
    path = resolve_checkpoint(teacher)
    refuse_reward_model(path, read_checkpoint_config(path))
    if not (path / TOKENIZER).is_file() or load_tokenizer(path / TOKENIZER).fingerprint != tokenizer.fingerprint:
        raise TinyLMError(f"--teacher {path} splits text differently from the policy (another tokenizer): "
                          "distillation needs one tokenizer")
    model = load_reference(str(path), True, path, vocab_size, device)
    assert model is not None
    return model
