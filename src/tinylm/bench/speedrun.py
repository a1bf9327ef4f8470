"""`tinylm speedrun`: how long each recipe takes to reach a dev bits-per-byte target, against a reference run beside it.

Time to a target quality is what a user waits for, not a step. Each recipe (bench/recipes.py) trains
through the one training engine on the same data, threads and precision as the reference. Every run
gets the same budget in tokens (the reference's `--steps` of its own batch), so a recipe with a
smaller batch takes more, cheaper steps. The dev set is evaluated every few steps; the target is
where the reference ends its budget (or `--target-bpb`), and the time to reach it is read off each
curve (bench/time_to_target.py), counting only the training steps' own seconds (`train_s`), not the
evaluations.

A noisy machine changes how fast a step runs from minute to minute, so the runs alternate: for each
seed the reference and the recipes run back to back, in reverse order on every other seed, and the
ratio (recipe over reference, `time_to_target_ratio`) is formed within a seed before the median over
seeds is taken. The reference's measured choices (dtype, attention kernel, compile) are kept for every
later run, so no recipe differs from it by a kernel. Results go into `--out`: speedrun.json, speedrun.md
(a table) and speedrun.png (dev bpb against training seconds, every run overlaid), and runs/ (each
run's own folder); an --out that holds a speedrun's results already is refused unless --overwrite.

A race shorter than the recipes were made for would otherwise spend itself warming up (the record's
150-step sequence warmup covers all of a 30-step race), so every warmup (lr, sequence, batch ramp) is at
most a quarter of its run's steps, the rule `tinylm train` applies to its default sequence warmup; the
speedrun says which it shortened. A speedrun does not resume: one interrupted is raced again from the start.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tinylm.bench.recipes import REFERENCE, Recipe, parse_recipe
from tinylm.bench.result_files import check_writable, mean_std, write_result_files
from tinylm.bench.speedrun_report import format_markdown, plot_curves
from tinylm.bench.time_to_target import finite_or_none, median_ratio, ratio, reach
from tinylm.checkpoint.read import read_checkpoint_config
from tinylm.errors import TinyLMError
from tinylm.metrics import read_metrics
from tinylm.options import SEEDS, STEPS, Option, check_options, option_from
from tinylm.runtime.attention_policy import has_blockwise_kernel
from tinylm.stages.pretrain import PretrainStage
from tinylm.stages.pretrain.config import PretrainConfig
from tinylm.train.config import DEMO_STEPS
from tinylm.train.loop import run_training

UNBOUNDED_STEPS = 10**9  # the token budget, not a step count, ends every run
WARMUP_SHARE = 4  # a warmup is at most 1/4 of its run's steps (the record's 150 of 600)
# each warmup a recipe may set, as the line that shortens it names it
WARMUPS = {"warmup_steps": "lr warmup", "seq_len_warmup_steps": "sequence warmup", "batch_ramp_steps": "batch ramp"}
DTYPE_FLAG = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}


# the options of every run that the speedrun passes to the training engine as given
TRAINING = ("data", "eval_batches", "device", "dtype", "compile", "threads")
FIRST_RUN_DECIDES = "auto: the reference's first run decides, every run keeps it"


@dataclass
class SpeedrunOptions:
    """What `tinylm speedrun` races and how: each option field is its flag (cli/commands/speedrun.py)."""

    preset: str = option_from(PretrainConfig, "preset")
    recipes: list[str] = Option("recipes to race, comma-separated; each is changes joined by '+'", flag="--recipe",
                                metavar="R[,R...]")(default_factory=lambda: ["record"])
    against: str = Option("the reference recipe, trained beside them; the default is tinylm train's defaults "
                          "before the record became them", metavar="R")(REFERENCE)
    target_bpb: float | None = Option("dev bits per byte to reach (default: where the reference ends, seed by seed)",
                                      low=0, low_open=True, metavar="X")(None)
    stop_at_target: bool = Option("end every run at its first evaluation at or below --target-bpb (a quicker screen; "
                                  "the final dev bpb is then where each run stopped)")(False)
    seeds: list[int] = SEEDS(default_factory=lambda: [1, 2, 3])
    steps: int = STEPS(DEMO_STEPS, note="the reference's budget in its steps; every run gets as many tokens")
    eval_every: int = Option("reference steps between dev evaluations; other batches evaluate at the same tokens",
                             low=1, high=10**9)(20)
    eval_batches: int = option_from(PretrainConfig, "eval_batches")
    overrides: dict[str, Any] = option_from(PretrainConfig, "overrides", note="for every run")
    data: str | None = option_from(PretrainConfig, "data")
    out: str = Option("output folder")("speedrun")
    overwrite: bool = Option("race into an --out that holds a speedrun's results already, replacing them")(False)
    device: str = option_from(PretrainConfig, "device")
    dtype: str = option_from(PretrainConfig, "dtype", note=FIRST_RUN_DECIDES)
    compile: str = option_from(PretrainConfig, "compile", note=FIRST_RUN_DECIDES)
    threads: int | None = option_from(PretrainConfig, "threads")
    # any other PretrainConfig fields of every run; a field named here wins over the one above
    train: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_options(self)
        if not self.seeds:
            raise TinyLMError("--seeds needs at least one seed")
        if not self.recipes:
            raise TinyLMError("--recipe needs at least one recipe")
        if self.stop_at_target and self.target_bpb is None:
            raise TinyLMError("--stop-at-target needs --target-bpb: without it the target is only known once the "
                              "reference has finished")


@dataclass
class Entry:
    """One racer: the reference (index 0) or a recipe, with the PretrainConfig it trains under."""

    name: str
    recipe: Recipe
    config: PretrainConfig
    shortened: str = ""  # the warmups cut to a quarter of the run: "lr warmup 20 -> 7 steps, ..."


def _row_length(cfg: PretrainConfig) -> int:
    return cfg.seq_len or cfg.model_config().context_length


def _tokens_per_step(cfg: PretrainConfig) -> int:
    return cfg.batch_size * cfg.grad_accum * _row_length(cfg)


def shorten_warmups(cfg: PretrainConfig, steps: int) -> tuple[PretrainConfig, str]:
    """`cfg` with every warmup at most a quarter of its `steps`, and what was cut ("" when nothing was)."""
    limit = steps // WARMUP_SHARE
    cut = {name: limit for name in WARMUPS if (getattr(cfg, name) or 0) > limit}
    said = ", ".join(f"{WARMUPS[name]} {getattr(cfg, name)} -> {limit} steps" for name in cut)
    return (cfg.replace(**cut) if cut else cfg), said


def plan_entries(opts: SpeedrunOptions) -> tuple[list[Entry], int]:
    """The reference and each recipe as checked TrainConfigs, and the token budget they share."""
    train = {**{name: getattr(opts, name) for name in TRAINING}, **opts.train}
    common_overrides = {**opts.overrides, **(train.pop("overrides", {}) or {})}
    base = PretrainConfig(preset=opts.preset, progress=False, sample_tokens=0, max_steps=UNBOUNDED_STEPS,
                       checkpoint_every=0, keep_last=1, **train)
    recipes = [parse_recipe(opts.against)] + [parse_recipe(spec) for spec in opts.recipes]
    names = ["reference: " + recipes[0].spec] + [r.spec for r in recipes[1:]]
    if len(set(names)) != len(names):
        raise TinyLMError(f"a recipe is listed twice: {', '.join(r.spec for r in recipes[1:])}")
    configs = []
    for recipe in recipes:
        try:
            cfg = base.replace(**recipe.config_changes(common_overrides))
            cfg.model_config()  # a bad model field is refused now, before any run trains
        except (TinyLMError, ValueError) as exc:
            raise TinyLMError(f"recipe {recipe.spec!r}: {exc}") from None
        configs.append(cfg)
    reference_step = _tokens_per_step(configs[0])
    budget = opts.steps * reference_step
    rows = _row_length(configs[0])
    stop_at = opts.target_bpb if opts.stop_at_target else None
    entries = []
    for name, recipe, cfg in zip(names, recipes, configs):
        if _row_length(cfg) != rows:
            raise TinyLMError(f"recipe {recipe.spec!r} trains on rows of {_row_length(cfg)} tokens and the reference "
                              f"on {rows}: the dev loss would be measured on other rows (change the batch instead)")
        every = max(1, round(opts.eval_every * reference_step / _tokens_per_step(cfg)))
        cfg, shortened = shorten_warmups(cfg, budget // _tokens_per_step(cfg))
        # the same dev rows for every run: the reference's batches of them, whatever a recipe's batch
        entries.append(Entry(name, recipe, cfg.replace(max_tokens=budget, eval_every=every, log_every=every,
                                                       eval_batch_size=configs[0].batch_size,
                                                       target_dev_bpb=stop_at), shortened))
    return entries, budget


def shortened_line(entries: list[Entry], steps: int) -> str:
    """The header line naming the warmups a short race cut ("" when none was)."""
    cuts = "; ".join(f"{entry.name}: {entry.shortened}" for entry in entries if entry.shortened)
    return (f"a {steps:,}-step race: each warmup is at most a quarter of its run's steps, so {cuts}" if cuts
            else "")


def check_out(out: Path, overwrite: bool) -> None:
    """Refuse an --out whose speedrun.json another speedrun wrote, before any training: a rerun would replace
    its results (an interrupted race wrote none, so its --out is raced into again)."""
    if (out / "speedrun.json").exists() and not overwrite:
        raise TinyLMError(f"--out {out} holds a speedrun already (speedrun.json): choose another --out, or pass "
                          "--overwrite to race into it again")
    check_writable(out)


def run_order(entries: list[Entry], seed_index: int) -> list[Entry]:
    """Reference first on even seeds, last on odd ones: a drift of the machine's speed touches both sides."""
    return list(entries) if seed_index % 2 == 0 else list(reversed(entries))


def dev_curve(run_dir: Path) -> list[dict[str, float]]:
    """[{step, tokens, train_s, dev_bpb, dev_loss}] at each evaluation, its training seconds from the step's row."""
    rows = read_metrics(run_dir)
    train_s = {r["step"]: r["train_s"] for r in rows if isinstance(r.get("train_s"), (int, float))}
    return [{"step": r["step"], "tokens": r["tokens"], "train_s": train_s.get(r["step"], 0.0),
             "dev_bpb": r["dev_bpb"], "dev_loss": r["dev_loss"]}
            for r in rows if isinstance(r.get("dev_bpb"), (int, float)) and r["step"] in train_s]


def pinned_choices(checkpoint: str | None) -> dict[str, str]:
    """The dtype, attention kernel and compile setting a finished run used, as PretrainConfig values."""
    if checkpoint is None:
        return {}
    record = read_checkpoint_config(Path(checkpoint)).get("run_choices", {})
    pins: dict[str, str] = {}
    dtype = record.get("precision", {}).get("value")
    if dtype in DTYPE_FLAG:
        pins["dtype"] = DTYPE_FLAG[dtype]
    kernel = record.get("attention", {}).get("value")
    if kernel in ("sdpa", "blockwise"):
        pins["attention"] = kernel
    compiled = record.get("compile", {}).get("value")
    if isinstance(compiled, bool):
        pins["compile"] = "on" if compiled else "off"
    return pins


def applicable_pins(pins: dict[str, str], cfg: PretrainConfig) -> dict[str, str]:
    """The pinned choices a run takes: those it leaves on auto, and the attention kernel only where it has one.

    The classic model has its own attention and no kernel to choose, so `nanogpt` neither takes the
    reference's kernel (--attention blockwise would refuse it) nor gives its "sdpa" to the runs after it.
    """
    keep = {k: v for k, v in pins.items() if getattr(cfg, k) == "auto"}
    if not has_blockwise_kernel(cfg.model_config()):
        keep.pop("attention", None)
    return keep


def run_speedrun(opts: SpeedrunOptions, say=lambda line: None) -> dict[str, Any]:
    """Train the reference and every recipe for every seed, alternating; write speedrun.json/md/png into opts.out."""
    entries, budget = plan_entries(opts)
    out = Path(opts.out)
    check_out(out, opts.overwrite)
    if line := shortened_line(entries, opts.steps):
        say(f"speedrun: {line}")
    pins: dict[str, str] = {}
    runs: list[dict[str, Any]] = []
    for index, seed in enumerate(opts.seeds):
        for entry in run_order(entries, index):
            run_dir = out / "runs" / f"{_folder(entry)}-seed{seed}"
            if run_dir.exists():
                shutil.rmtree(run_dir)  # this command's own output from an earlier invocation
            cfg = entry.config.replace(seed=seed, out=str(run_dir), **applicable_pins(pins, entry.config))
            say(f"speedrun: {entry.name}, seed {seed} ...")
            summary = run_training(cfg, stage=PretrainStage(), on_interrupt="")  # its own line says what next
            if summary.stopped == "interrupted":
                raise TinyLMError(f"speedrun stopped: {entry.name} (seed {seed}) was interrupted at step "
                                  f"{summary.steps}; a speedrun does not resume, so no results were written: run "
                                  "it again to race from the start")
            if summary.stopped not in ("max_tokens", "max_steps", "target"):
                raise TinyLMError(f"speedrun: {entry.name} (seed {seed}) stopped early ({summary.stopped}); "
                                  f"see {run_dir}/metrics.jsonl")
            choices = pinned_choices(summary.checkpoint)
            for key, value in applicable_pins(choices, entry.config).items():
                pins.setdefault(key, value)  # the first run that made a choice makes it for all the others
            curve = dev_curve(run_dir)
            runs.append({"recipe": entry.name, "seed": seed, "summary": summary.to_dict(), "curve": curve,
                         "train_s": curve[-1]["train_s"] if curve else None,
                         "choices": choices})
            say(f"speedrun: {entry.name}, seed {seed}: dev bpb {summary.dev_bpb:.4f} after "
                f"{runs[-1]['train_s'] or 0:.1f} s of training")
    result = summarize(opts, entries, budget, runs)
    write_results(result, out)
    return result


def _folder(entry: Entry) -> str:
    spec = entry.recipe.spec if not entry.name.startswith("reference") else "reference-" + entry.recipe.spec
    return "".join(c if c.isalnum() or c in "-_.+" else "_" for c in spec.replace("=", "_"))


def summarize(opts: SpeedrunOptions, entries: list[Entry], budget: int, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per seed: the target, each run's time to it and its ratio to the reference; per recipe: medians."""
    reference = entries[0].name
    for seed in opts.seeds:
        mine = [r for r in runs if r["seed"] == seed]
        ref = next(r for r in mine if r["recipe"] == reference)
        target = opts.target_bpb if opts.target_bpb is not None else ref["summary"]["dev_bpb"]
        ref_reach = reach(ref["curve"], target)
        for run in mine:
            run["target_bpb"] = target
            run["to_target"] = reach(run["curve"], target)
            run["ratio"] = finite_or_none(ratio(run["to_target"], ref_reach))
    rows = []
    for entry in entries:
        mine = [r for r in runs if r["recipe"] == entry.name]
        ratios = [r["ratio"] if r["ratio"] is not None else float("inf") for r in mine]
        reached = [r["to_target"] for r in mine if r["to_target"] is not None]
        rows.append({
            "recipe": entry.name, "spec": entry.recipe.spec, "description": entry.recipe.description,
            "time_to_target_ratio": median_ratio(ratios), "ratios": [finite_or_none(x) for x in ratios],
            "reached": len(reached), "seeds": len(mine),
            **{f"{axis}_to_target": mean_std([p[axis] for p in reached]) for axis in ("train_s", "step", "tokens")},
            "final_dev_bpb": mean_std([r["summary"]["dev_bpb"] for r in mine]),
            "final_dev_bpbs": [r["summary"]["dev_bpb"] for r in mine],
            "train_s": mean_std([r["train_s"] for r in mine if r["train_s"] is not None]),
            "tokens_per_s": mean_std([r["summary"]["tokens_per_s"] for r in mine]),
            "mfu": mean_std([r["summary"]["mfu"] for r in mine if r["summary"]["mfu"] is not None]),
            "params": mine[0]["summary"]["params"] if mine else None,
        })
    first = rows[1] if len(rows) > 1 else rows[0]
    return {
        "preset": opts.preset, "reference": entries[0].recipe.spec, "recipes": [e.recipe.spec for e in entries[1:]],
        "seeds": opts.seeds, "budget": {"reference_steps": opts.steps, "tokens": budget},
        "target": ("the reference's final dev bpb, seed by seed" if opts.target_bpb is None
                   else f"dev bpb {opts.target_bpb:g}"),
        "time_to_target_ratio": first["time_to_target_ratio"],
        "choices": runs[0]["choices"] if runs else {},
        "stopped_at_target": opts.stop_at_target,
        "warmups_shortened": shortened_line(entries, opts.steps),
        "rows": rows, "runs": runs,
    }


def write_results(result: dict[str, Any], out: Path) -> None:
    write_result_files(out, {"speedrun.json": json.dumps(result, indent=2) + "\n",
                             "speedrun.md": format_markdown(result)},
                       {"speedrun.png": lambda path: plot_curves(result, path)}, "the speedrun's results")
