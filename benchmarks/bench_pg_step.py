"""How far can an RL step go? The expected reward after one plain step along the GRPO policy gradient.

Loads an SFT checkpoint, samples G responses to each of `--prompts` training problems at the RL
temperature, forms GRPO's group-normalised advantages and the gradient of
(1/N) sum_i A_i (1/|o_i|) sum_t log pi(o_it) (the on-policy surrogate, written here from its formula,
not through the trainer's loss), then moves the weights by eta along that gradient, normalised to
norm 1, and along a random direction of the same norm, for each eta of `--steps`. Each model's
expected reward is estimated by sampling `--eval-prompts` held-out problems (and the gradient's own
problems) with the same seeds before and after, so a small change is not lost in sampling noise.
Prints one JSON object.

Why: GRPO from an SFT model below ~60% can lose most of its exact-match within 25 steps
(docs/posttrain/rl.md, "Where GRPO can start"). This measures the landscape it steps in: if the
reward rises only for steps far smaller than an Adam step moves the weights, the collapse is the
step's size, not the estimator's sign.

    python benchmarks/bench_pg_step.py --checkpoint runs/sft --task 'builtin:arith?digits=2&ops=+-'
"""

from __future__ import annotations  # noqa: I001 (start_env first)

import tinylm.runtime.start_env  # noqa: F401 (the numerics of the tinylm command, before torch loads)
import argparse
import copy
import json
from collections.abc import Sequence

import torch
from torch import nn

from tinylm.checkpoint import load_model
from tinylm.errors import TinyLMError
from tinylm.inference.sampling import SamplingParams
from tinylm.stages.rl.advantages import group_advantages
from tinylm.stages.rl.rollout import Rollouts, policy_logprobs, response_texts, sample_rollouts
from tinylm.tasks.registry import get_task
from tinylm.tasks.task import Example, Task
from tinylm.tokenizer.chat_format import ChatFormat


class Sampler:
    """G responses to each problem and their 0/1 rewards, seeded by position so two models see the same draws."""

    def __init__(self, chat: ChatFormat, tokenizer: object, task: Task, group_size: int, max_new_tokens: int,
                 temperature: float) -> None:
        self.chat, self.tokenizer, self.task = chat, tokenizer, task
        self.group_size, self.max_new_tokens = group_size, max_new_tokens
        self.sampling = SamplingParams(temperature=temperature)

    def __call__(self, model: nn.Module, examples: Sequence[Example], seed: int) -> tuple[Rollouts, torch.Tensor]:
        prompts = [self.chat.prompt_ids(e.prompt) for e in examples]
        seeds = [seed * 1_000_003 + i for i in range(len(examples))]
        rollouts = sample_rollouts(model, prompts, self.group_size, self.max_new_tokens, self.sampling, seeds,
                                   self.chat.stop_ids, self.tokenizer.eot_id)  # type: ignore[attr-defined]
        texts = response_texts(self.tokenizer, rollouts.responses, self.chat.stop_ids)
        repeated = [e for e in examples for _ in range(self.group_size)]
        rewards = torch.tensor([float(self.task.verify(t, e)) for t, e in zip(texts, repeated, strict=True)])
        return rollouts, rewards

    def expected_reward(self, model: nn.Module, examples: Sequence[Example], seed: int, chunk: int = 256) -> float:
        model.eval()
        with torch.no_grad():
            rewards = [self(model, examples[i:i + chunk], seed + i)[1] for i in range(0, len(examples), chunk)]
        return float(torch.cat(rewards).mean())


def policy_gradient(model: nn.Module, sampler: Sampler, examples: Sequence[Example], temperature: float,
                    seed: int, chunk: int = 128) -> dict[str, torch.Tensor]:
    """The gradient of GRPO's on-policy surrogate over `examples` (a direction of ascent for the expected reward)."""
    model.zero_grad(set_to_none=True)
    G = sampler.group_size
    for i in range(0, len(examples), chunk):
        with torch.no_grad():
            rollouts, rewards = sampler(model, examples[i:i + chunk], seed + i)
        advantages = group_advantages(rewards, G)
        model.train()
        logp, _ = policy_logprobs(model, rollouts.ids, temperature, rollouts.response_mask)
        mask = rollouts.response_mask
        per_response = (logp * mask).sum(-1) / mask.sum(-1).clamp(min=1)
        ((advantages * per_response).sum() / (len(examples) * G)).backward()
    return {name: p.grad.detach().clone() for name, p in model.named_parameters() if p.grad is not None}


def stepped(model: nn.Module, direction: dict[str, torch.Tensor], eta: float) -> nn.Module:
    """A copy of `model` moved by eta along `direction` (normalised to norm 1 over every parameter)."""
    norm = torch.sqrt(sum(d.pow(2).sum() for d in direction.values()))
    moved = copy.deepcopy(model)
    with torch.no_grad():
        for name, p in moved.named_parameters():
            if name in direction:
                p.add_(direction[name], alpha=eta / float(norm))
    return moved


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", required=True, help="an SFT run or checkpoint")
    parser.add_argument("--task", required=True, help="a built-in task whose verifier is the reward")
    parser.add_argument("--prompts", type=int, default=512, help="training problems the gradient is taken over")
    parser.add_argument("--eval-prompts", type=int, default=1536, help="held-out problems the reward is read on")
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=6)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--steps", default="0.0003,0.001,0.003,0.01,0.03,0.1", metavar="ETA,...")
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    try:
        etas = [float(v) for v in args.steps.split(",")]
    except ValueError:
        parser.error(f"--steps {args.steps!r}: give step norms as numbers, e.g. 0.001,0.01")
    for name in ("prompts", "eval_prompts", "group_size", "max_new_tokens"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.group_size < 2:
        parser.error("--group-size must be at least 2: a group of one has no spread to normalise")
    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        model, tokenizer, _ = load_model(args.checkpoint)
        task = get_task(args.task)
    except TinyLMError as exc:
        raise SystemExit(f"bench_pg_step: {exc}") from None
    chat = ChatFormat.from_tokenizer(tokenizer)
    model = model.float()
    sampler = Sampler(chat, tokenizer, task, args.group_size, args.max_new_tokens, args.temperature)
    train = task.examples("train", args.prompts, 0)
    held_out = task.examples("test", args.eval_prompts, 0)

    def rewards(m: nn.Module) -> dict[str, float]:
        return {"held_out": round(sampler.expected_reward(m, held_out, 7), 4),
                "gradient_problems": round(sampler.expected_reward(m, train, 3), 4)}

    before = rewards(model)
    gradient = policy_gradient(model, sampler, train, args.temperature, 3)
    gradient_norm = float(torch.sqrt(sum(g.pow(2).sum() for g in gradient.values())))
    if gradient_norm == 0.0:
        raise SystemExit("bench_pg_step: every group's rewards agree on these problems, so the gradient is zero: "
                         "give more --prompts, or a model that solves some of them and not others")
    generator = torch.Generator().manual_seed(0)
    random = {name: torch.randn(g.shape, generator=generator) for name, g in gradient.items()}
    largest = sorted(gradient.items(), key=lambda item: -float(item[1].norm()))[:5]
    rows = [{"eta": eta, "along_gradient": rewards(stepped(model, gradient, eta)),
             "along_random": rewards(stepped(model, random, eta))}
            for eta in etas]
    print(json.dumps({"checkpoint": args.checkpoint, "task": args.task, "temperature": args.temperature,
                      "group_size": args.group_size, "prompts": args.prompts, "eval_prompts": args.eval_prompts,
                      "expected_reward_before": before, "gradient_norm": round(gradient_norm, 4),
                      "largest_gradient_tensors": {name: round(float(g.norm()), 4) for name, g in largest},
                      "steps": rows}, indent=2))


if __name__ == "__main__":
    main()
