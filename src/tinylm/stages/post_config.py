"""The options of the stages that start from `--base`: FromBaseConfig (every one: SFT, reward, DPO, RL) and
PostTrainConfig (those that learn from rows of a data spec: SFT, reward, DPO; RL learns from a task's prompts).

The engine's options plus the base checkpoint, the built-in task's problem counts, the answers' length and LoRA,
with post-training-sized defaults; PostTrainConfig adds the data spec and its held-out split. A stage's own config
extends one of them with what only that stage needs.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from tinylm.data.rows.read import ON_ERROR
from tinylm.errors import TinyLMError
from tinylm.models.lora import LoraConfig, parse_targets
from tinylm.options import MAX_NEW_TOKENS, Option
from tinylm.tasks.registry import builtin_specs
from tinylm.train.config import EngineConfig

BASE_AND_DATA, LORA = "base and data", "LoRA (base frozen, only low-rank adapters train)"


# held-out answers need room for at least one token (generation elsewhere may ask for none)
ANSWER_TOKENS = dataclasses.replace(MAX_NEW_TOKENS, low=1)


@dataclass
class FromBaseConfig(EngineConfig):
    """The engine's options plus the base, a built-in task's problem counts and LoRA, post-training-sized."""

    base: str = Option("checkpoint or run folder to start from (an SFT run for DPO and RL); required unless "
                       "--resume continues a run, which names its own", metavar="RUN", group=BASE_AND_DATA)("")
    train_examples: int = Option("problems generated for a built-in task", low=1, group=BASE_AND_DATA)(20_000)
    eval_examples: int = Option("held-out problems of a built-in task, scored by exact-match", low=1,
                                group=BASE_AND_DATA)(200)
    max_new_tokens: int = ANSWER_TOKENS(32, group=BASE_AND_DATA, note="when answering held-out problems")
    lora_rank: int = Option("adapter rank; 0 = full fine-tuning", low=0, metavar="R", group=LORA)(0)
    lora_alpha: float | None = Option("scale alpha / R (default: alpha = R)", low=0, low_open=True, metavar="A",
                                      group=LORA)(None)
    lora_dropout: float = Option("dropout on the adapter's input, training only", low=0, high=1, high_open=True,
                                 metavar="P", group=LORA)(0.0)
    lora_targets: str = Option("q,k,v,o,gate,up,down (any subset) or all-linear", metavar="LIST",
                               group=LORA)("q,k,v,o,gate,up,down")
    rslora: bool = Option("scale alpha / sqrt(R) (rank-stabilised LoRA)", group=LORA)(False)
    max_steps: int = 300
    # fine-tuning keeps AdamW: the record that made Muon pretraining's default (docs/speedrun.md) raced pretraining
    optimizer: str = "adamw"
    lr: float | None = 1e-3
    muon_momentum: float = 0.95
    weight_decay: float = 0.0
    warmup_steps: int = 10
    eval_every: int = 100
    checkpoint_every: int = 0

    def validate(self) -> None:
        super().validate()
        if not self.base and self.resume is None:  # a resumed run takes its base from its checkpoint
            raise TinyLMError("--base is required: the checkpoint or run folder to start from")
        if self.lora_rank:
            self.lora_config().validate()
        else:
            self._refuse_lora_options_without_rank()

    def start_problem(self) -> str | None:
        """A resume that found no checkpoint starts afresh, from --base: without one there is nothing to start."""
        if self.base:
            return None
        where = (f"{self.out} holds no checkpoint to continue" if self.out
                 else "no --out names the run folder to continue")
        return f"--resume {self.resume}: {where}, and no --base was given to start a new run from"

    def _refuse_lora_options_without_rank(self) -> None:
        """A LoRA option changed while --lora-rank is 0 (full fine-tuning) would be silently ignored: say so."""
        defaults = {f.name: f.default for f in dataclasses.fields(self)}
        for name in ("lora_alpha", "lora_dropout", "rslora", "lora_targets"):
            if getattr(self, name) != defaults[name]:
                flag = "--" + name.replace("_", "-")
                raise TinyLMError(f"{flag} has no effect without --lora-rank (0: full fine-tuning); "
                                  f"give --lora-rank R to train adapters")

    def lora_config(self) -> LoraConfig:
        return LoraConfig(rank=self.lora_rank, alpha=self.lora_alpha, dropout=self.lora_dropout,
                          targets=parse_targets(self.lora_targets), rslora=self.rslora)


@dataclass
class PostTrainConfig(FromBaseConfig):
    """FromBaseConfig plus rows to learn from: a data spec, its held-out part and what to do with a bad row."""

    data: str | None = Option("a data spec: FILE (.jsonl, .json array, .csv), hf:NAME or a task "
                              f"({', '.join(builtin_specs())})", metavar="SPEC", group=BASE_AND_DATA)("builtin:arith")
    eval_data: str | None = Option("held-out data (default: the task's test split, or a share of --data)",
                                   metavar="SPEC", group=BASE_AND_DATA)(None)
    dev_fraction: float = Option("share of a file's rows held out", low=0, high=1, low_open=True, high_open=True,
                                 group=BASE_AND_DATA)(0.05)
    on_error: str = Option("a malformed row: stop with FILE:LINE, or skip and count it", choices=ON_ERROR,
                           group=BASE_AND_DATA)("stop")

    def validate(self) -> None:
        super().validate()
        if not self.data:
            raise TinyLMError("--data is required: builtin:arith, a JSONL/JSON/CSV file or hf:NAME")
