"""Shared fixtures: one real local Spark session for the whole run, and the S3 API on moto's server."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import settings

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
# The JVM side of the jars run (make test-jars): the --jars list python -m infra.jvm_jars printed, or
# empty when it could not fetch them; unset in the jars-free run.
JARS = os.environ.get("LAKE_TEST_JARS")
# The CI line this run is (tests.ci_lines): unset outside CI's runs, where every test runs.
LINE = os.environ.get("LAKE_TEST_LINE")
# "i/n": this process runs the i-th of n shares of the test modules (make test runs n side by side).
SHARD = os.environ.get("LAKE_TEST_SHARD")
# The whole suite shares one local JVM (driver and executors): Spark 3.5 outgrows the default 1 GiB heap.
os.environ.setdefault("PYSPARK_SUBMIT_ARGS", f"{f'--jars {JARS} ' if JARS else ''}--driver-memory 2g pyspark-shell")
# The JVMs the suite starts, unless SPARK_SUBMIT_OPTS is set already (spark-submit's launcher reads it, for
# the session's driver and every process a test starts). CPU is what CI waits on (its two chains share two
# cores), so the flags are chosen by CPU seconds. Java's serial collector took a fifth less than G1 over five
# minutes of in-process tests (467 to 379). The quick compiler alone (C1) took two fifths less in the
# processes a test starts (python -m demo: 113 to 65), and a fifth to a quarter less in the session too
# (tests/test_audit_first.py jars-free: 178 to 141; the daily cycle and test_vacuum_history.py with Delta 4.4:
# 237 to 173), at about the same wall time alone: the optimizing compiler's work ran on the second core,
# which in CI the other chain wants. C1 alone gets a 48 MB code cache by default, which Spark and Delta fill:
# 240 MB, the tiered default, keeps the sweeper from recompiling the same methods.
JVM = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m"
# Spark also compiles each new query's plan to Java bytecode (whole-stage and expression code generation):
# worth it over millions of rows, but the tests' queries read a few rows once each, and compiling was a
# seventh of the in-process tests' CPU (tests/test_erasure_document.py and test_audit_first.py: 316 to 270 CPU
# seconds), and a seventh of the wall time of the jars runs' in-process tests too (tests/test_pins_referee.py
# and test_delta_read.py with Delta 4.4: 128 to 109 s). So the session of every run evaluates plans
# interpreted, unless LAKE_TEST_CODEGEN=on. Every process a test starts (the user's path: the README's
# commands, the held and killed jobs, the clusters) keeps Spark's default: the interpreted mode is not the
# engine users run, and Spark 3.5 fails in it where compiled code does not (decoding the rows of
# Catalog.listTables on a Hive metastore: "argument type mismatch").
INTERPRETED = ("" if os.environ.get("LAKE_TEST_CODEGEN") == "on" else
               " -Dspark.sql.codegen.wholeStage=false -Dspark.sql.codegen.factoryMode=NO_CODEGEN")
SESSION_JVM = os.environ.get("SPARK_SUBMIT_OPTS", JVM + INTERPRETED)
os.environ.setdefault("SPARK_SUBMIT_OPTS", JVM)
# Set before Spark starts, so that its Python workers see them too: moto accepts any credentials.
for name, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                    "AWS_DEFAULT_REGION": "us-east-1"}.items():
    os.environ[name] = value
os.environ.pop("AWS_PROFILE", None)

# Delta tables other writers wrote (a folder of them: Delta's own test tables, a copy of production's),
# read by the tests marked golden beside the ones the suite writes itself; without it those are deselected.
GOLDEN = Path(os.environ["LAKE_TEST_GOLDEN_TABLES"]) if os.environ.get("LAKE_TEST_GOLDEN_TABLES") else None
README = Path(__file__).resolve().parents[1] / "README.md"
# What the documentation shows a user (README, the front door, and the pages of docs/): its commands,
# examples and SQL are run or parsed by the tests as written.
DOCS = [README, *sorted((README.parent / "docs").glob("*.md"))]


def documentation() -> str:
    """README and every page of docs/, one after the other."""
    return "\n".join(page.read_text() for page in DOCS)

# CI replays the same generated examples every run; developers get fresh ones.
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


def pytest_configure(config):
    """With ``LAKE_TEST_PROFILE`` set, each test's time and its causes go to that file (tests.durations)."""
    if os.environ.get("LAKE_TEST_PROFILE"):
        from tests.durations import Recorder

        config.pluginmanager.register(Recorder(os.environ["LAKE_TEST_PROFILE"], LINE, bool(JARS)), "lake-profile")


# What each marker of the jars run needs on the classpath, by the jar's name.
_NEEDS = {"delta_jars": ("delta-spark", "Delta's Spark jars"), "s3a": ("hadoop-aws", "hadoop-aws (Spark's S3 connector)")}


@pytest.hookimpl(tryfirst=True)  # before -m and --deselect: the line check sees the whole collection
def pytest_collection_modifyitems(config, items):
    """``s3`` follows from the fixture a test uses, so the marker cannot drift. A test that needs jars
    this run's classpath lacks is skipped saying why; in CI a jars run whose fetch failed is an error.
    In CI (``LAKE_TEST_LINE``) the tests ``.ci/lines.txt`` gives to other lines are deselected, once the
    whole collection is proven to leave no test on no line (tests.ci_lines). Without golden tables, the
    tests marked golden are deselected."""
    if JARS == "" and os.environ.get("CI") and any(item.get_closest_marker(m) for item in items for m in _NEEDS):
        raise pytest.UsageError("the jars run has no jars: python -m infra.jvm_jars failed (its line is above)")
    for item in items:
        if "s3_endpoint" in item.fixturenames:
            item.add_marker(pytest.mark.s3)
        for marker, (jar, what) in _NEEDS.items():
            if item.get_closest_marker(marker) and f"/{jar}" not in (JARS or ""):
                why = ("run by `make test-jars`" if JARS is None else
                       "python -m infra.jvm_jars failed (above)" if not JARS else
                       "python -m infra.jvm_jars knows no release for this PySpark line")
                item.add_marker(pytest.mark.skip(reason=f"{what} not on the classpath: {why}"))
    if LINE:
        _select_line(config, items)
    if GOLDEN is None:  # after the line check, which sees every test of the collection
        config.hook.pytest_deselected(items=[item for item in items if item.get_closest_marker("golden")])
        items[:] = [item for item in items if not item.get_closest_marker("golden")]
    if SHARD:
        _select_shard(items, config)


def _select_shard(items, config) -> None:
    """This process's share of the suite, balanced by the committed profile (tests.durations.shares): the
    jars-free run's shares first, then the jars run's, each share taking the jars units as its jars-free
    ones left it, so that the n processes end together. A unit is a module, or a test the profile lists as
    slow enough to run apart from it (unless it shares a module's fixture with the rest). A unit the profile
    lacks is guessed at ten seconds a slow test, half a second any other."""
    from tests.durations import module_of, shares, unit_seconds

    index, _, count = SHARD.partition("/")
    if not (index.isdigit() and count.isdigit() and 1 <= int(index) <= int(count)):
        raise pytest.UsageError(f"LAKE_TEST_SHARD={SHARD!r}: expected i/n, 1 <= i <= n")
    apart = {item.nodeid for item in items if not _shares_a_fixture(item)}
    seconds = {run: unit_seconds(run, apart) for run in (False, True)}
    units: dict[bool, dict[str, str]] = {False: {}, True: {}}
    guesses: dict[bool, Counter] = {False: Counter(), True: Counter()}
    for item in items:
        jars = any(item.get_closest_marker(m) for m in ("delta_jars", "s3a", "jars_too"))
        for run in ({False, True} if item.get_closest_marker("jars_too") else {jars}):
            unit = units[run][item.nodeid] = item.nodeid if item.nodeid in seconds[run] else module_of(item.nodeid)
            guesses[run][unit] += 10.0 if item.get_closest_marker("slow") else 0.5
    totals = [0.0] * int(count)
    share = shares(guesses[False], seconds[False], totals)
    run = JARS is not None
    if run:
        share = shares(guesses[True], seconds[True], totals)
    mine = int(index) - 1  # a test of the other run's only: -m deselects it
    ours = [share.get(units[run].get(item.nodeid, ""), mine) == mine for item in items]
    config.hook.pytest_deselected(items=[item for item, mine in zip(items, ours) if not mine])
    items[:] = [item for item, mine in zip(items, ours) if mine]


def _shares_a_fixture(item) -> bool:
    """Whether ``item`` uses a fixture set up once for more tests than itself but fewer than the session (a
    module's lake): run apart from its module, it would build it again."""
    return any(defs[-1].scope not in ("function", "session")
               for defs in item._fixtureinfo.name2fixturedefs.values() if defs)


def _select_line(config, items) -> None:
    from tests import ci_lines

    if LINE not in ci_lines.LINES:
        raise pytest.UsageError(f"LAKE_TEST_LINE={LINE!r}: expected one of {ci_lines.LINES}")
    entries = ci_lines.read()
    markers = {item.nodeid: {m.name for m in item.iter_markers()} for item in items}
    whole = all(Path(config.rootpath, arg).resolve() == Path(config.rootpath, "tests") for arg in config.args)
    found = ci_lines.problems(markers, entries, whole)
    if found:
        raise pytest.UsageError(f"{ci_lines.FILE} drops tests:\n  " + "\n  ".join(found))
    kept = [item for item in items if LINE in ci_lines.lines_of(item.nodeid, markers[item.nodeid], entries)]
    names = {item.nodeid for item in kept}
    config.hook.pytest_deselected(items=[item for item in items if item.nodeid not in names])
    items[:] = kept


@pytest.fixture(scope="session")
def spark():
    from lakeio.spark.session import get_spark

    started = os.environ["SPARK_SUBMIT_OPTS"]
    os.environ["SPARK_SUBMIT_OPTS"] = SESSION_JVM
    try:
        session = get_spark("tests", "local[2]")
    finally:
        os.environ["SPARK_SUBMIT_OPTS"] = started
    # Delta rebuilds a snapshot's state in 50 partitions by default, for tables of millions of files; the
    # tests' tables have a few, and the jars runs spent most of their time scheduling empty tasks.
    session.conf.set("spark.databricks.delta.snapshotPartitions", "2")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def s3_endpoint():
    """moto's S3 server, for the whole run (tests.s3_faults.moto_server)."""
    from tests.s3_faults import moto_server

    with moto_server() as endpoint:
        yield endpoint


@pytest.fixture
def s3(spark, s3_endpoint, monkeypatch):
    """Spark's S3 connector (hadoop-aws: tests marked ``s3a``; ``s3://`` mapped to it, as on a cluster outside
    EMR) and the Python clients pointed at moto's server; a boto3 client."""
    from tests.s3_faults import point_s3a_at, s3_client

    point_s3a_at(spark, s3_endpoint)
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_endpoint)
    monkeypatch.setenv("AWS_ALLOW_HTTP", "true")
    return s3_client(s3_endpoint)
