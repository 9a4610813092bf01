# Two commands on a fresh machine: `make plan` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TEST_STAMP := $(VENV)/.installed-test

.PHONY: install test plan fidelity clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

# the core: planning needs no torch
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

# the tests also cross-check layers against PyTorch (the `profile` extra, torch 2.13.0 CPU)
# and draw SVG timelines (the `viz` extra, matplotlib)
$(TEST_STAMP): $(STAMP)
	$(BIN)/pip install --quiet -e '.[dev,profile,viz]'
	touch $(TEST_STAMP)

install: $(STAMP)

test: $(TEST_STAMP)
	PLANNER_REQUIRE_TORCH=1 $(BIN)/python -m pytest -q

plan: $(STAMP)
	$(BIN)/planner plan

fidelity: $(STAMP)
	$(BIN)/python benchmarks/fidelity.py

clean:
	rm -rf $(VENV) build *.egg-info
