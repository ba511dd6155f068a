"""A Delta lake with a table per feature delta-spark writes, built once per builder and Delta version.

Writing it takes minutes (some sixty Delta commands, each starting jobs); reading a copy takes a
second. :func:`feature_lake` copies into the test's folder the lake that this module's source, this
PySpark and the Delta jars on the classpath built last, in the user's cache folder (outside any work
tree); it builds it there first when there is none, one process at a time (a lock), so that every
test and run of a line reads one build. ``LAKE_TEST_LAKE_CACHE=off`` builds into the test's folder.

Tests that run without Delta's jars read its tables too (:func:`copy_table`: no jars-free writer
writes deletion vectors), from a build of any Delta release: ``python -m tests.feature_lake``
(``make feature-lake``, which ``make test`` runs first) writes one with the jars infra.jvm_jars
fetches for this PySpark.

A shallow clone's log names its source's files by absolute path: the clones are written in the copy,
reading its clone_source, every time.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import inspect
import json
import os
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pyspark
import pytest

from demo.lake import partitioned_deletion_vectors
from lakeio.spark import jvm_archive
from lakeio.spark.session import session_setting
from lakeio.store import uris
from tests.conftest import JARS

HIDDEN_NESTED = "sub/_SUCCESS"  # hidden below the first segment: Delta's inventory mode deletes it, listing keeps it
DEBRIS = ("stale-orphan.parquet", HIDDEN_NESTED)  # left in every table: what a vacuum is for
SETTING = "LAKE_TEST_LAKE_CACHE"  # "off", or unset
_CACHE = jvm_archive.cache_dir() / "lakes"


def _create(spark, path: Path, columns: str = "id INT, v STRING", extra: str = "", props: dict | None = None) -> str:
    table = f"delta.`{path}`"
    props_sql = ", ".join(f"'{k}' = '{v}'" for k, v in (props or {}).items())
    spark.sql(f"CREATE TABLE {table} ({columns}) USING delta {extra} {f'TBLPROPERTIES ({props_sql})' if props_sql else ''}")
    return table


def _insert(spark, table: str, start: int, count: int = 50, value: str = "'a'") -> None:
    spark.sql(f"INSERT INTO {table} SELECT CAST(id AS INT), {value} FROM range({start}, {start + count})")


def _dv_table(spark, path: Path) -> str:
    """200 rows in a table with deletion vectors on."""
    t = _create(spark, path, props={"delta.enableDeletionVectors": "true"})
    _insert(spark, t, 0, 200)
    return t


def deletion_vectors(spark, path):
    t = _dv_table(spark, path)
    spark.sql(f"DELETE FROM {t} WHERE id % 3 = 0")
    spark.sql(f"DELETE FROM {t} WHERE id % 5 = 0")


def merge_with_dvs(spark, path):
    t = _dv_table(spark, path)
    spark.sql(f"MERGE INTO {t} AS t USING (SELECT CAST(id AS INT) AS id, 'm' AS v FROM range(150, 250)) AS s "
              "ON t.id = s.id WHEN MATCHED THEN UPDATE SET v = s.v WHEN NOT MATCHED THEN INSERT *")


def column_mapping_name(spark, path):
    t = _create(spark, path, props={"delta.columnMapping.mode": "name", "delta.minReaderVersion": "2",
                                    "delta.minWriterVersion": "5"})
    _insert(spark, t, 0)
    spark.sql(f"ALTER TABLE {t} RENAME COLUMN v TO w")
    spark.sql(f"INSERT OVERWRITE {t} SELECT CAST(id AS INT), 'b' FROM range(10)")


def column_mapping_id(spark, path):
    t = _create(spark, path, props={"delta.columnMapping.mode": "id", "delta.minReaderVersion": "2",
                                    "delta.minWriterVersion": "5"})
    _insert(spark, t, 0)
    spark.sql(f"INSERT OVERWRITE {t} SELECT CAST(id AS INT), 'b' FROM range(10)")


def v2_checkpoint(spark, path):
    t = _create(spark, path, props={"delta.checkpointPolicy": "v2", "delta.checkpointInterval": "3"})
    for start in range(0, 250, 50):
        _insert(spark, t, start)
    spark.sql(f"DELETE FROM {t} WHERE id < 60")
    assert list((path / "_delta_log").glob("*.checkpoint.*")), "no v2 checkpoint written"


def multi_part_checkpoint(spark, path):
    with session_setting(spark, "spark.databricks.delta.checkpoint.partSize", "2"):
        t = _create(spark, path, props={"delta.checkpointInterval": "3"})
        for start in range(0, 250, 50):
            _insert(spark, t, start)
        spark.sql(f"DELETE FROM {t} WHERE id < 60")
    assert list((path / "_delta_log").glob("*.checkpoint.0000000001.*.parquet")), "no multi-part checkpoint"


def row_tracking(spark, path):
    t = _create(spark, path, props={"delta.enableRowTracking": "true"})
    _insert(spark, t, 0)
    spark.sql(f"UPDATE {t} SET v = 'u' WHERE id < 20")


def liquid_clustering(spark, path):
    t = _create(spark, path, extra="CLUSTER BY (id)")
    for start in range(0, 200, 50):
        _insert(spark, t, start)
    spark.sql(f"OPTIMIZE {t}")


def type_widening(spark, path):
    t = _create(spark, path, columns="id INT, n SMALLINT", props={"delta.enableTypeWidening": "true"})
    spark.sql(f"INSERT INTO {t} SELECT CAST(id AS INT), CAST(id AS SMALLINT) FROM range(50)")
    spark.sql(f"ALTER TABLE {t} ALTER COLUMN n TYPE INT")
    spark.sql(f"INSERT OVERWRITE {t} SELECT CAST(id AS INT), CAST(id AS INT) FROM range(10)")


def change_data_feed(spark, path):
    t = _create(spark, path, props={"delta.enableChangeDataFeed": "true"})
    _insert(spark, t, 0)
    spark.sql(f"UPDATE {t} SET v = 'u' WHERE id < 20")
    spark.sql(f"DELETE FROM {t} WHERE id > 40")
    assert (path / "_change_data").is_dir(), "no change data written"


def reorg_purge(spark, path):
    t = _dv_table(spark, path)
    spark.sql(f"DELETE FROM {t} WHERE id % 2 = 0")
    spark.sql(f"REORG TABLE {t} APPLY (PURGE)")


def in_commit_timestamps(spark, path):
    t = _create(spark, path, props={"delta.enableInCommitTimestamps": "true"})
    _insert(spark, t, 0)
    spark.sql(f"INSERT OVERWRITE {t} SELECT CAST(id AS INT), 'b' FROM range(10)")


def restored(spark, path):
    t = _create(spark, path, extra="PARTITIONED BY (v)")
    _insert(spark, t, 0, 50, "'a'")
    _insert(spark, t, 50, 50, "'b'")
    spark.sql(f"INSERT OVERWRITE {t} SELECT CAST(id AS INT), 'c' FROM range(5)")
    spark.sql(f"RESTORE TABLE {t} TO VERSION AS OF 2")


def optimized(spark, path):
    t = _create(spark, path)
    for start in range(0, 200, 25):
        _insert(spark, t, start, 25)
    spark.sql(f"OPTIMIZE {t}")


def clone_source(spark, path):
    t = _create(spark, path)
    _insert(spark, t, 0)
    _insert(spark, t, 50)
    spark.sql(f"INSERT OVERWRITE {t} SELECT CAST(id AS INT), 'z' FROM range(5)")


def shallow_clone(spark, path):
    spark.sql(f"CREATE TABLE delta.`{path}` SHALLOW CLONE delta.`{path.parent / 'clone_source'}` VERSION AS OF 2")
    _insert(spark, f"delta.`{path}`", 500, 10)


def deep_clone(spark, path):
    spark.sql(f"CREATE TABLE delta.`{path}` DEEP CLONE delta.`{path.parent / 'clone_source'}` VERSION AS OF 2")


# In creation order: the clones read clone_source.
FEATURES: dict[str, Callable] = {f.__name__: f for f in (
    deletion_vectors, merge_with_dvs, partitioned_deletion_vectors, column_mapping_name, column_mapping_id,
    v2_checkpoint, multi_part_checkpoint, row_tracking, liquid_clustering, type_widening, change_data_feed,
    reorg_purge, in_commit_timestamps, restored, optimized, clone_source,
    shallow_clone, deep_clone)}
# A shallow clone's log (its checkpoint too) names its source's files by absolute path: the clones are
# written in each copy, reading the copy's clone_source, never cached.
IN_PLACE = ("shallow_clone", "deep_clone")


@dataclass(frozen=True)
class FeatureLake:
    """The lake at ``root``: the features this Delta version refused to write (with its first line),
    the rows each written table reads, and the files each reads (relative to ``root``)."""

    root: Path
    unsupported: dict[str, str]
    rows: dict[str, int]
    reads: frozenset[str]


def feature_lake(spark, dest: Path) -> FeatureLake:
    """The feature lake at ``dest`` (which must not exist): the cached tables copied, the clones written."""
    cached = [name for name in FEATURES if name not in IN_PLACE]
    if os.environ.get(SETTING, "").lower() == "off":
        copied = _build(spark, dest, cached)
    else:
        built = _cached(spark, JARS)
        facts = json.loads((built / "built.json").read_text())
        shutil.copytree(built / "lake", dest)
        copied = FeatureLake(dest, facts["unsupported"], facts["rows"], frozenset(facts["reads"]))
    # What the cached build could not write is tried again here, as every run did before the cache: a build
    # that failed once (a slow disk, a flaky job) is not a feature this Delta version lacks for good.
    again = _build(spark, dest, [name for name in cached if name in copied.unsupported])
    if "clone_source" in again.unsupported:
        raise AssertionError(f"no clone_source for the clones: {again.unsupported['clone_source']}")
    clones = _build(spark, dest, list(IN_PLACE))
    return FeatureLake(dest, {**again.unsupported, **clones.unsupported}, {**copied.rows, **again.rows, **clones.rows},
                       copied.reads | again.reads | clones.reads)


def copy_table(name: str, dest: Path) -> None:
    """Table ``name`` as Delta's own writer wrote it, copied to ``dest``: for tests whose question is ours,
    not Delta's, whatever Delta release (or none) their run has. Any cached build of this module's source
    will do; without one the test is skipped saying how to write one (an error in CI, which writes it first)."""
    source = _source()
    for facts in sorted(_CACHE.glob("features-*/built.json")) if _CACHE.is_dir() else []:
        built = json.loads(facts.read_text())
        if built.get("source") == source and name in built["rows"]:
            _copy_without_debris(facts.parent / "lake" / name, dest)
            return
    missing = (f"no feature lake with {name} in {_CACHE} written from this tests/feature_lake.py: "
               "`make feature-lake` writes one with Delta's jars")
    if os.environ.get("CI"):
        raise AssertionError(missing)
    pytest.skip(missing)


def _copy_without_debris(table: Path, dest: Path) -> None:
    """``table`` as Delta's writer left it: the debris the builder adds for the vacuums stays behind."""
    debris = {left.split("/")[0] for left in DEBRIS}
    shutil.copytree(table, dest, ignore=lambda folder, names: debris & set(names) if folder == str(table) else set())


def _cached(spark, jars: str | None) -> Path:
    """The cached build for this source, PySpark and Delta jars, built first when there is none."""
    _CACHE.mkdir(parents=True, exist_ok=True)
    built = _CACHE / _key(jars)
    with open(_CACHE / f"{built.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a second process waits for the first one's build, then reads it
        if not (built / "built.json").is_file():
            shutil.rmtree(built, ignore_errors=True)
            lake = _build(spark, built / "lake", [name for name in FEATURES if name not in IN_PLACE])
            (built / "built.json").write_text(json.dumps(
                {"source": _source(), "unsupported": lake.unsupported, "rows": lake.rows, "reads": sorted(lake.reads)}))
    return built


def _source() -> str:
    """What the build writes: this module and the writer it takes from the demo."""
    return hashlib.sha256(Path(__file__).read_bytes() + inspect.getsource(partitioned_deletion_vectors).encode()
                          ).hexdigest()


def _key(jars: str | None) -> str:
    """This builder's source, this PySpark, and the Delta jars it runs with."""
    delta = sorted(os.path.basename(jar) for jar in (jars or "").split(",") if "delta" in os.path.basename(jar))
    identity = [_source(), pyspark.__version__, *delta]
    return "features-" + hashlib.sha256("|".join(identity).encode()).hexdigest()[:16]


def _build(spark, root: Path, names: list[str]) -> FeatureLake:
    """The tables ``names`` under ``root``, each with its debris; a feature this Delta does not write is noted."""
    unsupported: dict[str, str] = {}
    for name in names:
        try:
            with session_setting(spark, "spark.sql.shuffle.partitions", "2"):  # Delta writing a few rows
                FEATURES[name](spark, root / name)
        except Exception as exc:  # a feature this Delta version does not write
            unsupported[name] = str(exc).strip().splitlines()[0][:300]
            continue
        for left in DEBRIS:
            (root / name / left).parent.mkdir(parents=True, exist_ok=True)
            (root / name / left).write_bytes(b"debris")
    tables = {name: spark.read.format("delta").load(str(root / name)) for name in names if name not in unsupported}
    reads = {str(Path(uris.local_path(f)).relative_to(root)) for frame in tables.values() for f in frame.inputFiles()}
    return FeatureLake(root, unsupported, {name: frame.count() for name, frame in tables.items()}, frozenset(reads))


def main(argv: list[str] | None = None) -> int:
    """Build the cached lake with the Delta jars infra.jvm_jars fetches for this PySpark: exit 3 when no
    Delta release is built for it (another environment must write it), 1 when they cannot be fetched."""
    argparse.ArgumentParser(prog="python -m tests.feature_lake", description=main.__doc__).parse_args(argv)
    from infra import jvm_jars
    from lakeio.spark.session import get_spark

    side = jvm_jars.for_installed_pyspark()
    if side.delta is None:
        print(f"tests.feature_lake: no Delta release is built for Spark {side.spark_line}: the tests read a lake "
              "another environment wrote (make test-newest: the default one)", file=sys.stderr)
        return 3
    try:
        jars = ",".join(str(j) for j in jvm_jars.jars(side))
    except jvm_jars.JarsUnavailable as exc:
        print(f"tests.feature_lake: {exc}", file=sys.stderr)
        return 1
    os.environ["PYSPARK_SUBMIT_ARGS"] = f"--jars {jars} --driver-memory 2g pyspark-shell"
    spark = get_spark("feature-lake", "local[2]")
    spark.conf.set("spark.databricks.delta.snapshotPartitions", "2")
    built = _cached(spark, jars)
    print(f"tests.feature_lake: {built}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
