"""`tinylm compare`: train several architectures on the same data, seeds and budget; tabulate and plot.

Every candidate is trained by the one training engine, `tinylm.train.loop.run_training`, with the
same PretrainConfig except the model: same data folder, same batch, same seeds, and the same budget,
either equal steps (hence equal tokens) or equal wall-clock seconds. With a time budget the number
of steps is not known in advance: the engine plans the schedule against the seconds instead
(train/schedule.py), so every candidate decays inside the same budget however fast its steps are.
Results go into `--out`:

- compare.md: per candidate, parameters (total and active per token), training tokens/s, final
  dev loss and bits per byte, as mean ± standard deviation over the seeds;
- compare.png: dev loss against tokens seen and against seconds of training;
- compare.json: every run's summary and dev-loss curve;
- runs/NAME-seedS/: each run's own folder (metrics.jsonl, checkpoint, loss plot).
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tinylm.bench.result_files import check_writable, mean_std, save_figure, write_result_files
from tinylm.bench.variants import VARIANTS, variant_overrides
from tinylm.errors import TinyLMError
from tinylm.metrics import read_metrics
from tinylm.models.factory import build_model
from tinylm.options import SEEDS, STEPS, Option, check_options, option_from
from tinylm.presets import preset_config
from tinylm.stages.pretrain import PretrainStage
from tinylm.stages.pretrain.config import PretrainConfig
from tinylm.train.loop import run_training

MAX_STEPS_FOR_TIME_BUDGET = 10**9  # the time budget, not the step count, ends these runs


@dataclass
class Candidate:
    name: str
    arch: str
    overrides: dict[str, Any]
    description: str


def candidates_for(preset: str, archs: list[str], variants: list[str], common: dict[str, Any]) -> list[Candidate]:
    """The baseline of each arch, then one modern model per variant (the variant table is in variants.py)."""

    out = []
    for arch in archs:
        if arch not in ("classic", "modern"):
            raise TinyLMError(f"unknown arch {arch!r}: choose classic and/or modern")
        out.append(Candidate(arch, arch, dict(common), f"{preset} preset, {arch}"))
    if variants:
        base = preset_config(preset, "modern", **common)
        for name in variants:
            changes = variant_overrides(name, base)
            out.append(Candidate(f"modern+{name}", "modern", {**common, **changes}, VARIANTS[name][0]))
    if not out:
        raise TinyLMError("nothing to compare: give --archs and/or --variants")
    names = [c.name for c in out]
    if len(set(names)) != len(names):
        raise TinyLMError(f"a candidate is listed twice: {', '.join(names)}")
    return out


COMPARE_STEPS = 200  # the budget when neither --steps nor --time-budget is given
# the options of every run that compare passes to the training engine as given
TRAINING = ("data", "batch_size", "seq_len", "lr", "eval_every", "eval_batches", "log_every", "device", "dtype",
            "threads")


@dataclass
class CompareOptions:
    """What `tinylm compare` races and how: each option field is its flag (cli/commands/compare.py)."""

    preset: str = option_from(PretrainConfig, "preset")
    archs: list[str] = Option("comma list of classic,modern (may be empty)")(
        default_factory=lambda: ["classic", "modern"])
    variants: list[str] = Option("comma list of modern variants (may be empty)", choices=lambda: tuple(VARIANTS),
                                 strict_choices=False)(default_factory=list)
    overrides: dict[str, Any] = option_from(PretrainConfig, "overrides", note="for every candidate")
    steps: int | None = STEPS(None, note=f"equal steps for every run (default: {COMPARE_STEPS}, unless --time-budget)")
    time_budget: float | None = option_from(PretrainConfig, "time_budget", note="the same for every run")
    seeds: list[int] = SEEDS(default_factory=lambda: [1])
    out: str = Option("output folder")("compare")
    data: str | None = option_from(PretrainConfig, "data")
    batch_size: int = option_from(PretrainConfig, "batch_size", note="")
    seq_len: int | None = option_from(PretrainConfig, "seq_len")
    lr: float | None = option_from(PretrainConfig, "lr")
    eval_every: int = option_from(PretrainConfig, "eval_every", 50)
    eval_batches: int = option_from(PretrainConfig, "eval_batches")
    log_every: int = option_from(PretrainConfig, "log_every")
    device: str = option_from(PretrainConfig, "device")
    dtype: str = option_from(PretrainConfig, "dtype", note="")
    threads: int | None = option_from(PretrainConfig, "threads")
    # any other PretrainConfig fields of every run (warmup_steps, ...); a field named here wins over the one above
    train: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_options(self)
        if self.steps is not None and self.time_budget is not None:
            raise TinyLMError("give exactly one budget: --steps N (equal steps) or --time-budget SECONDS (equal time)")
        if self.steps is None and self.time_budget is None:
            self.steps = COMPARE_STEPS
        if not self.seeds:
            raise TinyLMError("--seeds needs at least one seed")


def _model_sizes(preset: str, candidate: Candidate) -> tuple[int, int]:
    """(total, active) parameters, counted on the meta device: nothing is allocated."""
    import torch


    with torch.device("meta"):
        model = build_model(preset_config(preset, candidate.arch, **candidate.overrides))
    return model.num_params(), model.num_params(active=True)


def dev_curve(run_dir: Path) -> list[dict[str, float]]:
    """[{step, tokens, seconds, dev_loss}] from metrics.jsonl; seconds interpolated from the training rows."""
    import numpy as np

    rows = read_metrics(run_dir)
    timed = sorted((r["step"], r["elapsed_s"]) for r in rows if "elapsed_s" in r)
    steps, elapsed = ([s for s, _ in timed], [e for _, e in timed]) if timed else ([0], [0.0])
    return [{"step": r["step"], "tokens": r["tokens"], "dev_loss": r["dev_loss"],
             "seconds": float(np.interp(r["step"], steps, elapsed))}
            for r in rows if isinstance(r.get("dev_loss"), (int, float))]


def run_compare(opts: CompareOptions, say=lambda line: None) -> dict[str, Any]:
    """Train every candidate for every seed under the same budget; write compare.md/png/json into opts.out."""

    out = Path(opts.out)
    candidates = candidates_for(opts.preset, opts.archs, opts.variants, opts.overrides)
    budget: dict[str, Any] = ({"max_steps": opts.steps} if opts.steps is not None else
                              {"max_steps": MAX_STEPS_FOR_TIME_BUDGET, "time_budget": opts.time_budget})
    given = {name: getattr(opts, name) for name in TRAINING}
    base = PretrainConfig(preset=opts.preset, progress=True, sample_tokens=0, **{**given, **opts.train, **budget})
    check_writable(out)  # before any training, not after it
    runs: list[dict[str, Any]] = []
    for seed in opts.seeds:  # seed-major: a slow drift of the machine's speed touches every candidate alike
        for candidate in candidates:
            run_dir = out / "runs" / f"{candidate.name}-seed{seed}"
            if run_dir.exists():
                shutil.rmtree(run_dir)  # compare's own output from an earlier invocation
            say(f"training {candidate.name} (seed {seed}) ...")
            summary = run_training(base.replace(arch=candidate.arch, overrides=candidate.overrides, seed=seed,
                                                out=str(run_dir)), stage=PretrainStage())
            runs.append({"candidate": candidate.name, "seed": seed, "summary": summary.to_dict(),
                         "dev_curve": dev_curve(run_dir)})
    rows = []
    for candidate in candidates:
        mine = [r["summary"] for r in runs if r["candidate"] == candidate.name]
        total, active = _model_sizes(opts.preset, candidate)
        rows.append({"candidate": candidate.name, "description": candidate.description, "params": total,
                     "active_params": active, "seeds": len(mine),
                     **{key: mean_std([s[key] for s in mine]) for key in
                        ("tokens_per_s", "dev_loss", "dev_bpb", "steps", "tokens", "wall_s")}})
    budget_text = (f"{opts.steps} steps each" if opts.steps is not None
                   else f"{opts.time_budget:g} s of training each")
    result = {"preset": opts.preset, "budget": budget_text, "seeds": opts.seeds,
              "train": {**{k: v for k, v in base.to_dict().items() if k not in ("arch", "overrides", "out")},
                        "lr": base.adamw_lr},  # the rate every run used: unset, its optimizer's default
              "rows": rows, "runs": runs}
    write_results(result, out)
    return result


def write_results(result: dict[str, Any], out: Path) -> None:
    """compare.json, compare.md and compare.png, each complete or absent."""
    texts = {"compare.json": json.dumps(result, indent=2) + "\n", "compare.md": format_markdown(result)}
    write_result_files(out, texts, {"compare.png": lambda path: plot_compare(result, path)}, "the comparison")


def _cell(stat: dict[str, float | None], fmt: str) -> str:
    if stat["mean"] is None:
        return "-"
    return f"{stat['mean']:{fmt}} ± {stat['std']:{fmt}}"


def format_markdown(result: dict[str, Any]) -> str:
    t = result["train"]
    lines = [
        f"# tinylm compare: {result['preset']} preset, {result['budget']}",
        "",
        f"Same data and batch for every candidate (batch {t['batch_size']} x seq {t['seq_len'] or 'context'}, "
        f"{t['optimizer']}, lr {t['lr']:g}, dtype {t['dtype']}); seeds {', '.join(map(str, result['seeds']))}; "
        "values are mean ± standard deviation over the seeds.",
        "",
        "| candidate | params | active params | tokens/s | dev loss | dev bpb | steps | what it is |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in result["rows"]:
        cells = [r["candidate"], f"{r['params']:,}", f"{r['active_params']:,}", _cell(r["tokens_per_s"], ",.0f"),
                 _cell(r["dev_loss"], ".4f"), _cell(r["dev_bpb"], ".4f"), _cell(r["steps"], ".0f"), r["description"]]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "![dev loss](compare.png)", ""]
    return "\n".join(lines)


def plot_compare(result: dict[str, Any], path: Path) -> Path:
    """Dev loss against tokens (left) and against seconds (right); one color per candidate, one line per seed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (by_tokens, by_seconds) = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    names = [r["candidate"] for r in result["rows"]]
    for i, name in enumerate(names):
        first = True
        for run in (r for r in result["runs"] if r["candidate"] == name):
            curve = run["dev_curve"]
            if not curve:
                continue
            label = name if first else None
            first = False
            by_tokens.plot([p["tokens"] for p in curve], [p["dev_loss"] for p in curve], color=f"C{i % 10}",
                           marker="o", markersize=3, label=label)
            by_seconds.plot([p["seconds"] for p in curve], [p["dev_loss"] for p in curve], color=f"C{i % 10}",
                            marker="o", markersize=3, label=label)
    by_tokens.set_xlabel("tokens seen")
    by_seconds.set_xlabel("seconds of training")
    by_tokens.set_ylabel("dev loss (nats / token)")
    by_tokens.legend()
    fig.suptitle(f"tinylm compare: {result['preset']}, {result['budget']}")
    fig.tight_layout()
    return save_figure(fig, path)
