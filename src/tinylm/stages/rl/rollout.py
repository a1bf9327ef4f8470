"""Rollouts: G sampled responses per prompt, with the log-prob of every sampled token, for RL.

    rollouts = sample_rollouts(model, prompts, group_size=G, max_new_tokens=16, sampling=..., seeds=...)

Layout. Response g of prompt p is row p*G + g ("group by group"), so advantages can reshape rewards
to [prompts, G]. Every row is `prompt + response` right-padded to one length; `response_mask` [N, L-1]
marks the target positions t whose token ids[t+1] the policy produced (the stop token included: the
model learns when to stop), `logprobs` holds their sampling log-probs. A response ends at a stop id
(end-of-turn) or at `max_new_tokens`.

Exactness. The log-prob recorded is log softmax(logits / T) of the sampled token: the
temperature-scaled *full* distribution, which is what the trainer recomputes (`token_logprobs`) on
the same ids, so the first epoch's importance ratio is 1 up to float rounding. top-k / top-p only
decide *which* token is drawn (from the truncated, renormalised distribution); the ratio keeps using
the full tempered distribution for both the old and the new policy, so with truncation the samples
are slightly off-policy for pi_T, as in every sampler that truncates.

Determinism. Each row draws its tokens by inverse-CDF sampling from its own uniforms, generated
from the row's seed before decoding. A row's tokens therefore depend on its seed and the weights,
not on which other prompts share the batch, on the batch size, or on how many processes split the
work, so gradient accumulation and torchrun see the same rollouts as one big batch. `tinylm serve`
draws a seeded request the same way (`inference/sampling.py`), which is what lets the rollouts come
from a server (`rollout_server.py`).

Decoding runs on the model's own KV-cache path (`inference/runners.py`, the same forward as
training), with the current weights at every call.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from tinylm.inference.runners import make_runner
from tinylm.inference.sampling import (
    SamplingParams,
    inverse_cdf_sample,
    process_logits,
    sequence_uniforms,
)


@dataclass
class Rollouts:
    """A batch of sampled responses, laid out group by group (see the module docstring)."""

    ids: torch.Tensor  # [N, L] long: prompt + response, right-padded
    response_mask: torch.Tensor  # [N, L-1] float: 1 where the target ids[:, t+1] is a response token
    logprobs: torch.Tensor  # [N, L-1] float: the sampling log-probs of those targets (0 elsewhere)
    responses: list[list[int]]  # each response's ids (its stop token included when it stopped)
    stopped: torch.Tensor  # [N] bool: ended by a stop id (False: ran into its length limit)
    group_size: int
    tokens_per_s: float = 0.0  # decode throughput (response tokens per second) of this batch
    # multi-turn rollouts with tools (tool_rollouts.py): what each reward reads (the final answer) and the calls
    texts: list[str] | None = None
    calls: list[int] | None = None
    failed_calls: list[int] | None = None

    @property
    def lengths(self) -> torch.Tensor:
        return self.response_mask.sum(-1)


def response_texts(tokenizer: Any, responses: Sequence[Sequence[int]], stop_ids: Iterable[int]) -> list[str]:
    """What a reward reads of each response: its text, without the stop token that ended it."""
    stops = set(stop_ids)
    return [tokenizer.decode(list(r[:-1]) if r and r[-1] in stops else list(r)) for r in responses]


def stable_seed(*parts: int) -> int:
    """A seed from integers, the same on every machine and process (no Python hash randomisation)."""
    value = 0x9E3779B97F4A7C15
    for part in parts:
        value = (value ^ (part + 0x632BE59BD9B4E019)) * 0xBF58476D1CE4E5B9 % 2**63
    return value


def row_seeds(prompt_seeds: Sequence[int], group_size: int) -> list[int]:
    """One seed per row from one seed per prompt: sample g of a prompt seeded S is seeded S * 1,000,003 + g, so
    a server that seeds choice g of a request by its seed + g draws the rows from row_seeds([S], 1)[0]."""
    return [(s * 1_000_003 + g) % 2**63 for s in prompt_seeds for g in range(group_size)]


def token_logprobs(logits: torch.Tensor, targets: torch.Tensor, temperature: float) -> torch.Tensor:
    """log softmax(logits / T)[target] per position: what sampling records and the trainer recomputes."""
    logp = torch.log_softmax(logits.float() / temperature, dim=-1)
    return logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)


@torch.no_grad()
def sample_rollouts(model: nn.Module, prompts: Sequence[Sequence[int]], group_size: int, max_new_tokens: int,
                    sampling: SamplingParams, seeds: Sequence[int], stop_ids: Iterable[int], pad_id: int
                    ) -> Rollouts:
    """`group_size` responses to each prompt (one seed per prompt), sampled with the model's current weights."""
    if sampling.temperature <= 0:
        raise ValueError("rollouts sample: the temperature must be > 0")
    if len(seeds) != len(prompts):
        raise ValueError("one seed per prompt")
    t0 = time.perf_counter()
    was_training = model.training
    model.eval()
    rows = [list(p) for p in prompts for _ in range(group_size)]
    device = next(model.parameters()).device
    B, P = len(rows), max(len(p) for p in rows)
    if P + max_new_tokens > model.config.context_length:
        raise ValueError(f"prompt ({P} tokens) + max_new_tokens ({max_new_tokens}) exceed the context "
                         f"length {model.config.context_length}")
    uniforms = sequence_uniforms(row_seeds(seeds, group_size), max_new_tokens, device)
    stops = torch.tensor(sorted(set(stop_ids)), dtype=torch.long, device=device)
    starts = torch.tensor([P - len(p) for p in rows], device=device)
    idx = torch.full((B, P), pad_id, dtype=torch.long, device=device)
    for i, p in enumerate(rows):
        idx[i, P - len(p):] = torch.tensor(p, dtype=torch.long)
    slots = torch.arange(P, device=device)[None]
    runner = make_runner(model, B, P + max_new_tokens, use_cache=True, fast=False)
    logits = runner.extend(idx, (slots - starts[:, None]).clamp(min=0), slots >= starts[:, None])[:, -1]
    tokens = torch.full((B, max_new_tokens), pad_id, dtype=torch.long, device=device)
    logprobs = torch.zeros(B, max_new_tokens, device=device)
    alive = torch.ones(B, dtype=torch.bool, device=device)
    lengths = torch.zeros(B, dtype=torch.long, device=device)
    stopped = torch.zeros(B, dtype=torch.bool, device=device)
    for step in range(max_new_tokens):
        probs = torch.softmax(process_logits(logits, sampling), dim=-1)
        token = inverse_cdf_sample(probs, uniforms[:, step])
        logprob = token_logprobs(logits, token, sampling.temperature)
        tokens[:, step] = torch.where(alive, token, pad_id)
        logprobs[:, step] = torch.where(alive, logprob, 0.0)
        lengths += alive.long()
        hit_stop = alive & torch.isin(token, stops)
        stopped |= hit_stop
        alive &= ~hit_stop
        if step + 1 == max_new_tokens or not bool(alive.any()):
            break
        position = (P + step - starts)[:, None]
        logits = runner.extend(torch.where(alive, token, pad_id)[:, None], position)[:, -1]
    model.train(was_training)
    return layout(rows, tokens.cpu(), logprobs.cpu(), lengths.cpu(), stopped.cpu(), group_size, pad_id,
                   generated=int(lengths.sum()), seconds=time.perf_counter() - t0)


def layout(rows: list[list[int]], tokens: torch.Tensor, logprobs: torch.Tensor, lengths: torch.Tensor,
            stopped: torch.Tensor, group_size: int, pad_id: int, generated: int, seconds: float) -> Rollouts:
    """Prompt + response rows, right-padded, with the mask and log-probs on the target positions."""
    N = len(rows)
    L = max(len(p) + int(n) for p, n in zip(rows, lengths))
    ids = torch.full((N, L), pad_id, dtype=torch.long)
    mask = torch.zeros(N, L - 1)
    out_logprobs = torch.zeros(N, L - 1)
    responses = []
    for i, (prompt, n) in enumerate(zip(rows, lengths.tolist())):
        p = len(prompt)
        ids[i, :p] = torch.tensor(prompt, dtype=torch.long)
        ids[i, p:p + n] = tokens[i, :n]
        mask[i, p - 1:p - 1 + n] = 1.0  # target t predicts ids[t + 1]: the response starts at target p - 1
        out_logprobs[i, p - 1:p - 1 + n] = logprobs[i, :n]
        responses.append(tokens[i, :n].tolist())
    return Rollouts(ids, mask, out_logprobs, responses, stopped, group_size,
                    tokens_per_s=generated / max(seconds, 1e-9))


def policy_logprobs(model: nn.Module, ids: torch.Tensor, temperature: float, mask: torch.Tensor | None = None
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """(log-probs [N, L-1] of each next token under the tempered policy, logits): the trainer's recompute
    of what `sample_rollouts` recorded. Right padding sits after every real token, so causal attention
    never lets it change them.

    Without `mask` the logits are [N, L-1, V]. With `mask` [N, L-1] (the response tokens) only the
    masked positions go through the output head: the log-probs are 0 elsewhere and the logits are
    [n_masked, V]. The prompt's logits are never used, and on a short answer after a long prompt they
    are most of the head's and the softmax's work.
    """
    if mask is None:
        logits, _ = model(ids)
        logits = logits[:, :-1]
        return token_logprobs(logits, ids[:, 1:], temperature), logits
    logp, logits, _ = response_logprobs(model, ids, temperature, mask)
    return logp, logits


def response_logprobs(model: nn.Module, ids: torch.Tensor, temperature: float, mask: torch.Tensor
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """(log-probs [N, L-1], 0 off `mask`; logits [n_masked, V]; the model's second output at those positions).

    The output head runs on the masked positions only (`logits_at`); the second output is what the model
    returns beside its logits (PPO's `PolicyWithValue`: the values).
    """
    wanted = mask.bool()
    logits, second = model(ids, logits_at=response_positions(wanted))
    return on_response(token_logprobs(logits, ids[:, 1:][wanted], temperature), wanted), logits, second


def response_positions(mask: torch.Tensor) -> torch.Tensor:
    """The model's `logits_at` [N, L] for a target mask [N, L-1]: position t predicts token t + 1."""
    return torch.nn.functional.pad(mask.bool(), (0, 1))


def on_response(flat: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Per-token values [n_masked] laid back out as [N, L-1], 0 off the mask (differentiable)."""
    return torch.zeros(mask.shape, dtype=flat.dtype, device=flat.device).masked_scatter(mask.bool(), flat)
