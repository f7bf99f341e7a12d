PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# What the demo needs, without the test toolchain (playwright, schemathesis, mypy, SDKs).
RUN_STAMP := $(VENV)/.installed-run

.PHONY: test run lint typecheck bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check actors eventstore runtime tests benchmarks examples
	$(BIN)/ruff format --check actors eventstore runtime tests benchmarks examples

typecheck: $(STAMP)
	$(BIN)/mypy

test: lint typecheck
	$(BIN)/python -m pytest

$(RUN_STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e .
	touch $(RUN_STAMP)

run: $(RUN_STAMP)
	$(BIN)/python -m examples.travel_agent

bench: $(STAMP)
	$(BIN)/python -m benchmarks all --quick

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
