# The two set-up commands: `make demo` and `make test`. Each builds .venv on first use.
# `make package` writes dist/ for spark-submit (see infra/package.py).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test bench package clean

$(STAMP): pyproject.toml
	@command -v java >/dev/null 2>&1 || { echo "Java 17 is required (apt-get install openjdk-17-jre-headless)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	@touch $(STAMP)

demo: $(STAMP)
	$(PY) -m demo

test: $(STAMP)
	$(PY) -m pytest -q

bench: $(STAMP)
	$(PY) -m benchmarks

package: $(STAMP)
	$(PY) -m infra.package --out dist

clean:
	rm -rf $(VENV) demo-output bench-output dist .pytest_cache
