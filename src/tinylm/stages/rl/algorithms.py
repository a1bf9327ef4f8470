"""Every RL algorithm `tinylm rl --algo` knows, by name, in the order `--help` lists them.

An algorithm is a row of data (`Algorithm`, algorithm.py) in its family's file, whose `FAMILY`
lists its rows: a variant is one more row there; a new family is a new file and one entry here.
"""

from __future__ import annotations

from tinylm.stages.rl import grpo, ppo, reinforce_pp, rloo
from tinylm.stages.rl.algorithm import Algorithm

FAMILIES: tuple[tuple[Algorithm, ...], ...] = (
    grpo.FAMILY,
    rloo.FAMILY,
    reinforce_pp.FAMILY,
    ppo.FAMILY,
)
ALGORITHMS: dict[str, Algorithm] = {algorithm.name: algorithm for family in FAMILIES for algorithm in family}


def algorithms() -> dict[str, Algorithm]:
    """The registry by name (a copy: a caller may not change what another one sees)."""
    return dict(ALGORITHMS)
