"""`python -m tinylm` is the same as the `tinylm` command."""

from tinylm.cli.main import main

if __name__ == "__main__":
    raise SystemExit(main())
