"""Load a checkpoint for generation: model (optionally int8) + tokenizer, or one clear error line.

A RUN argument may be a run folder (its newest checkpoint is used) or one checkpoint folder; the
training code's `load_model` resolves both and checks the files. On a GPU the weights are cast to
bf16 where the hardware runs it natively: decoding reads every weight once per token, so half the
bytes is nearly twice the speed there. A caller that must match another process's numbers (the
server RL samples from) names the dtype instead, and nothing is measured.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from tinylm.checkpoint import load_model
from tinylm.errors import TinyLMError
from tinylm.inference.decode_timing import cast_measuring_decode
from tinylm.inference.int8 import quantize_int8
from tinylm.inference.packed_bf16 import can_pack
from tinylm.inference.row_kernel import bf16_row_kernel
from tinylm.runtime.choice import plain
from tinylm.runtime.device import pick_device
from tinylm.tokenizer.chat_format import ChatFormat


def load_for_generation(path: str, int8: bool = False, device: str = "auto", dtype: torch.dtype | None = None
                        ) -> tuple[nn.Module, Any, dict[str, Any]]:
    """(model in eval mode, tokenizer, checkpoint metadata) for `tinylm generate` / `chat` / `serve`.

    `dtype` None: the decode-precision policy picks; float32 or bfloat16: that, as asked. The choice is
    meta["decode_dtype"] (a torch dtype) and its reason meta["decode_precision"].
    """
    target = pick_device(device)
    model, tokenizer, meta = load_with_tokenizer(path)
    if int8:  # first: the activation dtype is then measured on the int8 model itself
        quantize_int8(model)
    if dtype is None:
        model, decode = cast_measuring_decode(model, target)
        meta["decode_dtype"], meta["decode_precision"] = decode.value, decode.reason
    else:
        model = model.to(dtype)
        meta["decode_dtype"], meta["decode_precision"] = dtype, f"{plain(dtype)}, as asked"
    model = model.to(target).eval().requires_grad_(False)  # it only decodes: the fast decoder may lay weights out
    if can_pack(next(model.parameters())):  # bf16 on a CPU: which kernel multiplies one row is measured too
        meta["decode_precision"] += f"; {bf16_row_kernel().reason}"
    return model, tokenizer, meta


def load_with_tokenizer(path: str) -> tuple[nn.Module, Any, dict[str, Any]]:
    """(model in eval mode on the CPU, in its stored dtype, tokenizer, metadata), or one line why not: what every
    command that turns text into the model's input starts from."""
    try:
        model, tokenizer, meta = load_model(path, device="cpu")
    except TinyLMError:
        raise
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        raise TinyLMError(f"cannot load checkpoint {path}: {str(exc).splitlines()[0]}") from None
    if tokenizer is None:
        raise TinyLMError(f"checkpoint {meta.get('path', path)} has no tokenizer.json: cannot turn text into tokens")
    return model.eval(), tokenizer, meta


def eot_id(tokenizer: Any) -> int | None:
    value = getattr(tokenizer, "eot_id", None)
    return int(value) if value is not None else None


def chat_format_of(tokenizer: Any, meta: dict[str, Any]) -> Any:
    """The chat format of a fine-tuned checkpoint (one that carries a chat template), or None for a base model."""
    if not meta.get("chat_template"):
        return None
    return ChatFormat.from_tokenizer(tokenizer)
