"""Which parameter gets which optimizer and which weight decay.

Weight decay pulls weights toward zero. That is a useful prior for the big matrices, but on a norm
gain it fights the scale the gain exists to learn, on a bias it has no purpose, and on an embedding
it shrinks rare tokens (whose rows get few gradient updates) toward zero. So AdamW decays only the
>= 2-D weight matrices that are not embeddings.

Muon orthogonalizes matrix updates, which makes sense for the hidden matrices that map one
activation space to another. Embeddings are lookup tables (one row per token, updated sparsely) and
the output head maps to logits; both stay on AdamW, as do 1-D parameters.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from tinylm.errors import TinyLMError
from tinylm.train.muon import Muon

OPTIMIZERS: tuple[str, ...] = ("adamw", "muon")


@dataclass
class ParamSplit:
    """Parameters by role; every trainable parameter appears in exactly one list (tied ones once)."""

    matrices: list[tuple[str, nn.Parameter]]
    embeddings: list[tuple[str, nn.Parameter]]
    head: list[tuple[str, nn.Parameter]]
    vectors: list[tuple[str, nn.Parameter]]


def split_params(model: nn.Module) -> ParamSplit:
    """Sort parameters by role, using module types rather than names so any model layout works.

    The head is every readout, not a hidden matrix: an `lm_head` at any depth (a policy wrapped with a value
    head, a reward model's backbone) and any matrix with a single output row (a value or reward score head),
    which Muon would only normalise to a fixed-size step whatever its gradient.
    """
    embedding_ids = {id(p) for m in model.modules() if isinstance(m, nn.Embedding) for p in m.parameters(recurse=False)}
    head_ids = {id(p) for name, m in model.named_modules() if name.rsplit(".", 1)[-1] == "lm_head"
                for p in m.parameters(recurse=False)}
    head_ids |= {id(p) for p in model.parameters() if p.ndim == 2 and p.shape[0] == 1}
    split = ParamSplit([], [], [], [])
    for name, p in model.named_parameters():  # named_parameters() yields a tied parameter once
        if not p.requires_grad:
            continue
        if id(p) in embedding_ids:
            split.embeddings.append((name, p))
        elif p.ndim < 2:
            split.vectors.append((name, p))
        elif id(p) in head_ids:
            split.head.append((name, p))
        else:
            split.matrices.append((name, p))
    return split


def _adamw(groups: list[dict[str, Any]], lr: float, betas: tuple[float, float], eps: float,
           device: torch.device) -> torch.optim.AdamW:
    """Fused kernel on CUDA (one launch for all tensors), foreach on CPU/MPS; same math either way."""
    groups = [g for g in groups if g["params"]]
    kind = {"fused": True} if device.type == "cuda" else {"foreach": True}
    return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps, **kind)


class OptimizerList:
    """Several optimizers stepping together (Muon + AdamW), looking like one to the training loop.

    `param_groups` is the concatenation of the members' groups, so learning-rate schedules and
    logging treat it like any optimizer; the state dict keeps one entry per member.
    """

    def __init__(self, optimizers: list[torch.optim.Optimizer]) -> None:
        self.optimizers = optimizers

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return [g for o in self.optimizers for g in o.param_groups]

    @property
    def state(self) -> dict[Any, Any]:
        merged: dict[Any, Any] = {}
        for o in self.optimizers:
            merged.update(o.state)
        return merged

    def zero_grad(self, set_to_none: bool = True) -> None:
        for o in self.optimizers:
            o.zero_grad(set_to_none=set_to_none)

    def step(self, closure: Any = None) -> None:
        if closure is not None:
            raise ValueError("OptimizerList.step does not take a closure")
        for o in self.optimizers:
            o.step()

    def state_dict(self) -> dict[str, Any]:
        return {"optimizers": [o.state_dict() for o in self.optimizers]}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        states = state_dict["optimizers"]
        if len(states) != len(self.optimizers):
            raise ValueError(f"optimizer state has {len(states)} members, expected {len(self.optimizers)}")
        for o, s in zip(self.optimizers, states):
            o.load_state_dict(s)

    def __repr__(self) -> str:
        return f"OptimizerList({', '.join(type(o).__name__ for o in self.optimizers)})"


AnyOptimizer = torch.optim.Optimizer | OptimizerList


def members(optimizer: AnyOptimizer) -> list[torch.optim.Optimizer]:
    """The real torch optimizers inside (for loss scalers, which step each one)."""
    return list(optimizer.optimizers) if isinstance(optimizer, OptimizerList) else [optimizer]


def build_optimizer(
    model: nn.Module,
    name: str = "adamw",
    *,
    lr: float = 3e-3,
    weight_decay: float = 0.1,
    betas: tuple[float, float] = (0.9, 0.95),
    eps: float = 1e-8,
    muon_lr: float = 0.02,
    muon_momentum: float = 0.95,
    device: torch.device | None = None,
) -> AnyOptimizer:
    """AdamW with decay on matrices only, or Muon on hidden matrices plus AdamW on the rest.

    Every group records its base learning rate as `initial_lr` and its base decay as `initial_weight_decay`;
    schedules scale from them.
    """
    device = device or torch.device("cpu")
    split = split_params(model)

    def group(params: list[tuple[str, nn.Parameter]], role: str, decay: float, base_lr: float) -> dict[str, Any]:
        return {"params": [p for _, p in params], "role": role, "weight_decay": decay, "initial_weight_decay": decay,
                "lr": base_lr, "initial_lr": base_lr}

    no_decay = split.embeddings + split.vectors
    if name == "adamw":
        groups = [group(split.matrices + split.head, "matrices", weight_decay, lr),
                  group(no_decay, "no_decay", 0.0, lr)]
        return _adamw(groups, lr, betas, eps, device)
    if name == "muon":
        if not split.matrices:
            raise TinyLMError("Muon needs at least one hidden matrix; this model has none (use --optimizer adamw)")
        ns_dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
        muon = Muon([group(split.matrices, "muon", weight_decay, muon_lr)], lr=muon_lr,
                    momentum=muon_momentum, ns_dtype=ns_dtype)
        adamw = _adamw([group(split.head, "head", weight_decay, lr), group(no_decay, "no_decay", 0.0, lr)],
                       lr, betas, eps, device)
        return OptimizerList([muon, adamw])
    raise TinyLMError(f"unknown optimizer {name!r}: choose one of {', '.join(OPTIMIZERS)}")


def describe_optimizer(optimizer: AnyOptimizer) -> str:
    """The header line: which optimizer steps which parameters at what base lr; the logged lr is the first's."""
    parts = []
    for member in members(optimizer):
        groups = [g for g in member.param_groups if g["params"]]
        count = sum(p.numel() for g in groups for p in g["params"])
        lrs = "/".join(f"{lr:g}" for lr in dict.fromkeys(g["initial_lr"] for g in groups))
        if isinstance(member, Muon):
            parts.append(f"Muon (lr {lrs}, momentum {groups[0]['momentum']:g}) on {count:,} hidden-matrix parameters")
        else:
            betas = "/".join(f"{b:g}" for b in member.defaults["betas"])
            parts.append(f"{type(member).__name__} (lr {lrs}, betas {betas}) on {count:,}"
                         f"{' other' if parts else ''} parameters")
    decay = max(g["initial_weight_decay"] for g in optimizer.param_groups)
    first = type(members(optimizer)[0]).__name__
    return f"optimizer: {', '.join(parts)}; weight decay {decay:g} on matrices; the logged lr is {first}'s"
