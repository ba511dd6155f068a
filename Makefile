# The two set-up commands: `make demo` and `make test`. Each builds .venv on first use.
# `make test-lowest` runs the tests again at the oldest Spark line and lowest pyarrow the
# pins allow (.ci/lowest.txt), in .venv-lowest; CI runs both.
# `make package` writes dist/ for spark-submit (see infra/package.py).
# `make bench BENCH_ARGS=--large` adds the 10M-object lakes to the benchmarks.
PYTHON ?= python3
VENV ?= .venv
PIP_CONSTRAINTS ?=
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test test-lowest lint bench package clean

$(STAMP): pyproject.toml $(PIP_CONSTRAINTS)
	@command -v java >/dev/null 2>&1 || { echo "Java 17 is required (apt-get install openjdk-17-jre-headless)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(if $(PIP_CONSTRAINTS),-c $(PIP_CONSTRAINTS)) -e '.[dev]'
	@touch $(STAMP)

demo: $(STAMP)
	$(PY) -m demo

test: $(STAMP)
	$(PY) -m pytest -q

test-lowest:
	$(MAKE) test VENV=.venv-lowest PIP_CONSTRAINTS=.ci/lowest.txt

lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m mypy

bench: $(STAMP)
	$(PY) -m benchmarks $(BENCH_ARGS)

package: $(STAMP)
	$(PY) -m infra.package --out dist

clean:
	rm -rf $(VENV) .venv-lowest demo-output bench-output dist .pytest_cache
