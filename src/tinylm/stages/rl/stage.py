"""RL from verifiable rewards as a stage of the one engine: sample, score, compute advantages, update.

One optimizer step of `tinylm rl`:

1. rollouts (`next_batch`, first micro-batch of a step): the step's prompts, G responses each, are
   sampled with the current weights (`rollout.py`), scored by the reward (`rewards.py`), and turned into
   per-token advantages by the algorithm (`algorithm.py`: GRPO family, RLOO, REINFORCE++, PPO); the
   round is collected by `collect.py`, DAPO's dynamic sampling included;
2. the engine runs `loss` on each micro-batch: the clipped surrogate (+ KL or value loss), aggregated
   as a (sum, units) pair (`update.py`, `policy_losses.aggregate`), and divides by the step's units.

Exactly one big batch. The step's prompts are numbered by a global slot; a slot's prompt and its
sampling seed depend only on (seed, rollout round, slot), never on the micro-batch or the process
that draws it. Everything that needs the whole batch (group statistics live inside one slot; batch
whitening, DAPO's informative-group count, the logged means) is summed over micro-batches and ranks
before any loss is computed (`step_advantages.py`, `step_totals.py`). So `--grad-accum k` and
`torchrun` with n processes compute what one process with the whole batch computes.

Epochs. With `--epochs E` the same rollouts serve E consecutive optimizer steps (the ratio moves
away from 1 after the first and clipping starts to matter). Exact resume: a checkpoint taken in the
middle of a round stores that round's rollouts; at a round boundary nothing needs storing, because
the next rollouts are a function of the saved weights and the round number.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import torch
from torch import nn

from tinylm.checkpoint import load_train_state, tied_aliases
from tinylm.errors import TinyLMError
from tinylm.stages.from_base import FromBaseStage, base_run_name
from tinylm.stages.rl.collect import RolloutCollector
from tinylm.stages.rl.config import RLConfig
from tinylm.stages.rl.plot import plot_rl_runs
from tinylm.stages.rl.policy_losses import units
from tinylm.stages.rl.ppo import PolicyWithValue
from tinylm.stages.rl.reference import load_reference, load_teacher
from tinylm.stages.rl.rewards import load_reward
from tinylm.stages.rl.rollout_server import RolloutServer
from tinylm.stages.rl.status import status_line
from tinylm.stages.rl.step_totals import StepTotals
from tinylm.stages.rl.update import rollout_loss
from tinylm.tasks.registry import get_task
from tinylm.tasks.with_tools import WithTools
from tinylm.tools import check_can_call, get_tools
from tinylm.train.stage import Batch, StageLoss

__all__ = ["RLConfig", "RLStage"]  # RLConfig too: pipeline/config.py imports it from here


class RLStage(FromBaseStage[RLConfig]):
    name = "rl"
    learns_from = "task"
    evaluate_at_start = True  # the starting model's exact-match is the "before"

    # ---- setup ---------------------------------------------------------------------------------
    def setup_data(self, cfg: RLConfig) -> None:
        """The task's training prompts that leave room for an answer, its held-out problems, the reward, pi_ref."""
        ctx = self.ctx
        self.algo = cfg.algorithm()
        self.task = get_task(cfg.task_spec())
        for note in self.task.notes:  # the row reader's, on a prompt file's bytes
            ctx.say(note)
        self.tools = get_tools(cfg.tools) if cfg.tools else get_tools(list(self.task.tools))
        if cfg.tools and {tool.name for tool in self.tools} != set(self.task.tools):
            self.task = WithTools(self.task, self.tools)  # its prompts declare the tools the rollouts run
        check_can_call(self.tools, self.chat, self.base)
        if self.tools and cfg.rollout_url is not None:  # a task's own tools too, not only --tools
            raise TinyLMError(f"{cfg.task} gives the rollouts the tool(s) {', '.join(t.name for t in self.tools)}, "
                              "whose calls run in-process between turns: it cannot sample on --rollout-url")
        window = self.mcfg.context_length - cfg.max_new_tokens
        self.pool = [e for e in self.task.examples("train", cfg.train_examples, cfg.seed)
                     if len(self.chat.prompt_ids(e.prompt)) <= window]
        if not self.pool:
            raise TinyLMError(f"no prompt of {cfg.task} fits the context of {self.mcfg.context_length} tokens with "
                              f"--max-new-tokens {cfg.max_new_tokens}")
        self.eval_problems = self.task.examples("test", cfg.eval_examples, cfg.seed)
        reward = load_reward(cfg.reward, self.task, ctx.device, timeout=cfg.reward_timeout, errors=cfg.reward_errors)
        reference = load_reference(cfg.reference, self.algo.beta > 0, self.base, self.mcfg.vocab_size, ctx.device)
        teacher = load_teacher(cfg.teacher, self.tokenizer, self.mcfg.vocab_size, ctx.device) if cfg.teacher else None
        server = None
        if cfg.rollout_url is not None:
            server = RolloutServer(cfg.rollout_url, cfg.rollout_timeout, cfg.rollout_sync)
            server.check_temperature(cfg.temperature)
        self.rollouts = RolloutCollector(cfg, self.algo, self.chat, self.tokenizer, self.task, self.pool, reward,
                                         reference, server, self.tools, teacher)
        self.steps_begun = 0  # optimizer steps whose batches were handed out
        self.micro = 0
        self.current: list[dict[str, Any]] = []  # this round's micro-batches (none before the first round)
        self.totals = StepTotals()  # this round's step units, tokens and logged means
        self.reward_failures = 0  # samples scored 0 because their reward failed, all rounds and ranks

    def run_name(self, cfg: RLConfig) -> str:
        """runs/<base run>-rl-<algo> by default."""
        return f"{base_run_name(cfg.base)}-rl-{cfg.algo}"

    def describe(self) -> list[str]:
        cfg, a = self.ctx.cfg, self.algo
        prompts = cfg.batch_size * cfg.grad_accum * self.ctx.env.world_size
        teacher = (f", minus {cfg.teacher_coef:g} x the reverse KL to the teacher {cfg.teacher}, summed over each "
                   "response") if cfg.teacher else ""
        return [f"base: {self.base}",
                f"task: {cfg.task} ({len(self.pool):,} train prompts), reward: {cfg.reward}{teacher}",
                f"algo: {a.name}: {a.summary}; aggregation {a.aggregation}, clip [{1 - a.clip_low:g}, "
                f"{1 + a.clip_high:g}], beta {a.beta:g}",
                f"rollouts: {prompts} prompts x G {cfg.group_size} per step, up to {cfg.max_new_tokens} new tokens, "
                f"temperature {cfg.temperature:g}, {cfg.epochs} epoch(s) per batch", *self._tool_lines(),
                *self._server_lines()]

    def _tool_lines(self) -> list[str]:
        if not self.tools:
            return []
        cfg = self.ctx.cfg
        return [f"tools: {', '.join(t.name for t in self.tools)}: up to {cfg.max_turns} turns per rollout, each up "
                f"to {cfg.max_new_tokens} tokens; tool results are context, never actions"
                + (f"; {cfg.tool_penalty:g} off the reward per failed call" if cfg.tool_penalty else "")]

    def _server_lines(self) -> list[str]:
        server = self.rollouts.server
        if server is None:
            return []
        return [f"{server.describe()}; each token weighed by min(pi_old / pi_sampler, {self.ctx.cfg.tis_cap:g}) (TIS)"]

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

    def _value_model(self) -> PolicyWithValue | None:
        """PPO's policy with its value head (what the engine trains), or None."""
        return self.model if isinstance(self.model, PolicyWithValue) else None

    def checkpoint_weights(self, model: nn.Module, gathered: dict[str, torch.Tensor] | None
                           ) -> dict[str, torch.Tensor] | None:
        if not self.ctx.cfg.lora_rank and isinstance(model, PolicyWithValue):
            aliases = tied_aliases(self.policy)  # the checkpoint is the policy; the value head rides in train_state
            return {k: v for k, v in self.policy.state_dict().items() if k not in aliases}
        return super().checkpoint_weights(model, gathered)

    # ---- batches and loss ----------------------------------------------------------------------
    def next_batch(self) -> Batch:
        cfg = self.ctx.cfg
        if self.micro == 0:
            epoch = self.steps_begun % cfg.epochs
            if epoch == 0 or not self.current:
                self.current, self.totals = self.rollouts.collect(self.ctx, self.steps_begun // cfg.epochs,
                                                                  self.policy, self._value_model())
                self.reward_failures += int(self.totals.metrics["reward_failures"])
            else:  # another epoch over the same rollouts: this step sampled nothing
                self.totals.metrics = {**self.totals.metrics, "rollout_s": 0.0}
        batch = {**self.current[self.micro], "epoch": self.steps_begun % cfg.epochs, "step_units": self.totals.units,
                 "step_tokens": self.totals.tokens, "step_metrics": self.totals.metrics}
        self.micro += 1
        if self.micro == cfg.grad_accum:
            self.micro = 0
            self.steps_begun += 1
        return batch

    def batch_weight(self, batch: Batch) -> int:
        if "units" in batch:  # counted before inert rows left (inert_rows.py)
            return int(batch["units"])
        return units(batch["mask"], self.algo.aggregation)  # a round saved mid-step by an earlier version

    def batch_tokens(self, batch: Batch) -> int:
        """Prompt + response rows padded to the micro-batch's longest, not the context: what the update computes."""
        return int(batch["ids"].numel())

    def loss(self, model: nn.Module, batch: Batch) -> StageLoss:
        return rollout_loss(model, batch, self.algo, self.ctx.cfg, self.ctx.env.world_size)

    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {"steps_begun": self.steps_begun, "reward_failures": self.reward_failures}
        if self.steps_begun % self.ctx.cfg.epochs and self.current:  # mid-round: the round's rollouts
            state["current"] = [{k: v.cpu() for k, v in b.items()} for b in self.current]
            state["step_units"], state["step_tokens"] = self.totals.units, self.totals.tokens
            state["step_metrics"] = dict(self.totals.metrics)
        value_model = self._value_model()
        if value_model is not None:
            state["value_head"] = {k: v.cpu() for k, v in value_model.value_head.state_dict().items()}
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.steps_begun = int(state["steps_begun"])
        self.reward_failures = int(state.get("reward_failures", 0))  # absent from runs saved before it was counted
        self.micro = 0
        if "current" in state:
            self.current = [{k: v.to(self.ctx.device) for k, v in b.items()} for b in state["current"]]
            self.totals = StepTotals(state["step_units"], state["step_tokens"], dict(state["step_metrics"]))

    # ---- evaluation ----------------------------------------------------------------------------
    def evaluate(self, model: nn.Module) -> dict[str, float]:
        """Greedy exact-match on the task's held-out problems (rank 0), and a console line with the last rollouts."""
        scores = self.held_out_exact_match(self.policy)
        if scores:
            self.ctx.say(status_line(self.steps_begun, scores["exact_match"], self.totals.metrics))
        return scores

    # ---- checkpoints and the end ---------------------------------------------------------------
    def checkpoint_meta(self) -> dict[str, Any]:
        cfg = self.ctx.cfg
        return {**super().checkpoint_meta(), "algo": cfg.algo, "reward": cfg.reward}

    def finish(self, model: nn.Module, checkpoint: Path | None) -> str | None:
        with contextlib.suppress(TinyLMError, OSError):  # a run that logged nothing has nothing to draw
            plot_rl_runs([self.ctx.run_dir])
        if self.reward_failures:
            first = self.rollouts.first_failure
            self.ctx.say(f"reward failures: {self.reward_failures:,} sample(s) scored 0 (--reward-errors zero)"
                         + (f"; first: {first}" if first else ""))
        return super().finish(model, checkpoint)  # a LoRA run's merged copy, the held-out samples
