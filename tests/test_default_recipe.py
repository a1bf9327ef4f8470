"""The speedrun record is `tinylm train`'s default (docs/speedrun.md): Muon for the hidden matrices beside AdamW at
0.06, Muon momentum 0.9, a sequence-length warmup. The old default stays a named recipe (the speedrun's
reference), post-training keeps AdamW, and a run folder from before keeps its own options on resume."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch

from test_train_support import config
from tinylm.bench.recipes import REFERENCE, parse_recipe
from tinylm.bench.speedrun import SpeedrunOptions
from tinylm.checkpoint import list_checkpoints
from tinylm.cli.main import parse_command_line
from tinylm.errors import TinyLMError
from tinylm.models.factory import build_model
from tinylm.stages import STAGES
from tinylm.stages.preference.config import PreferenceConfig
from tinylm.stages.pretrain import pretrain
from tinylm.stages.pretrain.config import PretrainConfig
from tinylm.stages.pretrain.warmups import pretraining_plan
from tinylm.stages.rl.config import RLConfig
from tinylm.stages.sft.config import SFTConfig
from tinylm.train.batch_plan import BatchPlan
from tinylm.train.muon import Muon
from tinylm.train.optim import members, split_params
from tinylm.train.resume_options import options_for_resume
from tinylm.train.run_setup import build_optimization
from tinylm.train.stage import Stage

# what decides an optimizer step: the record and the default must agree on every one of them
STEERING = ("optimizer", "adamw_lr", "muon_lr", "muon_momentum", "weight_decay", "beta1", "beta2", "schedule",
            "warmup_steps", "min_lr_ratio", "batch_size", "overrides")


def steering(cfg: PretrainConfig) -> dict[str, object]:
    """The optimizer's settings and the step shapes of a 600-step run with rows of 256."""
    return {**{name: getattr(cfg, name) for name in STEERING}, "plan": pretraining_plan(cfg, 256, 1)}


def with_recipe(spec: str) -> PretrainConfig:
    return PretrainConfig().replace(**parse_recipe(spec).config_changes())


def test_the_default_is_the_record_and_the_old_default_is_a_recipe() -> None:
    assert steering(PretrainConfig()) == steering(with_recipe("record"))
    assert pretraining_plan(PretrainConfig(), 256, 1).seq_warmup_steps == 150
    old = with_recipe("adamw-default")
    assert (old.optimizer, old.adamw_lr, old.muon_momentum, old.seq_len_warmup_steps) == ("adamw", 3e-3, 0.95, 0)
    assert not pretraining_plan(old, 256, 1).reshapes
    # every row of the record table was raced on the old default: `adamw-default+ROW` still builds that row
    assert steering(with_recipe("adamw-default+muon")) == {**steering(old), "optimizer": "muon"}
    nanogpt = with_recipe("nanogpt")
    assert (nanogpt.arch, nanogpt.optimizer, nanogpt.seq_len_warmup_steps) == ("classic", "adamw", 0)
    # the speedrun races against the old default, so `tinylm speedrun` with no arguments re-runs the table's race
    assert SpeedrunOptions().against == REFERENCE == "adamw-default"
    assert parse_command_line(["speedrun"]).against == REFERENCE


def test_the_lr_default_follows_the_optimizer_and_a_given_lr_wins() -> None:
    assert PretrainConfig().lr is None and PretrainConfig().adamw_lr == 0.06
    assert PretrainConfig(optimizer="adamw").adamw_lr == 3e-3
    assert PretrainConfig(optimizer="adamw", lr=0.01).adamw_lr == PretrainConfig(lr=0.01).adamw_lr == 0.01
    # a replace that switches the optimizer gets that optimizer's default, not the other's (nothing was resolved)
    assert PretrainConfig().replace(optimizer="adamw").adamw_lr == 3e-3
    with pytest.raises(Exception, match="--lr must be > 0"):
        PretrainConfig(lr=0.0)


def _built(cfg: PretrainConfig) -> list[torch.optim.Optimizer]:
    """The torch optimizers the run would build for `cfg`."""
    optimizer, _, _ = build_optimization(build_model(cfg.model_config()), cfg, torch.device("cpu"), torch.float32,
                                         BatchPlan(cfg.batch_size, cfg.seq_len or 16))
    return members(optimizer)


def _groups(cfg: PretrainConfig) -> list[tuple[str, str, float, int]]:
    """(optimizer, role, base lr, parameters) of every non-empty group the run would build."""
    return [(type(o).__name__, g["role"], g["initial_lr"], sum(p.numel() for p in g["params"]))
            for o in _built(cfg) for g in o.param_groups if g["params"]]


def test_the_default_run_builds_muon_for_hidden_matrices_and_adamw_at_its_lr_for_the_rest() -> None:
    cfg = config(None)
    split = split_params(build_model(cfg.model_config()))
    matrices = sum(p.numel() for _, p in split.matrices)
    groups = _groups(cfg)
    assert groups[0] == ("Muon", "muon", 0.02, matrices)
    assert {(name, lr) for name, _, lr, _ in groups[1:]} == {("AdamW", 0.06)}
    assert [g["momentum"] for o in _built(cfg) if isinstance(o, Muon) for g in o.param_groups] == [0.9]
    assert {(name, lr) for name, _, lr, _ in _groups(config(None, optimizer="adamw"))} == {("AdamW", 3e-3)}


@pytest.mark.parametrize("config_class", [SFTConfig, PreferenceConfig, RLConfig])
def test_post_training_keeps_adamw_at_its_own_lr(config_class: type) -> None:
    """The record raced pretraining; fine-tuning a pretrained model is another question, unmeasured."""
    cfg = config_class(base="runs/x")
    assert (cfg.optimizer, cfg.muon_momentum) == ("adamw", 0.95)
    assert not hasattr(cfg, "seq_len_warmup_steps")  # pretraining's batch plan is not theirs to take
    assert not config_class.__dataclass_fields__.get("batch_ramp_steps")
    assert all(spec.stage.plan_batches is Stage.plan_batches for spec in STAGES.values()
               if spec.config is not PretrainConfig)  # every step alike: the rows they draw are their own
    assert cfg.adamw_lr == cfg.lr == config_class.__dataclass_fields__["lr"].default
    assert cfg.adamw_lr < 0.01


def test_the_header_says_which_optimizer_steps_which_parameters(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    cfg = config(tmp_path / "run", max_steps=1)
    model = build_model(cfg.model_config())
    matrices = sum(p.numel() for _, p in split_params(model).matrices)
    pretrain(cfg)
    err = capsys.readouterr().err
    assert (f"optimizer: Muon (lr 0.02, momentum 0.9) on {matrices:,} hidden-matrix parameters, AdamW (lr 0.06, "
            f"betas 0.9/0.95) on {model.num_params() - matrices:,} other parameters; weight decay 0.1 on matrices; "
            "the logged lr is Muon's") in err
    pretrain(config(tmp_path / "adamw", max_steps=1, optimizer="adamw"))
    assert (f"optimizer: AdamW (lr 0.003, betas 0.9/0.95) on {model.num_params():,} parameters; weight decay 0.1 "
            "on matrices; the logged lr is AdamW's") in capsys.readouterr().err


def test_the_sequence_warmup_is_at_most_a_quarter_of_the_schedule_unless_given() -> None:
    """150 steps of a 600-step run is what was measured; unset, a 20-step run warms up for 5 and says so."""
    assert pretraining_plan(PretrainConfig(), 256, 1).seq_warmup_steps == 150  # make demo: as measured
    assert pretraining_plan(PretrainConfig(max_steps=1800), 256, 1).describe() == [
        "sequence warmup: 64 for steps 1-75, 128 for steps 76-150, then 256 tokens per row (as many tokens per "
        "step: more, shorter rows)"]
    short = pretraining_plan(PretrainConfig(max_steps=20), 256, 1)
    assert short.seq_warmup_steps == 5
    assert "sequence warmup: 5 steps, not 150: unset, it is at most a quarter of the 20-step lr schedule" in \
        short.describe()
    assert [short.shape(s)[1] for s in range(7)] == [64, 64, 128, 128, 128, 256, 256]
    # the schedule, not --max-steps, sets the length: a run stopped early and resumed with more steps plans the same
    assert pretraining_plan(PretrainConfig(max_steps=3, schedule_steps=600), 256, 1).seq_warmup_steps == 150
    # given, it is what was asked; rows that cannot be quartered get none by default and are refused when asked
    assert pretraining_plan(PretrainConfig(max_steps=20, seq_len_warmup_steps=12), 256, 1).seq_warmup_steps == 12
    odd = pretraining_plan(PretrainConfig(seq_len=30), 30, 1)
    assert not odd.reshapes and "sequence warmup: none (rows of 30 tokens cannot be quartered)" in odd.describe()
    with pytest.raises(TinyLMError, match="row length 30 must be a multiple of 4"):
        PretrainConfig(seq_len=30, seq_len_warmup_steps=150)


def test_a_run_from_before_the_sequence_warmup_resumes_without_one(tmp_path: Path) -> None:
    pretrain(config(tmp_path / "run", max_steps=1, seq_len_warmup_steps=0))
    (checkpoint,) = list_checkpoints(tmp_path / "run")
    meta = json.loads((checkpoint / "config.json").read_text())
    del meta["train"]["seq_len_warmup_steps"]  # written before the option existed
    (checkpoint / "config.json").write_text(json.dumps(meta))
    values = dataclasses.asdict(PretrainConfig())
    merged, taken = options_for_resume(PretrainConfig, values, set(), checkpoint)
    assert merged["seq_len_warmup_steps"] == 0 and "seq_len_warmup_steps" in taken
    merged, _ = options_for_resume(PretrainConfig, {**values, "seq_len_warmup_steps": 40}, {"seq_len_warmup_steps"},
                                   checkpoint)
    assert merged["seq_len_warmup_steps"] == 40  # given on the command line: that wins
