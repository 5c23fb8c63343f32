# The two commands of the README: `make demo` (the main job) and `make test` (lint + the whole test suite).
# Each sets up what it needs first (scripts/bootstrap.sh).
DAGSTER_HOME ?= $(CURDIR)/data/dagster_home
export DAGSTER_HOME

.PHONY: demo test test-s3 lint bench ui setup

demo:
	scripts/bootstrap.sh run
	.venv/bin/sharp-dagster demo

test:
	scripts/bootstrap.sh test
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .
	scripts/test.sh

# Opt-in: the warehouse on a real S3-compatible server (SeaweedFS, built from its Go module on first use).
test-s3:
	scripts/bootstrap.sh s3
	.venv/bin/python -m pytest sharp_dagster_tests/cluster/test_s3.py -q

lint:
	.venv/bin/ruff check . && .venv/bin/ruff format --check .

bench:
	scripts/bootstrap.sh bench
	.venv/bin/python bench/run_all.py

ui:
	mkdir -p $(DAGSTER_HOME)
	.venv/bin/dagster dev -w workspace.yaml
