# Everything a fresh machine needs. `make setup` is a no-op when .venv is up to date.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.tinylm-installed
TORCH_PIN := torch==2.13.0

.PHONY: setup demo test test-slow lint docs bench clean

setup: $(STAMP)

# The pinned CPU torch goes in first: a bare `torch` requirement could pull a multi-GB CUDA build.
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check $(TORCH_PIN)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	touch $(STAMP)

demo: setup
	$(PY) -m tinylm train

test: setup
	$(PY) -m pytest

test-slow: setup
	$(PY) -m pytest -m slow

lint: setup
	$(VENV)/bin/ruff check src tests benchmarks scripts docs/hooks

docs: setup
	$(VENV)/bin/mkdocs build --strict

bench: setup
	$(PY) -m tinylm bench

clean:
	rm -rf $(VENV) site build *.egg-info
