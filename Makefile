# The two newcomer commands: `make run` (set up, then run the embedded default end to end)
# and `make test` (set up, then run the test suite).
SHELL := /bin/bash
export PATH := $(CURDIR)/.venv/bin:$(PATH)
export HF_HUB_OFFLINE := 1
CORES ?= 2

.PHONY: setup run test dryrun dag clean

setup:
	bash scripts/setup.sh

run: setup
	snakemake --cores $(CORES)

test: setup
	python -m pytest -q -p no:cacheprovider tests

dryrun: setup
	snakemake -n --cores $(CORES)

clean:
	rm -rf results .snakemake
