"""PretrainConfig: what `tinylm train` can be told beyond the engine's options: the model, the data, the batch
plan, the stop at a target, the z-loss, the dev batches and the sample printed at the end.

The defaults are the `make demo` run: the `tiny` modern preset on the embedded Python-stdlib corpus, sized to
finish in about five minutes on two CPU cores, data preparation included.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from tinylm.config import ModelConfig, parse_override
from tinylm.data.document_windows import DOCUMENT_ENDS_NEED_LONG_DOCUMENTS
from tinylm.depth import MAX_DEPTH, DepthRule
from tinylm.errors import TinyLMError
from tinylm.inference.sampling import check_sampling_options
from tinylm.options import BATCH_SIZE, TEMPERATURE, TOP_K, Option
from tinylm.presets import PRESETS, preset_config
from tinylm.train.batch_plan import check_quarters
from tinylm.train.config import BUDGET, LOGGING, MODEL_AND_DATA, OPTIMIZER, EngineConfig

# the record's sequence-length warmup: 150 steps of a 600-step run; unset, it is at most a quarter of the schedule
DEFAULT_SEQ_WARMUP_STEPS = 150
SAMPLE = "sample at the end"
DEFAULT_BATCH_SIZE = 16


@dataclass
class PretrainConfig(EngineConfig):
    """The engine's options plus pretraining's own: the model, its data, the batch plan and the end-of-run sample."""

    preset: str = Option("model size", choices=lambda: tuple(PRESETS), strict_choices=False,
                         group=MODEL_AND_DATA)("tiny")
    depth: int | None = Option(
        "one dial for the model and its recipe: width 32N, N blocks, heads of 32, context 256, the AdamW lr "
        "scaled as 1/sqrt(width), 4N rows per batch (depth.py; depth 4 is `tiny`); replaces --preset's shape, "
        "and --lr, --muon-lr or --batch-size given beside it win", low=1, high=MAX_DEPTH, metavar="N",
        group=MODEL_AND_DATA)(None)
    arch: str = Option("the GPT-2-style classic or the modern (Llama/Qwen-style) decoder",
                       choices=("modern", "classic"), group=MODEL_AND_DATA)("modern")
    overrides: dict[str, Any] = Option(
        "override a model field, e.g. --set n_kv_head=1 (repeatable; in a config file: set = [\"n_kv_head=1\"] or "
        "a [set] table)", flag="--set", metavar="FIELD=VALUE", items=True, parse_item=parse_override,
        group=MODEL_AND_DATA)(default_factory=dict)
    extend: str | None = Option(
        "continue a trained checkpoint (or run folder) at a longer context: its weights, a fresh optimizer; --set "
        "context_length=N and a RoPE scaling rule are the only model changes (stages/pretrain/extend.py)",
        metavar="CHECKPOINT", group=MODEL_AND_DATA)(None)
    long_documents: bool = Option(
        "draw rows only from documents that hold a whole row, so every position has its own document behind it "
        "(for a context extension; the header says how many there are)", group=MODEL_AND_DATA)(False)
    document_ends: bool = Option(
        "with --long-documents, each row is the last tokens of a long document drawn uniformly, so what a "
        "document asks at its end is asked with a whole row behind it (passkey:N:LEN)", group=MODEL_AND_DATA)(False)
    data: str | None = Option("prepared data folder (default: the pystdlib corpus, prepared on first use)",
                              metavar="DIR", group=MODEL_AND_DATA)(None)
    batch_ramp_steps: int = Option("a batch-size ramp, a quarter of --batch-size for the first half of "
                                   "N steps and half for the second, then all of it (a token budget then takes "
                                   "more steps); 0 = off", low=0, metavar="N", group=BUDGET)(0)
    seq_len_warmup_steps: int | None = Option(
        "a sequence-length warmup, rows a quarter as long (and 4x as many) for the first half of N "
        "steps and half as long for the second; the tokens per step stay the same; 0 = off (default: "
        f"{DEFAULT_SEQ_WARMUP_STEPS}, at most a quarter of the lr schedule, none where rows cannot be quartered or "
        "for --extend)",
        low=0, metavar="N", group=BUDGET, before_it_existed=0)(None)
    target_dev_bpb: float | None = Option("stop at the first evaluation whose dev bits per byte is at or below X "
                                          "(a resumed run checks at its next evaluation)", low=0,
                                          low_open=True, metavar="X", group=BUDGET)(None)
    batch_size: int | None = BATCH_SIZE(None, group=BUDGET, note="per micro-batch (default: 16, or 4 x --depth)")
    z_loss: float = Option("each token's loss gains Z * logsumexp(logits)^2 (PaLM's z-loss), which keeps "
                           "the softmax normaliser near 1; the logged loss includes it, dev loss and bits per byte "
                           "do not; 0 = off", low=0, metavar="Z", group=OPTIMIZER)(0.0)
    eval_batches: int = Option("dev batches per evaluation", low=1, group=LOGGING)(20)
    eval_batch_size: int | None = Option("rows per dev batch (default: --batch-size); runs with different batches "
                                         "given one value are scored on the same dev rows", low=1,
                                         group=LOGGING)(None)
    # the sample printed at the end
    sample_tokens: int = Option("tokens of the sample printed at the end; 0 = no sample", low=0, group=SAMPLE)(120)
    prompt: str | None = Option('text to continue (default: "def" on the default Python corpus, else a new '
                                'document; "" = a new document)', group=SAMPLE)(None)
    temperature: float = TEMPERATURE(0.8, group=SAMPLE)
    top_k: int = TOP_K(50, group=SAMPLE)


    def __post_init__(self) -> None:
        if self.batch_size is None:  # unset: the depth rule's, else the record's 16
            self.batch_size = self.depth_rule.batch_size if self.depth_rule else DEFAULT_BATCH_SIZE
        super().__post_init__()

    def unset_value(self, name: str, default: Any) -> Any:
        if name == "batch_size":
            return self.depth_rule.batch_size if self.depth_rule else DEFAULT_BATCH_SIZE
        return super().unset_value(name, default)

    @property
    def depth_rule(self) -> DepthRule | None:
        return DepthRule(self.depth) if self.depth is not None else None

    @property
    def adamw_lr(self) -> float:
        """--lr; unset, the depth rule's with Muon, else the optimizer's default."""
        rule = self.depth_rule
        if self.lr is None and rule is not None and self.optimizer == "muon":
            return rule.adamw_lr
        return super().adamw_lr

    def validate(self) -> None:
        # the end-of-run sample and the batch plan: refuse now, before a run folder exists, not after training
        check_sampling_options(self.temperature, self.top_k)
        if self.document_ends and not self.long_documents:
            raise TinyLMError(DOCUMENT_ENDS_NEED_LONG_DOCUMENTS)
        super().validate()
        check_quarters(self.batch_size, self.seq_len, self.batch_ramp_steps, self.seq_len_warmup_steps or 0)

    def model_config(self) -> ModelConfig:
        """The preset for this arch with the overrides applied (validated)."""
        known = {f.name for f in dataclasses.fields(ModelConfig)}
        unknown = sorted(set(self.overrides) - known)
        if unknown:
            raise TinyLMError(f"unknown model field(s) {', '.join(unknown)}")
        overrides = dict(self.overrides)
        if self.gradient_checkpointing:
            overrides["gradient_checkpointing"] = True
        if self.depth_rule is not None:
            return self.depth_rule.model_config(self.arch, **overrides)
        return preset_config(self.preset, self.arch, **overrides)
