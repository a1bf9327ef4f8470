"""What `tinylm dpo` and `tinylm reward` can be told: the pair-sized defaults, the loss and its reference.

A loss's hyper-parameters default to its published values (losses.py); they are overridden here only
when an option is given.
"""

from __future__ import annotations

from dataclasses import dataclass

from tinylm.errors import TinyLMError
from tinylm.stages.post_config import PostTrainConfig
from tinylm.stages.preference.losses import LossSpec, resolve
from tinylm.stages.preference.reference import MODES


@dataclass
class PreferenceConfig(PostTrainConfig):
    """PostTrainConfig with pair-sized defaults: they tune the SFT demo model on `builtin:arith` in minutes."""

    train_examples: int = 2_000  # problems turned into pairs for a builtin task
    max_steps: int = 200
    lr: float = 5e-4
    eval_every: int = 50


HYPER_PARAMETERS = ("beta", "gamma", "lam", "label_smoothing", "desirable_weight", "undesirable_weight")


@dataclass
class DPOConfig(PreferenceConfig):
    loss: str = "dpo"  # see preference_losses.LOSSES
    beta: float | None = None  # None: the loss's published default
    gamma: float | None = None  # SimPO's target margin
    lam: float | None = None  # CPO's and RPO's NLL weight, ORPO's odds-ratio weight
    label_smoothing: float | None = None  # cDPO / robust DPO flip rate
    desirable_weight: float | None = None  # KTO
    undesirable_weight: float | None = None
    ref: str | None = None  # the reference checkpoint; default: the base
    reference: str = "auto"  # auto (cached, or adapters with LoRA), cached, copy, adapters

    def validate(self) -> None:
        super().validate()
        self.loss_spec()
        if self.reference not in ("auto", *MODES):
            raise TinyLMError(f"--reference must be auto, {', '.join(MODES)}; got {self.reference!r}")
        if self.reference == "adapters" and not self.lora_rank:
            raise TinyLMError("--reference adapters needs LoRA (--lora-rank R): without adapters there is no base "
                              "to fall back to")
        if self.reference == "adapters" and self.ref:
            raise TinyLMError("--reference adapters uses the base itself as the reference: drop --ref or choose "
                              "--reference cached")

    def loss_spec(self) -> tuple[LossSpec, dict[str, float]]:
        return resolve(self.loss, **{name: getattr(self, name) for name in HYPER_PARAMETERS})

    def reference_mode(self) -> str | None:
        """None for a reference-free loss; else the way pi_ref is computed."""
        if not self.loss_spec()[0].needs_reference:
            return None
        if self.reference != "auto":
            return self.reference
        return "adapters" if self.lora_rank and not self.ref else "cached"


@dataclass
class RewardConfig(PreferenceConfig):
    margin: float = 0.0  # Bradley-Terry with a margin: prefer the chosen answer by at least this much

    def validate(self) -> None:
        super().validate()
        if self.margin < 0:
            raise TinyLMError(f"--margin must be >= 0, got {self.margin:g}")
