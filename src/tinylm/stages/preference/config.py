"""What `tinylm dpo` and `tinylm reward` can be told: the pair-sized defaults, the loss and its reference.

A loss's hyper-parameters default to its published values (losses.py); they are overridden here only
when an option is given.
"""

from __future__ import annotations

from dataclasses import dataclass

from tinylm.errors import TinyLMError
from tinylm.options import Option
from tinylm.stages.post_config import PostTrainConfig
from tinylm.stages.preference.losses import LOSSES, LossSpec, resolve
from tinylm.stages.preference.reference import MODES


@dataclass
class PreferenceConfig(PostTrainConfig):
    """PostTrainConfig with pair-sized defaults: they tune the SFT demo model on `builtin:arith` in minutes."""

    train_examples: int = 2_000  # problems turned into pairs for a builtin task
    max_steps: int = 200
    lr: float | None = 5e-4
    eval_every: int = 50


LOSS = "the loss and its reference"
HYPER_PARAMETERS = ("beta", "gamma", "lam", "label_smoothing", "desirable_weight", "undesirable_weight")


@dataclass
class DPOConfig(PreferenceConfig):
    """The loss of the DPO family and its hyper-parameters (None: the loss's published value), and the reference."""

    loss: str = Option("the preference loss (see docs/posttrain/preference.md)", choices=lambda: tuple(LOSSES),
                       strict_choices=False, metavar="NAME", group=LOSS)("dpo")
    beta: float | None = Option("the loss's beta (default: its published value)", low=0, low_open=True,
                                group=LOSS)(None)
    gamma: float | None = Option("SimPO's target margin gamma (default 0.5)", group=LOSS)(None)
    lam: float | None = Option("CPO's, RPO's NLL weight (1.0), ORPO's odds ratio's (0.1)", low=0, group=LOSS)(None)
    label_smoothing: float | None = Option("cdpo / robust: label flip rate (0.1)", low=0, high=0.5, high_open=True,
                                           group=LOSS)(None)
    desirable_weight: float | None = Option("KTO: weight of desirable answers (1.0)", low=0, low_open=True,
                                            group=LOSS)(None)
    undesirable_weight: float | None = Option("KTO: weight of undesirable answers (1.0)", low=0, low_open=True,
                                              group=LOSS)(None)
    ref: str | None = Option("reference checkpoint (default: the base)", metavar="RUN", group=LOSS)(None)
    reference: str = Option("how pi_ref is computed: auto = cached, or adapters with LoRA",
                            choices=("auto", *MODES), group=LOSS)("auto")

    def validate(self) -> None:
        super().validate()
        self.loss_spec()
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
    """Bradley-Terry with a margin: prefer the chosen answer by at least this much."""

    margin: float = Option("Bradley-Terry margin: -log sigmoid(r_w - r_l - margin)", low=0)(0.0)
