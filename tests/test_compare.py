"""`tinylm compare` at a micro scale: same budget for every candidate, through the one training engine."""

from __future__ import annotations

import json
import shutil
import statistics
import sysconfig
from pathlib import Path

import pytest

from tinylm.bench.compare import COMPARE_STEPS, CompareOptions, candidates_for, run_compare
from tinylm.bench.variants import VARIANTS, variant_overrides
from tinylm.cli.main import main
from tinylm.errors import TinyLMError
from tinylm.models.factory import build_model
from tinylm.presets import preset_config

MICRO = {"vocab_size": 512, "n_embed": 32, "n_head": 2, "n_blocks": 1, "context_length": 32}
TRAIN = {"batch_size": 4, "eval_every": 2, "eval_batches": 2, "log_every": 1, "threads": 2, "device": "cpu",
         "warmup_steps": 1}


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small prepared dataset: ten stdlib modules, a 512-token BPE."""
    from tinylm.data.prepare import prepare_dataset

    corpus = tmp_path_factory.mktemp("corpus")
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    for name in ("argparse", "textwrap", "string", "glob", "shlex", "bisect", "heapq", "fnmatch", "abc", "colorsys"):
        shutil.copy(stdlib / f"{name}.py", corpus / f"{name}.py")
    out = tmp_path_factory.mktemp("data") / "micro"
    return prepare_dataset(str(corpus), vocab_size=512, out=out, context_length=32, progress=False, dev_fraction=0.2)


@pytest.mark.parametrize("name", list(VARIANTS))
def test_every_variant_is_a_valid_change_of_the_modern_preset(name: str) -> None:
    base = preset_config("tiny", "modern")
    changes = variant_overrides(name, base)
    config = base.replace(**changes)
    assert config.diff(base) or name == "gqa"  # tiny is already GQA with 2 of 4 heads
    build_model(preset_config("tiny", "modern", **MICRO, **variant_overrides(name, preset_config(
        "tiny", "modern", **MICRO))))


def test_candidates_and_unknown_names() -> None:
    names = [c.name for c in candidates_for("tiny", ["classic", "modern"], ["mqa", "moe"], {})]
    assert names == ["classic", "modern", "modern+mqa", "modern+moe"]
    with pytest.raises(TinyLMError, match="unknown variant 'warp'"):
        candidates_for("tiny", ["modern"], ["warp"], {})
    with pytest.raises(TinyLMError, match="exactly one budget"):
        CompareOptions(steps=5, time_budget=1.0)
    assert CompareOptions().steps == COMPARE_STEPS and CompareOptions(time_budget=1.0).steps is None


def test_every_candidate_gets_the_same_training_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Only the model and the seed change between runs; the training engine is `run_training` itself."""
    import tinylm.bench.compare as compare
    from tinylm.train.loop import TrainSummary

    seen = []

    def fake_run_training(config, stage):
        seen.append(config)
        run = Path(config.out)
        run.mkdir(parents=True)
        (run / "metrics.jsonl").write_text('{"step": 1, "loss": 5.0, "elapsed_s": 0.5}\n'
                                           '{"step": 1, "dev_loss": 5.5, "tokens": 128}\n')
        return TrainSummary(run_dir=str(run), checkpoint=None, arch=config.arch, steps=1, tokens=128,
                            final_loss=5.0, dev_loss=5.5 + config.seed, dev_bpb=1.0, tokens_per_s=1000.0, mfu=None,
                            params=1, non_embedding_params=1, stopped="max_steps", wall_s=1.0)

    monkeypatch.setattr(compare, "run_training", fake_run_training)
    result = run_compare(CompareOptions(preset="tiny", archs=["classic", "modern"], variants=["mla"], overrides=MICRO,
                                        steps=7, seeds=[1, 2], out=str(tmp_path), train=TRAIN))
    assert len(seen) == 6
    strip = ("arch", "overrides", "seed", "out")
    shared = [{k: v for k, v in c.to_dict().items() if k not in strip} for c in seen]
    assert all(s == shared[0] for s in shared) and shared[0]["max_steps"] == 7
    assert shared[0]["progress"] is True  # each run shows progress (plain lines when stderr is not a terminal)
    assert sorted({c.seed for c in seen}) == [1, 2]
    modern_mla = result["rows"][2]
    assert modern_mla["candidate"] == "modern+mla"
    assert modern_mla["dev_loss"]["mean"] == statistics.fmean([6.5, 7.5])
    assert modern_mla["dev_loss"]["std"] == statistics.stdev([6.5, 7.5])
    assert result["runs"][0]["dev_curve"] == [{"step": 1, "tokens": 128, "dev_loss": 5.5, "seconds": 0.5}]


def test_compare_equal_steps_end_to_end(data_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "cmp"
    args = ["compare", "--preset", "tiny", "--archs", "modern", "--variants", "moe", "--steps", "3",
            "--seeds", "1,2", "--out", str(out), "--data", str(data_dir), "--eval-every", "2", "--eval-batches", "2",
            "--log-every", "1", "--threads", "2", "--batch-size", "4", "--device", "cpu"]
    for name, value in MICRO.items():
        args += ["--set", f"{name}={value}"]
    assert main(args) == 0
    result = json.loads((out / "compare.json").read_text())
    summaries = [r["summary"] for r in result["runs"]]
    assert len(summaries) == 4
    assert {s["steps"] for s in summaries} == {3} and {s["tokens"] for s in summaries} == {3 * 4 * 32}
    assert all(s["dev_loss"] is not None for s in summaries)
    rows = {r["candidate"]: r for r in result["rows"]}
    assert rows["modern+moe"]["active_params"] < rows["modern+moe"]["params"]
    assert rows["modern"]["active_params"] == rows["modern"]["params"]
    text = (out / "compare.md").read_text()
    assert "| modern+moe |" in text and "mean ± standard deviation" in text
    assert (out / "compare.png").stat().st_size > 10_000


def test_compare_equal_time_budget(data_dir: Path, tmp_path: Path) -> None:
    result = run_compare(CompareOptions(preset="tiny", archs=["classic", "modern"], overrides=MICRO,
                                        time_budget=1.5, seeds=[1], out=str(tmp_path), train={**TRAIN,
                                                                                              "data": str(data_dir)}))
    summaries = [r["summary"] for r in result["runs"]]
    assert [s["stopped"] for s in summaries] == ["time_budget", "time_budget"]
    assert result["train"]["schedule"] == "cosine"  # planned against the seconds: it decays inside the budget
    # (1.5 s: a step slowed by a busy machine must not be a third of the budget, or the last logged lr is early)
    for run in ("classic-seed1", "modern-seed1"):
        lrs = [json.loads(line)["lr"] for line in (tmp_path / "runs" / run / "metrics.jsonl").read_text().splitlines()
               if '"lr"' in line]
        assert lrs[-1] < 0.5 * max(lrs), (run, lrs[-3:])


def test_a_read_only_out_is_refused_before_any_training(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                         capsys) -> None:
    import errno
    import os

    import tinylm.bench.compare as compare

    def never(config, stage):
        raise AssertionError("trained although --out cannot be written")

    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(tmp_path / "cmp"))

    monkeypatch.setattr(compare, "run_training", never)
    import tinylm.bench.result_files as result_files

    monkeypatch.setattr(result_files.tempfile, "TemporaryFile", read_only)
    assert main(["compare", "--archs", "modern", "--steps", "2", "--out", str(tmp_path / "cmp")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"tinylm: error: cannot write to --out {tmp_path / 'cmp'}: Read-only file system"]


def test_results_are_written_whole_or_not_at_all(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import errno
    import os

    import tinylm.bench.compare as compare

    stat = {"mean": 1.0, "std": 0.0}
    row = {"candidate": "modern", "description": "tiny preset, modern", "params": 10, "active_params": 10,
           **{key: stat for key in ("tokens_per_s", "dev_loss", "dev_bpb", "steps")}}
    run = {"candidate": "modern", "seed": 1, "dev_curve": [{"step": 2, "tokens": 64, "dev_loss": 5.0, "seconds": 1.0}]}
    result = {"preset": "tiny", "budget": "2 steps each", "seeds": [1], "rows": [row], "runs": [run],
              "train": {"batch_size": 4, "seq_len": None, "lr": 3e-3, "optimizer": "adamw", "dtype": "auto"}}

    def full_disk(result, path):
        Path(path).write_bytes(b"half a png")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    monkeypatch.setattr(compare, "plot_compare", full_disk)
    with pytest.raises(TinyLMError, match="No space left on device"):
        compare.write_results(result, tmp_path)
    assert list(tmp_path.iterdir()) == []  # neither the json/md written before the failure nor the half png
    monkeypatch.undo()
    compare.write_results(result, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["compare.json", "compare.md", "compare.png"]
