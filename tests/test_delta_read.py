"""Reading a Delta table: without Delta's jars only the partitions asked for are read, or even opened; with
them or without, a frame reads one version of the table however often it runs."""

from __future__ import annotations

from datetime import date, timedelta

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from lakeio.tables.read import NeedsDeltaJars, read_delta

DAYS = [date(2026, 11, 1) + timedelta(days=i) for i in range(4)]


@pytest.mark.slow  # four days of inventory written, then read back by partition
def test_only_the_partitions_asked_for_are_read(spark, tmp_path):
    table = tmp_path / "inventory"
    write_deltalake(str(table), pa.table({
        "path": [f"s3://b/k{i}-{d}" for d in DAYS for i in range(3)],
        "inventory_date": [d for d in DAYS for _ in range(3)],
        "bucket": ["b"] * 3 * len(DAYS),
    }), partition_by=["inventory_date", "bucket"])
    # The dates not asked for lose their files (as an S3 lifecycle rule on old partitions would do):
    # a read that so much as listed them fails.
    for day in (DAYS[1], DAYS[3]):
        for part in (table / f"inventory_date={day}").rglob("*.parquet"):
            part.unlink()

    wanted = {DAYS[0], DAYS[2]}
    rows = read_delta(spark, str(table), {"inventory_date": wanted}).collect()
    assert sorted((r["inventory_date"], r["path"]) for r in rows) == sorted(
        (d, f"s3://b/k{i}-{d}") for d in wanted for i in range(3))
    assert read_delta(spark, str(table), {"inventory_date": [DAYS[2]], "bucket": "b"}).count() == 3
    assert read_delta(spark, str(table), {"inventory_date": DAYS[0]}).count() == 3
    nothing = read_delta(spark, str(table), {"inventory_date": set()})
    assert nothing.count() == 0 and nothing.columns == ["path", "inventory_date", "bucket"]


@pytest.mark.jars_too  # Delta's own reader reads a table's newest version each time a frame runs, unless told one
def test_a_frame_reads_the_version_it_was_read_at_however_often_it_runs(spark, tmp_path):
    table = str(tmp_path / "audit")
    write_deltalake(table, pa.table({"id": [1, 2]}))
    rows = read_delta(spark, table)
    assert sorted(r["id"] for r in rows.collect()) == [1, 2]
    write_deltalake(table, pa.table({"id": [3]}), mode="append")
    write_deltalake(table, pa.table({"id": [4]}), mode="overwrite")

    assert sorted(r["id"] for r in rows.collect()) == [1, 2] and rows.count() == 2
    assert [r["id"] for r in read_delta(spark, table).collect()] == [4]
    assert sorted(r["id"] for r in read_delta(spark, table, version=1).collect()) == [1, 2, 3]


@pytest.mark.parametrize("properties, feature", [
    ({"delta.enableDeletionVectors": "true"}, "deletionVectors"),
    ({"delta.columnMapping.mode": "name", "delta.minReaderVersion": "2", "delta.minWriterVersion": "5"}, "columnMapping"),
])
def test_a_table_whose_readers_must_honour_more_than_its_files_is_refused_without_deltas_jars(spark, tmp_path,
                                                                                               properties, feature):
    table = str(tmp_path / "audit")
    try:
        write_deltalake(table, pa.table({"id": [1, 2]}), configuration=properties)
    except Exception as exc:  # a deltalake that cannot write the feature cannot be the other engine here
        pytest.skip(f"deltalake cannot write {feature}: {exc}")

    with pytest.raises(NeedsDeltaJars, match=rf"^file://{table}: its readers must honour (\w+, )*{feature}\b.*, which only Delta's jars"):
        read_delta(spark, table)


@pytest.mark.delta_jars  # another engine's DELETE on our table leaves deletion vectors: its rows are Delta's answer
def test_rows_a_deletion_vector_drops_are_not_read(spark, tmp_path):
    table = str(tmp_path / "audit")
    spark.sql(f"CREATE TABLE delta.`{table}` (id INT) USING delta TBLPROPERTIES (delta.enableDeletionVectors = true)")
    spark.range(1, 7).selectExpr("CAST(id AS INT) AS id").coalesce(1).write.format("delta").mode("append").save(table)
    spark.sql(f"DELETE FROM delta.`{table}` WHERE id % 2 = 0")
    assert any('"deletionVector"' in f.read_text() for f in (tmp_path / "audit" / "_delta_log").glob("*.json"))

    assert sorted(r["id"] for r in read_delta(spark, table).collect()) == [1, 3, 5]
