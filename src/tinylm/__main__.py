"""`python -m tinylm` is the same as the `tinylm` command."""

import sys

try:
    import tinylm.runtime.start_env  # noqa: F401  (first: sets MKL_CBWR before torch loads)
    from tinylm.cli.main import main
except KeyboardInterrupt:  # a Ctrl-C this early is an interrupt like any later one (cli/main.py), not a traceback
    print("tinylm: interrupted", file=sys.stderr)
    raise SystemExit(130) from None

if __name__ == "__main__":
    raise SystemExit(main())
