"""Each running row's next token and its log-probs, for one decode step of the scheduler.

Greedy rows take the argmax. The others draw by inverse CDF from their own seeded uniforms
(`inference/sampling.py`), in one batch per set of sampling options; rows of one set give the same
numbers batched or alone, since every filter works row by row.
"""

from __future__ import annotations

from typing import Any

import torch

from tinylm.inference.sampling import SamplingParams, inverse_cdf_sample, process_logits


def sample_rows(jobs: list[Any], logits: torch.Tensor) -> tuple[torch.Tensor, dict[int, torch.Tensor]]:
    """(the tokens [B], each sampled row's processed logits) for the jobs of rows 0..B-1 of `logits`."""
    tokens = logits.argmax(dim=-1)
    groups: dict[SamplingParams, list[int]] = {}
    for i, job in enumerate(jobs):
        if not job.sampling.greedy:
            groups.setdefault(job.sampling, []).append(i)
    processed: dict[int, torch.Tensor] = {}
    for params, rows in groups.items():
        index = torch.tensor(rows, device=logits.device)
        scaled = process_logits(logits[index], params)
        uniforms = torch.tensor([jobs[i].uniforms[jobs[i].generated] for i in rows], dtype=torch.float64,
                                device=logits.device)
        tokens[index] = inverse_cdf_sample(torch.softmax(scaled, dim=-1), uniforms)
        processed.update(zip(rows, scaled))
    return tokens, processed


def row_logprobs(logits: torch.Tensor, processed: dict[int, torch.Tensor], mode: str) -> torch.Tensor:
    """Each row's log-probs: of the model's distribution (raw), or of the one its token was drawn from
    (processed: after temperature, top-k, top-p, min-p; a token they rule out reads -9999, as in vLLM)."""
    logprobs = torch.log_softmax(logits.float(), dim=-1)
    if mode == "processed":
        for i, row in processed.items():
            logprobs[i] = torch.log_softmax(row, dim=-1).clamp(min=-9999.0)
    return logprobs
