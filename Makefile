# Everything a fresh machine needs. `make setup` is a no-op when .venv is up to date.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.tinylm-installed
TORCH_PIN := torch==2.13.0
LLAMA_CPP := $(VENV)/llama-cpp
LLAMA_CPP_STAMP := $(LLAMA_CPP)/.installed

.PHONY: setup demo test test-slow lint docs bench clean

setup: $(STAMP) $(LLAMA_CPP_STAMP)

# The pinned CPU torch goes in first: a bare `torch` requirement could pull a multi-GB CUDA build.
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check $(TORCH_PIN)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	touch $(STAMP)

# A real llama.cpp for the GGUF tests: node-llama-cpp's prebuilt CPU binary (pinned in tests/llama_cpp),
# no download at run time and no build. Without npm the tests that need it skip and say why.
$(LLAMA_CPP_STAMP): tests/llama_cpp/package.json tests/llama_cpp/package-lock.json
	@if command -v npm >/dev/null 2>&1; then \
	  mkdir -p $(LLAMA_CPP) && cp tests/llama_cpp/package.json tests/llama_cpp/package-lock.json $(LLAMA_CPP)/ && \
	  cd $(LLAMA_CPP) && NODE_LLAMA_CPP_SKIP_DOWNLOAD=true npm ci --omit=optional --ignore-scripts --no-audit \
	    --no-fund --loglevel=error && touch .installed; \
	else echo "setup: npm not found; the llama.cpp (GGUF) tests will skip"; fi

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
