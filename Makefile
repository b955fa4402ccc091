# Builds .venv from the pinned requirements on first use and reuses it afterwards.
# `make bench` is the main job, `make test` the test suite (see README "Quick start").
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: bench test lint clean-venv

$(STAMP): requirements.txt requirements-base.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -qq --upgrade pip
	$(BIN)/pip install -qq -r requirements.txt
	$(BIN)/pip install -qq --no-deps -e .
	touch $@

# every suite, quick profile, on the hardware present; then the HTML report
bench: $(STAMP)
	$(BIN)/release-bench run --profile quick

test: $(STAMP)
	$(BIN)/pytest

lint: $(STAMP)
	$(BIN)/ruff check .

clean-venv:
	rm -rf $(VENV)
