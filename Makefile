# The two set-up commands: `make demo` and `make test`. Each builds .venv on first use: the newest Spark
# line a Delta release is built for (constraints/default.txt), so that both run on Delta's own jars, which
# `python -m infra.jvm_jars` fetches with Maven into ~/.cache/lake-housekeeping (`make demo` says so in one
# line and runs without them when it cannot).
# `make test` writes Delta's feature tables once (make feature-lake), then in two processes side by side (SHARDS)
# runs the jars-free suite, then `make test-jars`: the tests that need Delta's Spark jars
# or Spark's S3 connector (markers delta_jars, s3a; jars_too runs a test both ways), in a Spark session
# started with them (skipped, saying why, when they cannot be fetched). `make test-newest` runs both on the
# newest PySpark, jars-free but for the S3 connector, as a plain `pip install` gets it (.venv-newest);
# `make test-lowest` at the oldest Spark line and lowest pyarrow the pins allow (.ci/lowest.txt), in
# .venv-lowest. CI runs all three lines (.ci/run).
# `make package` writes dist/ for spark-submit (see infra/package.py); `make docs` the documentation site.
# `make bench BENCH_ARGS=--large` adds the 10M-object lakes to the benchmarks; `make bench-delta` (which
# `make bench` runs last) times Delta's own VACUUM against job 2: 1M objects in 50 and in 500 tables on
# local disk, 100,000 in 50 tables on moto's S3 API behind a proxy adding 0 and 20 ms to every request.
# Hours on 2 cores; the 500-table loops stop after 25 minutes each, which bounds their ratios from below.
PYTHON ?= python3
VENV ?= .venv
PIP_CONSTRAINTS ?= constraints/default.txt
PY := $(VENV)/bin/python
# What make test-jars runs; CI narrows it on the Spark 4.2 line (.ci/run).
JARS_MARKERS ?= delta_jars or s3a or jars_too
STAMP := $(VENV)/.installed

.PHONY: demo test test-shard feature-lake test-jars test-newest test-lowest lint docs durations bench bench-delta package clean

# --no-compile: Python compiles a module when it is first imported; compiling all of PySpark's at install
# took half the install's time.
$(STAMP): pyproject.toml $(PIP_CONSTRAINTS)
	@command -v java >/dev/null 2>&1 || { echo "Java 17 is required (apt-get install openjdk-17-jre-headless)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q --no-compile $(if $(PIP_CONSTRAINTS),-c $(PIP_CONSTRAINTS)) -e '.[dev]'
	@touch $(STAMP)

# The demo on Delta's jars where they can be fetched (its tables written by Delta's writer, our commits in
# their history); one line saying so, and the jars-free path, where they cannot.
demo: $(STAMP)
	@jars=$$($(PY) -m infra.jvm_jars) || { jars=; echo "make demo: Delta's jars could not be fetched (the line above says why): running without them"; }; \
	  PYSPARK_SUBMIT_ARGS="$${jars:+--jars $$jars }pyspark-shell" $(PY) -m demo

# make test runs the suite in SHARDS processes side by side, each a share of it (balanced by
# tests/DURATIONS.md), jars-free then with the jars, its lines marked [i/n]: two keep two cores busy. CI runs
# two lines at once instead, each in one process (.ci/run sets SHARDS=1).
SHARDS ?= 2
test: $(STAMP)
	$(MAKE) feature-lake
ifeq ($(SHARDS),1)
	$(MAKE) test-shard
else
	@$(PY) -m infra.jvm_jars >/dev/null 2>&1 || true  # fetched once, before the shards look them up
	@trap 'kill 0' INT TERM; dir=$$(mktemp -d); for i in $$(seq 1 $(SHARDS)); do \
	  { LAKE_TEST_SHARD=$$i/$(SHARDS) $(MAKE) --no-print-directory test-shard 2>&1; echo $$? > $$dir/$$i; } \
	    | sed -u "s|^|[$$i/$(SHARDS)] |" & \
	done; wait; status=0; for i in $$(seq 1 $(SHARDS)); do [ "$$(cat $$dir/$$i)" = 0 ] || status=1; done; \
	rm -rf $$dir; exit $$status
endif

# One share (LAKE_TEST_SHARD=i/n, unset: all) of the suite: the jars-free tests, then the jars ones.
test-shard: $(STAMP)
	$(PY) -m pytest -q -m "not delta_jars and not s3a"
	$(MAKE) test-jars

# The lake of tables Delta's own writer writes (tests/feature_lake.py), cached once per Delta release in
# ~/.cache/lake-housekeeping/lakes: the jars-free tests read it too. Written with this environment's Delta
# jars; where no Delta release is built for its Spark (exit 3), by the default environment (test-newest).
# A fetch that fails is one line, and the tests that read the lake say why they skip.
feature-lake: $(STAMP)
	@$(PY) -m tests.feature_lake || [ $$? = 3 ] || echo "make feature-lake: not written (the line above says why)"

test-jars: $(STAMP)
	@jars=$$($(PY) -m infra.jvm_jars) || jars=; LAKE_TEST_JARS="$$jars" $(PY) -m pytest -q -m "$(JARS_MARKERS)"

test-newest:
	$(MAKE) feature-lake
	$(MAKE) test VENV=.venv-newest PIP_CONSTRAINTS=

test-lowest:
	$(MAKE) test VENV=.venv-lowest PIP_CONSTRAINTS=.ci/lowest.txt

lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m mypy

# The documentation site (mkdocs.yml: docs/*.md and the API reference) in site/, strict: a broken link fails.
$(VENV)/.docs-installed: $(STAMP)
	$(PY) -m pip install -q --no-compile $(if $(PIP_CONSTRAINTS),-c $(PIP_CONSTRAINTS)) -e '.[dev,docs]'
	@touch $@

docs: $(VENV)/.docs-installed
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict  # not --quiet: it hides the warnings strict counts

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

bench-delta: $(STAMP)
	$(PY) -m benchmarks.delta_vacuum --tables 50 --files-per-table 20000
	$(PY) -m benchmarks.delta_vacuum --tables 500 --files-per-table 2000 --repeat 1 \
	    --sides full inventory --budget-s 1500
	$(PY) -m benchmarks.delta_vacuum --s3 --tables 50 --files-per-table 2000

package: $(STAMP)
	$(PY) -m infra.package --out dist

clean:
	rm -rf $(VENV) .venv-newest .venv-lowest .venv-spark42 demo-output bench-output dist site .pytest_cache
