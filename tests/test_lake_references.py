"""A file any Delta table of the lake needs is never another table's candidate (docs/DESIGN.md
"References across the lake"), whether or not the table that needs it is vacuumed in the run.

One lake: a source table whose every file was removed long ago (each tombstone expired), and
tables that still need some of those files, by absolute URI (shallow clones) or, from a table
with another nested in its folder, by relative path. Delta's own VACUUM of the source would
delete them all.
"""

from __future__ import annotations

import json
import os
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from hypothesis import given
from hypothesis import strategies as st

from lake_reports.charges import chargeback
from lake_reports.erasure_evidence import erasure
from lakeio.deltalog.references import _holds_another
from tests.lakes import inventory_of
from tests.report_schemas import assert_matches_schema
from vacuum_jobs.cli import main

pytestmark = pytest.mark.slow  # whole vacuum runs

OLD = (datetime.now(timezone.utc) - timedelta(days=30)).timestamp()
DAY_MS = 86_400_000


def _commit(table: Path, actions: list[dict]) -> None:
    version = DeltaTable(str(table)).version() + 1
    (table / "_delta_log" / f"{version:020d}.json").write_text("".join(json.dumps(a) + "\n" for a in actions))


def _table(path: Path, appends: int = 1) -> Path:
    for i in range(appends):
        write_deltalake(str(path), pa.table({"id": [i]}), mode="append")
    return path


def _add(path: str) -> dict:
    return {"add": {"path": path, "size": 1, "modificationTime": int(OLD * 1000), "dataChange": True,
                    "partitionValues": {}}}


def _remove(path: str, at_ms: int) -> dict:
    return {"remove": {"path": path, "deletionTimestamp": at_ms, "dataChange": True}}


def test_files_other_tables_need_are_kept_and_named(spark, tmp_path):
    now_ms = int(time.time() * 1000)
    bucket = tmp_path / "lake"
    source = _table(bucket / "source", 5)
    files = sorted(p.name for p in source.glob("*.parquet"))
    _commit(source, [_remove(name, int(OLD * 1000)) for name in files])  # every tombstone expired
    uri = {name: f"file://{source}/{name}" for name in files}

    # Outside the run: a clone that still reads files[0], one whose tombstone of files[1] is inside
    # its retention, one whose tombstone of files[2] is not.
    _commit(_table(bucket / "clone_live"), [_add(uri[files[0]])])
    recent = _table(bucket / "clone_recent")
    _commit(recent, [_add(uri[files[1]])])
    _commit(recent, [_remove(uri[files[1]], now_ms - DAY_MS)])
    expired = _table(bucket / "clone_expired")
    _commit(expired, [_add(uri[files[2]])])
    _commit(expired, [_remove(uri[files[2]], now_ms - 10 * DAY_MS)])
    # In the run: a clone that reads files[3]. files[4] nobody needs.
    in_run = _table(bucket / "clone_in_run")
    _commit(in_run, [_add(uri[files[3]])])

    # A table with another nested in its folder names one of the nested table's files by a relative path.
    outer = _table(bucket / "outer")
    inner = _table(outer / "inner")
    shared = inner / "shared.parquet"
    shared.write_bytes(b"written by outer's writer into inner's folder")
    _commit(outer, [_add("inner/shared.parquet")])

    # Outside the run, a table whose log cannot be read: what it needs is unknown, and said so.
    broken = _table(bucket / "broken")
    _commit(broken, [_add(f"file://{source}/{files[4]}")])
    with open(broken / "_delta_log" / f"{1:020d}.json", "a") as log:
        log.write("{not json\n")

    for path in bucket.rglob("*.parquet"):
        os.utime(path, (OLD, OLD))
    inventory = inventory_of(spark, bucket, tmp_path)
    report_file = tmp_path / "report.json"
    code = main(["--inventory-table", inventory, "--table", str(source), "--table", str(in_run), "--table", str(inner),
                 "--apply", "--report", str(report_file)])

    assert code == 1  # the unreadable table outside the run
    doc = json.loads(report_file.read_text())
    assert_matches_schema(doc, "vacuum-report")
    assert list(doc["references_unknown"]) == [f"file://{broken}"]
    assert "malformed JSON line" in doc["references_unknown"][f"file://{broken}"]
    tables = {Path(t["table"]).name: t for t in doc["tables"]}
    assert {name: t["status"] for name, t in tables.items()} == {
        "source": "vacuumed", "clone_in_run": "vacuumed", "inner": "vacuumed"}
    assert tables["source"]["referenced_by"] == {
        f"file://{bucket}/clone_live": 1, f"file://{bucket}/clone_recent": 1, f"file://{bucket}/clone_in_run": 1}
    counts = tables["source"]["counts"]
    assert (counts["referenced_files"], counts["candidate_files"], counts["deleted_files"]) == (3, 2, 2)
    assert tables["inner"]["referenced_by"] == {f"file://{outer}": 1}
    assert [p.exists() for p in (source / name for name in files)] == [True, True, False, True, False]
    assert shared.exists()
    assert doc["totals"]["referenced_files"] == 4

    # The chargeback (of the inventory taken before the run) says the same: only the two are reclaimable.
    result = chargeback(spark, inventory)
    reclaimable = {c.table: c.objects for c in result.cells if c.category == "reclaimable"}
    assert reclaimable.get(f"file://{source}") == 2 and f"file://{inner}" not in reclaimable, reclaimable


@pytest.mark.parametrize("odd", ["odd%2Fname.parquet", "odd#name.parquet"], ids=["escaped slash", "raw hash"])
def test_a_table_whose_log_we_cannot_wholly_resolve_protects_what_it_names_in_every_report(spark, tmp_path, odd):
    """The vacuum, the chargeback and the erasure evidence classify the lake one way: a clone outside
    the run whose log also names a file we cannot resolve with certainty (so the clone itself is
    unreadable) still needs the source's file it names literally."""
    bucket = tmp_path / "lake"
    source = _table(bucket / "source", 2)
    files = sorted(p.name for p in source.glob("*.parquet"))
    _commit(source, [_remove(name, int(OLD * 1000)) for name in files])  # every tombstone expired
    clone = _table(bucket / "clone")
    _commit(clone, [_add(f"file://{source}/{files[0]}"), _add(odd)])
    for path in bucket.rglob("*.parquet"):
        os.utime(path, (OLD, OLD))
    inventory = inventory_of(spark, bucket, tmp_path)
    report_file, audit = tmp_path / "report.json", tmp_path / "audit"

    code = main(["--inventory-table", inventory, "--table", str(source), "--dry-run", "--audit-table", str(audit),
                 "--report", str(report_file)])

    assert code == 1  # the clone's references are not all known: said, and the run exits 1
    doc = json.loads(report_file.read_text())
    assert list(doc["references_unknown"]) == [f"file://{clone}"]
    [table] = doc["tables"]
    assert (table["counts"]["referenced_files"], table["counts"]["candidate_files"]) == (1, 1)
    charges = chargeback(spark, inventory)
    reclaimable = {c.table: c.objects for c in charges.cells if c.category == "reclaimable"}
    assert reclaimable.get(f"file://{source}") == 1, reclaimable  # the same one file
    assert f"file://{clone}" in charges.unreadable
    assert {c.category for c in charges.cells if c.table == f"file://{clone}"} == {"unclassified"}  # its own objects
    evidence = erasure(spark, str(audit), inventory, paths=[f"file://{source}/{name}" for name in files])
    assert [a.status for a in evidence.answers] == ["referenced_elsewhere", "not_vacuumed_since"], evidence.answers


# Roots as the lake spells them: nested, sharing a name's prefix (t, t_backup, t2), deep or shallow.
_segment = st.sampled_from(["t", "t_backup", "t2", "a", "a.b", "z"])
_root = st.lists(_segment, min_size=1, max_size=4).map(lambda parts: "s3://lake/" + "/".join(parts))


@given(roots=st.lists(_root, max_size=30), asked=_root)
def test_a_table_holds_another_exactly_when_some_root_lies_under_it(roots, asked):
    """The sorted search says what the definition says (some other root starts with the table's root and
    a slash), for any lake of nested and like-named roots."""
    expected = any(other.startswith(asked + "/") for other in roots)
    assert _holds_another(sorted(set(roots)), asked) == expected
