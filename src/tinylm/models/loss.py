"""Output head + cross-entropy in row chunks, never holding the full [tokens, vocab] float32 logits.

The plain loss, `F.cross_entropy(lm_head(h).float(), y)`, writes the logits, their float32 copy,
the softmax and the gradient of each: four [tokens, vocab] tensors. With a 50k vocabulary and 2,048
tokens each is 412 MB, and on a CPU the passes over them cost more than the head's matmul itself.

Here the rows go through the head `chunk_rows` at a time. For one chunk, with p = softmax(logits),

    loss_i = logsumexp(logits_i) - logits_i[y_i]
    d loss / d logits_i = (p_i - onehot(y_i)) / n_targets

so the chunk's gradients with respect to the hidden states, the head weight and its bias are
known right away, while the chunk is still in cache. They are computed in the forward pass and
kept (the memory of the inputs, not of the logits); `backward` only scales them by the incoming
gradient, which is exact because the loss is a scalar. Without gradients (evaluation) only the
loss is computed. Rows whose target is `ignore_index` count neither in the sum nor in the mean.

`z_loss` adds z * logsumexp(logits_i)^2 to each counted row's loss (PaLM's auxiliary "z-loss"), which
pulls the softmax normaliser toward 1 so the logits cannot drift up together. Its gradient is one more
term of the same softmax, d/d logits_i = 2 z logsumexp(logits_i) p_i, so it costs nothing extra.

`softcap` (the model's `logit_softcap`, Gemma 2's and modded-nanogpt's) bounds every logit to (-c, c):
z = c tanh(r / c) of the head's output r. The softmax and its gradient are taken on z, and the chain rule
adds one factor per logit, dz/dr = 1 - (z / c)^2, applied to the chunk's gradient before the matmuls.

`reduction="sum"` returns the sum over target tokens instead of their mean (the 1 / n_targets
factor is simply left out), so a trainer can add up micro-batches or ranks that hold different
numbers of target tokens and divide once by the total: exact accumulation for SFT, where each row
has as many targets as its assistant turns have tokens.

Compiled training (`--compile`) registers the head with `compile_output_loss`: each chunk's
softmax, loss and logit gradient then run as one `torch.compile`d function (`chunk_loss_and_grad`),
which inductor fuses into a couple of passes over the chunk instead of the eager code's eight kernels;
the matmuls stay where they are. Eager runs keep the in-place kernels below, which allocate nothing
per chunk.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

IGNORE_INDEX = -1  # the models' ignored target; output_head_loss maps every negative target (e.g. -100) to it
REDUCTIONS = ("mean", "sum")
# float32 logits per chunk: on a CPU ~32 MB, near the cache and still large enough for an efficient
# matmul; a GPU needs far bigger matmuls to fill its cores and has the memory bandwidth (~1 GB)
CHUNK_ELEMENTS = {"cpu": 1 << 23, "cuda": 1 << 28}


ChunkStep = Callable[..., tuple[torch.Tensor, torch.Tensor]]
_COMPILED_HEADS: weakref.WeakKeyDictionary[nn.Module, ChunkStep] = weakref.WeakKeyDictionary()


def chunk_loss_and_grad(logits: torch.Tensor, targets: torch.Tensor, counted: torch.Tensor,
                        weights: torch.Tensor, z_loss: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """(summed loss of the counted rows, (softmax - onehot) * weights in the logits' dtype) for one chunk.

    logits [R, V] in the head's compute dtype, targets [R, 1] (>= 0), counted [R] (1 or 0), weights [R, 1]
    (each row's share of the loss). With `z_loss`, each row also pays z * lse^2 and its gradient gains
    2 z lse * softmax. Written without in-place ops so that `torch.compile` can fuse it.
    """
    z = logits.float()
    lse = torch.logsumexp(z, dim=-1, keepdim=True)
    loss = ((lse - z.gather(1, targets) + z_loss * lse * lse).squeeze(1) * counted).sum()
    onehot = torch.arange(z.shape[1], device=z.device) == targets
    grad = (torch.exp(z - lse) * (1 + 2 * z_loss * lse) - onehot.float()) * weights
    return loss, grad.to(logits.dtype)


def soft_cap(logits: torch.Tensor, cap: float | None) -> torch.Tensor:
    """cap * tanh(logits / cap): every logit inside (-cap, cap), nearly unchanged where |logit| << cap."""
    return logits if cap is None else cap * torch.tanh(logits / cap)


def compile_output_loss(lm_head: nn.Module, backend: str = "inductor") -> None:
    """Make `lm_head`'s chunked loss run its per-chunk softmax and gradient through `torch.compile`."""
    _COMPILED_HEADS[lm_head] = torch.compile(chunk_loss_and_grad, backend=backend)


def default_chunk_rows(vocab_size: int, device_type: str = "cpu") -> int:
    return max(32, CHUNK_ELEMENTS.get(device_type, CHUNK_ELEMENTS["cpu"]) // vocab_size)


class _ChunkedLinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, bias, targets, chunk_rows: int, ignore_index: int,  # type: ignore[override]
                reduction: str = "mean", chunk_step: ChunkStep | None = None, z_loss: float = 0.0,
                softcap: float | None = None):
        want_grads = any(ctx.needs_input_grad[:3])
        device = hidden.device.type
        # the head's matmuls run in the autocast dtype if one is active, exactly as `lm_head(hidden)` would
        compute = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else hidden.dtype
        valid = targets != ignore_index
        n_targets = valid.sum()
        # each counted row's share of the loss: 1 / n for the mean (0 targets: 0/0 = nan, as in F.cross_entropy)
        scale = 1.0 / n_targets.clamp(min=1).float() if reduction == "mean" else torch.ones((), device=hidden.device)
        total = torch.zeros((), dtype=torch.float32, device=hidden.device)
        grad_hidden = torch.empty_like(hidden) if want_grads else None
        grad_weight = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device) if want_grads else None
        grad_bias = torch.zeros(bias.shape, dtype=torch.float32, device=bias.device) \
            if want_grads and bias is not None else None
        with torch.autocast(device, enabled=False):
            w = weight.to(compute)
            b = None if bias is None else bias.to(compute)
            for start in range(0, hidden.shape[0], chunk_rows):
                rows = slice(start, start + chunk_rows)
                h, ok, y = hidden[rows].to(compute), valid[rows], targets[rows].clamp(min=0)[:, None]
                logits = F.linear(h, w, b)
                squash = None
                if softcap is not None:  # the loss sees z = c tanh(r / c); dz/dr = 1 - tanh^2 scales its gradient
                    t = logits.float()  # the head's fresh product (or its float32 copy): ours to overwrite
                    t.div_(softcap).tanh_()
                    squash = t.square().neg_().add_(1) if want_grads else None
                    logits = t.mul_(softcap)
                counted = ok.float()
                weights = counted[:, None] * scale  # each counted row's share of the mean
                if want_grads and chunk_step is not None:  # compiled: the same formulas, fused
                    chunk_total, grad = chunk_step(logits, y, counted, weights, z_loss)
                    total += chunk_total
                else:
                    logits = logits.float()
                    picked = logits.gather(1, y).squeeze(1)
                    peak = logits.amax(dim=-1, keepdim=True)
                    probs = logits.sub_(peak).exp_()  # unnormalized softmax, in place of the logits
                    sums = probs.sum(dim=-1, keepdim=True)
                    lse = peak + sums.log()
                    row_loss = lse.squeeze(1) - picked  # logsumexp - target logit
                    if z_loss:
                        row_loss = row_loss + z_loss * lse.squeeze(1) ** 2
                    total += row_loss.mul(ok).sum()
                    if not want_grads:
                        continue
                    share = weights / sums if not z_loss else weights * (1 + 2 * z_loss * lse) / sums
                    grad = probs.mul_(share).scatter_add_(1, y, -weights)  # (p - onehot) / n
                if squash is not None:  # capped logits are float32, so both paths' gradients are too
                    grad = grad.mul_(squash)
                grad = grad.to(compute)
                grad_hidden[rows] = grad @ w
                if compute == torch.float32:
                    grad_weight.addmm_(grad.t(), h)
                else:  # low-precision product, accumulated in float32 across chunks
                    grad_weight += grad.t() @ h
                if grad_bias is not None:
                    grad_bias += grad.sum(0)
        loss = total / n_targets.float() if reduction == "mean" else total
        if want_grads:
            ctx.save_for_backward(grad_hidden, grad_weight, grad_bias)
            ctx.dtypes = (weight.dtype, None if bias is None else bias.dtype)
        return loss

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_loss):  # type: ignore[override]
        grad_hidden, grad_weight, grad_bias = ctx.saved_tensors
        weight_dtype, bias_dtype = ctx.dtypes
        grad_hidden = grad_hidden * grad_loss.to(grad_hidden.dtype) if ctx.needs_input_grad[0] else None
        grad_weight = (grad_weight * grad_loss).to(weight_dtype) if ctx.needs_input_grad[1] else None
        if grad_bias is not None and ctx.needs_input_grad[2]:
            grad_bias = (grad_bias * grad_loss).to(bias_dtype)
        else:
            grad_bias = None
        return grad_hidden, grad_weight, grad_bias, None, None, None, None, None, None, None


def chunked_cross_entropy(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    bias: torch.Tensor | None = None,
    chunk_rows: int | None = None,
    ignore_index: int = IGNORE_INDEX,
    reduction: str = "mean",
    chunk_step: ChunkStep | None = None,
    z_loss: float = 0.0,
    softcap: float | None = None,
) -> torch.Tensor:
    """mean (or sum) CE of `F.linear(hidden, weight, bias)` against `targets`, as the plain way computes it.

    hidden [..., C], targets [...] (same leading shape), weight [V, C], bias [V] or None.
    `chunk_step`: a compiled `chunk_loss_and_grad` to use for the gradient's chunks (default: the eager kernels).
    `z_loss`: each target row's loss gains z * logsumexp^2; `softcap`: the loss of cap * tanh(logits / cap)
    (see the module's docstring for both).
    """
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction={reduction!r}: choose one of {', '.join(REDUCTIONS)}")
    rows = hidden.reshape(-1, hidden.shape[-1])
    chunk_rows = chunk_rows or default_chunk_rows(weight.shape[0], hidden.device.type)
    return _ChunkedLinearCrossEntropy.apply(rows, weight, bias, targets.reshape(-1), chunk_rows, ignore_index,
                                            reduction, chunk_step, float(z_loss), softcap)


def output_head_loss(
    lm_head: nn.Linear,
    hidden: torch.Tensor,
    targets: torch.Tensor | None,
    return_logits: bool = True,
    reduction: str = "mean",
    z_loss: float = 0.0,
    softcap: float | None = None,
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """(logits or None, CE mean or sum over target tokens, or None): what both models' `forward` returns.

    Logits asked for: the plain head and `F.cross_entropy` (cheapest when the logits exist anyway).
    Logits not asked for (training, evaluation): the chunked loss, logits None.
    Every negative target is ignored: -1 (pretraining) and -100 (PyTorch's and Hugging Face's convention).
    `z_loss` > 0 adds z * logsumexp^2 per target token (pretraining's --z-loss; evaluation never passes it).
    `softcap`: the model's `logit_softcap`; the logits returned and the loss are those of cap * tanh(. / cap).
    """
    if targets is None:
        return soft_cap(lm_head(hidden), softcap), None
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction={reduction!r}: choose one of {', '.join(REDUCTIONS)}")
    targets = targets.clamp(min=IGNORE_INDEX)
    if not return_logits:
        return None, chunked_cross_entropy(hidden, lm_head.weight, targets, lm_head.bias, reduction=reduction,
                                           chunk_step=_COMPILED_HEADS.get(lm_head), z_loss=z_loss,
                                           softcap=softcap)
    logits = soft_cap(lm_head(hidden), softcap)
    flat, flat_targets = logits.float().view(-1, logits.shape[-1]), targets.reshape(-1)
    loss = F.cross_entropy(flat, flat_targets, ignore_index=IGNORE_INDEX, reduction=reduction)
    if z_loss:
        counted = flat_targets != IGNORE_INDEX
        penalty = (torch.logsumexp(flat[counted], dim=-1) ** 2).sum()
        loss = loss + z_loss * (penalty / counted.sum() if reduction == "mean" else penalty)
    return logits, loss
