# Two commands on a fresh machine: `make plan` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TEST_STAMP := $(VENV)/.installed-test
INTEGRATION_STAMP := $(VENV)/.installed-integration

.PHONY: install test test-exhaustive test-fast integration plan fidelity fidelity-refresh clean wheel-check

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

# and load the exports with the trainers themselves (the `integration` extra: DeepSpeed,
# torchtitan 0.2.2, triton), and run sweeps on a local Ray (the `ray` extra). DeepSpeed is an sdist whose setup imports torch: build it against
# the torch above (no build isolation; an isolated build sees no torch), with no ops compiled.
$(INTEGRATION_STAMP): $(TEST_STAMP)
	DS_BUILD_OPS=0 $(BIN)/pip install --quiet --no-build-isolation -e '.[dev,profile,viz,integration,ray]'
	touch $(INTEGRATION_STAMP)

install: $(STAMP)

# The wheel as a user gets it: built from a copy of the sources (no stale build/ folder), installed
# in a fresh venv outside the checkout, run from there (the catalog and examples are package data).
wheel-check: $(STAMP)
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && set -e && \
	mkdir "$$tmp/src" && cp -R pyproject.toml README.md planner profiles "$$tmp/src/" && \
	$(BIN)/pip wheel --quiet --no-deps -w "$$tmp/dist" "$$tmp/src" && \
	$(BIN)/python -m venv "$$tmp/venv" && \
	"$$tmp/venv/bin/pip" install --quiet "$$tmp"/dist/planner-*.whl && \
	cd "$$tmp" && \
	./venv/bin/planner gpus > gpus.txt && ./venv/bin/planner plan > plan.txt && \
	echo "wheel-check: $$(ls dist) installed outside the checkout; planner gpus and planner plan ran"

# the suite runs on every core (pytest-xdist; tests share no state but temporary directories);
# PYTEST_WORKERS= (empty) runs it in one process
PYTEST_WORKERS ?= -n auto --dist worksteal

test: wheel-check $(INTEGRATION_STAMP)
	PLANNER_REQUIRE_TORCH=1 PLANNER_REQUIRE_INTEGRATION=1 PLANNER_REQUIRE_RAY=1 $(BIN)/python -m pytest -q $(PYTEST_WORKERS) \
		-m "not exhaustive"

# the oracle instances whose brute force takes 5 s or more on 2 cores (10 s for the TP-split ones)
test-exhaustive: $(TEST_STAMP)
	$(BIN)/python -m pytest -q $(PYTEST_WORKERS) -m exhaustive

# the quick loop while editing: everything but the `slow` tests (the brute-force oracle checks and
# other long runs) and the `integration` ones, on the extras installed; `make test` runs them all
test-fast: $(TEST_STAMP)
	$(BIN)/python -m pytest -q $(PYTEST_WORKERS) -m "not slow and not integration"

integration: $(INTEGRATION_STAMP)
	PLANNER_REQUIRE_INTEGRATION=1 $(BIN)/python -m pytest -q -m integration

plan: $(STAMP)
	$(BIN)/planner plan

fidelity: $(STAMP)
	$(BIN)/python benchmarks/fidelity.py

# after a change to the cost model: the pin (benchmarks/fidelity-expected.json) and docs/fidelity-table.md
fidelity-refresh: $(STAMP)
	$(BIN)/python benchmarks/fidelity.py --write-expected --markdown docs/fidelity-table.md

clean:
	rm -rf $(VENV) build *.egg-info
