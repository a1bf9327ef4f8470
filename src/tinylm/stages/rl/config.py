"""What `tinylm rl` can be told: the algorithm and its overrides, the rollouts, the reward, and RL-sized defaults.

Every field is also a command-line option (cli/commands/rl.py) and a key of a --config file. The
algorithm's own constants (clip range, KL coefficient, aggregation) live in its family's file and
are overridden here only when an option is given (`RLConfig.algorithm`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from tinylm.errors import TinyLMError
from tinylm.options import MAX_NEW_TOKENS, TEACHER, TEMPERATURE, TOOLS, TOP_K, TOP_P, Option
from tinylm.stages.post_config import FromBaseConfig
from tinylm.stages.rl.algorithms import Algorithm, algorithms
from tinylm.stages.rl.kl import KL_ESTIMATORS
from tinylm.stages.rl.policy_losses import AGGREGATIONS
from tinylm.stages.rl.rewards import REWARD_ERRORS
from tinylm.stages.rl.rollout_server import SYNCS
from tinylm.tasks.registry import is_task_spec, known_tasks

TASK, ALGORITHM, ROLLOUTS = "task and reward", "algorithm", "rollouts"
ROLLOUT_TEMPERATURE = dataclasses.replace(TEMPERATURE, low=0, low_open=True)  # greedy rollouts would all agree
NUCLEUS = dataclasses.replace(TOP_P, low=0, low_open=True, high=1)


@dataclass
class RLConfig(FromBaseConfig):
    """FromBaseConfig plus what RL needs; --batch-size counts prompts (each sampled --group-size times)."""

    task: str = Option(f"the prompts and their verifier: {known_tasks()}, or FILE.jsonl of "
                       "{\"prompt\", \"answer\"} rows (parameters: builtin:arith?digits=2&ops=+)", metavar="SPEC",
                       group=TASK)("builtin:arith")
    reward: str = Option("exact, exact+format, python (sandboxed), model:PATH, module:function (the working folder "
                         "is searched), file.py:function, or none (0: with --teacher, distillation alone)",
                         metavar="SPEC", group=TASK)("exact")
    teacher: str | None = TEACHER(None, group=TASK, note="on-policy distillation as RL: each rollout's score loses "
                                  "--teacher-coef x its reverse KL to the teacher, summed over its tokens (log "
                                  "pi - log pi_teacher at each sampled token)")
    teacher_coef: float = Option("the weight of --teacher's KL in the score", low=0, metavar="C", group=TASK)(1.0)
    reward_timeout: float = Option("seconds one sample's reward call may take; a call past it has failed "
                                   "(see --reward-errors)", low=0, low_open=True,
                                   metavar="SECONDS", group=TASK)(60.0)
    reward_errors: str = Option("a reward that raises, returns no finite number or times out: stop the run with "
                                "its message, or score the sample 0 and count it (reward_failures)",
                                choices=REWARD_ERRORS, group=TASK)("stop")
    tool_penalty: float = Option("with tools: subtracted from a rollout's reward for each call that failed "
                                 "(malformed, to an unknown tool, or failing)", low=0, metavar="P", group=TASK)(0.0)
    reference: str | None = Option("frozen KL reference (default: --base)", metavar="RUN", group=TASK)(None)
    algo: str = Option("the RL algorithm", choices=lambda: tuple(algorithms()), group=ALGORITHM)("grpo")
    epochs: int = Option("optimizer steps per batch of rollouts", low=1, group=ALGORITHM)(1)
    aggregation: str | None = Option("loss aggregation (default: the algo's)", choices=AGGREGATIONS,
                                     group=ALGORITHM)(None)
    beta: float | None = Option("KL coefficient (default: the algo's)", low=0, group=ALGORITHM)(None)
    kl_estimator: str = Option("per-token KL estimator", choices=KL_ESTIMATORS, group=ALGORITHM)("k3")
    clip_low: float | None = Option("epsilon: ratio clipped below 1 - eps", low=0, group=ALGORITHM)(None)
    clip_high: float | None = Option("ratio clipped above 1 + eps (DAPO: 0.28)", low=0, group=ALGORITHM)(None)
    oversample: int = Option("dapo: prompts tried per slot before an all-equal group is kept", low=1,
                             group=ALGORITHM)(4)
    overlong_buffer: int | None = Option("dapo: soft length-penalty zone in tokens (default: limit // 4)", low=0,
                                         group=ALGORITHM)(None)
    gamma: float = Option("ppo: discount", low=0, high=1, group=ALGORITHM)(1.0)
    lam: float = Option("ppo: GAE lambda", low=0, high=1, group=ALGORITHM)(0.95)
    vf_coef: float = Option("ppo: value loss weight", low=0, group=ALGORITHM)(0.1)
    value_clip: float = Option("ppo: value clip range", low=0, group=ALGORITHM)(0.2)
    group_size: int = Option("responses sampled per prompt", low=1, metavar="G", group=ROLLOUTS)(8)
    max_new_tokens: int = MAX_NEW_TOKENS(12, group=ROLLOUTS, note="of a response (with tools: of each turn)")
    tools: str | None = TOOLS(None, group=ROLLOUTS, note="each rollout a multi-turn trajectory whose calls run "
                              "(default: the task's own, e.g. builtin:calc's calculator)")
    max_turns: int = Option("with tools: assistant turns per rollout (a call's result comes back for the next)",
                            low=1, metavar="N", group=ROLLOUTS)(4)
    temperature: float = ROLLOUT_TEMPERATURE(1.0, group=ROLLOUTS, note="RL samples its rollouts")
    top_k: int | None = TOP_K(None, group=ROLLOUTS)
    top_p: float | None = NUCLEUS(None, group=ROLLOUTS)
    rollout_url: str | None = Option("sample the rollouts on this OpenAI-compatible server (tinylm serve, vLLM, "
                                     "SGLang) instead of in-process; its token, if any, in $TINYLM_ROLLOUT_TOKEN",
                                     metavar="URL", group=ROLLOUTS, per_invocation=True)(None)
    rollout_sync: str = Option("how the server gets each round's weights: reload (tinylm serve's POST "
                               "/admin/reload of RUN/rollout-weights) or none (a server you sync yourself)",
                               choices=SYNCS, group=ROLLOUTS)("reload")
    rollout_timeout: float = Option("seconds one request to the rollout server may take", low=0, low_open=True,
                                    metavar="SECONDS", group=ROLLOUTS, per_invocation=True)(300.0)
    tis_cap: float = Option("truncated importance sampling: each token's loss is weighed by min(pi_old / "
                            "pi_sampler, C), the server's log-probs against the trainer's (with --rollout-url)",
                            low=0, low_open=True, metavar="C", group=ROLLOUTS)(2.0)
    # RL-sized defaults of the shared options
    batch_size: int = 8
    max_steps: int = 100
    lr: float | None = 3e-4
    weight_decay: float = 0.0
    warmup_steps: int = 0
    schedule: str = "constant"
    eval_every: int = 10
    log_every: int = 1
    checkpoint_every: int = 0
    dtype: str = "fp32"  # the sampler's and the trainer's log-probs agree to 1e-5 in float32

    def validate(self) -> None:
        super().validate()
        algo = algorithms()[self.algo]
        if self.group_size < algo.min_group:
            raise TinyLMError(f"--algo {self.algo} compares responses within a group: --group-size must be >= "
                              f"{algo.min_group} (got {self.group_size})")
        if self.fsdp:
            raise TinyLMError("tinylm rl samples with whole weights on every rank: use DDP (no --fsdp)")
        if self.tools and self.rollout_url is not None:
            raise TinyLMError("--tools runs the calls between turns in-process: it cannot sample on --rollout-url")

    def task_spec(self) -> str:
        """The spec `get_task` reads: a bare FILE.jsonl (not a task spec of its own) is a file of prompts."""
        return f"prompts:{self.task}" if self.task.endswith(".jsonl") and not is_task_spec(self.task) else self.task

    def algorithm(self) -> Algorithm:
        """The chosen algorithm with this run's overrides applied."""
        algo = algorithms()[self.algo]
        changes = {k: getattr(self, k) for k in ("beta", "clip_low", "clip_high", "aggregation")
                   if getattr(self, k) is not None}
        return dataclasses.replace(algo, **changes)
