"""Job 2 never deletes a file a table needs, and one odd table never stops the others.

One lake holds every trap we know of beside healthy tables; its inventory comes from two
inventory configurations, so every object is listed twice. A second test commits to a
table between planning and deleting.
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timedelta, timezone
from pathlib import Path
from urllib.parse import quote

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from inventory_etl.ingestion import IngestInventory
from inventory_etl.producer import objects_in_folder, write_delivery
from lakeio.errors import InvalidOption
from lakeio.spark.steps import Step
from lakeio.store.uris import TableRoot
from tests.feature_lake import copy_table
from tests.lakes import by_table, inventory_of
from tests.report_schemas import assert_matches_schema
from vacuum_jobs.batch_vacuum import BatchVacuum
from vacuum_jobs.cli import main
from vacuum_jobs.options import VacuumOptions
from vacuum_jobs.report import ReasonCode
from vacuum_jobs.vacuum_plan import Decision

pytestmark = pytest.mark.slow  # whole vacuum runs over lakes of traps

OLD = (datetime.now(timezone.utc) - timedelta(days=30)).timestamp()


def _log(table: Path, version: int) -> Path:
    return table / "_delta_log" / f"{version:020d}.json"


def _edit_commit(table: Path, version: int, edit) -> None:
    """Rewrite one commit, action by action (``edit`` returns the new action)."""
    lines = [json.loads(line) for line in _log(table, version).read_text().splitlines() if line.strip()]
    _log(table, version).write_text("".join(json.dumps(edit(a)) + "\n" for a in lines))


def _commit(table: Path, actions: list[dict]) -> None:
    version = DeltaTable(str(table)).version() + 1 if (table / "_delta_log").is_dir() else 0
    _log(table, version).write_text("".join(json.dumps(a) + "\n" for a in actions))


def _table(path: Path, appends: int = 1, **kwargs) -> Path:
    for i in range(appends):
        write_deltalake(str(path), pa.table({"id": [i]}), mode="append", **kwargs)
    return path


def _orphan(table: Path, name: str = "orphan.parquet") -> Path:
    path = table / name
    path.write_bytes(b"written by a job that never committed")
    return path


def _data_files(table: Path) -> list[str]:
    return sorted(p.name for p in table.glob("*.parquet"))


def _with_uniform_iceberg(action: dict) -> dict:
    if "metaData" in action:
        action["metaData"]["configuration"]["delta.universalFormat.enabledFormats"] = "iceberg"
    return action


def test_a_lake_of_traps(spark, tmp_path):
    bucket = tmp_path / "lake"
    healthy = _table(bucket / "healthy", 2)
    orphans = {_orphan(healthy)}

    # 1. UniForm Iceberg: metadata/ at any depth is Iceberg's, not an orphan.
    uniform = _table(bucket / "uniform", 2)
    _edit_commit(uniform, 0, _with_uniform_iceberg)
    (uniform / "metadata").mkdir()
    iceberg_files = [uniform / "metadata" / "v1.metadata.json", uniform / "metadata" / "snap-1.avro"]
    for path in iceberg_files:
        path.write_text("{}")
    orphans.add(_orphan(uniform))

    # 3. Live files spelled as a scheme-less absolute path and as ./x.
    spelled = _table(bucket / "spelled", 2)
    _edit_commit(spelled, 0, lambda a: {"add": {**a["add"], "path": quote(f"{spelled}/") + a["add"]["path"]}} if "add" in a else a)
    _edit_commit(spelled, 1, lambda a: {"add": {**a["add"], "path": "./" + a["add"]["path"]}} if "add" in a else a)
    orphans.add(_orphan(spelled))

    # 9. A shallow clone: its log adds the source table's files by absolute URI.
    source = _table(bucket / "source", 2)
    source_orphan = _orphan(source)  # the source is not vacuumed in this run: its orphan stays
    clone = _table(bucket / "clone", 1)
    _commit(clone, [{"add": {"path": f"file://{source}/{name}", "size": 1, "modificationTime": 1_600_000_000_000,
                             "dataChange": True, "partitionValues": {}}} for name in _data_files(source)])
    orphans.add(_orphan(clone))

    # 2. A multi-part checkpoint whose second part is corrupt, on a cluster that ignores corrupt files.
    # Both written by Delta's writer (tests.feature_lake).
    multipart = bucket / "multipart"
    copy_table("multi_part_checkpoint", multipart)
    corrupt = sorted((multipart / "_delta_log").glob("*.checkpoint.0000000002.*.parquet"))[-1]
    corrupt.write_bytes(b"PAR1junk")
    # ... and a v2 checkpoint whose newest sidecar vanished.
    sidecarless = bucket / "sidecarless"
    copy_table("v2_checkpoint", sidecarless)
    vanished = sorted((sidecarless / "_delta_log" / "_sidecars").glob("*.parquet"))[-1]
    vanished.unlink()

    # 6. A checkpoint-only table whose checkpoint cannot be read.
    checkpoint_only = _table(bucket / "checkpoint_only", 3)
    DeltaTable(str(checkpoint_only)).create_checkpoint()
    for version in range(3):
        _log(checkpoint_only, version).unlink()
    (checkpoint_only / "_delta_log" / "_last_checkpoint").unlink()
    next((checkpoint_only / "_delta_log").glob("*.checkpoint.parquet")).write_bytes(b"not parquet at all")

    # 7. A raw '%' in a log path; 4. a deletion vector of a storage type nobody knows.
    percent = _table(bucket / "percent", 1)
    (percent / "100%.parquet").write_bytes(b"x")
    _commit(percent, [{"add": {"path": "100%.parquet", "size": 1, "modificationTime": 1, "dataChange": True,
                               "partitionValues": {}}}])
    unknown_dv = _table(bucket / "unknown_dv", 1)
    _edit_commit(unknown_dv, 0, lambda a: {"add": {**a["add"], "deletionVector": {
        "storageType": "x", "pathOrInlineDv": "somewhere", "offset": 1, "sizeInBytes": 10, "cardinality": 1}}}
        if "add" in a else a)

    # 8. Glob characters in a table root are read literally.
    globbed = _table(bucket / "glob", 2).rename(bucket / "glob[1]{a}")  # delta-rs will not write there itself
    orphans.add(_orphan(globbed))

    for path in bucket.rglob("*"):
        if path.is_file() and "_delta_log" not in path.parts:
            os.utime(path, (OLD, OLD))
    before = {p for p in bucket.rglob("*") if p.is_file()}

    # 10. Two inventory configurations of the bucket deliver every object twice.
    now = datetime.now(timezone.utc)
    manifests = [write_delivery(str(tmp_path / "dest"), "lake", config, objects_in_folder(str(bucket)), now)
                 for config in ("daily", "weekly")]
    inventory = tmp_path / "inventory"
    assert not IngestInventory(spark, str(inventory), {"lake": str(bucket)}).execute(manifests).refused

    report_file = tmp_path / "report.json"
    tables = [healthy, uniform, spelled, clone, multipart, sidecarless, checkpoint_only, percent, unknown_dv, globbed]
    spark.conf.set("spark.sql.files.ignoreCorruptFiles", "true")
    spark.conf.set("spark.sql.files.ignoreMissingFiles", "true")
    try:
        code = main(["--inventory-table", str(inventory), *[a for t in tables for a in ("--table", str(t))],
                     "--apply", "--report", str(report_file)])
    finally:
        spark.conf.unset("spark.sql.files.ignoreCorruptFiles")
        spark.conf.unset("spark.sql.files.ignoreMissingFiles")

    assert code == 1
    doc = json.loads(report_file.read_text())
    assert_matches_schema(doc, "vacuum-report")
    report = {Path(t["table"]).name: t for t in doc["tables"]}
    vacuumed = ("healthy", "uniform", "spelled", "clone", "glob[1]{a}")
    for name in vacuumed:
        assert report[name]["status"] == "vacuumed", (name, report[name]["reason"])
        # one candidate per orphan, although the inventory lists each object twice
        assert report[name]["counts"]["candidate_files"] == report[name]["counts"]["deleted_files"] == 1, name
        assert report[name]["counts"]["missing_files"] == 0, name
    refusals = {
        "multipart": corrupt.name,
        "sidecarless": vanished.name,
        "checkpoint_only": "cannot read a log file",
        "percent": "'100%.parquet': malformed percent escape",
        "unknown_dv": "unknown deletion vector storage type 'x'",
    }
    for name, words in refusals.items():
        assert report[name]["status"] == "refused" and words in report[name]["reason"], (name, report[name]["reason"])

    after = {p for p in bucket.rglob("*") if p.is_file()}
    assert before - after == orphans  # the planted orphans of the vacuumed tables, and nothing else
    assert source_orphan.exists() and all(p.exists() for p in iceberg_files)


def test_a_commit_between_plan_and_delete_is_honoured(spark, tmp_path):
    """A RESTORE re-adds a file whose tombstone had expired while the run was planning."""
    table = _table(tmp_path / "lake" / "t", 2)
    original_add = next(json.loads(line) for line in _log(table, 0).read_text().splitlines() if '"add"' in line)
    restored = original_add["add"]["path"]
    long_ago = int(OLD * 1000)
    _commit(table, [{"remove": {"path": restored, "deletionTimestamp": long_ago, "dataChange": True}}])
    orphan = _orphan(table)
    for path in table.rglob("*.parquet"):
        os.utime(path, (OLD, OLD))
    inventory = inventory_of(spark, tmp_path / "lake", tmp_path)

    def restore_before_the_recheck(step: str) -> None:
        if step == Step.RECHECKING:
            _commit(table, [original_add])

    run = BatchVacuum(spark, VacuumOptions(str(inventory), dry_run=False), on_step=restore_before_the_recheck).execute(
        [str(table)])
    report = by_table(run)["t"]
    assert report.status == "vacuumed"
    assert report.counts.candidate_files == 2 and report.counts.named_since_planning_files == 1
    assert report.counts.deleted_files == 1
    assert (table / restored).exists() and not orphan.exists()
    assert DeltaTable(str(table)).to_pyarrow_table().num_rows == 2


def test_a_table_whose_protocol_changed_since_planning_deletes_nothing(spark, tmp_path):
    table = _table(tmp_path / "lake" / "t", 1)
    orphan = _orphan(table)
    os.utime(orphan, (OLD, OLD))
    inventory = inventory_of(spark, tmp_path / "lake", tmp_path)

    def upgrade_before_the_recheck(step: str) -> None:
        if step == Step.RECHECKING:
            _commit(table, [{"protocol": {"minReaderVersion": 3, "minWriterVersion": 7,
                                          "readerFeatures": ["someFutureFeature"], "writerFeatures": []}}])

    run = BatchVacuum(spark, VacuumOptions(str(inventory), dry_run=False), on_step=upgrade_before_the_recheck).execute(
        [str(table)])
    report = by_table(run)["t"]
    assert report.status == "refused" and "changed since planning" in report.reason
    assert report.reason_code == ReasonCode.CHANGED_SINCE_PLANNING
    assert orphan.exists()
    # The table's report keeps what planning found; the run's totals count only what it acted on.
    assert report.counts.candidate_files == 1
    assert (run.totals()["candidate_files"], run.totals()["candidate_bytes"]) == (0, 0)
    assert "total: 0 candidate file(s)" in run.summary()


def test_a_log_file_cleaned_up_while_the_run_plans_refuses_only_its_own_table(spark, tmp_path):
    """A writer commits, checkpoints and removes its expired log files between the run's summary
    read and its plan (Delta and delta-rs clean up logs after 30 days by default)."""
    lake = tmp_path / "lake"
    cleaned, other = _table(lake / "cleaned", 3), _table(lake / "other", 2)
    DeltaTable(str(cleaned)).create_checkpoint()  # version 2
    _table(cleaned, 1)  # version 3: the run reads checkpoint 2, then commit 3
    for table in (cleaned, other):
        os.utime(_orphan(table), (OLD, OLD))
    inventory = inventory_of(spark, lake, tmp_path)

    cleaned_up = []

    def clean_up_before_the_first_plan(step: str) -> None:
        if step == Step.PLANNING and not cleaned_up:  # once, between the first summary read and the plan
            _table(cleaned, 1)  # version 4
            DeltaTable(str(cleaned)).create_checkpoint()
            for old in (cleaned / "_delta_log").glob("0000000000000000000[0-3].*"):
                old.unlink()
            cleaned_up.append(True)

    run = BatchVacuum(spark, VacuumOptions(str(inventory), audit_table=str(tmp_path / "audit")),
                      on_step=clean_up_before_the_first_plan).execute([str(cleaned), str(other)])

    tables = by_table(run)
    assert tables["cleaned"].status == "refused" and "vanished while the run planned" in tables["cleaned"].reason
    assert tables["cleaned"].reason_code == ReasonCode.LOG_VANISHED
    assert tables["other"].status == "dry_run" and tables["other"].counts.candidate_files == 1
    audited = DeltaTable(str(tmp_path / "audit")).to_pyarrow_table().to_pylist()
    assert {(r["table_root"].rsplit("/", 1)[1], r["action"]) for r in audited if r["path"] is not None} == {
        ("other", "would_delete")}


def test_the_plan_a_dry_run_reports_is_the_plan_the_run_deletes_less_what_the_recheck_takes(spark, tmp_path):
    """Two tables, the same inventory and clock: a dry run, then the real run, during whose re-check a
    RESTORE re-adds one of ``t``'s candidates. What the real run deleted is its plan; its plan is the dry
    run's, less that file; ``u``, which nobody touched, deletes what its dry run named."""
    tables = {}
    for name in ("t", "u"):
        table = tables[name] = _table(tmp_path / "lake" / name, 2)
        _orphan(table)
    original_add = next(json.loads(line) for line in _log(tables["t"], 0).read_text().splitlines() if '"add"' in line)
    _commit(tables["t"], [{"remove": {"path": original_add["add"]["path"], "deletionTimestamp": int(OLD * 1000),
                                      "dataChange": True}}])
    for path in (tmp_path / "lake").rglob("*.parquet"):
        os.utime(path, (OLD, OLD))
    inventory = inventory_of(spark, tmp_path / "lake", tmp_path)
    now_ms = int(datetime.now(timezone.utc).timestamp() * 1000)
    targets = [str(tables["t"]), str(tables["u"])]

    dry = BatchVacuum(spark, VacuumOptions(str(inventory), now_ms=now_ms)).execute(targets)

    def restore_before_the_recheck(step: str) -> None:
        if step == Step.RECHECKING:
            _commit(tables["t"], [original_add])

    real = BatchVacuum(spark, VacuumOptions(str(inventory), dry_run=False, now_ms=now_ms),
                       on_step=restore_before_the_recheck).execute(targets)

    assert dry.plan is not None and real.plan is not None
    assert set(dry.plan.decisions.values()) == {Decision.DRY_RUN} and set(real.plan.decisions.values()) == {Decision.VACUUM}
    readded = f"file://{tables['t']}/{original_add['add']['path']}"
    planned, executed = dry.plan.files(), real.plan.files()
    assert readded in {path for path, _ in planned[TableRoot(f"file://{tables['t']}")]}
    assert executed == {root: [f for f in files if f[0] != readded] for root, files in planned.items()}
    # What the dry run named is its plan; what the real run deleted is its own.
    def acted(report, action):
        return sorted((r["table_root"], r["path"]) for r in report.outcomes.where(f"action = '{action}'").collect())

    assert acted(dry, "would_delete") == sorted((root, path) for root, files in planned.items() for path, _ in files)
    assert acted(real, "deleted") == sorted((root, path) for root, files in executed.items() for path, _ in files)


def test_a_reviewed_plan_bounds_a_later_run_which_reads_and_checks_the_lake_again(spark, tmp_path):
    """A dry run's plan, reviewed, then handed to a real run three days on. Meanwhile a RESTORE re-added one
    of ``t``'s reviewed files, and a tombstone of ``t`` has aged past the retention. The run deletes what the
    review named less the re-added file; the newly due file is kept (not reviewed) and counted; ``w``, not in
    the review, is skipped untouched. The reviewed plan itself is rows: the commit since does not change it."""
    tables = {name: _table(tmp_path / "lake" / name, 2) for name in ("t", "u", "w")}
    for table in tables.values():
        _orphan(table)
    adds = [json.loads(line) for v in (0, 1) for line in _log(tables["t"], v).read_text().splitlines() if '"add"' in line]
    now_ms = int(datetime.now(timezone.utc).timestamp() * 1000)
    five_days_ago = now_ms - 5 * 86_400_000  # within the 7-day retention now, past it three days on
    _commit(tables["t"], [{"remove": {"path": adds[0]["add"]["path"], "deletionTimestamp": int(OLD * 1000),
                                      "dataChange": True}},
                          {"remove": {"path": adds[1]["add"]["path"], "deletionTimestamp": five_days_ago,
                                      "dataChange": True}}])
    for path in (tmp_path / "lake").rglob("*.parquet"):
        os.utime(path, (OLD, OLD))
    inventory = inventory_of(spark, tmp_path / "lake", tmp_path)
    reviewed = BatchVacuum(spark, VacuumOptions(str(inventory), now_ms=now_ms)).execute(
        [str(tables["t"]), str(tables["u"])]).plan
    assert reviewed is not None
    review = reviewed.files()
    t_root = TableRoot(f"file://{tables['t']}")
    readded, aged = (f"file://{tables['t']}/{a['add']['path']}" for a in adds)
    assert readded in {p for p, _ in review[t_root]} and aged not in {p for p, _ in review[t_root]}
    _commit(tables["t"], [adds[0]])  # a RESTORE re-adds a reviewed file

    assert reviewed.files() == review  # the plan is its rows, not a query run again over the changed log
    three_days_on = now_ms + 3 * 86_400_000
    later = VacuumOptions(str(inventory), dry_run=False, now_ms=three_days_on, max_inventory_age_hours=24 * 30)
    with pytest.raises(InvalidOption, match="VacuumPlan"):
        BatchVacuum(spark, later).execute([str(tables["t"])], plan=review)  # type: ignore[arg-type]
    run = BatchVacuum(spark, later).execute([str(t) for t in tables.values()], plan=reviewed)

    report = {Path(t.table).name: t for t in run.tables}
    assert report["w"].status == "skipped" and report["w"].reason_code == ReasonCode.NOT_IN_PLAN
    assert (tables["w"] / "orphan.parquet").exists()
    assert report["t"].status == report["u"].status == "vacuumed"
    deleted = sorted((r["table_root"], r["path"]) for r in run.outcomes.where("action = 'deleted'").collect())
    assert deleted == sorted((root, path) for root, files in review.items() for path, _ in files if path != readded)
    assert report["t"].counts.outside_plan_files == 1 and report["u"].counts.outside_plan_files == 0
    assert Path(aged.removeprefix("file://")).exists() and Path(readded.removeprefix("file://")).exists()
    assert run.totals()["outside_plan_files"] == 1
    assert_matches_schema(run.to_dict(), "vacuum-report")
