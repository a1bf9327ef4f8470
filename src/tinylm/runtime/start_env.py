"""Imported first by the `tinylm` command (`cli/main.py`, `__main__.py`): the environment MKL reads at its first call.

Importing it is what it does: it sets `MKL_CBWR=AUTO,STRICT` where the user has not set it
(`mkl_cbwr.py` says why), before torch is loaded and long before any matmul.
"""

from __future__ import annotations

from tinylm.runtime.mkl_cbwr import set_default

set_default()
