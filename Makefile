# The newcomer commands: `make run` (set up, then run the embedded default end to end and record
# its results with DVC) and `make test` (set up, then run the test suite). `make dag` redraws the
# committed DAG pictures; `make clean` deletes every result (README: "Resuming, forcing, cleaning").
SHELL := /bin/bash
export PATH := $(CURDIR)/.venv/bin:$(PATH)
export HF_HUB_OFFLINE := 1
CORES ?= 2

.PHONY: setup run test dryrun dag clean

setup:
	bash scripts/setup.sh

# `dvc commit` records what Snakemake built in dvc.lock and puts the deliverables (exports, trained
# adapters, evals, the report) in the DVC cache, so `dvc push` / `dvc pull` move them.
run: setup
	snakemake --cores $(CORES)
	dvc commit --force --quiet

# The gate: everything but the few long end-to-end runs marked `extended` (each has a faster
# sibling in the gate); test-all runs those too.
test: setup
	python -m pytest -q -p no:cacheprovider -m "not extended" --durations=20 tests

test-all: setup
	python -m pytest -q -p no:cacheprovider tests

dryrun: setup
	snakemake -n --cores $(CORES)

# docs/dag (rule graph and job DAG: dot, SVG, PNG), docs/rulegraph.mmd and README.md's DVC stage graph.
dag: setup
	termforge dag --out docs/dag --mermaid docs/rulegraph.mmd --readme README.md

clean:
	rm -rf results .snakemake
