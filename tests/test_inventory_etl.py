"""Job 1 end to end on real Spark, real Delta tables and deliveries laid out as S3 writes them."""

from __future__ import annotations

import json
from datetime import date, datetime, timezone

import pytest
from deltalake import DeltaTable

from inventory_etl.cli import main
from inventory_etl.discovery import discover
from inventory_etl.ingestion import IngestInventory
from lakeio.spark.session import delta_jars_present
from lakeio.store.filesystem import Storage
from tests.deliveries import (
    AWKWARD_OBJECTS,
    VERSIONED_OBJECTS,
    data_files,
    deliver,
    replace_data_file,
    rewrite_manifest,
)


def table_rows(table_path) -> list[dict]:
    return DeltaTable(str(table_path)).to_pyarrow_table().to_pylist()


def ingest(spark, table, manifests, **options):
    return IngestInventory(spark, str(table), **options).execute([str(m) for m in manifests])


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["Parquet", "ORC", "CSV"])
def test_each_format_lands_awkward_keys_decoded(spark, tmp_path, fmt):
    manifest = deliver(tmp_path / "dest", fmt=fmt)
    result = ingest(spark, tmp_path / "inv", [manifest])

    assert [d.status for d in result.deliveries] == ["ingested"]
    rows = {r["key"]: r for r in table_rows(tmp_path / "inv")}
    assert set(rows) == {o.key for o in AWKWARD_OBJECTS}
    for obj in AWKWARD_OBJECTS:
        row = rows[obj.key]
        assert row["path"] == f"s3://src/{obj.key}"
        assert row["length"] == obj.size
        assert row["modificationTime"] == obj.last_modified_ms
        assert row["isDir"] is obj.key.endswith("/")
        assert row["storage_class"] == obj.storage_class
        assert row["e_tag"] == obj.e_tag
        assert row["bucket"] == "src"
        assert row["inventory_date"] == date(2026, 11, 21)
        assert row["config_id"] == "daily"
    assert result.deliveries[0].rows == len(AWKWARD_OBJECTS)
    assert result.deliveries[0].bytes == sum(o.size for o in AWKWARD_OBJECTS)


@pytest.mark.parametrize("fmt", ["Parquet", "CSV"])
def test_versioned_inventory_keeps_every_version_and_delete_marker(spark, tmp_path, fmt):
    manifest = deliver(tmp_path / "dest", objects=VERSIONED_OBJECTS, fmt=fmt, versioned=True)
    ingest(spark, tmp_path / "inv", [manifest])

    rows = {(r["key"], r["version_id"]): r for r in table_rows(tmp_path / "inv")}
    assert len(rows) == len(VERSIONED_OBJECTS)
    marker = rows[("gone.txt", "dm1")]
    assert marker["is_delete_marker"] is True and marker["length"] is None and marker["is_latest"] is True
    assert rows[("v.txt", "v1")]["is_latest"] is False
    assert rows[("v.txt", "v2")]["length"] == 11


def test_file_schema_spellings_are_one_field_list():
    from inventory_etl.manifest import parse_file_schema

    csv = parse_file_schema("m", "CSV", "Bucket, Key, Size, LastModifiedDate, ETag, IsMultipartUploaded")
    parquet = parse_file_schema("m", "Parquet", "message s3.inventory { required binary bucket (UTF8); "
                                "required binary key (UTF8); optional int64 size; optional int64 "
                                "last_modified_date (TIMESTAMP_MILLIS); optional binary e_tag (UTF8); "
                                "optional boolean is_multipart_uploaded; }")
    orc = parse_file_schema("m", "ORC", "struct<bucket:string,key:string,size:bigint,last_modified_date:timestamp,"
                            "e_tag:string,is_multipart_uploaded:boolean>")
    assert csv == parquet == orc == ("bucket", "key", "size", "last_modified_date", "e_tag", "is_multipart_uploaded")


def test_discovery_picks_the_newest_delivery_of_each_day_in_the_look_back_window(spark, tmp_path):
    root = tmp_path / "dest"
    deliver(root, "a", when=datetime(2026, 11, 10, 1, 0, tzinfo=timezone.utc))
    deliver(root, "a", when=datetime(2026, 11, 20, 1, 0, tzinfo=timezone.utc))
    deliver(root, "a", when=datetime(2026, 11, 21, 1, 0, tzinfo=timezone.utc))
    newest = deliver(root, "a", when=datetime(2026, 11, 21, 13, 0, tzinfo=timezone.utc))
    deliver(root, "a", config="weekly", when=datetime(2026, 11, 21, 2, 0, tzinfo=timezone.utc))
    only_old = deliver(root, "b", when=datetime(2026, 11, 20, 1, 0, tzinfo=timezone.utc))
    (root / "a" / "daily" / "hive").mkdir()  # S3 also writes symlink folders; they are not deliveries

    found = discover(Storage(spark), str(root))  # each day within a week of its pair's newest, oldest first
    assert [m.split("/dest/")[1] for m in found.manifests] == [
        "a/daily/2026-11-20T01-00Z/manifest.json", "b/daily/2026-11-20T01-00Z/manifest.json",
        "a/daily/2026-11-21T13-00Z/manifest.json", "a/weekly/2026-11-21T02-00Z/manifest.json"]
    assert newest.as_posix() in found.manifests[2] and found.stale == {}
    # the 10th is outside the window: reported while the table lacks it, silent once it holds it
    assert found.too_old == {("a", "daily"): [date(2026, 11, 10)]}
    assert discover(Storage(spark), str(root), held={(date(2026, 11, 10), "a", "daily")}).too_old == {}

    narrow = discover(Storage(spark), str(root), config_ids=["daily"], lookback_days=1)
    assert [m.split("/dest/")[1] for m in narrow.manifests] == [
        "b/daily/2026-11-20T01-00Z/manifest.json", "a/daily/2026-11-21T13-00Z/manifest.json"]
    assert narrow.too_old == {("a", "daily"): [date(2026, 11, 10), date(2026, 11, 20)]}

    older = discover(Storage(spark), str(root), on_date=date(2026, 11, 20), config_ids=["daily"])
    assert sorted(m.split("/dest/")[1] for m in older.manifests) == [
        "a/daily/2026-11-20T01-00Z/manifest.json", "b/daily/2026-11-20T01-00Z/manifest.json"]
    assert discover(Storage(spark), str(root), source_buckets=["b"]).manifests == [f"file://{only_old}"]
    assert discover(Storage(spark), str(root), on_date=date(2026, 11, 21)).stale == {("b", "daily"): date(2026, 11, 20)}


@pytest.mark.slow
def test_a_late_delivery_for_an_earlier_day_is_ingested_by_the_next_run(spark, tmp_path, capsys):
    root, table = tmp_path / "dest", tmp_path / "inv"
    deliver(root, "a", when=datetime(2026, 11, 20, 1, 0, tzinfo=timezone.utc))
    assert main(["--inventory-table", str(table), "--inventory-root", str(root)]) == 0
    deliver(root, "a", when=datetime(2026, 11, 22, 1, 0, tzinfo=timezone.utc))
    assert main(["--inventory-table", str(table), "--inventory-root", str(root)]) == 0
    deliver(root, "a", when=datetime(2026, 11, 21, 1, 0, tzinfo=timezone.utc))  # arrives after the 22nd's run
    deliver(root, "a", when=datetime(2026, 11, 1, 1, 0, tzinfo=timezone.utc))  # and one far too late
    capsys.readouterr()
    assert main(["--inventory-table", str(table), "--inventory-root", str(root)]) == 0
    out = capsys.readouterr().out
    assert "1 ingested, 0 refused, 0 superseded, 2 skipped" in out  # the 20th and 22nd are held already
    assert "1 day(s) of a/daily from 2026-11-01 to 2026-11-01 are not in the table and older than the look-back window" in out
    days = sorted({r["inventory_date"] for r in table_rows(table)})
    assert days == [date(2026, 11, 20), date(2026, 11, 21), date(2026, 11, 22)]
    history = DeltaTable(str(table)).history()
    assert len(history) == 3  # the runs wrote one day each: the days held were not written again


def test_path_root_maps_a_bucket_to_another_root(spark, tmp_path):
    manifest = deliver(tmp_path / "dest")
    ingest(spark, tmp_path / "inv", [manifest], path_roots={"src": "s3a://mirror/copy/"})
    paths = {r["path"] for r in table_rows(tmp_path / "inv")}
    assert paths == {f"s3a://mirror/copy/{o.key}" for o in AWKWARD_OBJECTS}


def test_delivery_copied_elsewhere_resolves_against_its_own_folder(spark, tmp_path):
    manifest = deliver(tmp_path / "dest")
    doc = json.loads(manifest.read_text())
    assert doc["files"][0]["key"].startswith("inventory/src/daily/data/")  # where S3 put it, not here
    result = ingest(spark, tmp_path / "inv", [manifest])
    assert result.deliveries[0].status == "ingested"


@pytest.mark.slow
def test_rerun_replaces_the_partition_in_one_commit(spark, tmp_path):
    first = deliver(tmp_path / "dest", "src")
    other = deliver(tmp_path / "dest", "other", objects=AWKWARD_OBJECTS[:2])
    ingest(spark, tmp_path / "inv", [first, other])
    assert ingest(spark, tmp_path / "inv", [first]).deliveries[0].status == "skipped"  # held already: no commit
    rows = table_rows(tmp_path / "inv")
    assert len(rows) == len(AWKWARD_OBJECTS) + 2
    assert DeltaTable(str(tmp_path / "inv")).version() == 0

    smaller = deliver(tmp_path / "dest2", "src", objects=AWKWARD_OBJECTS[:3],
                      when=datetime(2026, 11, 21, 9, 0, tzinfo=timezone.utc))
    ingest(spark, tmp_path / "inv", [smaller])
    rows = table_rows(tmp_path / "inv")
    assert sorted(r["key"] for r in rows if r["bucket"] == "src") == sorted(o.key for o in AWKWARD_OBJECTS[:3])
    assert len([r for r in rows if r["bucket"] == "other"]) == 2
    history = DeltaTable(str(tmp_path / "inv")).history()
    assert len(history) == 2  # one commit per run that writes: removes and adds together


def _bad_json(m):
    rewrite_manifest(m, raw="{not json")


def _missing_field(m):
    rewrite_manifest(m, lambda doc: doc.pop("fileSchema"))


def _unknown_format(m):
    rewrite_manifest(m, lambda doc: doc.update(fileFormat="Avro"))


def _missing_data_file(m):
    data_files(m)[0].unlink()


def _size_mismatch(m):
    rewrite_manifest(m, lambda doc: doc["files"][0].update(size=doc["files"][0]["size"] + 1))


def _md5_mismatch(m):
    rewrite_manifest(m, lambda doc: doc["files"][0].update(MD5checksum="0" * 32))


def _manifest_checksum_mismatch(m):
    (m.parent / "manifest.checksum").write_text("0" * 32)


def _bad_json_without_checksum(m):
    _bad_json(m)
    (m.parent / "manifest.checksum").unlink()


def _unreadable_report(m):
    replace_data_file(m, b"PAR1 this is not a parquet file PAR1")


def _schema_lists_extra_column(m):
    rewrite_manifest(m, lambda doc: doc.update(fileSchema=doc["fileSchema"].replace(
        "}", "optional binary replication_status (UTF8); }")))


def _lacks_required_field(m):
    rewrite_manifest(m, lambda doc: doc.update(fileSchema=doc["fileSchema"].replace(
        "optional int64 size;", "")))


BAD_INPUTS = {
    "malformed-json": (_bad_json, "manifest.json", "malformed JSON"),
    # its own fault first, not the missing checksum's: the manifest says what is wrong with it
    "malformed-json-no-checksum": (_bad_json_without_checksum, "manifest.json", "malformed JSON"),
    "missing-field": (_missing_field, "manifest.json", "missing field(s): fileSchema"),
    "unknown-format": (_unknown_format, "manifest.json", "unknown fileFormat 'Avro'"),
    "missing-data-file": (_missing_data_file, ".parquet", "is missing"),
    "size-mismatch": (_size_mismatch, ".parquet", "does not match the manifest's"),
    "md5-mismatch": (_md5_mismatch, ".parquet", "MD5"),
    "manifest-checksum": (_manifest_checksum_mismatch, "manifest.json", "does not match manifest.checksum"),
    "unreadable-report": (_unreadable_report, ".parquet", "unreadable Parquet report"),
    "columns-vs-fileSchema": (_schema_lists_extra_column, "manifest.json", "do not match fileSchema"),
    "lacks-size": (_lacks_required_field, "manifest.json", "lacks required field(s) size"),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_delivery_is_refused_and_the_others_still_go_in(spark, tmp_path, case):
    damage, file_hint, problem = BAD_INPUTS[case]
    good = deliver(tmp_path / "dest", "good")
    bad = deliver(tmp_path / "dest", "bad")
    damage(bad)

    result = ingest(spark, tmp_path / "inv", [good, bad])

    outcome = {d.manifest_uri.split("/dest/")[1].split("/")[0]: d for d in result.deliveries}
    assert outcome["good"].status == "ingested"
    assert outcome["bad"].status == "refused"
    assert problem in outcome["bad"].error
    assert file_hint in outcome["bad"].error.split(": ")[0]
    assert {r["bucket"] for r in table_rows(tmp_path / "inv")} == {"good"}


@pytest.mark.parametrize("body, problem", [
    ('"src","a","1","2026-01-01T00:00:00.000Z","e","STANDARD","extra"\n', "more fields than fileSchema"),
    ('"src","a","1"\n', "fewer fields than fileSchema"),
    ('"src","a","lots","2026-01-01T00:00:00.000Z","e","STANDARD"\n', "unparseable size"),
    ('"src","bad%zzkey","1","2026-01-01T00:00:00.000Z","e","STANDARD"\n', "unparseable key"),
    ('"elsewhere","a","1","2026-01-01T00:00:00.000Z","e","STANDARD"\n', "row of another bucket"),
    ('"src","a","2026-01-01T00:00:00.000Z","1234","e","STANDARD"\n', "unparseable size"),  # columns swapped
    ('"src","a","1234","1234","e","STANDARD"\n', "unparseable last_modified_date"),  # not a year 1234
])
def test_csv_rows_that_disagree_with_file_schema_refuse_the_delivery(spark, tmp_path, body, problem):
    import gzip

    manifest = deliver(tmp_path / "dest", fmt="CSV")
    rewrite_manifest(manifest, lambda doc: doc.update(fileSchema="Bucket, Key, Size, LastModifiedDate, ETag, StorageClass"))
    replace_data_file(manifest, gzip.compress(body.encode()))

    result = ingest(spark, tmp_path / "inv", [manifest])
    assert result.deliveries[0].status == "refused"
    assert problem in result.deliveries[0].error
    assert not (tmp_path / "inv" / "_delta_log").exists()


def test_a_refused_configuration_leaves_the_other_configuration_of_its_bucket_in(spark, tmp_path):
    good = deliver(tmp_path / "dest", "src", config="daily")
    bad = deliver(tmp_path / "dest", "src", config="extra")
    _md5_mismatch(bad)
    result = ingest(spark, tmp_path / "inv", [good, bad])
    assert {d.config_id: d.status for d in result.deliveries} == {"daily": "ingested", "extra": "refused"}
    assert {r["config_id"] for r in table_rows(tmp_path / "inv")} == {"daily"}


def test_without_checksum_verification_a_wrong_md5_is_accepted_but_size_is_not(spark, tmp_path):
    wrong_md5 = deliver(tmp_path / "dest", "a")
    _md5_mismatch(wrong_md5)
    _manifest_checksum_mismatch(wrong_md5)
    wrong_size = deliver(tmp_path / "dest", "b")
    _size_mismatch(wrong_size)
    result = ingest(spark, tmp_path / "inv", [wrong_md5, wrong_size], verify_checksums=False)
    assert {d.source_bucket: d.status for d in result.deliveries} == {"a": "ingested", "b": "refused"}


@pytest.mark.jars_too
def test_result_reads_with_spark(spark, tmp_path):
    manifest = deliver(tmp_path / "dest")
    ingest(spark, tmp_path / "inv", [manifest])
    if delta_jars_present():
        df = spark.read.format("delta").load(str(tmp_path / "inv"))
    else:  # no Delta jars: Spark reads exactly the files the Delta log lists
        df = spark.read.parquet(*DeltaTable(str(tmp_path / "inv")).file_uris())
    assert df.count() == len(AWKWARD_OBJECTS)
    assert df.columns[:4] == ["path", "length", "isDir", "modificationTime"]
    assert dict(df.dtypes)["modificationTime"] == "bigint"


@pytest.mark.parametrize("buckets", [("one",), ("one", "two")])
def test_validation_shuffles_each_row_once_into_tasks_sized_by_the_reports_bytes(spark, tmp_path, monkeypatch, buckets):
    """Nearly every object of a delivery is distinct: a partial aggregation before the shuffle holds (and
    spills) its whole input, and Spark's byte-sized tasks after it hold millions of objects each. A daily
    run's one delivery makes its number a literal, which Spark drops from the grouping: a shuffle keyed by
    it too would be followed by another."""
    import lakeio.spark.tasks
    from inventory_etl import ingestion

    monkeypatch.setattr(lakeio.spark.tasks, "KEYS_PER_AGGREGATION_TASK", 1)  # one task per row the bytes allow
    manifests = [str(deliver(tmp_path / "dest", bucket)) for bucket in buckets]
    job = IngestInventory(spark, str(tmp_path / "inv"))
    result = ingestion.IngestResult(job.inventory_table, [])
    accepted = job._read_reports(job._load_manifests(manifests, result), result)
    per_object = ingestion._per_object(accepted)

    plan = per_object._jdf.queryExecution().executedPlan().toString()  # as planned, before it runs
    assert plan.count("Exchange") == 1 and "Exchange hashpartitioning(object" in plan, plan
    report_bytes = sum(f.size for a in accepted for f in a.manifest.files)
    assert per_object.rdd.getNumPartitions() == report_bytes // ingestion.REPORT_BYTES_PER_ROW > len(AWKWARD_OBJECTS)
    assert per_object.groupBy().sum("rows").first()[0] == len(buckets) * len(AWKWARD_OBJECTS)


def test_cli_exit_codes_and_summary_json(spark, tmp_path, capsys):
    root = tmp_path / "dest"
    deliver(root, "good")
    summary = tmp_path / "summary.json"
    args = ["--inventory-table", str(tmp_path / "inv"), "--inventory-root", str(root), "--summary-json", str(summary)]
    assert main(args) == 0
    assert json.loads(summary.read_text())["deliveries_ingested"] == 1
    said = capsys.readouterr()
    assert "1 ingested, 0 refused" in said.out
    assert "--summary-json is deprecated and goes in the next release: use --report" in said.err

    _md5_mismatch(deliver(root, "bad"))
    args[-2] = "--report"  # the new name of --summary-json
    assert main(args) == 1
    report = json.loads(summary.read_text())
    assert (report["deliveries_refused"], report["deliveries_skipped"], report["rows"]) == (1, 1, 0)  # "good" is held
    assert "REFUSED" in capsys.readouterr().out

    (tmp_path / "empty").mkdir()
    assert main(["--inventory-table", str(tmp_path / "inv"), "--inventory-root", str(tmp_path / "empty")]) == 1
    capsys.readouterr()
    with pytest.raises(SystemExit) as missing:  # not an empty root: none at all, said before any Spark
        main(["--inventory-table", str(tmp_path / "inv"), "--inventory-root", str(tmp_path / "no-such")])
    assert missing.value.code == 2 and f"--inventory-root {tmp_path / 'no-such'}: no such folder" in capsys.readouterr().err
    with pytest.raises(SystemExit) as usage:
        main(["--inventory-table", "x", "--manifest", "m", "--date", "2026-01-01"])
    assert usage.value.code == 2
    with pytest.raises(SystemExit) as bad_date:
        main(["--inventory-table", "x", "--inventory-root", "r", "--date", "yesterday"])
    assert bad_date.value.code == 2


@pytest.mark.slow
def test_a_held_delivery_is_counted_as_skipped_never_rendered_as_refused(spark, tmp_path, capsys):
    manifest = deliver(tmp_path / "dest", "src")
    table = str(tmp_path / "inv")
    assert main(["--inventory-table", table, "--manifest", str(manifest)]) == 0
    capsys.readouterr()
    assert main(["--inventory-table", table, "--manifest", str(manifest)]) == 0
    out = capsys.readouterr().out
    assert "0 ingested, 0 refused, 0 superseded, 1 skipped" in out
    assert "REFUSED" not in out and "None" not in out
