"""On-policy distillation against GRPO from the same SFT student: the wall time each takes to an exact-match.

    python benchmarks/distill_vs_grpo.py --road runs/pipeline --seeds 1,2,3 --out runs/kd-vs-grpo

From the road's SFT model (`tinylm pipeline` folder), per seed: `tinylm distill` on-policy from the road's
GRPO model (the pipeline's distill slot settings) and `tinylm rl` with the road's GRPO settings, both
evaluating every --eval-every steps on the task's held-out problems. The target is the teacher's own
exact-match on the same problems minus --within (5 points). Prints one JSON object: the teacher's score,
each run's exact-match curve against seconds of training, the first time each reached the target (or
null) and the best score each reached. Seconds are `train_s` (optimizer steps and, on-policy, sampling and
the teacher's forward; not the evaluations).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch

from tinylm.evaluate.exact_match import exact_match
from tinylm.inference.loading import chat_format_of, load_with_tokenizer
from tinylm.pipeline.config import DEFAULT_TASK, DEFAULTS
from tinylm.tasks.registry import get_task


def flags(settings: dict[str, Any]) -> list[str]:
    out: list[str] = []
    for name, value in settings.items():
        out += [f"--{name.replace('_', '-')}", str(value)]
    return out


def curve(run: Path) -> list[tuple[float, float]]:
    """(seconds of training, exact-match) at every evaluation, the step-0 one included."""
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    seconds = {r["step"]: r["train_s"] for r in rows if "train_s" in r}
    seconds[0] = 0.0
    return [(seconds[r["step"]], r["exact_match"]) for r in rows if "exact_match" in r]


def teacher_score(teacher: Path, task_spec: str, examples: int, seed: int, max_new_tokens: int) -> float:
    model, tokenizer, meta = load_with_tokenizer(str(teacher))
    task = get_task(task_spec)
    with torch.no_grad():
        return exact_match(model, chat_format_of(tokenizer, meta), task, task.examples("test", examples, seed),
                           max_new_tokens).accuracy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--road", default="runs/pipeline")
    parser.add_argument("--task", default=DEFAULT_TASK)
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--within", type=float, default=0.05)
    parser.add_argument("--eval-every", type=int, default=50)
    parser.add_argument("--grpo-steps", type=int, default=DEFAULTS["grpo"]["max_steps"])
    parser.add_argument("--distill-steps", type=int, default=DEFAULTS["distill"]["max_steps"])
    parser.add_argument("--out", default="runs/kd-vs-grpo")
    args = parser.parse_args()
    road, out = Path(args.road), Path(args.out)
    distill = {**DEFAULTS["distill"], "eval_every": args.eval_every, "max_steps": args.distill_steps}
    grpo = {**DEFAULTS["grpo"], "eval_every": args.eval_every, "max_steps": args.grpo_steps}
    for settings in (distill, grpo):
        settings.pop("checkpoint_every", None)
    report: dict[str, Any] = {"road": str(road), "task": args.task, "within": args.within, "seeds": {}}
    for index, seed in enumerate(int(s) for s in args.seeds.split(",")):
        target = teacher_score(road / "grpo", args.task, distill["eval_examples"], seed, distill["max_new_tokens"])
        commands = {
            "distill": ["distill", "--teacher", str(road / "grpo"), "--base", str(road / "sft"), "--data", args.task,
                        *flags(distill), "--seed", str(seed), "--out", str(out / f"distill-{seed}")],
            "grpo": ["rl", "--base", str(road / "sft"), "--task", args.task, *flags(grpo), "--seed", str(seed),
                     "--out", str(out / f"grpo-{seed}")],
        }
        runs: dict[str, Any] = {"teacher_exact_match": target, "target": target - args.within}
        for name in (("distill", "grpo") if index % 2 == 0 else ("grpo", "distill")):
            print("$ tinylm " + " ".join(commands[name]), file=sys.stderr, flush=True)
            subprocess.run([sys.executable, "-m", "tinylm", *commands[name], "--no-progress"], check=True,
                           stdout=subprocess.DEVNULL)
            points = curve(out / f"{name}-{seed}")
            reached = next((t for t, em in points if em >= target - args.within), None)
            runs[name] = {"curve": points, "seconds_to_target": reached, "best": max(em for _, em in points)}
        report["seeds"][seed] = runs
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
