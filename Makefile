# Builds .venv from the pinned requirements on first use and reuses it afterwards.
# `make bench` is the main job, `make test` the test suite (see README "Quick start").
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: bench test lint asv asv-versions asv-envs report clean-venv

$(STAMP): requirements.txt requirements-base.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -qq --upgrade pip
	$(BIN)/pip install -qq -r requirements.txt
	$(BIN)/pip install -qq --no-deps -e .
	touch $@

# every suite, quick profile, on the hardware present; then the HTML report (also when a
# case failed: the exit status is the run's)
bench: $(STAMP)
	$(BIN)/release-bench run --profile quick; status=$$?; \
	$(BIN)/release-bench report && exit $$status

# the browser tests of the HTML pages need Debian's chromium (installed here if missing), and
# asv's dashboard the scripts it loads (fetched once into .asv/vendor: the tests download
# nothing); each test's outcome and time go to results/scratch/pytest.xml (JUnit XML), the
# slowest and the time by file to the end of pytest's output. Two test processes, a file
# each at a time (pytest-xdist): a test that times, waits on timers or starts workers runs
# alone (conftest.py), the others side by side; TEST_WORKERS=0 runs them all in one.
TEST_WORKERS ?= 2
test: $(STAMP)
	@scripts/ensure-chromium.sh
	$(BIN)/release-bench asv-vendor
	$(BIN)/pytest -n $(TEST_WORKERS) --dist loadfile --junitxml=results/scratch/pytest.xml

report: $(STAMP)
	$(BIN)/release-bench report

# asv on this commit, in the .venv environment ("existing"), then the offline dashboard
asv: $(STAMP)
	$(BIN)/asv run --machine "$$($(BIN)/release-bench asv-machine)" \
	  --set-commit-hash "$$(git rev-parse HEAD)" --launch-method spawn $(ASV_ARGS)
	$(BIN)/release-bench asv-publish

# asv over the torch release axis, in asv's own terms: asv.versions.conf.json lists one
# virtualenv per torch version (asv builds them under .asv/env-versions), so the dashboard
# draws one line per torch version
asv-versions: $(STAMP)
	$(BIN)/asv run --config asv.versions.conf.json --machine "$$($(BIN)/release-bench asv-machine)" \
	  --launch-method spawn $(ASV_ARGS) HEAD^!; status=$$?; \
	$(BIN)/release-bench asv-publish; exit $$status

# the same axis over the environments `release-bench env create VERSION` built in .envs/
# (no second copy of each torch): each is one asv environment ("existing")
asv-envs: $(STAMP)
	@status=0; for env in .envs/torch-*/; do \
	  [ -f "$$env/release-bench-env.json" ] || continue; \
	  echo "== asv in $$env"; \
	  $(BIN)/asv run -E "existing:$(CURDIR)/$${env}bin/python" --machine "$$($(BIN)/release-bench asv-machine)" \
	    --set-commit-hash "$$(git rev-parse HEAD)" --launch-method spawn $(ASV_ARGS) || status=1; \
	done; $(BIN)/release-bench asv-publish; exit $$status

lint: $(STAMP)
	$(BIN)/ruff check .

clean-venv:
	rm -rf $(VENV)
