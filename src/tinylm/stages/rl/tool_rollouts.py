"""Multi-turn rollouts: a whole tool-using trajectory as one row, the policy's tokens marked, results as context.

    rollouts = sample_tool_rollouts(model, chat, prompts, group_size=G, max_new_tokens=24, sampling=...,
                                    seeds=..., tools=get_tools("calculator"), pad_id=..., max_turns=4)

A rollout with tools is the tool loop of evaluation (`inference/tool_loop.py`), sampled: the model
writes a turn, its calls run, their results come back as tool turns, it writes again, up to
`max_turns` turns. The row is the whole context. `response_mask` marks the tokens the policy sampled
(every turn's tokens and the stop that ended it) and nothing else: not the prompt, not the
`<|assistant|>` header the loop writes before each turn, and never a tool's result, which the model
reads but must not be trained to write, nor pay KL for. The log-prob recorded for each sampled token
is the one `sample_rollouts` records, so the trainer's recompute on the row equals it, as for one turn.

Seeds. Turn k of row r is drawn from its own seed, stable_seed(row seed, k), by `sample_rollouts`,
whose rows depend only on their own seeds: a trajectory depends on its seed and the weights alone, so
`--grad-accum` and torchrun see the trajectories one process sees.

The reward reads the final answer (`texts`); `calls` and `failed_calls` (malformed, to an unknown
tool, or failing) let a reward, or `--tool-penalty`, score the use of tools.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from tinylm.inference.sampling import SamplingParams
from tinylm.inference.tool_loop import ToolRun, run_with_tools
from tinylm.stages.rl.rollout import Rollouts, row_seeds, sample_rollouts, stable_seed
from tinylm.tokenizer.chat_format import ChatFormat
from tinylm.tools.registry import Tool


@torch.no_grad()
def sample_tool_rollouts(model: nn.Module, chat: ChatFormat, prompts: Sequence[Sequence[Mapping[str, Any]]],
                         group_size: int, max_new_tokens: int, sampling: SamplingParams, seeds: Sequence[int],
                         tools: list[Tool], pad_id: int, max_turns: int) -> Rollouts:
    """`group_size` trajectories of each prompt conversation (one seed per prompt), with the current weights."""
    t0 = time.perf_counter()
    conversations = [prompt for prompt in prompts for _ in range(group_size)]
    seed_of = row_seeds(seeds, group_size)
    logprobs: list[list[float]] = [[] for _ in conversations]
    turn = generated = 0  # every row of a call is at the same turn: the loop only ever drops rows

    def generate(heads: list[list[int]], limits: list[int], rows: list[int]) -> list[list[int]]:
        """One turn for each row; rows with the same limit sampled together (sample_rollouts has one limit)."""
        nonlocal turn, generated
        out: list[list[int]] = [[] for _ in heads]
        for limit in sorted(set(limits)):
            picked = [k for k, row_limit in enumerate(limits) if row_limit == limit]
            batch = sample_rollouts(model, [heads[k] for k in picked], 1, limit, sampling,
                                    [stable_seed(seed_of[rows[k]], turn) for k in picked],
                                    chat.stop_ids, pad_id)
            for j, k in enumerate(picked):
                out[k] = batch.responses[j]
                logprobs[rows[k]] += batch.logprobs[j][batch.response_mask[j] > 0].tolist()
                generated += len(out[k])
        turn += 1
        return out

    runs = run_with_tools(generate, chat, conversations, tools, max_new_tokens, model.config.context_length,
                          max_turns, keeps_stop=True)
    rollouts = trajectories(runs, logprobs, chat, group_size, pad_id)
    rollouts.tokens_per_s = generated / max(time.perf_counter() - t0, 1e-9)
    return rollouts


def trajectories(runs: list[ToolRun], logprobs: list[list[float]], chat: ChatFormat, group_size: int,
                 pad_id: int) -> Rollouts:
    """The runs as right-padded rows: the mask and log-probs on the targets the policy sampled."""
    N, L = len(runs), max(len(run.ids) for run in runs)
    ids = torch.full((N, L), pad_id, dtype=torch.long)
    mask, out_logprobs = torch.zeros(N, L - 1), torch.zeros(N, L - 1)
    responses, stopped = [], []
    for i, run in enumerate(runs):
        ids[i, :len(run.ids)] = torch.tensor(run.ids, dtype=torch.long)
        sampled = [t for t, policy in enumerate(run.policy) if policy]
        assert len(sampled) == len(logprobs[i]), "one recorded log-prob per sampled token"
        targets = torch.tensor(sampled, dtype=torch.long) - 1  # target t predicts ids[t + 1]
        mask[i, targets] = 1.0
        out_logprobs[i, targets] = torch.tensor(logprobs[i])
        responses.append([run.ids[t] for t in sampled])
        stopped.append(run.stopped == "answer" and bool(run.ids) and run.ids[-1] in chat.stop_ids
                       and bool(run.policy[-1]))
    return Rollouts(ids, mask, out_logprobs, responses, torch.tensor(stopped), group_size,
                    texts=[run.final for run in runs], calls=[run.calls for run in runs],
                    failed_calls=[run.failed_calls for run in runs])
