"""The inventory table is exact or the delivery is refused: configurations, re-deliveries,
timestamps out of the ordinary, targets that are not ours, and real-world oddities."""

from __future__ import annotations

import io
import json
from datetime import date, datetime, timedelta, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake
from pyspark.sql import functions as F

from inventory_etl.cli import main
from inventory_etl.ingestion import IngestInventory
from inventory_etl.producer import InventoryObject
from lakeio.inventory import read_inventory
from tests.deliveries import AWKWARD_OBJECTS, T0, data_files, deliver, replace_data_file, rewrite_manifest

LATER = datetime(2026, 11, 21, 13, 0, tzinfo=timezone.utc)


def ingest(spark, table, manifests, **options):
    return IngestInventory(spark, str(table), **options).execute([str(m) for m in manifests])


def rows_of(table) -> list[dict]:
    return DeltaTable(str(table)).to_pyarrow_table().to_pylist()


@pytest.mark.slow
@pytest.mark.jars_too
def test_two_configurations_of_a_bucket_are_replaced_each_on_its_own(spark, tmp_path):
    daily = deliver(tmp_path / "dest", "src", config="daily", objects=AWKWARD_OBJECTS)
    weekly = deliver(tmp_path / "dest", "src", config="weekly", objects=AWKWARD_OBJECTS[:3])
    ingest(spark, tmp_path / "inv", [daily])
    ingest(spark, tmp_path / "inv", [weekly])  # a second run, another configuration

    rows = rows_of(tmp_path / "inv")
    assert sorted(r["config_id"] for r in rows) == ["daily"] * len(AWKWARD_OBJECTS) + ["weekly"] * 3
    # readers see one row per object however many configurations list it
    assert read_inventory(spark, str(tmp_path / "inv")).count() == len(AWKWARD_OBJECTS)

    smaller = deliver(tmp_path / "dest2", "src", config="daily", objects=AWKWARD_OBJECTS[:1], when=LATER)
    ingest(spark, tmp_path / "inv", [smaller])
    rows = rows_of(tmp_path / "inv")
    assert sorted(r["config_id"] for r in rows) == ["daily"] + ["weekly"] * 3


@pytest.mark.slow
@pytest.mark.jars_too
def test_keep_days_keeps_the_newest_dates_of_each_bucket_and_configuration(spark, tmp_path):
    days = {d: datetime(2026, 11, d, 9, 0, tzinfo=timezone.utc) for d in (1, 2, 5, 6, 7)}
    manifests = {d: deliver(tmp_path / "dest", "src", objects=AWKWARD_OBJECTS[:2], when=w) for d, w in days.items()}
    weekly = deliver(tmp_path / "dest", "src", config="weekly", objects=AWKWARD_OBJECTS[:1], when=days[1])
    other = deliver(tmp_path / "dest", "other", objects=AWKWARD_OBJECTS[:1], when=days[2])
    ingest(spark, tmp_path / "inv", [manifests[1], manifests[5], weekly, other])
    before = DeltaTable(str(tmp_path / "inv")).version()

    result = ingest(spark, tmp_path / "inv", [manifests[6], manifests[7]], keep_days=2)

    # src/daily keeps its two newest dates; the weekly configuration and the other bucket, lagging
    # behind, keep theirs (their only date) instead of vanishing from the table.
    assert sorted({(r["inventory_date"].day, r["bucket"], r["config_id"]) for r in rows_of(tmp_path / "inv")}) == [
        (1, "src", "weekly"), (2, "other", "daily"), (6, "src", "daily"), (7, "src", "daily")]
    assert result.partitions_dropped == 2 and "dropped 2 partition(s) of 2026-11-01 to 2026-11-05" in result.notes[0]
    assert DeltaTable(str(tmp_path / "inv")).version() == before + 1  # one commit: readers never see a gap

    # A late delivery of a date its configuration no longer keeps is not written at all.
    late = ingest(spark, tmp_path / "inv", [manifests[2]], keep_days=2)
    assert late.deliveries[0].status == "skipped" and "keeps its 2 newest date(s)" in late.deliveries[0].reason
    assert 2 not in {r["inventory_date"].day for r in rows_of(tmp_path / "inv") if r["bucket"] == "src"}
    assert DeltaTable(str(tmp_path / "inv")).version() == before + 1
    with pytest.raises(SystemExit):
        main(["--inventory-table", str(tmp_path / "inv"), "--manifest", str(manifests[7]), "--keep-days", "0"])


@pytest.mark.slow
@pytest.mark.jars_too
def test_the_newest_delivery_of_a_partition_wins_and_an_older_one_is_refused(spark, tmp_path):
    early = deliver(tmp_path / "dest", "src", objects=AWKWARD_OBJECTS)
    late = deliver(tmp_path / "dest", "src", objects=AWKWARD_OBJECTS[:2], when=LATER)

    result = ingest(spark, tmp_path / "inv", [late, early, late])  # the same manifest twice, too
    assert {d.status: d.manifest_uri.endswith(str(late)) for d in result.deliveries} == {
        "ingested": True, "superseded": False}
    assert result.superseded[0].superseded_by.endswith(str(late))
    assert len(rows_of(tmp_path / "inv")) == 2

    older = ingest(spark, tmp_path / "inv", [early])
    assert older.deliveries[0].status == "refused" and "older than the delivery the table holds" in older.deliveries[0].error
    assert len(rows_of(tmp_path / "inv")) == 2

    again = ingest(spark, tmp_path / "inv", [late]).deliveries[0]  # the same one again: nothing to do
    assert again.status == "skipped" and again.reason == "the table already holds this delivery"
    forced = ingest(spark, tmp_path / "inv", [early], allow_older=True)
    assert forced.deliveries[0].status == "ingested"
    assert len(rows_of(tmp_path / "inv")) == len(AWKWARD_OBJECTS)


def _parquet_report(manifest, table: pa.Table, schema: str) -> None:
    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    replace_data_file(manifest, buffer.getvalue())
    rewrite_manifest(manifest, lambda doc: doc.update(fileSchema=schema))


def test_timestamps_past_2262_are_stored_so_that_every_engine_reads_them(spark, tmp_path):
    manifest = deliver(tmp_path / "dest")
    far = datetime(9999, 12, 31, tzinfo=timezone.utc)
    _parquet_report(manifest, pa.table({
        "bucket": ["src"], "key": ["locked.parquet"], "size": pa.array([5], pa.int64()),
        "last_modified_date": pa.array([datetime(2999, 1, 2, tzinfo=timezone.utc)], pa.timestamp("ms", tz="UTC")),
        "object_lock_retain_until_date": pa.array([far], pa.timestamp("ms", tz="UTC")),
    }), "message s3.inventory { required binary bucket (UTF8); required binary key (UTF8); optional int64 size; "
        "optional int64 last_modified_date (TIMESTAMP_MILLIS); optional int64 object_lock_retain_until_date "
        "(TIMESTAMP_MILLIS); }")

    assert ingest(spark, tmp_path / "inv", [manifest]).deliveries[0].status == "ingested"

    dt = DeltaTable(str(tmp_path / "inv"))
    [row] = dt.to_pyarrow_table().to_pylist()
    assert row["object_lock_retain_until_date"] == far and row["last_modified"].year == 2999
    for uri in dt.file_uris():
        assert pq.read_table(uri.removeprefix("file://"))["object_lock_retain_until_date"].to_pylist() == [far]
    [read] = read_inventory(spark, str(tmp_path / "inv")).collect()
    assert read["object_lock_retain_until_date"].year == 9999
    assert read["modificationTime"] == int(datetime(2999, 1, 2, tzinfo=timezone.utc).timestamp() * 1000)


def test_a_plain_int64_last_modified_date_is_milliseconds(spark, tmp_path):
    manifest = deliver(tmp_path / "dest")
    _parquet_report(manifest, pa.table({
        "bucket": ["src"], "key": ["a"], "size": pa.array([1], pa.int64()),
        "last_modified_date": pa.array([T0], pa.int64()),
    }), "message s3.inventory { required binary bucket (UTF8); required binary key (UTF8); optional int64 size; "
        "optional int64 last_modified_date; }")
    ingest(spark, tmp_path / "inv", [manifest])
    [row] = rows_of(tmp_path / "inv")
    assert row["modificationTime"] == T0


def _plain_folder(target):
    target.mkdir()
    (target / "notes.txt").write_text("someone's files")


def _parquet_dataset(target):
    target.mkdir()
    pq.write_table(pa.table({"x": [1]}), target / "part-0.parquet")


def _other_delta_table(target):
    write_deltalake(str(target), pa.table({"path": ["a"], "salary": [1]}))


def _partitioned_the_old_way(target):
    write_deltalake(str(target), pa.table({"path": ["a"], "inventory_date": [date(2026, 1, 1)], "bucket": ["b"]}),
                    partition_by=["inventory_date", "bucket"])


@pytest.mark.parametrize("target, problem", [
    (_plain_folder, "not empty and not a Delta table"),
    (_parquet_dataset, "not empty and not a Delta table"),
    (_other_delta_table, "partitioned by []"),
    (_partitioned_the_old_way, "written by an earlier release, partitioned by inventory_date, bucket; copy it once"),
])
def test_a_target_that_is_not_an_inventory_table_is_refused_untouched(spark, tmp_path, target, problem):
    """Refused before any delivery is verified or read: its data files are never opened (here they are gone)."""
    table = tmp_path / "inv"
    target(table)
    before = sorted(p.relative_to(table) for p in table.rglob("*"))
    manifest = deliver(tmp_path / "dest")
    for data in Path(manifest).parent.parent.rglob("*"):
        if data.is_file() and data.suffix not in (".json", ".checksum"):
            data.unlink()

    result = ingest(spark, table, [manifest])

    assert result.deliveries[0].status == "refused" and problem in result.deliveries[0].error
    assert sorted(p.relative_to(table) for p in table.rglob("*")) == before


@pytest.mark.slow
def test_a_table_of_an_earlier_release_is_copied_into_the_current_layout_once(spark, tmp_path, capsys):
    from lakeio.inventory import EARLIER_PARTITION_COLUMNS
    from lakeio.tables.read import read_delta
    from lakeio.tables.write import write_delta

    current, earlier, copied = tmp_path / "current", tmp_path / "earlier", tmp_path / "copied"
    ingest(spark, current, [deliver(tmp_path / "dest", "src"), deliver(tmp_path / "dest", "other")])
    rows = read_delta(spark, str(current))
    write_delta(rows.drop("lifecycle_expiration_date"), str(earlier), EARLIER_PARTITION_COLUMNS,
                [{"inventory_date": "2026-11-21", "bucket": b} for b in ("src", "other")], mode="append")
    # earlier releases did not refuse a delivery that listed an object twice: the copy keeps one row
    write_delta(rows.drop("lifecycle_expiration_date").limit(1), str(earlier), EARLIER_PARTITION_COLUMNS,
                [{"inventory_date": "2026-11-21", "bucket": b} for b in ("src", "other")], mode="append")

    assert main(["--inventory-table", str(copied), "--migrate-from", str(earlier)]) == 0
    assert f"copied {2 * len(AWKWARD_OBJECTS)} rows" in capsys.readouterr().out
    assert DeltaTable(str(copied)).metadata().partition_columns == ["inventory_date", "bucket", "config_id"]
    assert sorted((r["bucket"], r["key"], r["config_id"]) for r in rows_of(copied)) == \
        sorted((r["bucket"], r["key"], r["config_id"]) for r in rows_of(current))
    assert len(rows_of(earlier)) == 2 * len(AWKWARD_OBJECTS) + 1  # left as it was

    weekly = deliver(tmp_path / "dest", "src", config="weekly", objects=AWKWARD_OBJECTS[:1])
    assert ingest(spark, copied, [weekly]).deliveries[0].status == "ingested"
    assert len(rows_of(copied)) == 2 * len(AWKWARD_OBJECTS) + 1
    assert main(["--inventory-table", str(earlier), "--migrate-from", str(earlier)]) == 1


@pytest.mark.slow
def test_a_foreign_column_is_refused_and_an_older_schema_of_ours_is_evolved_out_loud(spark, tmp_path):
    table = tmp_path / "inv"
    ingest(spark, table, [deliver(tmp_path / "dest")])
    dt = DeltaTable(str(table))
    older = tmp_path / "older"  # our table as an older release wrote it: without lifecycle_expiration_date
    write_deltalake(str(older), dt.to_pyarrow_table().drop_columns(["lifecycle_expiration_date"]),
                    partition_by=["inventory_date", "bucket", "config_id"])

    result = ingest(spark, older, [deliver(tmp_path / "dest2", "other")])

    assert result.deliveries[0].status == "ingested"
    assert any("added column(s) lifecycle_expiration_date" in n for n in result.notes)
    rows = rows_of(older)
    assert {r["bucket"] for r in rows} == {"src", "other"} and all("lifecycle_expiration_date" in r for r in rows)

    write_deltalake(str(older), pa.table({"extra": pa.array([], pa.string())}), mode="append", schema_mode="merge")
    refused = ingest(spark, older, [deliver(tmp_path / "dest3", "third")])
    assert refused.deliveries[0].status == "refused" and "['extra'] this write does not know" in refused.deliveries[0].error


@pytest.mark.slow
def test_a_data_file_outside_the_delivery_layout_refuses_only_its_delivery(spark, tmp_path):
    good = deliver(tmp_path / "dest", "good")
    odd = deliver(tmp_path / "dest", "odd")
    rewrite_manifest(odd, lambda doc: doc["files"][0].update(key="somewhere/else/data.parquet"))

    result = ingest(spark, tmp_path / "inv", [good, odd])

    outcome = {d.source_bucket: d for d in result.deliveries}
    assert outcome["good"].status == "ingested"
    assert outcome["odd"].status == "refused"
    assert outcome["odd"].error.startswith("s3://inventory-destination/somewhere/else/data.parquet: cannot read")


@pytest.mark.parametrize("report, problem", [
    (pa.table({"bucket": ["src", "src"], "key": ["a", "b"], "size": [1, -5]}), "unusable, first: negative size (key b)"),
    (pa.table({"bucket": ["src", "src", "src"], "key": ["a", "b", "a"], "size": [1, 2, 1]}),
     "1 row(s) repeat an object of the delivery, first: key a"),
])
def test_rows_that_cannot_be_true_refuse_the_delivery_naming_the_data_file(spark, tmp_path, report, problem):
    manifest = deliver(tmp_path / "dest")
    stamps = pa.array([T0] * report.num_rows, pa.timestamp("ms", tz="UTC"))
    _parquet_report(manifest, report.append_column("last_modified_date", stamps),
                    "message s3.inventory { required binary bucket (UTF8); required binary key (UTF8); "
                    "optional int64 size; optional int64 last_modified_date (TIMESTAMP_MILLIS); }")

    [outcome] = ingest(spark, tmp_path / "inv", [manifest]).deliveries

    assert outcome.status == "refused" and problem in outcome.error
    assert outcome.error.split(": ")[0].endswith(data_files(manifest)[0].name)


def test_a_hash_flag_the_keys_do_not_confirm_refuses_nothing(spark):
    rows = spark.createDataFrame([("a", None, "f1"), ("b", None, "f1"), ("a", "v2", "f2")], "key string, version_id string, _file string")
    assert IngestInventory._listed_twice(rows) == {"duplicates": 0, "duplicate": None}
    twice = rows.union(spark.createDataFrame([("b", None, "f2")], rows.schema))
    assert IngestInventory._listed_twice(twice)["duplicates"] == 1


def test_an_orc_delivery_of_several_files_is_read_whole(spark, tmp_path):
    manifest = deliver(tmp_path / "dest", fmt="ORC", rows_per_file=2)
    assert len(json.loads(manifest.read_text())["files"]) == 3
    [outcome] = ingest(spark, tmp_path / "inv", [manifest]).deliveries
    assert outcome.status == "ingested" and outcome.rows == len(AWKWARD_OBJECTS)


def test_roots_with_glob_characters_are_read_as_named(spark, tmp_path):
    root, table = tmp_path / "dest[1]{a,b}", tmp_path / "inv[x]"
    deliver(root, "src")
    assert main(["--inventory-table", str(table), "--inventory-root", str(root)]) == 0
    assert len(rows_of(table)) == len(AWKWARD_OBJECTS)


@pytest.mark.parametrize("value", ["src =x", "src=", "=s3://x", "src= s3://x"])
def test_a_malformed_path_root_is_a_usage_error(value):
    with pytest.raises(SystemExit) as usage:
        main(["--inventory-table", "t", "--manifest", "m", "--path-root", value])
    assert usage.value.code == 2


def test_two_ingestions_into_one_table_at_once_both_land(spark, tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    table = tmp_path / "inv"
    ingest(spark, table, [deliver(tmp_path / "dest0", "first")])  # the table exists; both runs then commit to it
    manifests = [deliver(tmp_path / f"dest{b}", f"bucket{b}") for b in (1, 2)]
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda m: ingest(spark, table, [m]), manifests))

    assert [d.status for r in results for d in r.deliveries] == ["ingested", "ingested"], \
        [d.error for r in results for d in r.deliveries]
    assert sorted({r["bucket"] for r in rows_of(table)}) == ["bucket1", "bucket2", "first"]
    assert len(rows_of(table)) == 3 * len(AWKWARD_OBJECTS)


def _manifest_of(spark, manifest_path, **file_entry):
    from inventory_etl.manifest import parse_manifest

    rewrite_manifest(manifest_path, lambda doc: doc["files"][0].update(file_entry))
    return parse_manifest(f"file://{manifest_path}", manifest_path.read_bytes(), None)


@pytest.mark.slow
def test_a_data_file_over_2_gib_is_checked_in_bounded_memory(spark, tmp_path):
    from inventory_etl.verify import verify_data_files

    manifest_path = deliver(tmp_path / "dest")
    big = data_files(manifest_path)[0]
    with open(big, "wb") as out:
        out.truncate(2**31 + 1)  # sparse: two gigabytes of zeros, past what one byte array holds
    right = _manifest_of(spark, manifest_path, size=2**31 + 1, MD5checksum="97cdd4bb45c3d5d652c0079901fb4eec")
    assert verify_data_files(spark, [right]) == {}
    wrong = _manifest_of(spark, manifest_path, MD5checksum="0" * 32)
    assert "MD5 97cdd4bb45c3d5d652c0079901fb4eec does not match" in str(verify_data_files(spark, [wrong])[wrong.uri])


def test_data_files_on_s3_are_streamed_by_the_tasks(spark, tmp_path, s3_endpoint):
    import boto3

    from inventory_etl.verify import verify_data_files

    manifest_path = deliver(tmp_path / "dest")
    body = data_files(manifest_path)[0].read_bytes()
    s3 = boto3.client("s3", endpoint_url=s3_endpoint)
    s3.create_bucket(Bucket="inventory-destination")
    s3.put_object(Bucket="inventory-destination", Key="elsewhere/report.parquet", Body=body)
    found = _manifest_of(spark, manifest_path, key="elsewhere/report.parquet")
    gone = _manifest_of(spark, manifest_path, key="elsewhere/gone.parquet")
    assert found.files[0].uri == "s3://inventory-destination/elsewhere/report.parquet"
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()
    hadoop.set("fs.s3a.endpoint", s3_endpoint)  # as a cluster sets it for an S3-compatible store
    try:
        assert verify_data_files(spark, [found]) == {}
        assert "is missing" in str(verify_data_files(spark, [gone])[gone.uri])
    finally:
        hadoop.unset("fs.s3a.endpoint")


# Wall clocks a zone skips (New York's spring gap), repeats (its autumn overlap) and an ordinary one.
ZONE_TRAPS = [InventoryObject(f"tz/{i}.parquet", 10 + i, int(when.timestamp() * 1000)) for i, when in enumerate([
    datetime(2026, 3, 8, 2, 30, tzinfo=timezone.utc), datetime(2026, 11, 1, 1, 30, tzinfo=timezone.utc),
    datetime(2026, 3, 29, 1, 30, tzinfo=timezone.utc), datetime(2026, 1, 2, 3, 4, 5, 123000, tzinfo=timezone.utc)])]
# ORC's reader maps 01:30 and 02:30 UTC of New York's spring-forward day onto one instant there.
ORC_BLIND_HOUR = InventoryObject("tz/blind.parquet", 1, int(datetime(2026, 3, 8, 1, 30, tzinfo=timezone.utc).timestamp() * 1000))


@pytest.mark.slow
@pytest.mark.every_line  # the readers of each Spark line
@pytest.mark.parametrize("zone", ["Asia/Kolkata", "America/New_York"])
def test_every_format_reads_the_same_utc_instants_whatever_the_jvm_zone(tmp_path, zone):
    import os
    import subprocess
    import sys
    from dataclasses import replace
    from pathlib import Path

    # The Object Lock date is an instant too: each object locked until its own modification time.
    objects = [replace(o, object_lock_retain_until_date=o.last_modified_ms, object_lock_mode="COMPLIANCE")
               for o in (*AWKWARD_OBJECTS, *ZONE_TRAPS)]
    for fmt in ("Parquet", "ORC", "CSV"):
        deliver(tmp_path / "dest", "src", objects=objects, fmt=fmt, config=fmt.lower(), object_lock=True)
    deliver(tmp_path / "dest", "src", objects=[ORC_BLIND_HOUR], fmt="ORC", config="orc-blind-hour")
    env = {**os.environ, "TZ": zone, "PYSPARK_SUBMIT_ARGS": f"--driver-java-options -Duser.timezone={zone} pyspark-shell"}
    run = subprocess.run([sys.executable, "-m", "inventory_etl", "--inventory-table", str(tmp_path / "inv"),
                          "--inventory-root", str(tmp_path / "dest"), "--master", "local[2]"],
                         cwd=Path(__file__).resolve().parents[1], env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]

    expected = {o.key: o.last_modified_ms for o in objects}
    rows = rows_of(tmp_path / "inv")
    for fmt in ("parquet", "orc", "csv"):
        got = {r["key"]: r["modificationTime"] for r in rows if r["config_id"] == fmt}
        assert got == expected, fmt
        locked = {r["key"]: (int(r["object_lock_retain_until_date"].timestamp() * 1000), r["object_lock_mode"])
                  for r in rows if r["config_id"] == fmt}
        assert locked == {key: (ms, "COMPLIANCE") for key, ms in expected.items()}, fmt
    # Where ORC's reader cannot tell two UTC wall clocks apart, the later is taken: never older.
    [blind] = [r["modificationTime"] for r in rows if r["config_id"] == "orc-blind-hour"]
    shift = 3_600_000 if zone == "America/New_York" else 0
    assert blind == ORC_BLIND_HOUR.last_modified_ms + shift


@pytest.mark.slow
def test_a_current_only_configuration_beside_an_all_versions_one_counts_each_version_once(spark, tmp_path):
    from tests.deliveries import VERSIONED_OBJECTS

    every = deliver(tmp_path / "dest", "src", objects=VERSIONED_OBJECTS, config="all-versions", versioned=True)
    current = [o for o in VERSIONED_OBJECTS if o.is_latest and not o.is_delete_marker]
    only_current = deliver(tmp_path / "dest", "src", objects=current, config="current-only", when=LATER)
    ingest(spark, tmp_path / "inv", [every, only_current])

    rows = read_inventory(spark, str(tmp_path / "inv")).collect()
    listed = [o for o in VERSIONED_OBJECTS]
    assert len(rows) == len(listed)  # v.txt: v1 and v2 once each, not v2 and a version-less third
    assert sum(r["length"] or 0 for r in rows) == sum(o.size or 0 for o in listed)
    [latest] = [r for r in rows if r["key"] == "v.txt" and r["version_id"] == "v2"]
    assert latest["is_latest"] is True and latest["config_id"] == "current-only"  # the newer delivery's row


@pytest.mark.slow
def test_an_object_two_configurations_list_differently_takes_the_newest_deliverys_row(spark, tmp_path):
    from dataclasses import replace

    early = deliver(tmp_path / "dest", "src", config="zz-weekly", when=datetime(2026, 11, 21, 1, 0, tzinfo=timezone.utc),
                    objects=[replace(o, storage_class="STANDARD") for o in AWKWARD_OBJECTS])
    late = deliver(tmp_path / "dest", "src", config="aa-daily", when=LATER,  # a lifecycle transition in between
                   objects=[replace(o, storage_class="GLACIER") for o in AWKWARD_OBJECTS])
    ingest(spark, tmp_path / "inv", [early, late])

    rows = read_inventory(spark, str(tmp_path / "inv")).collect()
    assert len(rows) == len(AWKWARD_OBJECTS)
    assert {(r["storage_class"], r["config_id"]) for r in rows} == {("GLACIER", "aa-daily")}


@pytest.mark.slow
def test_only_what_two_configurations_delivered_is_merged_and_the_rest_reads_as_merged_too(spark, tmp_path):
    """Readers merge only the (date, bucket) pairs the log shows two configurations delivered
    (ingestion refuses a delivery that lists an object twice); what they read equals merging every row."""
    from collections import Counter

    from lakeio.inventory import inventory_snapshot, one_row_per_object
    from lakeio.tables.read import read_delta
    from tests.deliveries import DELIVERED, VERSIONED_OBJECTS

    current = [o for o in VERSIONED_OBJECTS if o.is_latest and not o.is_delete_marker]
    next_day = DELIVERED + timedelta(days=1)
    ingest(spark, tmp_path / "inv", [
        deliver(tmp_path / "dest", "src", objects=VERSIONED_OBJECTS, config="all-versions", versioned=True),
        deliver(tmp_path / "dest", "src", objects=current, config="current-only", when=LATER),
        deliver(tmp_path / "dest", "other"),  # one configuration: nothing to merge
        deliver(tmp_path / "dest", "src", objects=current, config="current-only", when=next_day)])
    table = str(tmp_path / "inv")

    def counted(rows):
        return Counter(tuple(r) for r in rows.collect())

    every = one_row_per_object(read_delta(spark, table))  # every row merged, whatever the log says
    assert counted(read_inventory(spark, table)) == counted(every)
    for day, shared in ((DELIVERED.date(), {(DELIVERED.date(), "src")}), (next_day.date(), set())):
        snapshot = inventory_snapshot(spark, table, day)
        assert snapshot.shared == shared
        assert counted(snapshot.objects()) == counted(every.where(F.col("inventory_date") == day))
    assert counted(every.where(F.col("bucket") == "src")) != counted(
        read_delta(spark, table).where(F.col("bucket") == "src"))  # the shared pair had rows to merge


# Zones whose rules move the clock by an hour, by half an hour (Lord Howe), at odd offsets (Kathmandu,
# Chatham), southern summers, and Morocco's Ramadan shifts.
TRANSITION_ZONES = ["America/New_York", "Europe/London", "Australia/Lord_Howe", "Asia/Kathmandu",
                    "Pacific/Chatham", "America/Santiago", "Africa/Casablanca", "America/St_Johns"]


def _wall_clocks_around_transitions(zone: str) -> list[int]:
    """UTC instants (ms) every 10 minutes within 6 hours of each of ``zone``'s transitions in 2025-2026,
    plus a sparse sample of the rest of those years: each ORC file's wall clocks, as S3 writes UTC's."""
    from zoneinfo import ZoneInfo

    tz, hour = ZoneInfo(zone), 3_600_000
    start = int(datetime(2025, 1, 1, tzinfo=timezone.utc).timestamp() * 1000)
    offsets = [(start + h * hour, datetime.fromtimestamp((start + h * hour) / 1000, tz).utcoffset())
               for h in range(0, 2 * 365 * 24)]
    changes = [at for (at, before), (_, after) in zip(offsets, offsets[1:]) if before != after]
    around = {c + m * 600_000 for c in changes for m in range(-36, 37)}
    return sorted(around | {start + d * 86_400_000 + 37_000 for d in range(0, 730, 7)})


@pytest.mark.parametrize("zone", TRANSITION_ZONES)
def test_orc_wall_clocks_read_in_any_zone_are_the_utc_instants_s3_wrote(spark, tmp_path, zone):
    """A generator over each zone's transitions: every ORC reading turns back into the instant S3 wrote;
    where ORC's reader maps two wall clocks onto one reading, into the later of them (never older)."""
    from inventory_etl.manifest import parse_manifest
    from inventory_etl.reports import read_report
    from lakeio.store import uris
    instants = _wall_clocks_around_transitions(zone)
    objects = [InventoryObject(f"k/{i}", 1, ms) for i, ms in enumerate(instants)]
    manifest = deliver(tmp_path / "dest", "src", objects=objects, fmt="ORC")
    delivery = parse_manifest(uris.to_uri(str(manifest)), manifest.read_bytes(), None)
    jvm = spark.sparkContext._jvm
    zones = jvm.java.util.TimeZone
    before = zones.getDefault()
    zones.setDefault(zones.getTimeZone(zone))  # local mode: the executors' JVM is this one
    try:
        rows = read_report(spark, delivery).select("key", "_problem", (F.unix_millis("last_modified_date")).alias("ms"))
        raw = spark.read.orc([str(f) for f in data_files(manifest)]).select(
            "key", F.unix_millis("last_modified_date").alias("r"))
        got = {r["key"]: (r["ms"], r["_problem"], r["r"]) for r in rows.join(raw, "key").collect()}
    finally:
        zones.setDefault(before)
    assert zones.getDefault().getID() == before.getID()
    written = {o.key: o.last_modified_ms for o in objects}
    latest_per_reading: dict[int, int] = {}
    for key, (_, _, reading) in got.items():
        latest_per_reading[reading] = max(latest_per_reading.get(reading, 0), written[key])
    assert len(got) == len(objects) and not any(problem for _, problem, _ in got.values())
    wrong = {key: (ms, written[key]) for key, (ms, _, reading) in got.items() if ms != latest_per_reading[reading]}
    assert not wrong, f"{zone}: {len(wrong)} of {len(got)}, e.g. {sorted(wrong.items())[:3]}"
    blind = sum(1 for key, (ms, _, _) in got.items() if ms != written[key])
    assert blind <= len(got) // 10  # only spring-forward hours are blind


def test_an_orc_delivery_read_in_another_zone_than_the_executors_is_refused_by_name(spark, tmp_path, monkeypatch):
    """Each row is checked against the zone its correction assumed: a row read elsewhere refuses the delivery."""
    from inventory_etl import reports

    manifest = deliver(tmp_path / "dest", fmt="ORC")
    monkeypatch.setattr(reports, "executors_zone", lambda spark: "Asia/Kolkata")  # as if read by another executor
    result = ingest(spark, tmp_path / "inv", [manifest])
    [refused] = result.refused
    assert "JVM zone is" in refused.error and "not Asia/Kolkata" in refused.error and ".orc" in refused.error
    assert not (tmp_path / "inv").exists() or not rows_of(tmp_path / "inv")


def test_an_orc_row_unusable_when_read_and_fine_when_read_again_still_refuses_its_delivery(spark, tmp_path, monkeypatch):
    """The zone check depends on the executor that reads a row, so the second read that names the first
    unusable row may find none (every task on an executor in the assumed zone): the delivery is refused
    all the same, by its count, not ingested and not a crash. Forced here by moving the session JVM
    (local mode: the executors' JVM) into the assumed zone between the two reads."""
    from inventory_etl import reports

    manifest = deliver(tmp_path / "dest", fmt="ORC")
    monkeypatch.setattr(reports, "executors_zone", lambda spark: "Asia/Kolkata")  # not this JVM's zone
    zones = spark.sparkContext._jvm.java.util.TimeZone
    before = zones.getDefault()
    first_unusable = IngestInventory._first_unusable

    def read_again_in_the_assumed_zone(rows):
        zones.setDefault(zones.getTimeZone("Asia/Kolkata"))
        try:
            return first_unusable(rows)
        finally:
            zones.setDefault(before)

    monkeypatch.setattr(IngestInventory, "_first_unusable", staticmethod(read_again_in_the_assumed_zone))
    result = ingest(spark, tmp_path / "inv", [manifest])
    [refused] = result.refused
    assert "unusable when first read, none when read again" in refused.error and str(manifest) in refused.error
    assert not (tmp_path / "inv").exists() or not rows_of(tmp_path / "inv")
