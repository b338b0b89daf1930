# The two commands a newcomer needs:
#   make report   set up .venv and run the default (mini) pipeline to report/mini/index.html
#   make test     set up .venv and run the tests
PYTHON ?= python3.11
VENV := .venv
CORES ?= all
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)

.PHONY: report test lint bench clean

$(VENV)/.installed: pyproject.toml
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet -e '.[test]'
	touch $@

report: $(VENV)/.installed
	snakemake --cores $(CORES)
	@echo "report: $(CURDIR)/report/mini/index.html"

test: $(VENV)/.installed
	pytest

lint: $(VENV)/.installed
	snakemake --lint

bench: $(VENV)/.installed
	python benchmarks/step_time.py
