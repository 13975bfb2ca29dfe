# The README's two commands: `make demo` and `make test`. Everything else is a helper.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test test-fast test-under-load lint typecheck unit venv bench bench-quick chaos completions clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[server,dev]'
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	PATH="$(CURDIR)/$(BIN):$$PATH" bash examples/demo.sh

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks tools
	$(BIN)/ruff format --check src tests benchmarks tools

# src under --strict; tests/ under the same configuration (pyproject's strict = true), so the
# fakes are held to the Protocols they stand in for and the fixtures to what they return.
typecheck: $(STAMP)
	$(BIN)/mypy --strict src
	$(BIN)/mypy tests

unit: $(STAMP)
	$(BIN)/pytest -q tests/unit

test: $(STAMP) lint typecheck
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/pytest -q -p no:cacheprovider -n 3 --maxschedchunk 1 --durations=10

# The inner loop: the unit and integration kinds (tests/README.md) minus the tests marked `slow`
# (the herd of thousands of waiters, the property runs, the scope matrix, and the few
# integration tests that start server or command processes). Left out
# whole are the kinds whose every test drives real processes through real time or runs long:
# tests/system (`run` processes and signals, the CLI against live servers and a terminal, the
# docs' recipes run verbatim, TLS servers and edge floods, the gateway, upgrades from earlier
# releases, fuzzing a live server) and tests/soak (chaos campaigns, the soak, the database freeze,
# the benchmarks' smoke run). `make test` still runs all of them.
SLOW_DIRS := tests/system tests/soak
test-fast: $(STAMP)
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/pytest -q -p no:cacheprovider -n 2 --durations=10 \
		-m "not slow" $(addprefix --ignore=,$(SLOW_DIRS))

# The timing-sensitive suites with a CPU hog spinning on each of two cores: a test must not fail
# because the machine is busy (CI and developers share small machines). The hogs are this
# recipe's own children, killed when it ends however it ends; the exit status is pytest's.
# Result of a run: docs/reliability.md, "the suite under load".
UNDER_LOAD := tests/system/run tests/system/cli tests/system/docs tests/system/server \
	tests/system/chaos tests/integration/server tests/integration/store tests/soak/chaos
test-under-load: $(STAMP)
	@hogs=""; \
	for core in 1 2; do $(BIN)/python -c 'while 1: pass' & hogs="$$hogs $$!"; done; \
	trap 'kill $$hogs 2>/dev/null' EXIT INT TERM; \
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/pytest -q -p no:cacheprovider -n 2 --durations=10 \
		$(UNDER_LOAD)

bench: $(STAMP)
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m benchmarks.run --out benchmarks/results/latest.md

bench-quick: $(STAMP)
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m benchmarks.run --mode quick

chaos: $(STAMP)
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m tools.chaos.harness --long

completions: $(STAMP)
	for sh in bash zsh fish; do $(BIN)/jobagentctl completion $$sh > completions/jobagentctl.$$sh; done
	$(BIN)/python -m jobagentctl.cli.completion_cmd   # the command tree Tab answers from

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
