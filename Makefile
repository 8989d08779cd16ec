# distbench: `make help` lists the targets. The venv is .venv; torch is installed first
# (pinned, so pip takes the CPU wheel here and never pulls a CUDA build by accident).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TORCH := torch==2.13.0

.DEFAULT_GOAL := help
.PHONY: help install run sweep test test-unit lint format ui clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install $(TORCH)
	$(BIN)/pip install -e '.[dev,server,slurm]'  # the tests use both extras
	touch $(STAMP)

install: $(STAMP) ## create .venv: torch first, then distbench and its dependencies

run: install ## the default job: tiny model, dp, 2 ranks, into ./mlflow.db (about a minute on CPU)
	$(BIN)/python run.py

sweep: install ## the README's sweep: dp, tp, zero3 at world sizes 2 and 4
	$(BIN)/python run.py -m strategy=dp,tp,zero3 world_size=2,4

# Two pytest-xdist workers, two tests at once: the rank layers' tests in groups that share a
# fixture (tests/conftest.py's xdist_group), the unit layer's one by one.
test: install ## all tests, 2 at a time: unit, distributed (real gloo ranks), e2e (real sweeps), gpu (skips here)
	$(BIN)/python -m pytest -n 2 --dist loadgroup tests

gpu-check: install ## on a GPU machine: every workload and engine that fits the GPUs, one JSON + markdown summary
	$(BIN)/python benchmarks/gpu_check.py

test-unit: install ## the fast layer only
	$(BIN)/python -m pytest -m unit

lint: install ## ruff check + format check
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

format: install ## ruff format + fixes
	$(BIN)/ruff format . && $(BIN)/ruff check --fix .

ui: install ## the MLflow UI on ./mlflow.db, bound to 127.0.0.1:5000
	$(BIN)/distbench ui

clean: ## remove run outputs (keeps .venv and mlflow.db)
	rm -rf outputs multirun/*/ .pytest_cache .ruff_cache
