"""logit_softcap: refused where no reference computes it, validated, and raceable as a speedrun recipe."""

from __future__ import annotations

import pytest

from tinylm.bench.recipes import parse_recipe
from tinylm.errors import TinyLMError
from tinylm.interop.gguf_layout import gguf_architecture
from tinylm.interop.hf import hf_architecture
from tinylm.presets import preset_config


@pytest.mark.parametrize("arch", ["modern", "classic"])
def test_the_exports_refuse_a_capped_model_in_one_line(arch: str) -> None:
    config = preset_config("tiny", arch=arch, logit_softcap=15.0)
    for export in (hf_architecture, gguf_architecture):
        with pytest.raises(TinyLMError, match="logit_softcap=15"):
            export(config)


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf")])
def test_a_cap_must_be_a_positive_number(bad: float) -> None:
    with pytest.raises(ValueError, match="logit_softcap"):
        preset_config("tiny", logit_softcap=bad)


def test_a_recipe_sets_the_cap_as_a_model_field() -> None:
    recipe = parse_recipe("muon+logit_softcap=15")
    assert recipe.changes["overrides"] == {"logit_softcap": 15.0}
