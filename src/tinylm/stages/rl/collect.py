"""One round of rollouts: the step's prompts, G sampled responses each, scored and laid out as micro-batches.

A round serves `--epochs` optimizer steps. Its prompts are numbered by a global slot (micro-batch j
of rank r holds slots (j * world_size + r) * batch_size + i), and a slot's prompt and sampling seed
depend only on (seed, round, slot, candidate), never on the micro-batch or the process that draws
it: `--grad-accum k` and torchrun with n processes sample the rollouts one process samples.

DAPO's dynamic sampling: a group whose G rewards all agree has zero advantage and teaches nothing.
With `dynamic_sampling` each slot tries up to `--oversample` candidate prompts and keeps the first
whose rewards differ (else the last); when any group of the step is informative, the uninformative
ones are masked out of the loss. DAPO's overlong shaping adds a soft penalty near the length limit.

Each micro-batch then gets what its loss needs from frozen models (the reference's log-probs, PPO's
old values), and the step its advantages (step_advantages.py) and its totals (step_totals.py).

With a rollout server (`rollout_server.py`) rank 0 syncs the weights before the round samples, the
server's log-probs become `sampler_logp`, and `old_logp` is the trainer's own recompute.

Ctrl-C while a reward runs ends the wait at once (`reward_calls.py`); the ranks agree on it in the
round's first all-reduce, and every rank drops the step together (`StepInterrupted`).
"""

from __future__ import annotations

import time
from typing import Any

import torch
from torch import nn

from tinylm.checkpoint import TOKENIZER
from tinylm.errors import TinyLMError
from tinylm.inference.sampling import SamplingParams
from tinylm.runtime.compile_policy import eager_blocks
from tinylm.runtime.device import autocast
from tinylm.runtime.distributed import DistEnv, all_reduce_max, all_reduce_sum
from tinylm.stages.rl.advantages import reward_spread
from tinylm.stages.rl.algorithm import Algorithm
from tinylm.stages.rl.config import RLConfig
from tinylm.stages.rl.inert_rows import drop_inert_rows, rows_can_be_dropped
from tinylm.stages.rl.policy_losses import units
from tinylm.stages.rl.ppo import PolicyWithValue
from tinylm.stages.rl.rewards import Reward, RewardsInterrupted
from tinylm.stages.rl.rollout import (
    Rollouts,
    on_response,
    policy_logprobs,
    response_positions,
    response_texts,
    sample_rollouts,
    stable_seed,
)
from tinylm.stages.rl.rollout_server import RolloutServer
from tinylm.stages.rl.step_advantages import step_advantages
from tinylm.stages.rl.step_totals import StepTotals, step_totals
from tinylm.stages.rl.tool_rollouts import sample_tool_rollouts
from tinylm.tasks.task import Example, Task
from tinylm.tokenizer.chat_format import ChatFormat
from tinylm.tokenizer.tokenizer import Tokenizer
from tinylm.tools.registry import Tool
from tinylm.train.faults import StepInterrupted, stop_requested
from tinylm.train.stage import StageContext


def overlong_penalty(mask: torch.Tensor, limit: int, buffer: int | None) -> torch.Tensor:
    """DAPO's soft overlong punishment: 0 up to L - buffer, then linear down to -1 at the limit L."""
    width = buffer if buffer is not None else max(1, limit // 4)
    lengths = mask.sum(-1).double()
    return ((limit - width - lengths) / width).clamp(min=-1.0, max=0.0)


class RolloutCollector:
    """This rank's rounds of rollouts. It holds what sampling and scoring need; the run's context (device,
    precision, ranks) and the models come with each round."""

    def __init__(self, cfg: RLConfig, algo: Algorithm, chat: ChatFormat, tokenizer: Tokenizer, task: Task,
                 pool: list[Example], reward: Reward, reference: nn.Module | None,
                 server: RolloutServer | None = None, tools: list[Tool] | None = None,
                 teacher: nn.Module | None = None) -> None:
        """With `tools`, every rollout is a multi-turn trajectory through the tool loop (tool_rollouts.py); with a
        `teacher`, each rollout's score loses --teacher-coef x its summed reverse KL to it (`teacher_kl`)."""
        self.teacher = teacher
        self.cfg, self.algo, self.server, self.tools = cfg, algo, server, tools or []
        self.chat, self.tokenizer, self.task, self.reward, self.reference = chat, tokenizer, task, reward, reference
        self.pool = pool
        self.pool_ids = [chat.prompt_ids(e.prompt) for e in pool]
        self.sampling = SamplingParams(temperature=cfg.temperature, top_k=cfg.top_k, top_p=cfg.top_p)
        self.tries = cfg.oversample if algo.dynamic_sampling else 1  # candidate prompts per slot
        self.last_round_end: float | None = None  # the time between two rounds is the update's
        self.first_failure: str | None = None  # this rank's first failed reward (--reward-errors zero)

    def collect(self, ctx: StageContext[RLConfig], round_index: int, policy: nn.Module,
                value_model: PolicyWithValue | None) -> tuple[list[dict[str, Any]], StepTotals]:
        """This rank's micro-batches for a round (rollouts, rewards, advantages) and the step's totals."""
        env, device, algo = ctx.env, ctx.device, self.algo
        t0 = time.perf_counter()
        update_s = t0 - self.last_round_end if self.last_round_end is not None else 0.0
        if self.server is not None:
            self._sync(ctx, round_index, policy)
        sync_s = time.perf_counter() - t0
        try:
            groups = [self._fill(ctx, round_index, slots, policy) for slots in self._slots(env)]
            interrupted = 0.0
        except RewardsInterrupted:
            groups, interrupted = [], 1.0
        flat = [g for micro in groups for g in micro]
        # DAPO: once any group of the step is informative, the uninformative ones leave the loss
        counts = torch.tensor([float(sum(g["informative"] for g in flat)), interrupted], dtype=torch.float64,
                              device=device)
        n_informative, n_interrupted = all_reduce_sum(counts, env).tolist()
        if n_interrupted:  # every rank raises here, together: no rank is left waiting in a collective
            raise StepInterrupted(f"stopped while rewards were computed for round {round_index}")
        any_informative = n_informative > 0
        limit, buffer = self.cfg.max_new_tokens * (self.cfg.max_turns if self.tools else 1), self.cfg.overlong_buffer
        for g in flat:
            shaping = overlong_penalty(g["mask"], limit, buffer) if algo.overlong_shaping else 0.0
            g["score"] = g["reward"] + shaping - self.cfg.teacher_coef * g["teacher_kl"]
            g["keep"] = not (algo.dynamic_sampling and any_informative and not g["informative"])
        micro_batches = [self._assemble(ctx, micro, value_model) for micro in groups]
        step_advantages(micro_batches, algo, self.cfg.group_size, self.cfg.gamma, self.cfg.lam, env)
        for b in micro_batches:  # the loss's units, counted before any row leaves
            b["units"] = torch.tensor(float(units(b["mask"], algo.aggregation)))
        rollout_s = time.perf_counter() - t0
        totals = step_totals(micro_batches, flat, rollout_s, update_s, env, device, tools=bool(self.tools),
                             teacher=self.teacher is not None)
        if rows_can_be_dropped(algo, self.reference is not None):  # token means over the rows computed
            kept = torch.tensor([sum(drop_inert_rows(b) for b in micro_batches)], dtype=torch.float64, device=device)
            totals.tokens = max(float(all_reduce_sum(kept, env)[0]), 1.0)
        if self.server is not None:  # the largest per-token gap |log pi_old - log pi_sampler| of the step
            gap = torch.tensor([max((g["gap_max"] for g in flat), default=0.0)], dtype=torch.float64, device=device)
            totals.metrics["sampler_gap_max"] = float(all_reduce_max(gap, env)[0])
            totals.metrics["sync_s"] = sync_s  # part of rollout_s: publishing the weights and the server's reload
        self.last_round_end = time.perf_counter()
        return micro_batches, totals

    def _sync(self, ctx: StageContext[RLConfig], round_index: int, policy: nn.Module) -> None:
        """Rank 0 publishes the weights and has the server load them; every rank learns together whether it did."""
        assert self.server is not None
        failure = None
        if ctx.env.rank == 0:
            try:
                self.server.sync(ctx.run_dir, round_index, policy, policy.config, ctx.run_dir / TOKENIZER)
            except TinyLMError as exc:
                failure = exc
        failed = all_reduce_sum(torch.tensor([float(failure is not None)], device=ctx.device), ctx.env)
        if failure is not None:
            raise failure
        if failed.item():  # the other ranks: rank 0 says why
            raise TinyLMError("rank 0 could not sync the weights to the rollout server")

    def _slots(self, env: DistEnv) -> list[list[int]]:
        """This rank's global slot numbers, one list per micro-batch."""
        b, ws = self.cfg.batch_size, env.world_size
        return [[(j * ws + env.rank) * b + i for i in range(b)] for j in range(self.cfg.grad_accum)]

    def _fill(self, ctx: StageContext[RLConfig], round_index: int, slots: list[int], policy: nn.Module
              ) -> list[dict[str, Any]]:
        """Each slot's group; with dynamic sampling, the first candidate prompt whose rewards differ."""
        filled: dict[int, dict[str, Any]] = {}
        pending = list(slots)
        for candidate in range(self.tries):
            for slot, group in zip(pending, self._sample_slots(ctx, round_index, pending, candidate, policy)):
                group["informative"] = bool(reward_spread(group["reward"], self.cfg.group_size)[0])
                if group["informative"] or candidate == self.tries - 1:
                    filled[slot] = group
            pending = [s for s in pending if s not in filled]
            if not pending:
                break
        return [filled[s] for s in slots]

    def _sample_slots(self, ctx: StageContext[RLConfig], round_index: int, slots: list[int], candidate: int,
                      policy: nn.Module) -> list[dict[str, Any]]:
        """Sample and score G responses for each slot's `candidate`-th prompt; one dict per slot."""
        cfg, G = self.cfg, self.cfg.group_size
        prompts_per_round = cfg.batch_size * cfg.grad_accum * ctx.env.world_size
        picks = [((round_index * prompts_per_round + s) * self.tries + candidate) % len(self.pool) for s in slots]
        seeds = [stable_seed(cfg.seed, round_index, s, candidate) for s in slots]
        rollouts, sampler_logp = self._rollouts(ctx, picks, seeds, policy)
        texts = rollouts.texts if rollouts.texts is not None else response_texts(
            self.tokenizer, rollouts.responses, self.chat.stop_ids)
        examples = [self.pool[p] for p in picks for _ in range(G)]
        scores = self.reward.score(texts, examples, should_stop=lambda: stop_requested() is not None)
        calls, failed_calls = rollouts.calls or [0] * len(texts), rollouts.failed_calls or [0] * len(texts)
        rewards = [r - cfg.tool_penalty * f for r, f in zip(scores.rewards, failed_calls, strict=True)]
        if scores.failures and self.first_failure is None:
            self.first_failure = scores.first_failure
            ctx.say(f"warning: {scores.failures} reward(s) failed and scored 0 (--reward-errors zero); first: "
                    f"{scores.first_failure}")
        correct = [float(self.task.verify(t, e)) for t, e in zip(texts, examples)]
        teacher_kl = self._teacher_kl(ctx, rollouts)
        out = []
        for i in range(len(slots)):
            rows = slice(i * G, (i + 1) * G)
            out.append({"ids": rollouts.ids[rows], "mask": rollouts.response_mask[rows],
                        "old_logp": rollouts.logprobs[rows], "stopped": rollouts.stopped[rows],
                        **self._sampler_part(rollouts, sampler_logp, rows),
                        "reward": torch.tensor(rewards[rows], dtype=torch.float64),
                        "correct": torch.tensor(correct[rows], dtype=torch.float64), "failures": 0,
                        "teacher_kl": teacher_kl[rows],
                        "tokens": int(rollouts.response_mask[rows].sum()),
                        "calls": sum(calls[rows]), "failed_calls": sum(failed_calls[rows])})
        if scores.failures:  # attribute the failures to the first slot: only their total is logged
            out[0]["failures"] = scores.failures
        return out

    def _rollouts(self, ctx: StageContext[RLConfig], picks: list[int], seeds: list[int], policy: nn.Module
                  ) -> tuple[Rollouts, torch.Tensor | None]:
        """(rollouts whose `logprobs` are the trainer's, the server's log-probs or None when sampled in-process)."""
        cfg = self.cfg
        stops, pad = self.chat.stop_ids, self.tokenizer.eot_id
        prompts = [self.pool_ids[p] for p in picks]
        if self.tools:  # decoding runs compiled blocks eagerly: a graph per cache length would never pay
            with autocast(ctx.device, ctx.dtype), eager_blocks():
                return sample_tool_rollouts(policy, self.chat, [self.pool[p].prompt for p in picks], cfg.group_size,
                                            cfg.max_new_tokens, self.sampling, seeds, self.tools, pad,
                                            cfg.max_turns), None
        if self.server is None:
            with autocast(ctx.device, ctx.dtype), eager_blocks():  # the same precision as the loss's recompute
                return sample_rollouts(policy, prompts, cfg.group_size, cfg.max_new_tokens, self.sampling, seeds,
                                       stops, pad_id=pad), None
        rollouts = self.server.sample(prompts, cfg.group_size, cfg.max_new_tokens, self.sampling, seeds, stops, pad,
                                      policy.config.vocab_size)
        sampler_logp = rollouts.logprobs
        was_training = policy.training
        policy.eval()
        with torch.no_grad(), autocast(ctx.device, ctx.dtype):  # pi_old: the trainer's numbers for these tokens
            old, _ = policy_logprobs(policy, rollouts.ids.to(ctx.device), cfg.temperature,
                                     rollouts.response_mask.to(ctx.device))
        policy.train(was_training)
        rollouts.logprobs = old.float().cpu()
        return rollouts, sampler_logp

    def _teacher_kl(self, ctx: StageContext[RLConfig], rollouts: Rollouts) -> torch.Tensor:
        """Each rollout's reverse KL to the teacher, sampled: the sum over its tokens of log pi(y_t) - log
        pi_teacher(y_t) at the sampling temperature (0 for every rollout without a teacher)."""
        if self.teacher is None:
            return torch.zeros(len(rollouts.ids), dtype=torch.float64)
        mask = rollouts.response_mask.to(ctx.device)
        with torch.no_grad(), autocast(ctx.device, ctx.dtype):
            teacher_logp, _ = policy_logprobs(self.teacher, rollouts.ids.to(ctx.device), self.cfg.temperature, mask)
        gap = (rollouts.logprobs.to(ctx.device) - teacher_logp.float()) * mask
        return gap.sum(-1).double().cpu()

    @staticmethod
    def _sampler_part(rollouts: Rollouts, sampler_logp: torch.Tensor | None, rows: slice) -> dict[str, Any]:
        """A group's server log-probs and its largest gap to the trainer's (nothing when sampled in-process)."""
        if sampler_logp is None:
            return {}
        mask = rollouts.response_mask[rows] > 0
        gap = (rollouts.logprobs[rows] - sampler_logp[rows]).abs()[mask]
        return {"sampler_logp": sampler_logp[rows], "gap_max": float(gap.max()) if gap.numel() else 0.0}

    def _assemble(self, ctx: StageContext[RLConfig], micro: list[dict[str, Any]], value_model: PolicyWithValue | None
                  ) -> dict[str, Any]:
        """One micro-batch: its groups' rows padded to one length, the reference log-probs, old values."""
        pad = self.tokenizer.eot_id
        L = max(g["ids"].shape[1] for g in micro)

        def padded(key: str, width: int, value: float) -> torch.Tensor:
            parts = [torch.nn.functional.pad(g[key], (0, width - g[key].shape[1]), value=value) for g in micro]
            return torch.cat(parts)

        keep = torch.cat([torch.full((g["ids"].shape[0],), float(g["keep"])) for g in micro])
        batch: dict[str, Any] = {
            "ids": padded("ids", L, pad), "mask": padded("mask", L - 1, 0.0) * keep[:, None],
            "old_logp": padded("old_logp", L - 1, 0.0), "score": torch.cat([g["score"] for g in micro]),
            "reward": torch.cat([g["reward"] for g in micro]), "correct": torch.cat([g["correct"] for g in micro]),
            "stopped": torch.cat([g["stopped"] for g in micro]),
        }
        if "sampler_logp" in micro[0]:
            batch["sampler_logp"] = padded("sampler_logp", L - 1, 0.0)
        device = ctx.device
        batch = {k: v.to(device) for k, v in batch.items()}
        with torch.no_grad(), autocast(device, ctx.dtype):
            if self.reference is not None:  # response tokens only, like the policy's recompute
                batch["ref_logp"], _ = policy_logprobs(self.reference, batch["ids"], self.cfg.temperature,
                                                       batch["mask"])
            if value_model is not None:
                wanted = batch["mask"] > 0
                values = value_model(batch["ids"], logits_at=response_positions(wanted))[1]
                batch["old_values"] = on_response(values.float(), wanted)
        return batch
