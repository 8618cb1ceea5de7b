# Two commands do all the set-up on a fresh machine with Python 3.11+ and make:
#   make plan   - plan the example stack on the embedded catalog (no credentials)
#   make test   - lint, type-check and run the whole test suite
# uv comes from PATH, or is installed once into .tools/ with pip.

SHELL := /bin/bash
PYTHON ?= python3
UV ?= $(shell command -v uv 2>/dev/null || echo .tools/bin/uv)
STACK ?= stacks/Pulumi.llama70b-chat.yaml
export UV_COMPILE_BYTECODE := 1

.PHONY: plan test sync lint typecheck pytest bench clean

.tools/bin/uv:
	$(PYTHON) -m venv .tools
	.tools/bin/pip install --quiet uv==0.13.9

.venv/.synced: pyproject.toml uv.lock | $(UV)
	$(UV) sync --locked --quiet
	$(UV) run --no-sync python -m compileall -q selector providers cli
	@touch $@

sync: .venv/.synced

plan: sync
	$(UV) run --no-sync gpufit plan $(STACK)

lint: sync
	$(UV) run --no-sync ruff check .

typecheck: sync
	$(UV) run --no-sync mypy

pytest: sync
	$(UV) run --no-sync pytest

test: lint typecheck pytest

bench: sync
	$(UV) run --no-sync python benchmarks/bench_plan.py
	$(UV) run --no-sync python benchmarks/bench_refresh.py --latency-ms 50
	$(UV) run --no-sync python benchmarks/bench_refresh.py --latency-ms 150

clean:
	rm -rf .venv .tools .pytest_cache .mypy_cache .ruff_cache
