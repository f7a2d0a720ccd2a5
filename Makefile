# Every target bootstraps its own virtualenv: a fresh clone needs nothing installed by hand.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml shared/requirements.txt | cksum | cut -d' ' -f1)

.PHONY: venv test lint typecheck imports template-lint pytest demo bench build clean

venv: $(STAMP)

$(STAMP): pyproject.toml shared/requirements.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check --upgrade pip
	$(PY) -m pip install -q --disable-pip-version-check -e '.[dev]'
	rm -f $(VENV)/.installed-* && touch $@

test: lint typecheck imports template-lint pytest

lint: venv
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/ruff check .

typecheck: venv
	$(VENV)/bin/mypy

imports: venv
	$(VENV)/bin/lint-imports

pytest: venv
	$(PY) -m pytest

demo: venv
	$(VENV)/bin/crcr demo

bench: venv
	$(PY) bench/run.py --out bench/results.json

clean:
	rm -rf $(VENV) .aws-sam .pytest_cache .mypy_cache .ruff_cache
