# mediamesh: `make run` starts the mesh, `make test` runs the whole suite.
# Both set up .venv from nothing when it is missing or out of date.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
BIN := $(VENV)/bin
# The CPU build of torch installs from local disk here; a floating torch pulls CUDA.
TORCH_SPEC ?= torch==2.13.0
MODELS_DIR ?= .mediamesh/models
GENERATED := services/common/generated
# mypy cannot follow the editable install's import hook that maps services/ to `mediamesh`;
# `make lint` checks the package through a link of that name in this folder (mypy_path).
TYPECHECK := .mediamesh/typecheck
# Test fixtures and helpers are type-checked too; test bodies are not.
TEST_HELPERS = $(shell find tests -name '*.py' ! -name 'test_*.py' | sort)
PROTOS := $(shell find protos -name '*.proto')

.PHONY: setup system-deps run test test-fast lint format protos models bench bench-smoke gpu-check gpu-wheels clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c constraints.txt "$(TORCH_SPEC)"
	$(PY) -m pip install -q -c constraints.txt -e '.[dev,sim,deepspeed]'
	touch $@

# The one target that writes generated stubs; never edit them by hand.
protos: setup
	rm -rf $(GENERATED)
	$(PY) -m mediamesh.common.protogen $(GENERATED)

models: setup
	$(BIN)/mediamesh models build --out $(MODELS_DIR)

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	mkdir -p $(TYPECHECK) && ln -sfn ../../services $(TYPECHECK)/mediamesh
	$(BIN)/mypy -p mediamesh
	$(BIN)/mypy $(TEST_HELPERS)
	$(BIN)/lint-imports --no-logo

format: setup
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

run: setup models
	$(BIN)/mediamesh up --models-dir $(MODELS_DIR)

# System packages the tests run (Debian names): installed with apt-get when `make test` runs
# as root, otherwise it stops with one line naming them. Prometheus scrapes a running mesh
# and its promtool tests the alerting rules. Chromium and its driver run the web
# page's test in a real headless browser; Node runs the page's script against scripted answers.
SYSTEM_PACKAGES := prometheus chromium chromium-driver nodejs

system-deps:
	bash scripts/system-deps $(SYSTEM_PACKAGES)

# Two test processes (pytest-xdist) share the machine for all but the tests marked serial,
# which compare timings or need the fixed default ports, and run alone afterwards.
TEST_PROCESSES ?= 2

test: system-deps setup lint models
	$(BIN)/pytest -q -p no:cacheprovider -n $(TEST_PROCESSES) --dist worksteal -m "not serial" \
		--durations=15
	$(BIN)/pytest -q -p no:cacheprovider -m serial --durations=5

test-fast: setup
	$(BIN)/pytest -q -p no:cacheprovider tests/unit

# Refuses a tree with uncommitted changes (results must name the code they measured);
# `make bench BENCH_ARGS=--allow-dirty` for a development run.
bench: setup models
	$(PY) -m bench.run all $(BENCH_ARGS)

bench-smoke: setup models
	$(PY) -m bench.run all --smoke

# On a CUDA machine: FLUX-width transformer timings and one mesh run, as JSON. Without one it
# runs the same code's CPU dry path (--dry) into .mediamesh/, never over the real results.
GPU_CHECK_ARGS ?=
gpu-check: setup models
	if $(PY) -c 'import sys, torch; sys.exit(not torch.cuda.is_available())'; then \
		$(PY) -m bench.gpu_check --out bench/results/gpu_check.json $(GPU_CHECK_ARGS); \
	else \
		echo "gpu-check: no CUDA device here; the CPU dry run"; \
		$(PY) -m bench.gpu_check --dry --out .mediamesh/gpu_check-dry.json $(GPU_CHECK_ARGS); \
	fi

# A lent CUDA machine has no package index: this fills .whl/ (ignored) with the wheels of
# mediamesh's dependencies its image lacks (CPython 3.12, x86-64), and prints their sizes.
# There, from a copy of this tree that carries .whl, the one command is
# `bash scripts/gpu_check.sh` (JSON and log into $OUT; see the script).
gpu-wheels: setup
	$(PY) -m bench.gpu_check_launch wheels --dest .whl

clean:
	rm -rf $(VENV) .mediamesh build *.egg-info
