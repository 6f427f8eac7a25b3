# Two entry points: `make demo` and `make test`. Both create .venv/ on first use.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip --disable-pip-version-check -q
STAMP  := $(VENV)/.installed
# With an NVIDIA GPU, TensorFlow needs its CUDA libraries to see the GPU that DALI decodes on.
TF     := $(if $(shell nvidia-smi -L 2>/dev/null),tf-gpu,tf)

.PHONY: demo test docs install clean

install: $(STAMP)

# The DALI TensorFlow plugin compiles against the TensorFlow that is already installed,
# so it comes last, without build isolation and without pip's cache (a wheel cached from an earlier build was
# compiled against the TensorFlow of then); it is reinstalled whenever pyproject.toml or this file changes.
$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --upgrade pip setuptools wheel
	$(PIP) install -e '.[$(TF),cuda120,s3,dev,docs]'
	$(PIP) install --no-build-isolation --force-reinstall --no-deps --no-cache-dir 'nvidia-dali-tf-plugin-cuda120==2.4.0'
	$(PY) -c "import nvidia.dali.plugin.tf"
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/daliloader bench --label-mode onehot,int --seconds 2

# ruff first (a lint failure costs seconds, not the suite's minutes); its rules are in pyproject.toml.
# The suite runs on TEST_WORKERS processes (pytest-xdist; each imports TensorFlow and DALI). A worker that a
# hung test ends (tests/conftest.py) is not replaced: the run stops there, as it does on one process.
TEST_WORKERS ?= 2
test: $(STAMP)
	$(VENV)/bin/ruff check .
	DALILOADER_TESTS_REQUIRE=all $(PY) -m pytest -q -n $(TEST_WORKERS) --max-worker-restart=0

# The documentation site, built strictly (a broken link or reference fails), into build/docs/.
docs: $(STAMP)
	$(PY) -m sphinx -W --keep-going -n -q -b html docs build/docs
	@echo "open build/docs/index.html"

clean:
	rm -rf $(VENV) build *.egg-info
