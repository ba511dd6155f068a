"""The project's own Delta write path: Spark writes, deltalake commits, with or without Delta's jars."""

from datetime import date

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from lakeio.tables.write import Claim, held_claims, partition_folder, write_delta

PARTS = ["day", "tag"]


def frame(spark, rows):
    return spark.createDataFrame(rows, "id long, name string, day date, tag string")


@pytest.mark.slow
def test_append_then_replace_partitions(spark, tmp_path):
    d1, d2 = date(2026, 1, 1), date(2026, 1, 2)
    table = str(tmp_path / "t")
    first = write_delta(frame(spark, [(1, "a", d1, "x"), (2, "b", d1, "y"), (3, "c", d2, "x")]), table, PARTS,
                        [{"day": "2026-01-01", "tag": "x"}, {"day": "2026-01-01", "tag": "y"},
                         {"day": "2026-01-02", "tag": "x"}], mode="append")
    assert (first.rows, first.files_removed) == (3, 0)

    write_delta(frame(spark, [(4, "d", d2, "y")]), table, PARTS, [{"day": "2026-01-02", "tag": "y"}],
                mode="append")
    replaced = write_delta(frame(spark, [(5, "e", d1, "x"), (6, "f", d1, "x")]), table, PARTS,
                           [{"day": "2026-01-01", "tag": "x"}], mode="replace_partitions")
    assert replaced.rows == 2 and replaced.files_removed == 1

    dt = DeltaTable(table)
    assert dt.version() == 2
    assert sorted(r["id"] for r in dt.to_pyarrow_table().to_pylist()) == [2, 3, 4, 5, 6]
    actions = pa.table(dt.get_add_actions(flatten=True)).to_pylist()
    assert sum(a["num_records"] for a in actions) == 5  # numRecords stats on every add
    assert DeltaTable(table, version=1).to_pyarrow_table().num_rows == 4  # time travel still works


def test_replacing_with_nothing_new_only_removes(spark, tmp_path):
    table = str(tmp_path / "t")
    write_delta(frame(spark, [(1, "a", date(2026, 1, 1), "x")]), table, PARTS, [{"day": "2026-01-01", "tag": "x"}],
                mode="append")
    empty = frame(spark, [])
    result = write_delta(empty, table, PARTS, [{"day": "2026-01-01", "tag": "x"}], mode="replace_partitions")
    assert result.files_removed == 1
    assert DeltaTable(table).to_pyarrow_table().num_rows == 0


def test_partition_values_that_need_escaping_are_refused():
    assert partition_folder(PARTS, {"day": "2026-01-01", "tag": "my.bucket-1"}) == "day=2026-01-01/tag=my.bucket-1"
    with pytest.raises(ValueError, match="needs escaping"):
        partition_folder(PARTS, {"day": "2026-01-01", "tag": "a/b"})


@pytest.mark.delta_jars
def test_with_delta_jars_deltalake_still_commits_and_delta_reads_it_claims_included(spark, tmp_path):
    """Delta's Spark writer would commit through its log store, on S3 safe for one JVM only: with its jars
    loaded our commits are deltalake's all the same, and Delta's own reader reads them."""
    d1, table, x, y = date(2026, 1, 1), str(tmp_path / "t"), {"day": "2026-01-01", "tag": "x"}, {"day": "2026-01-01", "tag": "y"}
    key = ("2026-01-01", "x")
    first = write_delta(frame(spark, [(1, "a", d1, "x"), (2, "b", d1, "y")]), table, PARTS, [x, y],
                        mode="replace_partitions", claims={key: Claim(10, 7)})
    assert (first.rows, first.files_removed) == (2, 0)
    assert held_claims(table, PARTS, [key]) == {key: Claim(10, 7)}  # in the log, as the deltalake path writes it

    older = write_delta(frame(spark, [(3, "c", d1, "x")]), table, PARTS, [x], mode="replace_partitions",
                        drop=[y], claims={key: Claim(5, 1)})
    assert older.outranked == {key: Claim(10, 7)} and older.rows == 0  # the table holds a newer claim: left as it is
    newer = write_delta(frame(spark, [(4, "d", d1, "x")]), table, PARTS, [x], mode="replace_partitions",
                        claims={key: Claim(20, 3)})
    assert (newer.rows, newer.files_removed, newer.outranked) == (1, 1, {})

    assert sorted(r.id for r in spark.read.format("delta").load(table).collect()) == [4]  # y dropped, x replaced
    assert held_claims(table, PARTS, [key]) == {key: Claim(20, 3)}
    history = spark.sql(f"DESCRIBE HISTORY delta.`{table}`").orderBy("version").collect()
    assert all(h.engineInfo.startswith("delta-rs:") for h in history), [h.engineInfo for h in history]


def test_each_run_writes_its_own_folder_and_old_dead_staging_is_cleared(spark, tmp_path):
    from datetime import datetime, timezone

    table = tmp_path / "t"
    now = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    dead = table / "run-20200101T000000Z-deadbeef" / "_temporary" / "0" / "task_0" / "day=2026-01-01" / "tag=x"
    recent = table / f"run-{now}-0badcafe" / "_temporary" / "0" / "task_0" / "day=2026-01-01" / "tag=x"
    for folder in (dead, recent):
        folder.mkdir(parents=True)
        (folder / "part-0.parquet").write_bytes(b"a dead run's committed task output")

    write_delta(frame(spark, [(1, "a", date(2026, 1, 1), "x")]), str(table), PARTS, [{"day": "2026-01-01", "tag": "x"}],
                mode="replace_partitions")

    [add] = pa.table(DeltaTable(str(table)).get_add_actions(flatten=True)).to_pylist()
    assert add["path"].startswith("run-") and "/day=2026-01-01/tag=x/part-" in add["path"]
    assert not (table / add["path"].split("/")[0] / "_SUCCESS").exists()
    assert not (table / "run-20200101T000000Z-deadbeef" / "_temporary").exists()  # a day old: the run is dead
    assert recent.is_dir()  # may still be running
    assert DeltaTable(str(table)).to_pyarrow_table().num_rows == 1


def test_a_run_without_deltas_jars_says_deltalake_commits_its_tables(spark):
    """Every run's first line names its engine: here (the jars-free run) no Delta, no S3 connector."""
    from lakeio.spark.session import engine_jars

    assert engine_jars() == "no Delta jars; deltalake commits our tables; no S3 connector (s3a://)"


@pytest.mark.delta_jars
def test_a_run_with_deltas_jars_names_them_and_still_says_deltalake_commits(spark):
    from lakeio.spark.session import engine_jars

    said = engine_jars()
    assert said.startswith("Delta's jars (delta-spark_") and "; deltalake commits our tables; " in said, said
