# `make demo` and `make test` each bootstrap .venv from nothing, then run.
# On a GPU cluster, install a CUDA torch instead of the CPU wheel, e.g.
#   make TORCH_SPEC="torch==2.13.0" PIP_TORCH_ARGS="--index-url <your CUDA wheel index>" venv
PYTHON      ?= python3
VENV        := .venv
PY          := $(VENV)/bin/python
PIP         := $(PY) -m pip
STAMP       := $(VENV)/.installed
TORCH_SPEC  ?= torch==2.13.0
PIP_TORCH_ARGS ?=
DEEPSPEED_SPEC ?= deepspeed==0.19.8
# SGLang's HTTP contract (sglang.api.v1.api_types) for the tests, without its dependencies: its server
# needs CUDA and a GPU stack; the contract module needs only msgspec (a dev dependency).
SGLANG_SPEC ?= sglang==0.5.23
PYTEST_ARGS ?=
# Two test processes (pytest-xdist), one file at a time each (tests/conftest.py groups them, the long
# fault-injection group first): most tests wait on the subprocesses they start (servers, stage jobs,
# engines), so two cores carry two files at once. PYTEST_WORKERS=0: one process.
PYTEST_WORKERS ?= 2
# torch comes from pip (it honours PIP_TORCH_ARGS and pip's own index settings), without compiling
# its thousands of modules to bytecode up front (a minute on 2 cores; Python compiles what it imports);
# uv installs the other ~150 packages in a fraction of pip's time, against the same pinned constraints
# (a private index: set UV_INDEX_URL as well as pip's).
UV_SPEC     ?= uv==0.13.9
UV_INSTALL  := $(VENV)/bin/uv pip install --python $(PY)

export DO_NOT_TRACK := 1
export PREFECT_SERVER_ANALYTICS_ENABLED := false
export AWS_EC2_METADATA_DISABLED := true
export WANDB_MODE ?= offline
export TOKENIZERS_PARALLELISM := false
export HF_HUB_OFFLINE := 1
export PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS := 60
# The demo and the tests start dozens of Python processes; each reuses the bytecode the first one
# compiled (nothing is compiled at install time), so bytecode caching stays on even where the
# environment turns it off.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: venv demo test clean

venv: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --no-compile $(TORCH_SPEC) $(PIP_TORCH_ARGS)
	$(PIP) install -q --no-compile $(UV_SPEC)
	$(UV_INSTALL) -q -U setuptools wheel
	DS_BUILD_OPS=0 $(UV_INSTALL) -q --no-build-isolation $(DEEPSPEED_SPEC) -c constraints.txt
	$(UV_INSTALL) -q -e '.[dev]' -c constraints.txt -C editable_mode=compat
	$(UV_INSTALL) -q --no-deps $(SGLANG_SPEC)
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/posttrain pipeline --spec specs/tiny.yaml

# Lint (ruff: rules in pyproject.toml) and the layer contracts (import-linter) first: either fails the run.
# Two test files at once each run torch on every core, and torch's OpenMP threads spin at each barrier
# while the other file's threads wait for the core: two smoke pipelines side by side took 332 s each.
# Threads that sleep at once when idle (passive) took 171 s each; one pipeline alone, 145 s (142 s spinning).
test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports --no-cache
	OMP_WAIT_POLICY=PASSIVE $(PY) -m pytest -n $(PYTEST_WORKERS) --dist loadscope --no-loadscope-reorder $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) artifacts runs build *.egg-info .pytest_cache .hypothesis
