# The two set-up commands: `make demo` and `make test`. Each builds .venv on first use.
# `make test` runs the jars-free suite, then `make test-jars`: the tests that need Delta's Spark jars
# or Spark's S3 connector (markers delta_jars, s3a; jars_too runs a test both ways), in a Spark session started with the jars that
# `python -m infra.jvm_jars` fetches with Maven into ~/.cache/lake-housekeeping (skipped, saying why,
# when it cannot). `make test-lowest` runs both at the oldest Spark line and lowest pyarrow the pins
# allow (.ci/lowest.txt), in .venv-lowest; CI runs both, and the jars tests once more on Spark 4.2
# (.ci/spark42.txt), the newest line a Delta release is built for.
# `make package` writes dist/ for spark-submit (see infra/package.py).
# `make bench BENCH_ARGS=--large` adds the 10M-object lakes to the benchmarks; `make bench-delta` (which
# `make bench` runs last) times Delta's own VACUUM against job 2, on the Spark 4.2 line (.venv-spark42),
# since Delta's jars exist for no newer one: 1M objects in 50 and in 500 tables on local disk, 100,000
# in 50 tables on moto's S3 API behind a proxy adding 0 and 20 ms to every request. Hours on 2 cores;
# the 500-table loops stop after 25 minutes each, which bounds their ratios from below.
PYTHON ?= python3
VENV ?= .venv
PIP_CONSTRAINTS ?=
PY := $(VENV)/bin/python
# What make test-jars runs; CI narrows it on the Spark 4.2 line (.ci/run).
JARS_MARKERS ?= delta_jars or s3a or jars_too
STAMP := $(VENV)/.installed

.PHONY: demo test test-jars test-lowest lint durations bench bench-delta package clean

# --no-compile: Python compiles a module when it is first imported; compiling all of PySpark's at install
# took half the install's time.
$(STAMP): pyproject.toml $(PIP_CONSTRAINTS)
	@command -v java >/dev/null 2>&1 || { echo "Java 17 is required (apt-get install openjdk-17-jre-headless)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q --no-compile $(if $(PIP_CONSTRAINTS),-c $(PIP_CONSTRAINTS)) -e '.[dev]'
	@touch $(STAMP)

demo: $(STAMP)
	$(PY) -m demo

test: $(STAMP)
	$(PY) -m pytest -q -m "not delta_jars and not s3a"
	$(MAKE) test-jars

test-jars: $(STAMP)
	@jars=$$($(PY) -m infra.jvm_jars) || jars=; LAKE_TEST_JARS="$$jars" $(PY) -m pytest -q -m "$(JARS_MARKERS)"

test-lowest:
	$(MAKE) test VENV=.venv-lowest PIP_CONSTRAINTS=.ci/lowest.txt

lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m mypy

# tests/DURATIONS.md from the profiles a CI run recorded (.ci/run prints where: PROFILES='/tmp/tmp.*/*.jsonl'),
# or from a `make test` run here when none is named; BALANCE=1 also rewrites .ci/lines.txt's balanced part.
PROFILES ?=
durations: $(STAMP)
	$(if $(PROFILES),,rm -f .durations.jsonl && LAKE_TEST_PROFILE=$(CURDIR)/.durations.jsonl $(MAKE) test)
	$(PY) -m tests.durations $(or $(PROFILES),.durations.jsonl) > tests/DURATIONS.md
	$(if $(BALANCE),$(PY) -m tests.durations --balance $(or $(PROFILES),.durations.jsonl))

bench: $(STAMP)
	$(PY) -m benchmarks $(BENCH_ARGS)
	$(MAKE) bench-delta

bench-delta:
	$(MAKE) .venv-spark42/.installed VENV=.venv-spark42 PIP_CONSTRAINTS=.ci/spark42.txt
	.venv-spark42/bin/python -m benchmarks.delta_vacuum --tables 50 --files-per-table 20000
	.venv-spark42/bin/python -m benchmarks.delta_vacuum --tables 500 --files-per-table 2000 --repeat 1 \
	    --sides full inventory --budget-s 1500
	.venv-spark42/bin/python -m benchmarks.delta_vacuum --s3 --tables 50 --files-per-table 2000

package: $(STAMP)
	$(PY) -m infra.package --out dist

clean:
	rm -rf $(VENV) .venv-lowest .venv-spark42 demo-output bench-output dist .pytest_cache
