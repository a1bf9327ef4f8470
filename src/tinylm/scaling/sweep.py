"""`tinylm scaling`: an IsoFLOP sweep, each budget spent by several depths, each run an ordinary run folder.

For each compute budget C and depth N of the grid, the run trains exactly the steps whose FLOPs are nearest C
(budget.py), with the record recipe and a schedule fitted to its length: the lr warmup at the record's share
(20 of 600 steps), the sequence warmup a quarter of the steps, and the cosine decay ending at the last step, so
every run is a finished run of its size, never a stopped one. A depth whose run would have fewer than 50
steps is left out of that budget (mostly warmup, its loss would measure the schedule).

The sweep folder holds one run folder per point (`c1e+13-d4`...), `sweep.json` (the grid and what must not
change under it), and `points.jsonl`, a row per finished run. Run again, it skips the points it has and
resumes a run that was stopped (its checkpoint); `--jobs N` trains N runs at once, each pinned to its own
share of the cores (never two on one core).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from tinylm.bench.result_files import check_writable, write_result_files
from tinylm.checkpoint import list_checkpoints
from tinylm.depth import MAX_DEPTH
from tinylm.errors import TinyLMError
from tinylm.options import SEED, Option, check_options, option_from
from tinylm.scaling.budget import MIN_STEPS, BudgetRun, budget_run, warmup_steps
from tinylm.stages.pretrain.config import PretrainConfig

POINTS, SWEEP = "points.jsonl", "sweep.json"
DEFAULT_BUDGETS = [1e12, 3.16e12, 1e13]
DEFAULT_DEPTHS = [1, 2, 3, 4, 5, 6]
# every run is scored on the whole dev split, in rows of 16 whatever its batch (the dev split is ~90 rows)
DEV_ROWS, DEV_BATCHES = 16, 1000


@dataclass
class ScalingOptions:
    """What `tinylm scaling` sweeps and where (cli/commands/scaling.py makes each field a flag)."""

    budgets: list[float] = Option("compute budgets in FLOPs, comma-separated (each spent by every depth that "
                                  "gets 50 steps or more)", low=1e6, high=1e30, metavar="C[,C...]")(
        default_factory=lambda: list(DEFAULT_BUDGETS))
    depths: list[int] = Option("depths to try at each budget (depth.py's rule)", low=1, high=MAX_DEPTH,
                               metavar="N[,N...]")(default_factory=lambda: list(DEFAULT_DEPTHS))
    arch: str = option_from(PretrainConfig, "arch")
    data: str | None = option_from(PretrainConfig, "data")
    overrides: dict[str, Any] = option_from(PretrainConfig, "overrides", note="for every run of the sweep (its FLOPs "
                                            "are counted for the models it makes)")
    seed: int = SEED(1)
    jobs: int = Option("runs trained at once, each pinned to its share of the cores (default 1: one run on all)",
                       low=1, high=256)(1)
    out: str = Option("sweep folder (resumed when it holds this sweep already)")("runs/scaling")
    train: dict[str, Any] = field(default_factory=dict)  # any other PretrainConfig fields of every run

    def __post_init__(self) -> None:
        check_options(self)
        if not self.budgets:
            raise TinyLMError("--budgets needs at least one budget")
        if len(set(self.depths)) < 3:
            depths = ",".join(map(str, self.depths))
            raise TinyLMError(f"an IsoFLOP curve needs at least three sizes: --depths {depths} has fewer")
        cores = len(os.sched_getaffinity(0))
        if self.jobs > cores:
            raise TinyLMError(f"--jobs {self.jobs} on {cores} cores would put two runs on one core; at most {cores}")


def plan_sweep(options: ScalingOptions) -> list[BudgetRun]:
    """Every (budget, depth) of the grid that gets MIN_STEPS steps, by budget then depth; refuses a budget that
    buys no curve (fewer than three depths)."""
    runs = []
    for budget in sorted(set(options.budgets)):
        fitting = [r for r in (budget_run(d, budget, options.arch, options.overrides)
                               for d in sorted(set(options.depths))) if r.steps >= MIN_STEPS]
        if len(fitting) < 3:
            smallest = budget_run(min(options.depths), budget, options.arch, options.overrides)
            raise TinyLMError(f"budget {budget:.3g} FLOPs is too small for an IsoFLOP curve: only {len(fitting)} of "
                              f"the depths get {MIN_STEPS} steps (depth {smallest.depth} gets {smallest.steps}); "
                              "raise it or add smaller depths")
        runs += fitting
    return runs


def run_config(options: ScalingOptions, run: BudgetRun, seed: int, folder: Path, threads: int | None) -> PretrainConfig:
    """The PretrainConfig of one point: the depth rule, the budget's steps, the record's warmups scaled to them."""
    resume = "latest" if list_checkpoints(folder) else None
    fields: dict[str, Any] = dict(depth=run.depth, arch=options.arch, data=options.data, seed=seed,
                                  max_steps=run.steps, warmup_steps=warmup_steps(run.steps), out=str(folder),
                                  resume=resume, sample_tokens=0, eval_every=0, checkpoint_every=0,
                                  eval_batch_size=DEV_ROWS, eval_batches=DEV_BATCHES, progress=False, threads=threads,
                                  overrides=dict(options.overrides))
    return PretrainConfig(**{**fields, **options.train})


def train_point(config: dict[str, Any]) -> dict[str, Any]:
    """Train one point (in this process or a worker's); its summary as a dict."""
    from tinylm.stages.pretrain.stage import pretrain  # here: a spawned worker imports torch once, on first use

    return pretrain(PretrainConfig(**config)).to_dict()


def _pin_worker(shares: Any) -> None:
    """A worker's start: it takes one share of the cores for its whole life, so two runs never share a core."""
    os.sched_setaffinity(0, shares.get())


def point_row(run: BudgetRun, seed: int, summary: dict[str, Any]) -> dict[str, Any]:
    return {"run": run.name, "depth": run.depth, "budget": run.budget, "params": run.params, "tokens": run.tokens,
            "flops": run.flops, "steps": run.steps, "seed": seed, "loss": summary["dev_loss"],
            "dev_bpb": summary["dev_bpb"], "wall_s": summary["wall_s"]}


def read_rows(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _check_same_sweep(out: Path, options: ScalingOptions) -> None:
    """A sweep folder is one arch, one data and one seed: a second sweep there would mix two laws."""
    fixed = {"arch": options.arch, "data": options.data, "seed": options.seed, "overrides": options.overrides,
             "train": options.train}
    record = out / SWEEP
    if record.is_file():
        before = {"overrides": {}, **json.loads(record.read_text(encoding="utf-8"))["fixed"]}
        changed = [k for k in fixed if before.get(k) != fixed[k]]
        if changed:
            raise TinyLMError(f"{out} holds a sweep with another {', '.join(changed)} "
                              f"({', '.join(f'{k}={before.get(k)!r}' for k in changed)}): use another --out")
    check_writable(out)  # before any run: a folder it cannot write to is one line, not an hour later
    grid = {"fixed": fixed, "budgets": sorted(set(options.budgets)), "depths": sorted(set(options.depths))}
    write_result_files(out, {SWEEP: json.dumps(grid, indent=2) + "\n"}, {}, "the sweep's record")


def _core_shares(jobs: int) -> list[list[int]]:
    cores = sorted(os.sched_getaffinity(0))
    size = len(cores) // jobs
    return [cores[i * size:(i + 1) * size] for i in range(jobs)]


def run_points(options: ScalingOptions, runs: list[BudgetRun], seed: int, say: Callable[[str], None],
               folder_name: Callable[[BudgetRun], str] = lambda run: run.name, file: str = POINTS
               ) -> list[dict[str, Any]]:
    """Train the runs not yet in OUT/FILE (resuming any that stopped); every point's row, in plan order."""
    out = Path(options.out)
    points = out / file
    done = {(row["run"], row["seed"]): row for row in read_rows(points)}
    todo = [run for run in runs if (folder_name(run), seed) not in done]
    if len(todo) < len(runs):
        say(f"scaling: {len(runs) - len(todo)} of {len(runs)} points already trained in {points}")

    def record(run: BudgetRun, summary: dict[str, Any]) -> None:
        if summary["stopped"] == "interrupted":  # Ctrl-C: saved; the same command resumes it (exit 130)
            say(f"scaling: {folder_name(run)} stopped and saved: run the same command again to resume the sweep")
            raise KeyboardInterrupt
        if summary["stopped"] == "nan" or summary["dev_loss"] is None:
            raise TinyLMError(f"{folder_name(run)} stopped ({summary['stopped']}) without a final dev loss: its "
                              "point is not recorded; lower the learning rates (--depth's rule) or drop that depth")
        row = {**point_row(run, seed, summary), "run": folder_name(run)}
        done[(row["run"], seed)] = row
        with points.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(row) + "\n")
        say(f"scaling: {row['run']}: {run.params:,} params x {run.tokens:,} tokens = {run.flops:.3g} FLOPs "
            f"({run.steps} steps): dev loss {row['loss']:.4f} in {row['wall_s']:.0f} s")

    configs = [(run, run_config(options, run, seed, out / folder_name(run), None if options.jobs == 1 else
                                len(os.sched_getaffinity(0)) // options.jobs)) for run in todo]
    if options.jobs == 1:
        for run, config in configs:
            say(f"scaling: training {folder_name(run)} (depth {run.depth}, {run.steps} steps)")
            record(run, train_point(config.to_dict()))
    else:
        context = get_context("spawn")
        shares = context.Queue()
        for share in _core_shares(options.jobs):
            shares.put(share)
        with ProcessPoolExecutor(options.jobs, mp_context=context, initializer=_pin_worker,
                                 initargs=(shares,)) as pool:
            pending = {pool.submit(train_point, config.to_dict()): run for run, config in configs}
            for future, run in pending.items():
                record(run, future.result())
    return [done[(folder_name(run), seed)] for run in runs]


def run_sweep(options: ScalingOptions, say: Callable[[str], None] = lambda line: print(line, file=sys.stderr)
              ) -> list[dict[str, Any]]:
    """Plan, check the folder, train what is missing; the points of this grid."""
    runs = plan_sweep(options)
    _check_same_sweep(Path(options.out), options)
    total = sum(run.flops for run in runs)
    budgets = len({r.budget for r in runs})
    say(f"scaling: {len(runs)} runs over {budgets} budget{'s' if budgets > 1 else ''}, {total:.3g} FLOPs in all, "
        f"into {options.out}")
    return run_points(options, runs, options.seed, say)
