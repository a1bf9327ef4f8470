"""Evaluate one checkpoint on a list of tasks and keep the scores with its run.

The scores are appended to RUN/evals.jsonl (one JSON object per evaluation: checkpoint, step, stage,
each task's metrics and a few samples), which the report card reads, so `tinylm eval` adds to a run's
story rather than overwriting it.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tinylm.checkpoint import TOKENIZER, load_model
from tinylm.errors import TinyLMError
from tinylm.evaluate.core import core_score
from tinylm.evaluate.tasks import EvalOptions, EvalTask, Generative, Subject, TaskResult, run_tasks
from tinylm.runtime.rng import seed_everything

EVALS = "evals.jsonl"


@dataclass
class Evaluation:
    checkpoint: str
    step: int
    stage: str
    results: list[TaskResult]
    core: float | None = None
    options: dict[str, Any] = field(default_factory=dict)
    wall_s: float = 0.0
    notes: list[str] = field(default_factory=list)  # what the scores need beside them (not recorded)

    def scores(self) -> dict[str, dict[str, float]]:
        table = {r.task: dict(r.metrics) for r in self.results}
        if self.core is not None:
            table["core"] = {"core": self.core}
        return table

    def outcomes(self) -> dict[str, str]:
        """Per-problem verdicts of the exact-match tasks ('1'/'0' in order): what pairs two models' scores."""
        return {r.task: r.outcomes for r in self.results if r.outcomes}

    def to_dict(self) -> dict[str, Any]:
        return {"checkpoint": self.checkpoint, "step": self.step, "stage": self.stage, "scores": self.scores(),
                "samples": {r.task: r.samples for r in self.results if r.samples}, "outcomes": self.outcomes(),
                "options": self.options,
                "wall_s": self.wall_s, "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def load_subject(checkpoint: str | Path) -> Subject:
    """The checkpoint's model (CPU, eval mode; LoRA adapters folded into their base) and tokenizer; one clear
    line when it cannot be evaluated."""
    model, tokenizer, meta = load_model(checkpoint)
    if tokenizer is None:
        raise TinyLMError(f"checkpoint {meta['path']} has no {TOKENIZER}: evaluation needs the model's tokenizer")
    return Subject(model, tokenizer, meta)


def chat_format_notes(meta: dict[str, Any], tasks: list[EvalTask]) -> list[str]:
    """One note when a base model (no chat template) meets tasks that ask in the chat format: its near-0 score
    there is what a base model gets, not a broken evaluation."""
    chat_tasks = [t.spec for t in tasks if isinstance(t, Generative)]
    if meta.get("chat_template") or not chat_tasks:
        return []
    return [f"note: {meta.get('path')} is a base model (no chat template) and {', '.join(chat_tasks)} "
            f"{'asks' if len(chat_tasks) == 1 else 'ask'} in the chat format: scores near 0 are expected; "
            "run `tinylm sft` on it first"]


def evaluate_checkpoint(checkpoint: str | Path, tasks: list[EvalTask], options: EvalOptions | None = None
                        ) -> Evaluation:

    options = options or EvalOptions()
    options.validate()
    start = time.perf_counter()
    subject = load_subject(checkpoint)
    seed_everything(options.seed)
    results = run_tasks(subject, tasks, options)
    choices = {r.task: (r.metrics["acc"], r.chance) for r in results if r.chance is not None}
    return Evaluation(subject.meta["path"], int(subject.meta.get("step", 0)), str(subject.meta.get("stage", "?")),
                      results, core_score(choices) if choices else None, asdict(options),
                      time.perf_counter() - start, chat_format_notes(subject.meta, tasks))


def run_folder(checkpoint: str | Path) -> Path:
    """The run folder a checkpoint belongs to (RUN/checkpoints/step_N -> RUN)."""
    path = Path(checkpoint)
    return path.parent.parent if path.parent.name == "checkpoints" else path


def record(evaluation: Evaluation) -> Path:
    """Append the evaluation to its run's evals.jsonl; returns the run folder."""
    run = run_folder(evaluation.checkpoint)
    with open(run / EVALS, "a", encoding="utf-8") as f:
        f.write(json.dumps(evaluation.to_dict()) + "\n")
    return run


def read_evaluations(run: str | Path) -> list[dict[str, Any]]:
    """Every evaluation recorded for a run, oldest first (unreadable lines are skipped)."""
    file = Path(run) / EVALS
    if not file.is_file():
        return []
    out = []
    for line in file.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict) and isinstance(row.get("scores"), dict):
            out.append(row)
    return out
