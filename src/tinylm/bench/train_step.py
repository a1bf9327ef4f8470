"""One training step of tinylm and of its `transformers` twin, built to be timed side by side.

Both steps do the same work the training loop does: forward with loss, backward, gradient
clipping, an AdamW step (the same parameter groups and foreach/fused kernel, from
`tinylm.train.optim`) and zeroing the gradients. The reference is the `transformers` model that
computes exactly what ours does (LlamaForCausalLM / Qwen3 / GPT-2, through `tinylm.interop.hf`),
holding a copy of the same weights, fed the same batch, in the same dtype and thread count.
tinylm calls its model with `return_logits=False`, as training does, so its loss runs chunked.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from tinylm.interop.hf import to_hf_model
from tinylm.runtime.compile_policy import compile_blocks
from tinylm.runtime.device import autocast
from tinylm.train.optim import build_optimizer
from tinylm.train.step import clip_gradients

GRAD_CLIP = 1.0


@dataclass
class StepSetup:
    """What both sides share: batch shape, device, autocast dtype, whether to torch.compile.

    Compiling means what each side's users do: tinylm compiles its blocks (`runtime/compile_policy.py`),
    a `transformers` user compiles the whole model.
    """

    batch_size: int
    seq_len: int
    device: torch.device
    dtype: torch.dtype
    compile: bool = False

    @property
    def tokens(self) -> int:
        return self.batch_size * self.seq_len


def random_batch(vocab_size: int, setup: StepSetup, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs and next-token targets of uniformly random tokens (speed does not depend on the text)."""
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, vocab_size, (setup.batch_size, setup.seq_len + 1), generator=g)
    tokens = tokens.to(setup.device)
    return tokens[:, :-1], tokens[:, 1:]


def _finish_step(model: nn.Module, optimizer, loss: torch.Tensor) -> None:
    loss.backward()
    clip_gradients([p for p in model.parameters() if p.grad is not None], GRAD_CLIP)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def tinylm_step(model: nn.Module, setup: StepSetup, batch: tuple[torch.Tensor, torch.Tensor]) -> Callable[[], None]:
    """A closure running one full training step of a tinylm model on `batch`."""
    model.train()
    optimizer = build_optimizer(model, "adamw", device=setup.device)
    if setup.compile:
        compile_blocks(model)  # what `tinylm train --compile on` does: per block, plus the loss's softmax
    x, y = batch

    def step() -> None:
        with autocast(setup.device, setup.dtype):
            _, loss = model(x, y, return_logits=False)
        _finish_step(model, optimizer, loss)

    return step


def reference_model(model: nn.Module, device: torch.device) -> nn.Module:
    """The `transformers` model equal to `model` (same weights), in training mode, using SDPA attention."""
    hf = to_hf_model(model)
    hf.config._attn_implementation = "sdpa"  # what tinylm's attention uses too; the fastest built-in
    return hf.to(device).train()


def reference_step(hf: nn.Module, setup: StepSetup, batch: tuple[torch.Tensor, torch.Tensor]) -> Callable[[], None]:
    """A closure running one training step of the `transformers` model the way its users write it."""
    optimizer = build_optimizer(hf, "adamw", device=setup.device)
    forward = torch.compile(hf) if setup.compile else hf
    x, _ = batch

    def step() -> None:
        with autocast(setup.device, setup.dtype):
            loss = forward(input_ids=x, labels=x).loss  # transformers shifts the labels itself
        _finish_step(hf, optimizer, loss)

    return step
