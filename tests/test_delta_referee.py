"""Delta's own VACUUM as the referee of job 2, on tables delta-spark writes in the test, one per feature.

One lake holds a table per feature this Delta version writes (deletion vectors, column mapping,
v2 and multi-part checkpoints, row tracking, clustering, type widening, change data, REORG PURGE,
RESTORE, clones, OPTIMIZE, MERGE), each with stale debris, and a copy of every golden table (where
Delta itself refuses one, we must delete nothing from it). Every file is aged past the retention,
the inventory is taken (job 1, through Delta's own writer here), and at retention 0 our dry-run
plan is compared, table by table, with Delta's ``VACUUM ... DRY RUN`` (listing) and with
``VACUUM ... USING INVENTORY`` fed our inventory table:

- a file we would delete that Delta keeps fails the test;
- a file Delta would delete that we keep must fall under one of our named rules (README, "Where
  we are stricter than Delta").

Then the lake is vacuumed for real and every table reads as before, by Delta. The same comparison
runs over generated histories (``tests.histories``, with their files written to disk), at the
default retention: ``REFEREE_EXAMPLES`` of them, 4 by default.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from deltalake import DeltaTable
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lake_reports.charges import chargeback
from lakeio import uris
from lakeio.spark import session_setting
from tests.conftest import GOLDEN
from tests.histories import clones, debris, spellings, steps, write_clone, write_history
from tests.lakes import inventory_of, now_ms, vacuum

pytestmark = [pytest.mark.delta_jars, pytest.mark.slow]

DAY_MS = 24 * 3600 * 1000
HIDDEN_NESTED = "sub/_SUCCESS"  # hidden below the first segment: Delta's inventory mode deletes it, listing keeps it


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
    deletion_vectors, merge_with_dvs, column_mapping_name, column_mapping_id, v2_checkpoint, multi_part_checkpoint,
    row_tracking, liquid_clustering, type_widening, change_data_feed, reorg_purge, in_commit_timestamps, restored,
    optimized, clone_source,
    shallow_clone, deep_clone)}
GOLDEN_TABLES = sorted(p.name for p in GOLDEN.iterdir() if (p / "_delta_log").is_dir()) if GOLDEN.is_dir() else []


@dataclass
class Refereed:
    """The lake and what each side would delete from it, as canonical URIs per table name."""

    bucket: Path
    inventory: str
    unsupported: dict[str, str] = field(default_factory=dict)
    delta_refused: dict[str, str] = field(default_factory=dict)  # golden tables Delta's VACUUM will not take
    ours: dict[str, set[str]] = field(default_factory=dict)
    referenced: set[str] = field(default_factory=set)  # every file some table of the lake reads
    escaped: set[str] = field(default_factory=set)  # files the table needs, named in its log with percent-escapes
    uniform: bool = False  # UniForm Iceberg on: its metadata folders are the table's
    rows: dict[str, int] = field(default_factory=dict)
    _delta: dict[str, tuple[set[str], set[str]]] = field(default_factory=dict)

    def delta(self, spark, name: str) -> tuple[set[str], set[str]]:
        """Delta's candidates for table ``name``, by listing and from our inventory: asked when a test
        first needs them (each VACUUM takes seconds, and CI referees the golden tables on one line only)."""
        if name not in self._delta:
            with session_setting(spark, "spark.databricks.delta.retentionDurationCheck.enabled", "false"):
                try:
                    self._delta[name] = (_delta_candidates(spark, self.bucket / name),
                                         _delta_candidates(spark, self.bucket / name, self.inventory))
                except Exception as exc:  # only golden tables may be ones Delta will not vacuum
                    if name not in GOLDEN_TABLES:
                        raise
                    self.delta_refused[name] = str(exc).strip().splitlines()[0][:300]
                    self._delta[name] = (set(), set())
        return self._delta[name]


def _canonical(path: str) -> str:
    return uris.canonical(uris.to_uri(path))


def _delta_candidates(spark, table: Path, inventory: str | None = None, retention_hours: int = 0) -> set[str]:
    using = ""
    if inventory is not None:
        # README's form: Delta keeps the rows that start with the table's qualified path, spelled file:/x locally.
        using = (f"USING INVENTORY (SELECT regexp_replace(path, '^file:///', 'file:/') AS path, length, isDir, "
                 f"modificationTime FROM delta.`{inventory}` WHERE coalesce(is_latest, true) "
                 "AND NOT coalesce(is_delete_marker, false)) ")
    query = f"VACUUM delta.`{table}` {using}RETAIN {retention_hours} HOURS DRY RUN"
    return {_canonical(r.path) for r in spark.sql(query).collect()}


@pytest.fixture(scope="module")
def refereed(spark, tmp_path_factory) -> Refereed:
    work = tmp_path_factory.mktemp("referee")
    bucket = work / "lake"
    lake = Refereed(bucket, "")
    for name, build in FEATURES.items():
        path = bucket / name
        try:
            with session_setting(spark, "spark.sql.shuffle.partitions", "2"):  # Delta writing a few rows
                build(spark, path)
        except Exception as exc:  # a feature this Delta version does not write
            if "clone" in name and "clone_source" in lake.unsupported:
                raise
            lake.unsupported[name] = str(exc).strip().splitlines()[0][:300]
            continue
        for left in ("stale-orphan.parquet", HIDDEN_NESTED):
            (path / left).parent.mkdir(parents=True, exist_ok=True)
            (path / left).write_bytes(b"debris")
    built = sorted(name for name in FEATURES if name not in lake.unsupported)
    for name in GOLDEN_TABLES:
        shutil.copytree(GOLDEN / name, bucket / name)
    aged = (time.time() - 10 * 24 * 3600)
    for parent, _dirs, files in os.walk(bucket):
        for f in files:
            os.utime(os.path.join(parent, f), (aged, aged))
    lake.rows = {name: spark.read.format("delta").load(str(bucket / name)).count() for name in built}
    lake.referenced = {_canonical(f) for name in built for f in spark.read.format("delta").load(str(bucket / name)).inputFiles()}
    lake.inventory = inventory_of(spark, bucket, work)
    audit = work / "audit"
    report = vacuum(spark, lake.inventory, [bucket / n for n in built + GOLDEN_TABLES], dry_run=True, retention_hours=0,
                    enforce_retention_duration=False, min_coverage=0.0, audit_table=str(audit), now_ms=now_ms() + 5000)
    odd = {Path(t.table).name: (t.status.value, t.reason) for t in report.tables
           if t.status != "dry_run" and Path(t.table).name not in GOLDEN_TABLES}
    assert not odd, odd
    rows = DeltaTable(str(audit)).to_pyarrow_table().to_pylist()
    for name in built + GOLDEN_TABLES:
        root = _canonical(str(bucket / name))
        lake.ours[name] = {_canonical(r["path"]) for r in rows if r["action"] == "would_delete"
                           and _canonical(r["table_root"]) == root}
    return lake


def stricter_rule(lake: Refereed, table: str, path: str) -> str | None:
    """Which of our named rules keeps ``path`` where Delta would delete it, or None."""
    relative = path.removeprefix(_canonical(str(lake.bucket / table)) + "/")
    if Path(uris.local_path(path)).is_dir():
        return "folders are not objects"  # S3 has none; a folder left empty locally goes after the deletes
    if any(segment.startswith(("_", ".")) for segment in relative.split("/")[1:]):
        return "hidden at any depth"
    if lake.uniform and "metadata" in relative.split("/"):
        return "Iceberg's metadata with UniForm on, at any depth"
    if path in lake.referenced:
        return "referenced by another table of the lake"
    if path in lake.escaped:
        return "one file however its log path is percent-encoded"
    return None


@pytest.mark.parametrize("feature", [*FEATURES, *(pytest.param(n, id=f"golden-{n}") for n in GOLDEN_TABLES)])
def test_we_delete_nothing_delta_keeps_and_keep_only_by_a_named_rule(spark, refereed, feature):
    if feature in refereed.unsupported:
        pytest.skip(f"this Delta version does not write it: {refereed.unsupported[feature]}")
    ours = refereed.ours[feature]
    listing, inventory = refereed.delta(spark, feature)
    if feature in refereed.delta_refused:
        assert not ours, f"Delta will not vacuum it ({refereed.delta_refused[feature]}), yet we would delete {sorted(ours)}"
        return
    if feature in FEATURES:
        stale = _canonical(str(refereed.bucket / feature / "stale-orphan.parquet"))
        assert stale in ours, "the stale orphan is a candidate for both sides"
    _assert_refereed(refereed, feature, ours, listing, inventory)


def _assert_refereed(lake: Refereed, table: str, ours: set[str], listing: set[str], inventory: set[str]) -> None:
    """Nothing we delete is kept by Delta, and what only Delta deletes one of our rules keeps."""
    for side, theirs in (("VACUUM DRY RUN", listing), ("VACUUM USING INVENTORY", inventory)):
        assert not ours - theirs, f"we would delete what Delta's {side} keeps: {sorted(ours - theirs)}"
        unexplained = {p for p in theirs - ours if stricter_rule(lake, table, p) is None}
        assert not unexplained, f"Delta's {side} deletes, we keep, and no rule of ours says why: {sorted(unexplained)}"


def test_the_inventory_feeds_deltas_own_vacuum_and_its_inventory_mode_deletes_nested_hidden_files(spark, refereed):
    table = next(name for name in FEATURES if name not in refereed.unsupported)
    nested = _canonical(str(refereed.bucket / table / HIDDEN_NESTED))
    listing, inventory = refereed.delta(spark, table)
    assert nested in inventory  # Delta checks only the first segment in inventory mode
    assert nested not in listing | refereed.ours[table]


def test_clone_sources_keep_what_their_shallow_clones_read(spark, refereed):
    if {"clone_source", "shallow_clone"} & set(refereed.unsupported):
        pytest.skip(f"no shallow clone here: {refereed.unsupported}")
    listing, _ = refereed.delta(spark, "clone_source")
    kept = {p for p in listing - refereed.ours["clone_source"]
            if stricter_rule(refereed, "clone_source", p) == "referenced by another table of the lake"}
    assert kept, "the clone reads files its source removed: Delta's vacuum of the source deletes them, ours keeps them"


def test_the_chargeback_reads_every_feature_table(spark, refereed):
    charges = chargeback(spark, refereed.inventory)
    charged = {Path(uris.local_path(t.table)).name for t in charges.tables() if t.table and t.bytes > 0}
    assert set(refereed.rows) <= charged, sorted(set(refereed.rows) - charged)
    assert not set(charges.unreadable) & {_canonical(str(refereed.bucket / n)) for n in refereed.rows}, charges.unreadable


def test_a_real_vacuum_leaves_every_table_reading_as_before(spark, refereed, tmp_path):
    built = sorted(refereed.rows)
    report = vacuum(spark, refereed.inventory, [refereed.bucket / n for n in built], dry_run=False, retention_hours=0,
                    enforce_retention_duration=False, min_coverage=0.0, audit_table=str(tmp_path / "audit"), now_ms=now_ms() + 5000)
    assert {t.status for t in report.tables} == {"vacuumed"}, [(t.table, t.reason) for t in report.tables]
    assert report.totals()["deleted_files"] >= len(built)
    for name in built:
        assert spark.read.format("delta").load(str(refereed.bucket / name)).count() == refereed.rows[name], name
        assert not (refereed.bucket / name / "stale-orphan.parquet").exists()
        assert (refereed.bucket / name / HIDDEN_NESTED).exists()
    # Our VACUUM START and END (on local disk, as Delta's default), as Delta's own DESCRIBE HISTORY reads them
    # (in-commit timestamps included).
    for table in report.tables:
        end, start = spark.sql(f"DESCRIBE HISTORY delta.`{uris.local_path(table.table)}` LIMIT 2").collect()
        assert (start.operation, end.operation) == ("VACUUM START", "VACUUM END"), table.table
        assert {"retentionCheckEnabled", "defaultRetentionMillis", "specifiedRetentionMillis"} <= set(
            start.operationParameters)
        assert start.operationMetrics == {"numFilesToDelete": str(table.counts.candidate_files),
                                          "sizeOfDataToDelete": str(table.counts.candidate_bytes)}, table.table
        assert end.operationParameters["status"] == '"COMPLETED"'
        assert end.operationMetrics["numDeletedFiles"] == str(table.counts.deleted_files), table.table
        assert json.loads(end.operationParameters["runId"]) == report.run_id and end.timestamp >= start.timestamp
    # Delta goes on writing each table over our commits, and reads the versions before them.
    for table in report.tables:
        path = uris.local_path(table.table)
        name = Path(path).name
        before = spark.read.format("delta").load(path)
        spark.createDataFrame(before.limit(1).collect(), before.schema).write.format("delta").mode("append").save(path)
        latest, end = spark.sql(f"DESCRIBE HISTORY delta.`{path}` LIMIT 2").collect()
        assert (latest.operation, latest.version, end.operation) == ("WRITE", end.version + 1, "VACUUM END"), name
        assert spark.read.format("delta").load(path).count() == refereed.rows[name] + min(1, refereed.rows[name]), name
        # The lake's commits were aged past the retention: Delta 4.x then refuses time travel by its own rule.
        with session_setting(spark, "spark.databricks.delta.vacuum.enforceTimeTravelWithinDeletedFileRetentionDuration",
                             "false"):
            old = spark.read.format("delta").option("versionAsOf", end.version - 2).load(path)
            assert old.count() == refereed.rows[name], name


# Times around the cutoff of a vacuum at the default retention: an hour or more from it on either side,
# so that Delta's clock, read seconds after ours, puts each file on the same side; and just written.
OFFSETS = st.sampled_from([-DAY_MS, -3600_000, 3600_000, 7 * DAY_MS - 60_000])


@settings(max_examples=int(os.environ.get("REFEREE_EXAMPLES", "4")), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
# No inline deletion vectors: Delta's VACUUM (3.3.2 and 4.4.0) fails on a table whose log holds one
# (a MatchError in getDeletionVectorRelativePathAndSize, which handles on-disk ones only).
@given(history=steps(OFFSETS, inline_dvs=False), orphan_times=st.lists(OFFSETS, min_size=1, max_size=4), partitioned=st.booleans(),
       spelling=spellings, iceberg=st.booleans(), clone=clones(OFFSETS))
def test_over_generated_histories_we_delete_nothing_delta_keeps(spark, tmp_path_factory, history, orphan_times,
                                                                 partitioned, spelling, iceberg, clone):
    """The keep-rule property's histories, with their files on disk, at the default retention (168 h)."""
    cutoff = now_ms() - 7 * DAY_MS
    base = tmp_path_factory.mktemp("refereed-history")
    bucket = base / "lake"
    h = write_history(bucket / "t", [(op, folder, name, cutoff + at, dv) for op, folder, name, at, dv in history],
                      partitioned=partitioned, iceberg=iceberg, spelling=spelling)
    cloned = write_clone(h, bucket / "clone", [(i, None if at is None else cutoff + at) for i, at in clone])
    for relative, at in {**h.files(), **debris([cutoff + at for at in orphan_times])}.items():
        path = h.root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"written by a generated history")
        os.utime(path, (at / 1000, at / 1000))
    lake = Refereed(bucket, inventory_of(spark, bucket, base),
                    referenced={_canonical(str(h.root / p)) for p, at in cloned.items() if at is None or at >= cutoff},
                    escaped={_canonical(str(h.root / p)) for p in h.needed(cutoff) if "%" in h.spelled.get(p, "")},
                    uniform=iceberg)

    report = vacuum(spark, lake.inventory, [h.root], dry_run=True, min_coverage=0.0, audit_table=str(base / "audit"))
    assert [t.status for t in report.tables] == ["dry_run"], report.tables
    rows = DeltaTable(str(base / "audit")).to_pyarrow_table(columns=["path", "action"]).to_pylist()
    ours = {_canonical(r["path"]) for r in rows if r["action"] == "would_delete"}
    listing = _delta_candidates(spark, h.root, retention_hours=168)
    inventory = _delta_candidates(spark, h.root, lake.inventory, retention_hours=168)
    _assert_refereed(lake, "t", ours, listing, inventory)
