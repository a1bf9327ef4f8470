"""PostTrainConfig: the options every stage that starts from `--base` shares (SFT, reward, DPO, RL).

TrainConfig (the engine's options) plus the base checkpoint, the data spec, the held-out split and LoRA,
with post-training-sized defaults. A stage's own config extends it with what only that stage needs.
"""

from __future__ import annotations

from dataclasses import dataclass

from tinylm.errors import TinyLMError
from tinylm.models.lora import LoraConfig, parse_targets
from tinylm.train.config import TrainConfig

ON_ERROR = ("stop", "skip")


@dataclass
class PostTrainConfig(TrainConfig):
    """TrainConfig plus the base, the data spec and LoRA, with post-training-sized defaults."""

    base: str = ""  # the checkpoint (or run folder) to start from
    data: str | None = "builtin:arith"  # a data spec: builtin:NAME, a JSONL file, hf:NAME
    eval_data: str | None = None  # a held-out spec; default: the task's test split, or a share of the data
    dev_fraction: float = 0.05  # share of a file's rows held out when there is no --eval-data
    train_examples: int = 20_000  # problems generated for a builtin task
    eval_examples: int = 200  # held-out problems of a builtin task (exact-match)
    max_new_tokens: int = 32  # reply length limit when answering held-out problems
    on_error: str = "stop"  # a malformed row: stop with file:line, or skip and count it
    lora_rank: int = 0  # 0 = every weight trains
    lora_alpha: float | None = None
    lora_dropout: float = 0.0
    lora_targets: str = "q,k,v,o,gate,up,down"
    rslora: bool = False
    max_steps: int = 300
    lr: float = 1e-3
    weight_decay: float = 0.0
    warmup_steps: int = 10
    eval_every: int = 100
    checkpoint_every: int = 0
    sample_tokens: int = 0

    def validate(self) -> None:
        super().validate()
        if not self.base:
            raise TinyLMError("--base is required: the checkpoint or run folder to start from")
        if not self.data:
            raise TinyLMError("--data is required: builtin:arith, a JSONL file or hf:NAME")
        if not 0 < self.dev_fraction < 1:
            raise TinyLMError(f"--dev-fraction must be in (0, 1), got {self.dev_fraction}")
        for name in ("train_examples", "eval_examples", "max_new_tokens"):
            if getattr(self, name) < 1:
                raise TinyLMError(f"--{name.replace('_', '-')} must be >= 1 (got {getattr(self, name)})")
        if self.on_error not in ON_ERROR:
            raise TinyLMError(f"--on-error must be stop or skip, got {self.on_error!r}")
        if self.lora_rank < 0:
            raise TinyLMError(f"--lora-rank must be > 0 (or 0 for full fine-tuning), got {self.lora_rank}")
        if self.lora_rank:
            self.lora_config().validate()

    def lora_config(self) -> LoraConfig:
        return LoraConfig(rank=self.lora_rank, alpha=self.lora_alpha, dropout=self.lora_dropout,
                          targets=parse_targets(self.lora_targets), rslora=self.rslora)
