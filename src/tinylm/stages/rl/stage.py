"""RL from verifiable rewards as a stage of the one engine: sample, score, compute advantages, update.

One optimizer step of `tinylm rl`:

1. rollouts (`next_batch`, first micro-batch of a step): the step's prompts, G responses each, are
   sampled with the current weights (`rollout.py`), scored by the reward (`rewards.py`), and turned into
   per-token advantages by the algorithm (`algorithm.py`: GRPO family, RLOO, REINFORCE++, PPO);
2. the engine runs `loss` on each micro-batch: the clipped surrogate (+ KL or value loss), aggregated
   as a (sum, units) pair (`policy_losses.aggregate`), and divides by the step's units.

Exactly one big batch. The step's prompts are numbered by a global slot; a slot's prompt and its
sampling seed depend only on (seed, rollout round, slot), never on the micro-batch or the process
that draws it. Everything that needs the whole batch (group statistics live inside one slot; batch
whitening, DAPO's informative-group count, the logged means) is summed over micro-batches and ranks
before any loss is computed. So `--grad-accum k` and `torchrun` with n processes compute what one
process with the whole batch computes.

Epochs. With `--epochs E` the same rollouts serve E consecutive optimizer steps (the ratio moves
away from 1 after the first and clipping starts to matter). Exact resume: a checkpoint taken in the
middle of a round stores that round's rollouts; at a round boundary nothing needs storing, because
the next rollouts are a function of the saved weights and the round number.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch
from torch import nn

from tinylm.checkpoint import (
    checkpoint_model_config,
    load_train_state,
    load_weights,
    resolve_checkpoint,
    tied_aliases,
)
from tinylm.errors import TinyLMError
from tinylm.models.factory import build_model
from tinylm.runtime.device import autocast
from tinylm.runtime.distributed import all_reduce_sum
from tinylm.stages.from_base import FromBaseStage
from tinylm.stages.post_config import PostTrainConfig
from tinylm.stages.rl.advantages import group_advantages, moment_sums, reward_spread, rloo_advantages, whiten
from tinylm.stages.rl.config import RLConfig
from tinylm.stages.rl.gae import gae
from tinylm.stages.rl.kl import kl_estimate
from tinylm.stages.rl.policy_losses import (
    aggregate,
    clipped_surrogate,
    clipped_value_loss,
    gspo_surrogate,
    token_entropy,
    units,
)
from tinylm.stages.rl.ppo import PolicyWithValue, token_rewards
from tinylm.stages.rl.rollout import (
    on_response,
    policy_logprobs,
    response_logprobs,
    response_positions,
    sample_rollouts,
)
from tinylm.train.config import TrainConfig
from tinylm.train.stage import Batch, StageLoss


def _stable_seed(*parts: int) -> int:
    """A seed from integers, the same on every machine and process (no Python hash randomisation)."""
    value = 0x9E3779B97F4A7C15
    for part in parts:
        value = (value ^ (part + 0x632BE59BD9B4E019)) * 0xBF58476D1CE4E5B9 % 2**63
    return value


class RLStage(FromBaseStage):
    name = "rl"
    evaluate_at_start = True  # the starting model's exact-match is the "before"

    # ---- setup ---------------------------------------------------------------------------------
    def setup_data(self, cfg: PostTrainConfig) -> None:
        from tinylm.inference.sampling import SamplingParams
        from tinylm.stages.rl.rewards import load_reward
        from tinylm.tasks.registry import get_task

        assert isinstance(cfg, RLConfig)
        ctx = self.ctx
        self.algo = cfg.algorithm()
        self.task = get_task(cfg.task)
        window = self.mcfg.context_length - cfg.max_new_tokens
        pool = [e for e in self.task.examples("train", cfg.train_examples, cfg.seed)
                if len(self.chat.prompt_ids(e.prompt)) <= window]
        if not pool:
            raise TinyLMError(f"no prompt of {cfg.task} fits the context of {self.mcfg.context_length} tokens with "
                              f"--max-new-tokens {cfg.max_new_tokens}")
        self.pool = pool
        self.pool_ids = [self.chat.prompt_ids(e.prompt) for e in pool]
        self.eval_problems = self.task.examples("test", cfg.eval_examples, cfg.seed)
        self.reward = load_reward(cfg.reward, self.task, ctx.device)
        self.reference = self._load_reference(cfg)
        self.sampling = SamplingParams(temperature=cfg.temperature, top_k=cfg.top_k, top_p=cfg.top_p)
        self.steps_begun = 0  # optimizer steps whose batches were handed out
        self.micro = 0
        self.current: list[dict[str, Any]] | None = None  # this round's micro-batches
        self.last_rollout_end: float | None = None
        self.failure_said = False

    def data_spec(self) -> str:
        return self.ctx.cfg.task  # type: ignore[attr-defined]

    def _load_reference(self, cfg: RLConfig) -> nn.Module | None:
        needs = self.algo.beta > 0
        if not needs and cfg.reference is None:
            return None
        path = resolve_checkpoint(cfg.reference) if cfg.reference else self.base
        ref_cfg = checkpoint_model_config(path)
        if ref_cfg.vocab_size != self.mcfg.vocab_size:
            raise TinyLMError(f"reference {path} has a vocabulary of {ref_cfg.vocab_size} tokens, the policy "
                              f"{self.mcfg.vocab_size}: the KL needs the same vocabulary")
        reference = build_model(ref_cfg)
        load_weights(reference, path)
        reference.requires_grad_(False)
        return reference.eval().to(self.ctx.device)

    def run_name(self, cfg: TrainConfig) -> tuple[str, str]:
        path = Path(cfg.base).resolve()  # type: ignore[attr-defined]
        run = path.parent.parent if path.parent.name == "checkpoints" else path
        return run.name or "base", f"rl-{cfg.algo}"  # type: ignore[attr-defined]

    def describe(self) -> list[str]:
        cfg: RLConfig = self.ctx.cfg  # type: ignore[assignment]
        a = self.algo
        prompts = cfg.batch_size * cfg.grad_accum * self.ctx.env.world_size
        return [f"base: {self.base}", f"task: {cfg.task} ({len(self.pool):,} train prompts), reward: {cfg.reward}",
                f"algo: {a.name}: {a.summary}; aggregation {a.aggregation}, clip [{1 - a.clip_low:g}, "
                f"{1 + a.clip_high:g}], beta {a.beta:g}",
                f"rollouts: {prompts} prompts x G {cfg.group_size} per step, up to {cfg.max_new_tokens} new tokens, "
                f"temperature {cfg.temperature:g}, {cfg.epochs} epoch(s) per batch"]

    # ---- the model -----------------------------------------------------------------------------
    def build_model(self) -> nn.Module:
        """FromBaseStage's policy (LoRA adapters in it, if asked), with PPO's value head beside it."""
        policy = super().build_model()
        self.model = policy
        if not self.algo.value_head:
            return policy
        self.model = PolicyWithValue(policy)
        if self.ctx.resume is not None:
            self.model.value_head.load_state_dict(load_train_state(self.ctx.resume)["loader"]["value_head"])
        return self.model

    def checkpoint_weights(self, model: nn.Module, gathered: dict[str, torch.Tensor] | None
                           ) -> dict[str, torch.Tensor] | None:
        if not self.ctx.cfg.lora_rank and isinstance(model, PolicyWithValue):  # type: ignore[attr-defined]
            aliases = tied_aliases(self.policy)  # the checkpoint is the policy; the value head rides in train_state
            return {k: v for k, v in self.policy.state_dict().items() if k not in aliases}
        return super().checkpoint_weights(model, gathered)

    # ---- rollouts ------------------------------------------------------------------------------
    def _slots(self) -> list[list[int]]:
        """This rank's global slot numbers, one list per micro-batch."""
        cfg, env = self.ctx.cfg, self.ctx.env
        b, ws = cfg.batch_size, env.world_size
        return [[(j * ws + env.rank) * b + i for i in range(b)] for j in range(cfg.grad_accum)]

    def _prompts_per_round(self) -> int:
        cfg = self.ctx.cfg
        return cfg.batch_size * cfg.grad_accum * self.ctx.env.world_size

    def _sample_slots(self, round_index: int, slots: list[int], candidate: int) -> list[dict[str, Any]]:
        """Sample and score G responses for each slot's `candidate`-th prompt; one dict per slot."""
        cfg: RLConfig = self.ctx.cfg  # type: ignore[assignment]
        tries = cfg.oversample if self.algo.dynamic_sampling else 1
        picks = [((round_index * self._prompts_per_round() + s) * tries + candidate) % len(self.pool) for s in slots]
        seeds = [_stable_seed(cfg.seed, round_index, s, candidate) for s in slots]
        G = cfg.group_size
        with autocast(self.ctx.device, self.ctx.dtype):  # the same precision as the loss's recompute
            rollouts = sample_rollouts(self.policy, [self.pool_ids[p] for p in picks], G, cfg.max_new_tokens,
                                       self.sampling, seeds, self.chat.stop_ids, pad_id=self.tokenizer.eot_id)
        stops = set(self.chat.stop_ids)
        texts = [self.tokenizer.decode(r[:-1] if r and r[-1] in stops else r) for r in rollouts.responses]
        examples = [self.pool[p] for p in picks for _ in range(G)]
        scores = self.reward.score(texts, examples)
        if scores.failures and not self.failure_said:
            self.ctx.say(f"warning: {scores.failures} reward(s) failed and scored 0; first: {scores.first_failure}")
            self.failure_said = True
        correct = [float(self.task.verify(t, e)) for t, e in zip(texts, examples)]
        out = []
        for i in range(len(slots)):
            rows = slice(i * G, (i + 1) * G)
            out.append({"ids": rollouts.ids[rows], "mask": rollouts.response_mask[rows],
                        "old_logp": rollouts.logprobs[rows], "stopped": rollouts.stopped[rows],
                        "reward": torch.tensor(scores.rewards[rows], dtype=torch.float64),
                        "correct": torch.tensor(correct[rows], dtype=torch.float64), "failures": 0,
                        "tokens": int(rollouts.response_mask[rows].sum())})
        if scores.failures:  # attribute the failures to the first slot: only their total is logged
            out[0]["failures"] = scores.failures
        return out

    def _fill(self, round_index: int, slots: list[int]) -> list[dict[str, Any]]:
        """Each slot's group; with dynamic sampling, the first candidate prompt whose rewards differ."""
        cfg: RLConfig = self.ctx.cfg  # type: ignore[assignment]
        G = cfg.group_size
        filled: dict[int, dict[str, Any]] = {}
        tries = cfg.oversample if self.algo.dynamic_sampling else 1
        pending = list(slots)
        for candidate in range(tries):
            for slot, group in zip(pending, self._sample_slots(round_index, pending, candidate)):
                group["informative"] = bool(reward_spread(group["reward"], G)[0])
                if group["informative"] or candidate == tries - 1:
                    filled[slot] = group
            pending = [s for s in pending if s not in filled]
            if not pending:
                break
        return [filled[s] for s in slots]

    def _rollout_round(self, round_index: int) -> list[dict[str, Any]]:
        """This rank's micro-batches for a round: rollouts, rewards, advantages and the step's totals."""
        env, device, algo = self.ctx.env, self.ctx.device, self.algo
        t0 = time.perf_counter()
        update_s = t0 - self.last_rollout_end if self.last_rollout_end is not None else 0.0
        groups = [self._fill(round_index, slots) for slots in self._slots()]
        flat = [g for micro in groups for g in micro]
        n_informative = torch.tensor([float(sum(g["informative"] for g in flat))], dtype=torch.float64, device=device)
        any_informative = float(all_reduce_sum(n_informative, env)[0]) > 0
        for g in flat:
            g["score"] = g["reward"] + (self._overlong_penalty(g) if algo.overlong_shaping else 0.0)
            g["keep"] = not (algo.dynamic_sampling and any_informative and not g["informative"])
        micro_batches = [self._assemble(micro) for micro in groups]
        self._advantages(micro_batches)
        rollout_s = time.perf_counter() - t0
        self._totals(micro_batches, flat, rollout_s, update_s)
        self.last_rollout_end = time.perf_counter()
        return micro_batches

    def _overlong_penalty(self, group: dict[str, Any]) -> torch.Tensor:
        """DAPO's soft overlong punishment: 0 up to L - buffer, then linear down to -1 at the limit L."""
        cfg: RLConfig = self.ctx.cfg  # type: ignore[assignment]
        limit = cfg.max_new_tokens
        buffer = cfg.overlong_buffer if cfg.overlong_buffer is not None else max(1, limit // 4)
        lengths = group["mask"].sum(-1).double()
        return ((limit - buffer - lengths) / buffer).clamp(min=-1.0, max=0.0)

    def _assemble(self, micro: list[dict[str, Any]]) -> dict[str, Any]:
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
        device = self.ctx.device
        batch = {k: v.to(device) for k, v in batch.items()}
        with torch.no_grad(), autocast(device, self.ctx.dtype):
            if self.reference is not None:  # response tokens only, like the policy's recompute
                batch["ref_logp"], _ = policy_logprobs(self.reference, batch["ids"], self.ctx.cfg.temperature,
                                                       batch["mask"])
            if self.algo.value_head:
                wanted = batch["mask"] > 0
                values = self._value_model()(batch["ids"], logits_at=response_positions(wanted))[1]
                batch["old_values"] = on_response(values.float(), wanted)
        return batch

    def _value_model(self) -> PolicyWithValue:
        assert isinstance(self.model, PolicyWithValue)
        return self.model

    def _advantages(self, micro_batches: list[dict[str, Any]]) -> None:
        """Per-token advantages [n, L-1] for every micro-batch (whitened over the whole step when asked)."""
        cfg: RLConfig = self.ctx.cfg  # type: ignore[assignment]
        G, kind = cfg.group_size, self.algo.advantage
        for b in micro_batches:
            score = b["score"]
            if kind == "group":
                seq = group_advantages(score, G, scale_by_std=True)
            elif kind in ("group-mean", "group-mean-whitened"):
                seq = group_advantages(score, G, scale_by_std=False)
            elif kind == "rloo":
                seq = rloo_advantages(score, G)
            else:
                rewards = token_rewards(score, b["old_logp"], b.get("ref_logp"), b["mask"], self.algo.beta)
                adv, b["returns"] = gae(rewards.double(), b["old_values"].double(), b["mask"], cfg.gamma, cfg.lam)
                b["advantages"] = adv
                continue
            b["advantages"] = seq.double()[:, None] * b["mask"].double()
        if kind in ("group-mean-whitened", "gae"):
            sums = sum(moment_sums(b["advantages"], b["mask"]) for b in micro_batches)
            sums = all_reduce_sum(sums, self.ctx.env)
            for b in micro_batches:
                b["advantages"] = whiten(b["advantages"], sums, b["mask"])
        for b in micro_batches:
            b["advantages"] = b["advantages"].float()
            if "returns" in b:
                b["returns"] = b["returns"].float()

    def _totals(self, micro_batches: list[dict[str, Any]], groups: list[dict[str, Any]], rollout_s: float,
                update_s: float) -> None:
        """The step's global units, tokens and logged means, summed over micro-batches and ranks."""
        aggregation = self.algo.aggregation
        env = self.ctx.env
        local = torch.tensor([
            sum(units(b["mask"], aggregation) for b in micro_batches),
            sum(float(b["mask"].sum()) for b in micro_batches),
            sum(float(b["reward"].sum()) for b in micro_batches),
            sum(float(b["correct"].sum()) for b in micro_batches),
            sum(float(b["reward"].numel()) for b in micro_batches),
            sum(float(g["tokens"]) for g in groups),
            sum(float((~b["stopped"]).sum()) for b in micro_batches),
            float(sum(g["informative"] for g in groups)), float(len(groups)),
            float(sum(g["failures"] for g in groups)), rollout_s, update_s,
        ], dtype=torch.float64, device=self.ctx.device)
        t = all_reduce_sum(local, env).tolist()
        ws = env.world_size
        W, T, reward, correct, n, generated, truncated, informative, n_groups, failures = t[:10]
        self.step_units, self.step_tokens = W, max(T, 1.0)
        rollout_s, update_s = t[10] / ws, t[11] / ws
        self.step_metrics = {"reward": reward / n, "accuracy": correct / n, "response_length": generated / n,
                             "truncated_frac": truncated / n, "informative_frac": informative / n_groups,
                             "reward_failures": failures, "rollout_s": rollout_s, "update_s": update_s,
                             "rollout_tokens_per_s": generated / max(rollout_s, 1e-9)}

    # ---- batches and loss ----------------------------------------------------------------------
    def next_batch(self) -> Batch:
        cfg: RLConfig = self.ctx.cfg  # type: ignore[assignment]
        if self.micro == 0:
            epoch = self.steps_begun % cfg.epochs
            if epoch == 0 or self.current is None:
                self.current = self._rollout_round(self.steps_begun // cfg.epochs)
            elif epoch > 0:
                self.step_metrics = {**self.step_metrics, "rollout_s": 0.0}
        batch = {**self.current[self.micro], "epoch": self.steps_begun % cfg.epochs, "step_units": self.step_units,
                 "step_tokens": self.step_tokens, "step_metrics": self.step_metrics}
        self.micro += 1
        if self.micro == cfg.grad_accum:
            self.micro = 0
            self.steps_begun += 1
        return batch

    def batch_weight(self, batch: Batch) -> int:
        return units(batch["mask"], self.algo.aggregation)

    def batch_tokens(self, batch: Batch) -> int:
        """Prompt + response rows padded to the micro-batch's longest, not the context: what the update computes."""
        return int(batch["ids"].numel())

    def loss(self, model: nn.Module, batch: Batch) -> StageLoss:
        cfg: RLConfig = self.ctx.cfg  # type: ignore[assignment]
        algo, mask, ids = self.algo, batch["mask"], batch["ids"]
        values = None
        # the head runs on the response tokens only: logp is 0 elsewhere, and so is old (ratio 1, finite)
        logp, logits, second = response_logprobs(model, ids, cfg.temperature, mask)
        if algo.value_head:
            values = on_response(second.float(), mask)
        old, adv = batch["old_logp"] * (mask > 0), batch["advantages"]
        if algo.sequence_ratio:
            per_token, clipped = gspo_surrogate(logp, old, adv, mask, algo.clip_low, algo.clip_high)
        else:
            per_token, clipped = clipped_surrogate(logp, old, adv, algo.clip_low, algo.clip_high)
        m = mask.float()
        token_metrics: dict[str, torch.Tensor] = {"clip_frac": (clipped * m).sum(),
                                                  "ratio": (torch.exp(logp - old) * m).sum().detach()}
        with torch.no_grad():
            token_metrics["entropy"] = token_entropy(logits.detach() / cfg.temperature).sum()  # response tokens
        if "ref_logp" in batch:
            kl = kl_estimate(logp, batch["ref_logp"], cfg.kl_estimator)
            token_metrics["kl"] = (kl.detach() * m).sum()
            if algo.beta and not algo.value_head:
                per_token = per_token + algo.beta * kl
        if values is not None:
            value_loss = clipped_value_loss(values, batch["old_values"], batch["returns"], cfg.value_clip)
            token_metrics["value_loss"] = (value_loss.detach() * m).sum()
            per_token = per_token + cfg.vf_coef * value_loss
        total, _ = aggregate(per_token, mask, algo.aggregation, constant=float(cfg.max_new_tokens))
        # logged as sum / step units: token sums are scaled to token means, step constants to themselves
        W, T = batch["step_units"], batch["step_tokens"]
        share = W / (cfg.grad_accum * self.ctx.env.world_size)
        metrics = {k: v.detach().float() * (W / T) for k, v in token_metrics.items()}
        metrics.update({k: torch.tensor(float(v) * share, device=ids.device) for k, v in batch["step_metrics"].items()})
        metrics["epoch"] = torch.tensor(float(batch["epoch"]) * share, device=ids.device)
        return StageLoss(total, metrics)

    def state_dict(self) -> dict[str, Any]:
        cfg: RLConfig = self.ctx.cfg  # type: ignore[assignment]
        state: dict[str, Any] = {"steps_begun": self.steps_begun}
        if self.steps_begun % cfg.epochs and self.current is not None:  # mid-round: the round's rollouts
            state["current"] = [{k: v.cpu() for k, v in b.items()} for b in self.current]
            state["step_units"], state["step_tokens"] = self.step_units, self.step_tokens
            state["step_metrics"] = dict(self.step_metrics)
        if self.algo.value_head:
            state["value_head"] = {k: v.cpu() for k, v in self._value_model().value_head.state_dict().items()}
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.steps_begun = int(state["steps_begun"])
        self.micro = 0
        if "current" in state:
            self.current = [{k: v.to(self.ctx.device) for k, v in b.items()} for b in state["current"]]
            self.step_units, self.step_tokens = state["step_units"], state["step_tokens"]
            self.step_metrics = dict(state["step_metrics"])

    # ---- evaluation ----------------------------------------------------------------------------
    def evaluate(self, model: nn.Module) -> dict[str, float]:
        if not self.ctx.env.is_main or not self.eval_problems:
            return {}
        from tinylm.evaluate.exact_match import exact_match

        cfg: RLConfig = self.ctx.cfg  # type: ignore[assignment]
        with torch.no_grad(), autocast(self.ctx.device, self.ctx.dtype):
            score = exact_match(self.policy, self.chat, self.task, self.eval_problems, cfg.max_new_tokens)
        self.last_samples = score.samples
        self.ctx.say(self._status_line(score.accuracy))
        return {"exact_match": score.accuracy}

    def _status_line(self, exact_match: float) -> str:
        """One line per evaluation: the held-out score and what the last rollouts looked like."""
        line = f"step {self.steps_begun}: held-out exact-match {exact_match:.1%}"
        m = getattr(self, "step_metrics", None)
        if m:
            line += (f" | samples: reward {m['reward']:.3f}, accuracy {m['accuracy']:.1%}, length "
                     f"{m['response_length']:.1f}, informative groups {m['informative_frac']:.0%} | rollout "
                     f"{m['rollout_s']:.1f} s ({m['rollout_tokens_per_s']:.0f} tokens/s), update {m['update_s']:.1f} s")
        return line

    # ---- checkpoints ---------------------------------------------------------------------------
    def checkpoint_meta(self) -> dict[str, Any]:
        cfg: RLConfig = self.ctx.cfg  # type: ignore[assignment]
        return {**super().checkpoint_meta(), "algo": cfg.algo, "reward": cfg.reward}

    def finish(self, model: nn.Module, checkpoint: Path | None) -> str | None:
        import contextlib

        super().finish(model, checkpoint)  # a LoRA run's merged copy
        from tinylm.stages.rl.plot import plot_rl_runs

        with contextlib.suppress(TinyLMError, OSError):  # a run that logged nothing has nothing to draw
            plot_rl_runs([self.ctx.run_dir])
        samples = getattr(self, "last_samples", None)
        if not samples:
            return None
        return "\n".join(f"{'ok ' if ok else 'bad'} {prompt!r} -> {reply!r}" for prompt, reply, ok in samples)
