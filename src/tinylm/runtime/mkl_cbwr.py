"""`MKL_CBWR=AUTO,STRICT` for the `tinylm` command: fp32 matmuls that do not depend on how many threads MKL took.

Without it, MKL's GEMM splits a long inner dimension (a weight gradient sums over every row of the
batch) across the threads it decides to use for that call (`MKL_DYNAMIC`, on by default), and the
partial sums add up in another order: the likely cause of one fp32 command giving a different
step-10 loss in about 1 of 6 runs on an Intel AMX machine (issue 23). MKL's Conditional Numerical
Reproducibility, in its strict mode, keeps the sums in one order whatever the thread count: 60
steps of `tiny` gave the same losses with MKL on 1 thread, on 2, dynamic or not, where the default
gave three different sequences, and it cost no measurable tokens/s (the COMPATIBLE mode cost 2.8x).
MKL reads the variable at its first call, so the command sets it as it starts, before torch
computes anything (`start_env.py`, imported first by `cli/main.py`), and only where the user has not
set it; the run header says which (`describe`). A library caller's process is left as it is: torch
may have run MKL already.
"""

from __future__ import annotations

import os
import sys

VARIABLE = "MKL_CBWR"
DEFAULT = "AUTO,STRICT"
MARKER = "TINYLM_DEFAULT_MKL_CBWR"  # set with it, so a child process (a torchrun rank) knows whose value it is


def set_default() -> bool:
    """Set `MKL_CBWR=AUTO,STRICT` unless the user set it or torch is loaded already; True if this call set it."""
    if VARIABLE in os.environ or "torch" in sys.modules:
        return False
    os.environ[VARIABLE] = DEFAULT
    os.environ[MARKER] = DEFAULT
    return True


def describe() -> str | None:
    """The run header's line on MKL's reproducibility mode; None where torch does not use MKL."""
    import torch

    if not torch.backends.mkl.is_available():
        return None
    value = os.environ.get(VARIABLE)
    if value is None:
        return (f"numerics: {VARIABLE} unset: fp32 matmul sums may depend on the threads MKL takes per call "
                f"(the tinylm command sets {DEFAULT})")
    whose = "tinylm's default, fp32 matmul sums in one order whatever the threads" if os.environ.get(
        MARKER) == value else "yours"
    return f"numerics: {VARIABLE}={value} ({whose})"
