"""One number over several multiple-choice tasks, centred on chance, in the style of nanochat's CORE.

Raw accuracies do not average well: 25% is chance on four choices and a real result on a hundred. Each
task's accuracy is first centred on its chance level b (the mean of 1/k over its questions),

    centred = (acc - b) / (1 - b)

so 0 means guessing and 1 means perfect, then the centred scores are averaged with equal weight.
A model worse than chance scores below 0.
"""

from __future__ import annotations

from collections.abc import Mapping


def centred(accuracy: float, chance: float) -> float:
    if not 0 <= chance < 1:
        raise ValueError(f"chance must be in [0, 1), got {chance}")
    return (accuracy - chance) / (1 - chance)


def core_score(tasks: Mapping[str, tuple[float, float]]) -> float:
    """Mean centred accuracy of {task: (accuracy, chance)}."""
    if not tasks:
        raise ValueError("core_score needs at least one task")
    return sum(centred(acc, chance) for acc, chance in tasks.values()) / len(tasks)
