# The two commands a newcomer needs:
#   make report   set up .venv and run the default (mini) pipeline to report/mini/index.html
#   make test     set up .venv and run the tests
PYTHON ?= python3.11
VENV := .venv
CORES ?= all
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)

.PHONY: report test test-unit test-slurm rehearsal test-rehearsal lint bench mutation gpu-wheels

$(VENV)/.installed: pyproject.toml
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet -e '.[test]'
	touch $@

report: $(VENV)/.installed
	snakemake --cores $(CORES)
	@echo "report: $(CURDIR)/report/mini/index.html"

# one torch and BLAS thread a test worker (tests/conftest.py sets torch's too): two workers with a
# thread per core each wait on each other's threads
test: $(VENV)/.installed
	OMP_NUM_THREADS=1 pytest -n 2 --dist loadfile

# The unit and property tests alone, about 3 minutes on 2 cores: no Snakemake, and no config/
# (they read tests/fixtures/config; the tests marked `config` check config/ itself, in `make test`).
test-unit: $(VENV)/.installed
	OMP_NUM_THREADS=1 pytest -n 2 --dist loadfile -m "not integration and not config and not slurm and not rehearsal and not gpu"

# The paper scale's whole DAG on fake data in the real formats (config/rehearsal.yaml): about
# 30 minutes on 2 cores, report/rehearsal/index.html. Its files stay in resources/rehearsal/ and
# results/rehearsal/, apart from the real data's.
rehearsal: $(VENV)/.installed
	resrepro rehearse --cores $(CORES)
	@echo "report: $(CURDIR)/report/rehearsal/index.html"

# The rehearsal in a temporary copy, with the network refused to every compute job, then checked
# (tests/test_rehearsal_run.py).
test-rehearsal: $(VENV)/.installed
	pytest -m rehearsal -s

# profiles/slurm on a real one-node Slurm (tests/slurm/one_node_slurm.sh; installs Debian's
# packages when root). Skips without them unless RESREPRO_REQUIRE_SLURM=1.
test-slurm: $(VENV)/.installed
	pytest -m slurm

lint: $(VENV)/.installed
	snakemake --lint

# Mutation testing of the modules that compute reported numbers ([tool.mutmut] in pyproject.toml):
# hours on 2 cores, so not in CI. Survivors: `mutmut results`, `mutmut show NAME`.
mutation: $(VENV)/.installed
	$(VENV)/bin/pip install --quiet -e '.[test,mutation]'
	mutmut run --max-children 2
	mutmut results

# Issue 11's step-cost tables: every residual variant against its baseline, on PreAct-ResNet-20
# and on the base Transformer's width (benchmarks/README.md has the switches, e.g. --device cuda).
bench: $(VENV)/.installed
	python benchmarks/step_time.py
	python benchmarks/transformer_step_time.py

# The packages a lent GPU machine lacks, as wheels for its Python, into .whl/ (here, with the
# internet); there: `python3 benchmarks/gpu_session.py --wheels .whl ...`, carrying .whl.
gpu-wheels: $(VENV)/.installed
	python benchmarks/gpu_session.py --download-wheels .whl
