"""Delta's own VACUUM as the referee of job 2, on tables delta-spark writes in the test, one per feature.

One lake holds a table per feature this Delta version writes (deletion vectors, column mapping, v2
and multi-part checkpoints, row tracking, clustering, type widening, change data, REORG PURGE,
RESTORE, clones, OPTIMIZE, MERGE), each with stale debris (tests.feature_lake: built once per Delta
version, copied here), and a copy of every table other writers wrote in LAKE_TEST_GOLDEN_TABLES where
it is set (where Delta itself refuses one, we must delete nothing from it). Every file is aged past the retention,
the inventory is taken (job 1, committed by deltalake as in every session), and at retention 0 our dry-run
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
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from deltalake import DeltaTable
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lake_reports.charges import chargeback
from lakeio.spark.session import session_setting
from lakeio.store import uris
from tests.conftest import GOLDEN
from tests.feature_lake import FEATURES, HIDDEN_NESTED, feature_lake
from tests.histories import clones, debris, spellings, steps, write_clone, write_history
from tests.lakes import inventory_of, now_ms, vacuum

pytestmark = [pytest.mark.delta_jars, pytest.mark.slow]

DAY_MS = 24 * 3600 * 1000


GOLDEN_TABLES = sorted(p.name for p in GOLDEN.iterdir() if (p / "_delta_log").is_dir()) if GOLDEN else []


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
        first needs them (each VACUUM takes seconds, and a test asks for one table's)."""
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
def refereed(spark, tmp_path_factory, request) -> Refereed:
    work = tmp_path_factory.mktemp("referee")
    bucket = work / "lake"
    features = feature_lake(spark, bucket)  # built once per Delta version (tests.feature_lake)
    lake = Refereed(bucket, "", unsupported=dict(features.unsupported))
    built = sorted(name for name in FEATURES if name not in lake.unsupported)
    # The golden tables this run referees (LAKE_TEST_GOLDEN_TABLES).
    asked = {item.callspec.params.get("feature") for item in request.session.items if hasattr(item, "callspec")}
    golden = [name for name in GOLDEN_TABLES if name in asked]
    for name in golden:
        shutil.copytree(GOLDEN / name, bucket / name)
    aged = (time.time() - 10 * 24 * 3600)
    for parent, _dirs, files in os.walk(bucket):
        for f in files:
            os.utime(os.path.join(parent, f), (aged, aged))
    lake.rows = dict(features.rows)
    lake.referenced = {_canonical(str(bucket / f)) for f in features.reads}
    lake.inventory = inventory_of(spark, bucket, work)
    audit = work / "audit"
    report = vacuum(spark, lake.inventory, [bucket / n for n in built + golden], dry_run=True, retention_hours=0,
                    enforce_retention_duration=False, min_coverage=0.0, audit_table=str(audit), now_ms=now_ms() + 5000)
    odd = {Path(t.table).name: (t.status.value, t.reason) for t in report.tables
           if t.status != "dry_run" and Path(t.table).name not in GOLDEN_TABLES}
    assert not odd, odd
    rows = DeltaTable(str(audit)).to_pyarrow_table().to_pylist()
    for name in built + golden:
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


@pytest.mark.every_line  # each Delta release referees the tables it writes
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


@pytest.mark.every_line
def test_the_inventory_feeds_deltas_own_vacuum_and_its_inventory_mode_deletes_nested_hidden_files(spark, refereed):
    table = next(name for name in FEATURES if name not in refereed.unsupported)
    nested = _canonical(str(refereed.bucket / table / HIDDEN_NESTED))
    listing, inventory = refereed.delta(spark, table)
    assert nested in inventory  # Delta checks only the first segment in inventory mode
    assert nested not in listing | refereed.ours[table]


@pytest.mark.every_line
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


@pytest.mark.every_line
def test_a_real_vacuum_leaves_every_table_reading_as_before(spark, refereed, tmp_path):
    built = sorted(refereed.rows)
    report = vacuum(spark, refereed.inventory, [refereed.bucket / n for n in built], dry_run=False, retention_hours=0,
                    enforce_retention_duration=False, min_coverage=0.0, audit_table=str(tmp_path / "audit"), now_ms=now_ms() + 5000)
    assert {t.status for t in report.tables} == {"vacuumed"}, [(t.table, t.reason) for t in report.tables]
    assert report.totals()["deleted_files"] >= len(built)
    for table in report.tables:
        path = uris.local_path(table.table)
        name = Path(path).name
        before = spark.read.format("delta").load(path)
        # Every row read from its file: Delta answers count() from the log's statistics, and a file we
        # deleted by mistake would go unnoticed.
        rows = before.collect()
        assert len(rows) == refereed.rows[name], name
        assert not (refereed.bucket / name / "stale-orphan.parquet").exists()
        assert (refereed.bucket / name / HIDDEN_NESTED).exists()
        # Delta goes on writing each table over our commits (its write reads the snapshot they end): then
        # its own DESCRIBE HISTORY reads our VACUUM START and END below its write (in-commit timestamps
        # included), and it reads the versions before them.
        spark.createDataFrame(rows[:1], before.schema).write.format("delta").mode("append").save(path)
        latest, end, start = spark.sql(f"DESCRIBE HISTORY delta.`{path}` LIMIT 3").collect()
        assert (latest.operation, latest.version, end.operation, start.operation) == (
            "WRITE", end.version + 1, "VACUUM END", "VACUUM START"), name
        assert {"retentionCheckEnabled", "defaultRetentionMillis", "specifiedRetentionMillis"} <= set(
            start.operationParameters)
        assert start.operationMetrics == {"numFilesToDelete": str(table.counts.candidate_files),
                                          "sizeOfDataToDelete": str(table.counts.candidate_bytes)}, name
        assert end.operationParameters["status"] == '"COMPLETED"'
        assert end.operationMetrics["numDeletedFiles"] == str(table.counts.deleted_files), name
        assert json.loads(end.operationParameters["runId"]) == report.run_id and end.timestamp >= start.timestamp
        # The lake's commits were aged past the retention: Delta 4.x then refuses time travel by its own rule.
        with session_setting(spark, "spark.databricks.delta.vacuum.enforceTimeTravelWithinDeletedFileRetentionDuration",
                             "false"):
            old = spark.read.format("delta").option("versionAsOf", end.version - 2).load(path)
            assert len(old.collect()) == refereed.rows[name], name


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
