# Two commands do all the set-up on a fresh machine with Python 3.11+ and make:
#   make plan   - plan the example stack on the embedded catalog (no credentials)
#   make test   - lint (code and workflows), type-check and run the whole test suite
#                 (installs Debian's shellcheck, chromium and chromedriver first if absent)
# uv comes from PATH, or is installed once into .tools/ with pip, checked against the sha256
# hashes in scripts/uv-requirements.txt.

SHELL := /bin/bash
PYTHON ?= python3
UV ?= $(shell command -v uv 2>/dev/null || echo .tools/bin/uv)
STACK ?= stacks/Pulumi.llama70b-chat.yaml
export UV_COMPILE_BYTECODE := 1

.PHONY: plan test sync test-tools lint lint-workflows typecheck pytest bench clean

.tools/bin/uv: scripts/uv-requirements.txt
	$(PYTHON) -m venv .tools
	.tools/bin/pip install --quiet --require-hashes --no-deps --only-binary :all: --requirement scripts/uv-requirements.txt

.venv/.synced: pyproject.toml uv.lock | $(UV)
	$(UV) sync --locked --quiet
	$(UV) run --no-sync python -m compileall -q selector hub cloudapi deployment catalog machine gitops providers cli
	@touch $@

sync: .venv/.synced

plan: sync
	$(UV) run --no-sync gpufit plan $(STACK)

lint: sync
	$(UV) run --no-sync ruff check .

test-tools:
	@bash scripts/ensure-test-tools.sh

# actionlint (runs shellcheck on run: scripts when it is installed) and zizmor (security)
lint-workflows: sync test-tools
	$(UV) run --no-sync actionlint .github/workflows/*.yml
	$(UV) run --no-sync zizmor --persona auditor --offline --quiet .github/workflows

typecheck: sync
	$(UV) run --no-sync mypy

pytest: sync test-tools
	$(UV) run --no-sync pytest

test: test-tools lint lint-workflows typecheck pytest

bench: sync
	$(UV) run --no-sync python benchmarks/bench_plan.py
	$(UV) run --no-sync python benchmarks/bench_refresh.py --latency-ms 50
	$(UV) run --no-sync python benchmarks/bench_refresh.py --latency-ms 150

clean:
	rm -rf .venv .tools .pytest_cache .mypy_cache .ruff_cache
