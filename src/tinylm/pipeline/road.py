"""Run the road: prepare, each training stage in turn, then one evaluation of every stage's model.

Every step asks `state.py` first whether it is done (skip), half done (resume) or new (run). The
evaluation measures each stage's final checkpoint the same way (`tinylm eval`'s tasks: bits per byte
on the pretraining corpus, the task's held-out exact-match, preference accuracy on held-out pairs),
appends the scores to that stage's run and rebuilds its report card, and the table of the four rows
is the pipeline's result: how much each stage gained.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tinylm.checkpoint import list_checkpoints
from tinylm.errors import TinyLMError
from tinylm.evaluate.report_card import write_report_card
from tinylm.evaluate.scores import evaluate_checkpoint, record
from tinylm.evaluate.tasks import EvalOptions, Generative, parse_tasks
from tinylm.pipeline.config import STAGES, PipelineConfig
from tinylm.pipeline.gains import stage_gains
from tinylm.pipeline.stages import UNSTABLE, prepare_data, settings_of, stage_config, stage_object
from tinylm.pipeline.state import PipelineState
from tinylm.stages import report_curves
from tinylm.train.loop import run_training

STOPPED_EARLY = {"nan": "stopped on a non-finite loss", "interrupted": "was interrupted"}


@dataclass
class PipelineResult:
    out: str
    rows: list[dict[str, Any]]  # one per stage: stage, checkpoint, steps, wall_s, scores
    wall_s: float
    ran: list[str] = field(default_factory=list)  # steps run (or resumed) by this invocation
    skipped: list[str] = field(default_factory=list)
    stopped: str | None = None  # a stage that did not finish (interrupted, nan)
    held_out: int | None = None  # the held-out problems exact-match was measured on (the gains' n)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class _Road:
    def __init__(self, config: PipelineConfig, say: Callable[[str], None], progress: bool) -> None:
        self.config, self.say, self.progress = config, say, progress
        self.out = Path(config.out)
        self.state = PipelineState(self.out)
        self.ran: list[str] = []
        self.skipped: list[str] = []

    def prepare(self) -> Path:
        first = STAGES[0]  # the stage whose model the data is prepared for
        model = {k: v for k, v in self.config.section(first).items() if k not in UNSTABLE}
        settings = {"prepare": self.config.section("prepare"), first: model}
        done = self.state.finished("prepare", settings, derived=True)
        if done is not None:
            self.skipped.append("prepare")
            return Path(done["data"])
        start = time.perf_counter()
        self.state.begin("prepare", settings, self.out)
        self.say("== prepare")
        data = prepare_data(self.config, self.progress)
        self.ran.append("prepare")
        return Path(self.state.finish("prepare", data=str(data), wall_s=time.perf_counter() - start)["data"])

    def train(self, name: str, data: Path, base: Path | None) -> dict[str, Any] | None:
        """The stage's record once finished; None when it stopped early (the pipeline stops there)."""
        folder = self.out / name
        config = stage_config(name, self.config, folder, data, base)
        settings = settings_of(config)
        done = self.state.finished(name, settings)
        if done is not None:
            self.skipped.append(name)
            self.say(f"== {name}: done ({done['checkpoint']}), skipped")
            return done
        began = name in self.state.steps
        if list_checkpoints(folder) and not began:
            raise TinyLMError(f"{folder} already holds a run this pipeline did not start: delete it or use another out")
        resuming = began and bool(list_checkpoints(folder))
        self.state.begin(name, settings, folder)
        self.say(f"== {name}{': resuming' if resuming else ''} -> {folder}")
        start = time.perf_counter()
        try:
            summary = run_training(config.replace(resume="latest") if resuming else config,
                                   stage=stage_object(name))
        finally:
            self.state.note(name, wall_s=self.state.steps[name]["wall_s"] + time.perf_counter() - start)
        self.ran.append(name)
        if summary.stopped in STOPPED_EARLY or summary.checkpoint is None:
            self.say(f"{name} {STOPPED_EARLY.get(summary.stopped, 'saved no checkpoint')}: run the pipeline "
                     "again to resume it")
            return None
        return self.state.finish(name, checkpoint=summary.checkpoint, steps=summary.steps)

    def eval_options(self) -> tuple[list[str], EvalOptions]:
        section = dict(self.config.section("eval"))
        extra = list(section.pop("tasks", []))
        specs = ["bpb", self.config.task, f"prefs:{self.config.task}", *extra]
        return specs, EvalOptions(**{"seed": self.config.seed, **section})

    def held_out(self) -> int | None:
        """How many held-out problems the task's exact-match is measured on (at most --examples)."""
        _, options = self.eval_options()
        task = parse_tasks(self.config.task)[0]
        return len(task.task.examples("test", options.examples, options.seed)) if isinstance(task, Generative) \
            else None

    def evaluate(self, trained: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        """Per stage: its scores and its per-problem exact-match outcomes (what pairs the gains)."""
        specs, options = self.eval_options()
        settings = {"tasks": specs, "options": asdict(options),
                    "checkpoints": {name: [r["checkpoint"], r["finished_at"]] for name, r in trained.items()}}
        done = self.state.finished("eval", settings, derived=True)
        if done is not None and "outcomes" in done:  # a record from before the outcomes were kept runs again
            self.skipped.append("eval")
            return {"scores": done["scores"], "outcomes": done["outcomes"]}
        tasks = parse_tasks(",".join(specs))
        self.state.begin("eval", settings, self.out)
        scores, outcomes = {}, {}
        start = time.perf_counter()
        for name, record_ in trained.items():
            self.say(f"== eval {name}: {record_['checkpoint']}")
            evaluation = evaluate_checkpoint(record_["checkpoint"], tasks, options)
            write_report_card(record(evaluation), report_curves)
            scores[name], outcomes[name] = evaluation.scores(), evaluation.outcomes()
        self.ran.append("eval")
        done = self.state.finish("eval", scores=scores, outcomes=outcomes, wall_s=time.perf_counter() - start)
        return {"scores": done["scores"], "outcomes": done["outcomes"]}


def run_pipeline(config: PipelineConfig, say: Callable[[str], None] = print, progress: bool = True
                 ) -> PipelineResult:
    """prepare -> the configured stages -> eval; skips what is done and resumes what was interrupted."""
    start = time.perf_counter()
    road = _Road(config, say, progress)
    data = road.prepare()
    trained: dict[str, dict[str, Any]] = {}
    base: Path | None = None
    for name in config.stages:
        finished = road.train(name, data, base)
        if finished is None:
            return PipelineResult(str(road.out), [], time.perf_counter() - start, road.ran, road.skipped, name)
        trained[name] = finished
        base = Path(finished["checkpoint"])
    measured = road.evaluate(trained)
    rows = [{"stage": name, "checkpoint": r["checkpoint"], "steps": r["steps"], "wall_s": r["wall_s"],
             "scores": measured["scores"].get(name, {}), "outcomes": measured["outcomes"].get(name, {})}
            for name, r in trained.items()]
    held_out = road.held_out()
    for row, gain in zip(rows, stage_gains(rows, config.task, held_out), strict=True):
        row["gain"] = gain.to_dict() if gain else None
    steps = road.state.steps
    total = sum(float(steps[s].get("wall_s", 0.0)) for s in ("prepare", *config.stages, "eval") if s in steps)
    return PipelineResult(str(road.out), rows, total, road.ran, road.skipped, held_out=held_out)
