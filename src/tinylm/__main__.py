"""`python -m tinylm` is the same as the `tinylm` command."""

import tinylm.runtime.start_env  # noqa: F401  (first: sets MKL_CBWR before torch loads)
from tinylm.cli.main import main

if __name__ == "__main__":
    raise SystemExit(main())
