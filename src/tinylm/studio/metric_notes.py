"""What each number in metrics.jsonl measures: its unit and one line, shown under the studio's chart titles.

A learner meets `grad_norm`, `tis_weight` or `dev_bpb` as a bare chart title; the note says what it counts
and, where it helps, which way is good. Every key a training stage can log has one (tests/test_metric_notes.py
scans the logging code for them), so a new metric comes with its explanation.
"""

from __future__ import annotations

from tinylm.stages import STAGES

MetricNote = tuple[str, str]  # (unit, one-line meaning); "" unit: a plain number

_RUN: dict[str, MetricNote] = {  # every stage, each logged step (the training loop)
    "step": ("steps", "optimizer steps taken so far"),
    "tokens": ("tokens", "tokens trained on so far, every process counted"),
    "elapsed_s": ("s", "wall-clock seconds of the run so far, evaluations and saves included, across resumes"),
    "train_s": ("s", "seconds spent in training steps alone (no evaluations, saves or samples)"),
    "loss": ("nats", "the stage's training loss on this step's batches: next-token cross-entropy per token "
                     "(pretrain, SFT), the preference loss (DPO, reward), the policy loss (RL: near 0 by design)"),
    "lr": ("", "learning rate of this step, after warmup and decay"),
    "tokens_per_s": ("tokens/s", "training speed since the previous logged row, every process counted"),
    "mfu": ("0-1", "model FLOPs utilization: the model's FLOPs per second over the hardware's peak "
                   "(none when the peak is unknown)"),
    "grad_norm": ("", "length (L2 norm) of the gradient before clipping; spikes warn of an unstable run"),
}

_EVALUATION: dict[str, MetricNote] = {  # every --eval-every steps, on rows the run never trains on
    "dev_loss": ("nats", "the training loss on held-out rows: rising while `loss` falls means overfitting"),
    "dev_bpb": ("bits/byte", "held-out loss in bits per byte of text, comparable across tokenizers; lower is better"),
    "exact_match": ("0-1", "share of held-out task problems answered right (greedy reply, the task's verifier)"),
    "dev_accuracy": ("0-1", "share of held-out pairs ranked right: the chosen answer's reward above the rejected's"),
    "dev_margin": ("", "held-out mean reward margin, chosen minus rejected"),
    "dev_logp_accuracy": ("0-1", "share of held-out pairs whose chosen answer the model itself finds likelier"),
    "dev_label_accuracy": ("0-1", "KTO: share of held-out answers on their label's side of the reference point z0"),
}

_PREFERENCE: dict[str, MetricNote] = {  # DPO and its variants, and reward models, each step
    "reward_chosen": ("nats", "implicit reward of the chosen answers, beta * log(pi / pi_ref), mean per pair"),
    "reward_rejected": ("nats", "implicit reward of the rejected answers, beta * log(pi / pi_ref), mean per pair"),
    "reward_margin": ("", "reward of the chosen answer minus the rejected one's, mean per pair; should grow"),
    "reward_accuracy": ("0-1", "share of pairs whose chosen answer gets the higher reward"),
    "logp_chosen": ("nats", "log-probability of the chosen answer (summed over its tokens), mean per pair"),
    "logp_rejected": ("nats", "log-probability of the rejected answer (summed over its tokens), mean per pair"),
    "kto_z0": ("nats", "KTO's reference point z0: the policy's KL to the reference the answers are measured from"),
    "score_chosen": ("", "reward model: score of the chosen answers, mean per pair"),
    "score_rejected": ("", "reward model: score of the rejected answers, mean per pair"),
}

_RL: dict[str, MetricNote] = {  # each RL step: the rollouts, then the update
    "reward": ("", "mean reward of the step's sampled responses"),
    "accuracy": ("0-1", "share of the step's samples the task's verifier accepts"),
    "response_length": ("tokens", "mean length of the sampled responses"),
    "truncated_frac": ("0-1", "share of responses cut at --max-new-tokens before they ended"),
    "informative_frac": ("0-1", "share of groups whose rewards differ: only they carry a learning signal"),
    "reward_failures": ("samples", "responses whose reward function failed and were scored 0"),
    "rollout_s": ("s", "seconds spent sampling the step's responses"),
    "update_s": ("s", "seconds of the previous step's forward, backward and optimizer"),
    "rollout_tokens_per_s": ("tokens/s", "sampling speed: response tokens generated per second of rollout"),
    "tool_calls": ("calls", "tool calls per response, mean"),
    "failed_calls": ("calls", "tool calls per response that failed, mean"),
    "clip_frac": ("0-1", "share of response tokens whose probability ratio was clipped (the trust region)"),
    "ratio": ("", "mean probability ratio pi / pi_old over response tokens: 1 on a step's first epoch"),
    "entropy": ("nats", "mean entropy of the next-token choice over response tokens; a fast fall means "
                        "exploration collapsing"),
    "kl": ("nats", "KL estimate (k3) to the reference model, mean per response token"),
    "teacher_kl": ("nats", "reverse KL to the --teacher, summed over a response's tokens, mean per response: "
                           "what --teacher-coef subtracts from the score"),
    "value_loss": ("", "PPO's value-head loss: clipped squared error to the returns"),
    "epoch": ("", "which pass over the step's rollouts (0 first; --epochs above 1 reuses them)"),
    "tis_weight": ("", "mean truncated importance weight, trainer over rollout server: 1 when the two agree"),
    "tis_capped_frac": ("0-1", "share of response tokens whose importance weight hit --tis-cap"),
    "sampler_gap": ("nats", "mean |log pi_old - log pi_sampler| per response token: trainer vs rollout server"),
    "sampler_gap_max": ("nats", "the largest such gap in the step, over every process"),
    "sync_s": ("s", "seconds publishing the weights to the rollout server and waiting for its reload"),
}

# a stage's own metrics are noted in its own package (its stage class's `metric_notes`)
_STAGES: dict[str, MetricNote] = {name: note for spec in STAGES.values() for name, note in spec.metric_notes.items()}
NOTES: dict[str, MetricNote] = {**_RUN, **_EVALUATION, **_PREFERENCE, **_RL, **_STAGES}


def notes_json() -> dict[str, dict[str, str]]:
    """{name: {"unit", "meaning"}}: what GET /api/metric-notes answers."""
    return {name: {"unit": unit, "meaning": meaning} for name, (unit, meaning) in NOTES.items()}
