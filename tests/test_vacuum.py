"""Job 2 on real Spark against real Delta tables (deltalake-written, delta-spark-written, and other writers'
where LAKE_TEST_GOLDEN_TABLES names them)."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake

from demo.lake import build_lake, read_all_rows
from lakeio.deltalog.keep import dv_relative_path
from tests.conftest import GOLDEN
from tests.feature_lake import copy_table
from tests.lakes import by_table, inventory_of, vacuum
from tests.report_schemas import assert_matches_schema
from vacuum_jobs.batch_vacuum import RunRefused
from vacuum_jobs.cli import build_undo_parser, main
from vacuum_jobs.report import ReasonCode
from vacuum_jobs.restore_purge import UndoCommand, UndoError, restore
from vacuum_jobs.targets import Discover, TableTarget, from_file

pytestmark = pytest.mark.slow  # whole vacuum runs over built lakes


def delta_rs_full_vacuum(table: Path, hours: float) -> set[Path]:
    """What delta-rs's own FULL-mode vacuum would delete, minus hidden paths (which it wrongly includes)."""
    names = DeltaTable(str(table)).vacuum(retention_hours=hours, dry_run=True, enforce_retention_duration=False,
                                          full=True)
    return {table / n for n in names if not any(s.startswith(("_", ".")) and s != "_change_data" for s in n.split("/"))}


def planned_paths(report, table_name: str, audit: Path, action: str) -> set[Path]:
    rows = DeltaTable(str(audit)).to_pyarrow_table().to_pylist()
    return {Path(r["path"].removeprefix("file://")) for r in rows
            if r["action"] == action and r["run_id"] == report.run_id and r["table_root"].endswith("/" + table_name)}


def snapshot_dv_files(table: Path) -> set[Path]:
    actions = pa.table(DeltaTable(str(table)).get_add_actions(flatten=True)).to_pylist()
    return {table / dv_relative_path(a["deletionVector.pathOrInlineDv"]) for a in actions
            if a.get("deletionVector.storageType") == "u"}


def test_realistic_lake_dry_run_then_vacuum_then_rerun(spark, tmp_path):
    lake = build_lake(tmp_path / "lake", dv_table=lambda path: copy_table("partitioned_deletion_vectors", path))
    rows_before = lake.row_counts()
    expected = {name: delta_rs_full_vacuum(path, 168) for name, path in lake.tables.items() if name != "dv_flags"}
    inventory = inventory_of(spark, lake.bucket_dir, tmp_path)
    audit = tmp_path / "audit"
    tables = list(lake.tables.values())

    dry = vacuum(spark, inventory, tables, dry_run=True, audit_table=str(audit))
    assert {t.status for t in dry.tables} == {"dry_run"}
    for name, paths in expected.items():
        assert planned_paths(dry, name, audit, "would_delete") == paths, name
    would = set().union(*(planned_paths(dry, n, audit, "would_delete") for n in lake.tables))
    assert lake.stale_debris <= would
    assert not would & (lake.fresh_debris | lake.hidden_debris | lake.outside_tables)
    assert all(p.exists() for p in would)  # a dry run deletes nothing
    orders = by_table(dry)["orders"]
    assert orders.counts.tombstone_files > 0 and orders.counts.too_recent_files >= 1
    assert orders.retention_hours == 168.0

    real = vacuum(spark, inventory, tables, dry_run=False, audit_table=str(audit))
    assert {t.status for t in real.tables} == {"vacuumed"}
    deleted = set().union(*(planned_paths(real, n, audit, "deleted") for n in lake.tables))
    assert deleted == would
    assert not any(p.exists() for p in deleted)
    assert all(p.exists() for p in lake.fresh_debris | lake.hidden_debris | lake.outside_tables)
    assert not (lake.tables["orders"] / "tmp_export").exists()  # folders left empty are removed
    assert lake.row_counts() == rows_before
    assert all(p.exists() for p in snapshot_dv_files(lake.tables["dv_flags"]))
    orders_table = DeltaTable(str(lake.tables["orders"]))
    previous = DeltaTable(str(lake.tables["orders"]), version=orders_table.version() - 1)
    assert previous.to_pyarrow_table().num_rows > 0  # time travel within retention still works
    total = real.totals()
    assert total["deleted_files"] == len(deleted) and total["deleted_bytes"] > 0
    # the undo command as it runs: the audit table named, applied
    assert f"undo: 0 deleted file(s) kept by a delete marker or the trash (python -m vacuum_jobs restore --audit-table " \
           f"{audit} --run-id {real.run_id} --apply brings them back until a purge erases them); {len(deleted):,} " \
           "delete(s) final" in real.summary()
    undo = shlex.split(re.search(r"\((python -m vacuum_jobs restore .*?) brings them back", real.summary()).group(1))
    assert build_undo_parser(UndoCommand.RESTORE).parse_args(undo[4:]).apply  # the line a user copies runs
    undone = restore(spark, str(audit), real.run_id, dry_run=False)  # a local disk keeps no versions
    assert not undone.ok and {n for counts in undone.tables.values() for n in counts} == {"not_restored"}
    assert sum(c["not_restored"] for c in undone.tables.values()) == len(deleted) and not any(p.exists() for p in deleted)
    assert undone.problems[0].endswith("the delete was final: no delete marker or trash recorded (the store keeps "
                                       "no versions, and the run had no --trash)")

    again = vacuum(spark, inventory, tables, dry_run=False, audit_table=str(audit))
    assert again.totals()["deleted_files"] == 0
    assert again.totals()["already_absent_files"] == len(deleted)  # gone already: not counted as deleted


def test_neighbour_and_nested_tables_are_never_touched(spark, tmp_path):
    bucket = tmp_path / "lake"
    t, backup, nested = bucket / "t", bucket / "t_backup", bucket / "t" / "inner"
    for table in (t, backup, nested):
        write_deltalake(str(table), pa.table({"id": [1, 2]}))
    old = (datetime.now(timezone.utc) - timedelta(days=30)).timestamp()
    strays = [t / "stray.parquet", backup / "stray.parquet", nested / "stray.parquet"]
    for path in strays:
        path.write_bytes(b"junk")
    for path in bucket.rglob("*"):
        if path.is_file():
            os.utime(path, (old, old))
    inventory = inventory_of(spark, bucket, tmp_path)

    report = vacuum(spark, inventory, [t], dry_run=True, audit_table=str(tmp_path / "audit"))
    assert planned_paths(report, "t", tmp_path / "audit", "would_delete") == {t / "stray.parquet"}


def test_retention_shorter_than_the_table_setting_is_refused_unless_forced(spark, tmp_path):
    table = tmp_path / "lake" / "t"
    write_deltalake(str(table), pa.table({"id": [1]}), configuration={"delta.deletedFileRetentionDuration": "interval 2 days"})
    inventory = inventory_of(spark, tmp_path / "lake", tmp_path)

    refused = vacuum(spark, inventory, [table], retention_hours=24, dry_run=True)
    assert refused.tables[0].status == "refused" and refused.tables[0].reason_code == ReasonCode.RETENTION_BELOW_TABLE
    assert "shorter than the table's delta.deletedFileRetentionDuration (48 h)" in refused.tables[0].reason
    assert "--" not in refused.tables[0].reason  # a Python caller passes no flag: the CLI names it (FLAG_HINTS)
    default = vacuum(spark, inventory, [table], dry_run=True)
    assert default.tables[0].retention_hours == 48.0
    forced = vacuum(spark, inventory, [table], retention_hours=24, enforce_retention_duration=False, dry_run=True)
    assert forced.tables[0].status == "dry_run" and forced.tables[0].retention_hours == 24

    first = table / "_delta_log" / f"{0:020d}.json"  # a setting no engine can read: refused, whatever the run's
    first.write_text(first.read_text().replace("interval 2 days", "two days"))
    unreadable = vacuum(spark, inventory, [table], retention_hours=100, dry_run=True).tables[0]
    assert (unreadable.status, unreadable.reason_code) == ("refused", ReasonCode.RETENTION_SETTING_INVALID)
    assert unreadable.reason.startswith("delta.deletedFileRetentionDuration: "), unreadable.reason


def test_stale_inventory_refuses_the_run(spark, tmp_path):
    table = tmp_path / "lake" / "t"
    write_deltalake(str(table), pa.table({"id": [1]}))
    inventory = inventory_of(spark, tmp_path / "lake", tmp_path, when=datetime.now(timezone.utc) - timedelta(days=5))
    with pytest.raises(RunRefused, match="h old"):
        vacuum(spark, inventory, [table], dry_run=True)
    report = vacuum(spark, inventory, [table], dry_run=True, max_inventory_age_hours=24 * 10)
    assert report.tables[0].status == "dry_run"


def test_an_audit_table_that_cannot_take_the_run_refuses_it_before_any_delete(spark, tmp_path):
    table = tmp_path / "lake" / "t"
    write_deltalake(str(table), pa.table({"id": [1]}))
    write_deltalake(str(table), pa.table({"id": [2]}), mode="overwrite")
    inventory = inventory_of(spark, tmp_path / "lake", tmp_path)
    files = sorted(table.rglob("*.parquet"))
    other = tmp_path / "salaries"
    write_deltalake(str(other), pa.table({"name": ["a"], "salary": [1]}))
    with pytest.raises(RunRefused, match=r"partitioned by \[\]") as refused:
        vacuum(spark, inventory, [table], dry_run=False, retention_hours=0, enforce_retention_duration=False, audit_table=str(other))
    assert refused.value.report.tables[0].status == "refused" and sorted(table.rglob("*.parquet")) == files
    with pytest.raises(UndoError, match=r"partitioned by \[\]"):
        restore(spark, str(other), "any")


@pytest.mark.slow  # a whole CLI run each
def test_a_dry_run_names_what_it_would_delete_bounded_on_the_console_whole_in_a_file(spark, tmp_path, capsys):
    """As Delta's VACUUM ... DRY RUN and delta-rs's vacuum(dry_run=True) do: the summary names each table's first
    candidates and how many more, the report the first 100, --list-candidates every one (what delta-rs's
    own dry run lists, and the audit's would_delete rows); nothing is deleted."""
    many, one = tmp_path / "lake" / "many", tmp_path / "lake" / "one"
    for table, versions in ((many, 9), (one, 2)):
        for i in range(versions):
            write_deltalake(str(table), pa.table({"id": [i]}), mode="overwrite")
    files = sorted((tmp_path / "lake").rglob("*.parquet"))
    inventory = inventory_of(spark, tmp_path / "lake", tmp_path)
    listed, report_file, audit = tmp_path / "candidates.txt", tmp_path / "report.json", tmp_path / "audit"
    capsys.readouterr()

    status = main(["--inventory-table", inventory, "--table", str(many), "--table", str(one), "--retain-hours", "0",
                   "--force-retention", "--dry-run", "--list-candidates", str(listed), "--report", str(report_file),
                   "--audit-table", str(audit), "--master", "local[2]"])

    out = capsys.readouterr().out
    assert status == 0 and sorted((tmp_path / "lake").rglob("*.parquet")) == files
    theirs = {t: sorted(f"file://{p}" for p in delta_rs_full_vacuum(t, 0)) for t in (many, one)}
    assert len(theirs[many]) == 8 and len(theirs[one]) == 1
    assert listed.read_text().splitlines() == theirs[many] + theirs[one]
    report = json.loads(report_file.read_text())
    assert_matches_schema(report, "vacuum-report")
    assert {Path(t["table"]).name: t["would_delete"] for t in report["tables"]} == {
        "many": theirs[many], "one": theirs[one]}
    named = [line.split("would delete ", 1)[1] for line in out.splitlines() if "would delete " in line]
    assert named == theirs[many][:5] + theirs[one], out
    assert "… and 3 more" in out and out.count("more (the report names") == 1
    rows = DeltaTable(str(audit)).to_pyarrow_table().to_pylist()
    assert sorted(r["path"] for r in rows if r["action"] == "would_delete") == sorted(theirs[many] + theirs[one])


# Every way a whole run is refused before it deletes: (extra arguments, what the error names).
_REFUSALS = {
    "stale inventory": (["--max-inventory-age-hours", "1"], "h old"),
    "no inventory": (["--inventory-table", "{tmp}/nowhere"], "nowhere"),
    "audit under a file": (["--audit-table", "{tmp}/a-file/audit"], "a-file/audit cannot be written"),
    "audit of another schema": (["--audit-table", "{tmp}/salaries"], "partitioned by []"),
    "nothing matches": (["--discover", "--include", "*/nope/*"], "include '*/nope/*' matches none"),
}


@pytest.mark.slow  # a whole CLI run each
@pytest.mark.parametrize("refusal", list(_REFUSALS))
def test_a_refused_run_says_refused_nothing_deleted_and_why_once(spark, tmp_path, capsys, refusal):
    """Not "deletions performed, inventory None" and a table refused with the run's reason: one error line
    leads with the refusal and its cause, which is said once; the JSON report carries it as ``refused``."""
    table = tmp_path / "lake" / "t"
    write_deltalake(str(table), pa.table({"id": [1]}))
    write_deltalake(str(table), pa.table({"id": [2]}), mode="overwrite")
    files = sorted(table.rglob("*.parquet"))
    inventory = inventory_of(spark, tmp_path / "lake", tmp_path, when=datetime.now(timezone.utc) - timedelta(hours=3))
    (tmp_path / "a-file").write_text("x")
    write_deltalake(str(tmp_path / "salaries"), pa.table({"name": ["a"], "salary": [1]}))
    extra, cause = _REFUSALS[refusal]
    extra = [a.format(tmp=tmp_path) for a in extra]
    named = [] if "--discover" in extra else ["--table", str(table)]
    argv = ["--inventory-table", inventory, *named, "--retain-hours", "0", "--force-retention", "--apply",
            "--report", str(tmp_path / "report.json"), "--master", "local[2]"]
    capsys.readouterr()  # only what the run prints

    status = main([*argv, *extra])

    out, err = capsys.readouterr()
    assert status == 1 and sorted(table.rglob("*.parquet")) == files
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith("error: vacuum run ") and "refused, nothing deleted: " in errors[0]
    assert cause in errors[0] and (out + err).count(cause) == 1, (out, err)
    assert "deletions performed" not in out + err and "None" not in out + err
    report = json.loads((tmp_path / "report.json").read_text())
    assert cause in report["refused"] and all(t["status"] == "refused" for t in report["tables"])
    assert {t["reason_code"] for t in report["tables"]} <= {ReasonCode.RUN_REFUSED}
    assert_matches_schema(report, "vacuum-report")


def test_inventory_that_does_not_cover_a_table_refuses_it(spark, tmp_path):
    covered, uncovered = tmp_path / "lake" / "covered", tmp_path / "elsewhere" / "uncovered"
    for table in (covered, uncovered):
        write_deltalake(str(table), pa.table({"id": [1]}))
        write_deltalake(str(table), pa.table({"id": [2]}), mode="append")
    tomorrow = datetime.now(timezone.utc) + timedelta(days=1)
    inventory = inventory_of(spark, tmp_path / "lake", tmp_path, when=tomorrow)
    # The uncovered table's log says its files predate the inventory, but the inventory lists none.
    report = vacuum(spark, inventory, [covered, uncovered], dry_run=True, now_ms=int(tomorrow.timestamp() * 1000))
    tables = by_table(report)
    assert tables["covered"].status == "dry_run"
    assert tables["uncovered"].status == "refused" and "does not cover" in tables["uncovered"].reason
    assert tables["uncovered"].reason_code == ReasonCode.INVENTORY_COVERAGE
    assert tables["uncovered"].counts.missing_files == 2 and len(tables["uncovered"].missing) == 2


def test_live_files_missing_from_storage_are_reported(spark, tmp_path):
    table = tmp_path / "lake" / "t"
    for i in range(4):
        write_deltalake(str(table), pa.table({"id": [i]}), mode="append")
    victim = next(table.glob("*.parquet"))
    victim.unlink()
    tomorrow = datetime.now(timezone.utc) + timedelta(days=1)
    inventory = inventory_of(spark, tmp_path / "lake", tmp_path, when=tomorrow)
    report = vacuum(spark, inventory, [table], dry_run=True, now_ms=int(tomorrow.timestamp() * 1000))
    t = report.tables[0]
    assert t.status == "dry_run" and t.counts.missing_files == 1
    assert t.missing == [f"file://{victim}"]


def test_unreadable_logs_refuse_only_their_table(spark, tmp_path):
    good, broken, gap = (tmp_path / "lake" / n for n in ("good", "broken", "gap"))
    for table in (good, broken, gap):
        write_deltalake(str(table), pa.table({"id": [1]}))
        write_deltalake(str(table), pa.table({"id": [2]}), mode="append")
    with open(broken / "_delta_log" / "00000000000000000001.json", "a") as log:
        log.write("\n{this is not json\n")
    (gap / "_delta_log" / "00000000000000000000.json").unlink()
    inventory = inventory_of(spark, tmp_path / "lake", tmp_path)
    tables = by_table(vacuum(spark, inventory, [good, broken, gap, tmp_path / "lake" / "absent"], dry_run=True))
    assert tables["good"].status == "dry_run"
    assert tables["broken"].status == "refused" and "malformed JSON" in tables["broken"].reason
    assert tables["gap"].status == "refused" and "no commit 0" in tables["gap"].reason
    assert tables["absent"].status == "refused" and "not a Delta table" in tables["absent"].reason
    assert {tables[n].reason_code for n in ("broken", "gap", "absent")} == {ReasonCode.UNREADABLE_LOG}


ODD_LOG_LINES = {  # appended to a commit: (line, why the table is refused)
    "escaped protocol key": ('{"\\u0070rotocol": {"minReaderVersion": 3, "minWriterVersion": 7, '
                             '"readerFeatures": ["futureFeature"], "writerFeatures": ["futureFeature"]}}',
                             "unknown table feature(s): futureFeature"),
    "add without a path": ('{"add": {"size": 1, "modificationTime": 1, "dataChange": true}}', "without a path"),
    "deletion vector id not z85": ('{"add": {"path": "x.parquet", "size": 1, "modificationTime": 1, "dataChange": true, '
                                   '"deletionVector": {"storageType": "u", "pathOrInlineDv": "~~~~~~~~~~~~~~~~~~~~", '
                                   '"sizeInBytes": 1, "cardinality": 1}}}',
                                   "version 1: deletion vector id '~~~~~~~~~~~~~~~~~~~~' is not valid z85"),
    "protocol of the wrong type": ('{"protocol": {"minReaderVersion": "three", "minWriterVersion": 2}}',
                                   "malformed JSON line in"),
}


@pytest.mark.parametrize("line", ODD_LOG_LINES.values(), ids=ODD_LOG_LINES.keys())
def test_odd_log_lines_refuse_their_table(spark, tmp_path, line):
    """A JSON key written with escapes is still that key (as Delta's JSON reader reads it); an
    action naming no file or a deletion vector id that does not decode, or a protocol whose
    fields do not parse as their types, refuses the table (with that reason); blank lines are
    no actions."""
    text, reason = line
    odd, blank = (tmp_path / "lake" / n for n in ("odd", "blank"))
    for table in (odd, blank):
        write_deltalake(str(table), pa.table({"id": [1]}))
        write_deltalake(str(table), pa.table({"id": [2]}), mode="append")
    with open(odd / "_delta_log" / "00000000000000000001.json", "a") as log:
        log.write("\n" + text + "\n")  # delta-rs ends its last line without a newline
    with open(blank / "_delta_log" / "00000000000000000001.json", "a") as log:
        log.write("\n \t\r\n\n")
    inventory = inventory_of(spark, tmp_path / "lake", tmp_path)
    tables = by_table(vacuum(spark, inventory, [odd, blank], dry_run=True))
    assert tables["odd"].status == "refused" and reason in tables["odd"].reason, tables["odd"].reason
    assert tables["blank"].status == "dry_run" and tables["blank"].counts.live_files == 2


def test_protocol_gates(spark, tmp_path):
    bucket = tmp_path / "lake"
    names = ["deltalog-invalid-protocol-version", "basic-with-vacuum-protocol-check-feature", "versions-not-contiguous"]
    for name in names:
        write_deltalake(str(bucket / name), pa.table({"id": [1]}))
    _set_protocol(bucket / names[0], {"minReaderVersion": 99, "minWriterVersion": 7, "readerFeatures": [],
                                      "writerFeatures": []})
    _set_protocol(bucket / names[1], {"minReaderVersion": 3, "minWriterVersion": 7,
                                      "readerFeatures": ["vacuumProtocolCheck"], "writerFeatures": ["vacuumProtocolCheck"]})
    for more in ([2], [3]):
        write_deltalake(str(bucket / names[2]), pa.table({"id": more}), mode="append")
    (bucket / names[2] / "_delta_log" / f"{1:020d}.json").unlink()  # versions 0 and 2
    catalog = bucket / "catalog-managed"
    write_deltalake(str(catalog), pa.table({"id": [1]}))
    _set_protocol(catalog, {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["catalogManaged"],
                            "writerFeatures": ["catalogManaged", "inCommitTimestamp"]})
    future = bucket / "future-feature"
    write_deltalake(str(future), pa.table({"id": [1]}))
    _set_protocol(future, {"minReaderVersion": 1, "minWriterVersion": 7, "writerFeatures": ["someFutureFeature"]})
    inventory = inventory_of(spark, bucket, tmp_path)

    tables = by_table(vacuum(spark, inventory, [bucket / n for n in names] + [catalog, future], dry_run=True))
    assert tables["deltalog-invalid-protocol-version"].status == "refused"
    assert "protocol (99, 7)" in tables["deltalog-invalid-protocol-version"].reason
    assert tables["basic-with-vacuum-protocol-check-feature"].status == "dry_run"
    assert tables["versions-not-contiguous"].status == "refused"
    assert "not contiguous" in tables["versions-not-contiguous"].reason
    assert (tables["catalog-managed"].status, tables["catalog-managed"].reason_code) == ("skipped", "catalog_managed")
    assert tables["future-feature"].status == "refused" and "someFutureFeature" in tables["future-feature"].reason
    assert tables["future-feature"].reason_code == ReasonCode.UNSUPPORTED_PROTOCOL


def _set_protocol(table: Path, protocol: dict) -> None:
    log = table / "_delta_log" / "00000000000000000000.json"
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    log.write_text("\n".join(json.dumps({"protocol": protocol} if "protocol" in a else a) for a in lines) + "\n")


@pytest.mark.golden
def test_every_golden_table_survives_a_zero_retention_vacuum(spark, tmp_path):
    bucket = tmp_path / "lake"
    shutil.copytree(GOLDEN, bucket, ignore=shutil.ignore_patterns("README.md"))
    tables = sorted(p for p in bucket.iterdir() if (p / "_delta_log").is_dir())
    readable_before = {}
    for table in tables:
        try:
            readable_before[table.name] = read_all_rows(table)
        except Exception:
            pass  # log-replay fixtures whose data files are absent, or features delta-rs lacks
    dv_files = {t.name: snapshot_dv_files(t) for t in tables if t.name in readable_before}
    inventory = inventory_of(spark, bucket, tmp_path)
    later = int((datetime.now(timezone.utc) + timedelta(seconds=5)).timestamp() * 1000)

    report = by_table(vacuum(spark, inventory, tables, dry_run=False, retention_hours=0, enforce_retention_duration=False,
                             min_coverage=0.0, now_ms=later))

    assert report["deltalog-invalid-protocol-version"].status == "refused"
    assert report["versions-not-contiguous"].status == "refused"
    for name, rows in readable_before.items():
        assert report[name].status in ("vacuumed", "refused"), (name, report[name].reason)
        assert read_all_rows(bucket / name) == rows, name
        assert all(p.exists() for p in dv_files[name]), name
    for table in tables:
        for log_file in (table / "_delta_log").rglob("*"):
            assert log_file.exists()
    assert report["dv-partitioned-with-checkpoint"].status == "vacuumed"
    assert report["snapshot-vacuumed"].status == "vacuumed"
    # Log-replay fixtures ship without their data files: reported as missing, never a reason to delete.
    assert report["corrupted-last-checkpoint"].counts.missing_files == report["corrupted-last-checkpoint"].counts.live_files > 0
    # Its checkpoint's .crc side file disagrees with the checkpoint: an unreadable log, refused with the cause.
    assert report["checkpoint"].status == "refused" and "Checksum" in report["checkpoint"].reason


def test_tables_file_overrides_and_discovery(spark, tmp_path):
    bucket = tmp_path / "lake"
    for name in ("a", "b", "c", "scratch_tbl"):
        write_deltalake(str(bucket / "db" / name), pa.table({"id": [1]}))
    inventory = inventory_of(spark, bucket, tmp_path)
    spec = tmp_path / "tables.yaml"
    spec.write_text(f"- table: {bucket / 'db' / 'a'}\n  enabled: false\n"
                    f"- table: {bucket / 'db' / 'b'}\n  retention_hours: 200\n  dry_run: true\n"
                    f"- {bucket / 'db' / 'c'}\n")
    targets = from_file(str(spec))
    assert targets[1] == TableTarget(f"file://{bucket / 'db' / 'b'}", 200, True, True)
    # retention_hours: 200 is a YAML int; the audit's retention column is a double.
    report = by_table(vacuum(spark, inventory, targets, dry_run=False, audit_table=str(tmp_path / "audit")))
    assert (report["a"].status, report["a"].reason_code) == ("skipped", ReasonCode.DISABLED)
    assert report["b"].status == "dry_run" and report["b"].retention_hours == 200
    assert report["c"].status == "vacuumed"

    found = vacuum(spark, inventory, Discover(include=("*/db/*",), exclude=("*scratch*",)))
    assert sorted(by_table(found)) == ["a", "b", "c"]

    # A typo in a daily schedule must not vacuum nothing, forever, with exit 0.
    with pytest.raises(RunRefused, match=r"include '\*/bd/\*' matches none of the 4 Delta table\(s\)") as typo:
        vacuum(spark, inventory, Discover(include=("*/bd/*",)))
    assert f"file://{bucket / 'db' / 'a'}" in str(typo.value)
    assert main(["--inventory-table", inventory, "--discover", "--include", "db/*", "--dry-run"]) == 1
    spec.write_text("[]\n")
    with pytest.raises(RunRefused, match="the list of tables to vacuum is empty"):
        vacuum(spark, inventory, from_file(str(spec)))


def test_cli_report_exit_codes_and_usage(spark, tmp_path, capsys):
    # The broken table lies outside the inventory's view: inside it, its unknown references would
    # make every run exit 1 (tests/test_lake_references.py).
    good, broken = tmp_path / "lake" / "good", tmp_path / "elsewhere" / "broken"
    for table in (good, broken):
        write_deltalake(str(table), pa.table({"id": [1]}))
    (broken / "_delta_log" / "00000000000000000000.json").write_text("{nope\n")
    inventory = inventory_of(spark, tmp_path / "lake", tmp_path)
    report_file = tmp_path / "report.json"

    assert main(["--inventory-table", inventory, "--table", str(good), "--dry-run", "--report", str(report_file)]) == 0
    doc = json.loads(report_file.read_text())
    assert_matches_schema(doc, "vacuum-report")
    assert doc["tables"][0]["status"] == "dry_run" and doc["totals"]["tables_dry_run"] == 1
    assert "DRY RUN" in capsys.readouterr().out

    assert main(["--inventory-table", inventory, "--table", str(good), "--table", str(broken), "--dry-run",
                 "--report", str(report_file)]) == 1
    statuses = {Path(t["table"]).name: t["status"] for t in json.loads(report_file.read_text())["tables"]}
    assert statuses == {"good": "dry_run", "broken": "refused"}

    assert main(["--inventory-table", str(tmp_path / "nothing"), "--table", str(good),
                 "--report", str(report_file)]) == 1
    refused_run = json.loads(report_file.read_text())
    assert_matches_schema(refused_run, "vacuum-report")
    assert refused_run["inventory_date"] is None and refused_run["tables"][0]["status"] == "refused"
    for bad, said in ((["--inventory-table", inventory], "one of the arguments"),
                      (["--inventory-table", inventory, "--table", "x", "--include", "*"], "go with --discover"),
                      (["--inventory-table", inventory, "--table", "x", "--delete-batch-size", "5000"],
                       "--delete-batch-size must be between 1 and 1000"),
                      (["--inventory-table", inventory, "--table", "x", "--delete-prefix-keys-per-second", "0"],
                       "--delete-prefix-keys-per-second must be > 0"),
                      (["--inventory-table", inventory, "--table", "x", "--delete-keys-per-second", "-1"],
                       "--delete-keys-per-second must be > 0"),
                      (["--inventory-table", inventory, "--table", "x", "--min-coverage", "2"],
                       "--min-coverage must be between 0 and 1")):
        with pytest.raises(SystemExit) as usage:
            main(bad)
        assert usage.value.code == 2 and said in capsys.readouterr().err


def test_the_cli_deletes_only_with_apply_and_names_the_flag_a_refusal_needs(spark, tmp_path, capsys):
    """One convention for the destructive commands: a dry run unless --apply (as restore, purge and vacuum()).
    A table's reason names no flag (a Python caller has none); the CLI adds the one that acts on it."""
    table = tmp_path / "lake" / "t"
    for i in range(2):
        write_deltalake(str(table), pa.table({"id": [i]}), mode="overwrite")
    inventory = inventory_of(spark, tmp_path / "lake", tmp_path)
    base = ["--inventory-table", inventory, "--table", str(table), "--retention-hours", "0"]
    files = lambda: set(table.glob("*.parquet"))  # noqa: E731
    before = files()

    with pytest.raises(SystemExit) as both:
        main([*base, "--force-retention", "--apply", "--dry-run"])
    assert both.value.code == 2 and "not allowed with argument" in capsys.readouterr().err
    for planning in ([], ["--dry-run"]):
        assert main([*base, "--force-retention", *planning]) == 0 and files() == before
        out, err = capsys.readouterr()
        assert "DRY RUN: nothing deleted" in out and "warning" not in err

    assert main([*base, "--apply"]) == 1 and files() == before  # shorter than the table's 7 days, not forced
    out, err = capsys.readouterr()
    assert "refused" in out and "--force-retention" not in out
    assert "hint: --force-retention allows a retention shorter than a table's own" in err

    assert main(["--inventory-table", inventory, "--table", str(table), "--retain-hours", "0", "--force-retention",
                 "--apply"]) == 0
    assert len(files()) == len(before) - 1
    said = capsys.readouterr().err
    assert "hint:" not in said and "--retain-hours is deprecated" in said
    with pytest.raises(SystemExit) as both:
        main(["restore", "--audit-table", "a", "--run-id", "r", "--apply", "--dry-run"])
    assert both.value.code == 2


def test_an_empty_part_of_a_multi_part_checkpoint_is_read_and_a_zero_byte_part_refuses(spark, tmp_path):
    """Delta writes multi-part checkpoints with more parts than actions (an empty Parquet part); Spark
    passes over a zero-byte file without a word, so only that one says a part went unread."""
    bucket = tmp_path / "lake"
    tables = {}
    for name in ("empty_part", "zero_bytes"):
        path = bucket / name
        write_deltalake(str(path), pa.table({"id": [1, 2]}))
        write_deltalake(str(path), pa.table({"id": [3]}), mode="append")
        DeltaTable(str(path)).create_checkpoint()
        log = path / "_delta_log"
        single = log / f"{1:020d}.checkpoint.parquet"
        actions = pq.read_table(single)
        pq.write_table(actions, log / f"{1:020d}.checkpoint.0000000001.0000000002.parquet")
        second = log / f"{1:020d}.checkpoint.0000000002.0000000002.parquet"
        if name == "empty_part":
            pq.write_table(actions.slice(0, 0), second)
        else:
            second.write_bytes(b"")
        single.unlink()
        (log / "_last_checkpoint").write_text(json.dumps({"version": 1, "size": actions.num_rows, "parts": 2}))
        tables[name] = path
    inventory = inventory_of(spark, bucket, tmp_path)
    report = by_table(vacuum(spark, inventory, list(tables.values()), min_coverage=0.0))
    assert report["empty_part"].status == "dry_run", report["empty_part"].reason
    assert report["empty_part"].counts.live_files == 2
    assert report["zero_bytes"].status == "refused" and "no actions read" in report["zero_bytes"].reason


def test_a_tables_quiet_until_is_when_the_clock_first_brings_it_a_new_candidate(spark, tmp_path):
    """``quiet_until``, end to end: a run a millisecond before it plans the same candidates as now, a run just past it
    plans more; a table that keeps nothing for its age is quiet for good (null). Tombstones from an overwrite (their
    deletion at the commit) and an orphan written after it, at a retention of an hour."""
    bucket = tmp_path / "bucket"
    busy, still = bucket / "busy", bucket / "still"
    for start in (0, 10):
        write_deltalake(str(busy), pa.table({"id": list(range(start, start + 10))}), mode="append")
    write_deltalake(str(busy), pa.table({"id": [1]}), mode="overwrite")
    (busy / "orphan.parquet").write_bytes(b"o" * 10)
    write_deltalake(str(still), pa.table({"id": [1]}))
    inventory = inventory_of(spark, bucket, tmp_path)
    tables = [str(busy), str(still)]
    forced = {"retention_hours": 1, "enforce_retention_duration": False}
    now = int(datetime.now(timezone.utc).timestamp() * 1000)

    def candidates(at: int):
        report = vacuum(spark, inventory, tables, now_ms=at, **forced)
        return {row["path"] for row in report.outcomes.collect()}, by_table(report)

    first, tables_now = candidates(now)
    assert tables_now["still"].quiet_until is None  # only a change can bring it a candidate
    quiet = int(datetime.fromisoformat(tables_now["busy"].quiet_until).timestamp() * 1000)  # to the second, down
    assert now < quiet <= now + 3_600_000 + 1
    assert candidates(quiet - 1)[0] == first
    later, _ = candidates(quiet + 1000)
    assert later > first
