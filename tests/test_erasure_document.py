"""One erasure request, followed to the last copy of its bytes.

A lake of two local "buckets" (``lake`` and ``replica``), inventoried on two days with the MD5
ETags S3 gives single-part uploads. ``sales/orders`` (delta-rs) writes file A, then B, then a
``DELETE`` removes both. The same bytes also live in: a deep clone (its own copies of A and B,
plus an unreferenced copy of B), a shallow clone of version 0 (its log names A itself), an export
folder, a replica bucket under SSE-KMS, and a noncurrent version in the replica; an older export
was deleted between the two inventories. A real vacuum erases B; the shallow clone keeps A.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from urllib.parse import quote

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from inventory_etl.ingestion import IngestInventory
from inventory_etl.producer import InventoryObject, objects_in_folder, write_delivery
from lake_reports.cli import main
from lake_reports.copies import etag_kind, holder
from lake_reports.erasure_document import COLOURS, erasure_request, erasure_requests
from lake_reports.erasure_evidence import CommitQuestion
from lakeio.store.uris import decode_log_path
from lakeio.times import epoch_ms
from tests.browser import chromium, headless
from tests.feature_lake import copy_table
from tests.lakes import vacuum
from tests.report_schemas import assert_matches_schema

pytestmark = pytest.mark.slow  # two days of inventory ingested, a vacuum, four documents


def _objects(bucket_dir: Path, **overrides) -> list[InventoryObject]:
    """The folder as S3 Inventory lists it, each file with the MD5 ETag of its bytes."""
    return [InventoryObject(o.key, o.size, o.last_modified_ms,
                            e_tag=hashlib.md5((bucket_dir / o.key).read_bytes()).hexdigest(), **overrides)
            for o in objects_in_folder(str(bucket_dir))]


def _ingest(spark, inventory: str, work: Path, buckets: dict[str, Path], when: datetime,
            extra: list[InventoryObject] = ()) -> None:
    manifests = [write_delivery(str(work / "dest"), name, "daily",
                                _objects(folder, encryption_status="SSE-KMS" if name == "replica" else "SSE-S3")
                                + (list(extra) if name == "replica" else []), when, versioned=name == "replica")
                 for name, folder in buckets.items()]
    assert not IngestInventory(spark, inventory, {n: str(f) for n, f in buckets.items()}).execute(manifests).refused


def _adds(table: Path, version: int) -> list[str]:
    lines = (table / "_delta_log" / f"{version:020d}.json").read_text().splitlines()
    return [json.loads(line)["add"]["path"] for line in lines if "add" in json.loads(line)]


@pytest.fixture(scope="module")
def lake(spark, tmp_path_factory):
    work = tmp_path_factory.mktemp("request")
    bucket, replica = work / "lake", work / "replica"
    orders, plain = bucket / "sales" / "orders", bucket / "sales" / "plain"
    write_deltalake(str(orders), pa.table({"id": [1, 2, 3]}))
    write_deltalake(str(orders), pa.table({"id": [4, 5, 6]}), mode="append")
    a, b = orders / _adds(orders, 0)[0], orders / _adds(orders, 1)[0]
    deep, shallow = bucket / "sales" / "orders_deep", bucket / "sales" / "orders_shallow"
    (deep / "_delta_log").mkdir(parents=True)
    for version in (0, 1):
        shutil.copy(orders / "_delta_log" / f"{version:020d}.json", deep / "_delta_log")
    for f in (a, b):
        shutil.copy(f, deep / f.name)
    shutil.copy(b, deep / "stray-copy-of-b.parquet")  # referenced by no commit of the clone
    (shallow / "_delta_log").mkdir(parents=True)
    first = [json.loads(line) for line in (orders / "_delta_log" / f"{0:020d}.json").read_text().splitlines()]
    for action in first:
        if "add" in action:
            action["add"]["path"] = "file:" + quote(str(a))
    (shallow / "_delta_log" / f"{0:020d}.json").write_text("\n".join(json.dumps(x) for x in first) + "\n")
    DeltaTable(str(orders)).delete("id = 2 OR id = 5")  # version 2: removes A and B
    (bucket / "exports").mkdir(exist_ok=True)
    shutil.copy(b, bucket / "exports" / "orders-2026.parquet")
    shutil.copy(b, bucket / "exports" / "old-copy.parquet")
    (replica / "sales" / "orders").mkdir(parents=True)
    shutil.copy(b, replica / "sales" / "orders" / b.name)
    write_deltalake(str(plain), pa.table({"id": [7, 8]}))
    DeltaTable(str(plain)).delete("id = 7")  # version 1
    dv_table = bucket / "dims" / "dv_flags"
    copy_table("partitioned_deletion_vectors", dv_table)  # demo.lake.partitioned_deletion_vectors, by Delta
    # An export of the file version 6 gives a deletion vector: the export still holds the row.
    last = [json.loads(line) for line in (dv_table / "_delta_log" / f"{6:020d}.json").read_text().splitlines()]
    hidden = next(a["add"]["path"] for a in last if "add" in a and a["add"].get("deletionVector"))
    shutil.copy(dv_table / decode_log_path(hidden), bucket / "exports" / "dv-file-copy.parquet")
    b_md5 = hashlib.md5(b.read_bytes()).hexdigest()
    noncurrent = [InventoryObject("backup/b.parquet", b.stat().st_size, 1_700_000_000_000, e_tag=b_md5,
                                  version_id="v1", is_latest=False, encryption_status="SSE-S3"),
                  InventoryObject("backup/b.parquet", None, 1_700_000_100_000, version_id="v2", is_delete_marker=True,
                                  storage_class=None, encryption_status="SSE-S3")]

    now = datetime.now(timezone.utc)
    inventory, audit = str(work / "inventory"), str(work / "audit")
    buckets = {"lake": bucket, "replica": replica}
    _ingest(spark, inventory, work, buckets, now - timedelta(days=1), noncurrent)
    run = vacuum(spark, inventory, [orders, plain], dry_run=False, audit_table=audit, retention_hours=0.0,
                 enforce_retention_duration=False)
    assert not b.exists() and a.exists(), run.summary()  # the shallow clone keeps A
    (bucket / "exports" / "old-copy.parquet").unlink()
    DeltaTable(str(plain)).delete("id = 8")  # after the vacuum (and its VACUUM START and END commits)
    _ingest(spark, inventory, work, buckets, now, noncurrent)
    return {"work": work, "inventory": inventory, "audit": audit, "orders": orders, "plain": plain, "a": a, "b": b,
            "deep": deep, "shallow": shallow, "replica": replica, "bucket": bucket, "dv": dv_table, "run": run,
            "plain_after": DeltaTable(str(plain)).version()}


def _uri(path: Path) -> str:
    return "file://" + str(path)


def test_the_document_finds_every_copy_says_what_keeps_the_bytes_and_renders(spark, lake, tmp_path, capsys):
    out = tmp_path / "evidence"
    assert main(["erasure", "--audit-table", lake["audit"], "--inventory-table", lake["inventory"],
                 "--commit", f"{lake['orders']}@2", "--request-id", "REQ 17/a", "--out", str(out)]) == 1
    printed = capsys.readouterr().out
    assert "verdict: at_risk" in printed and "erasure-REQ_17_a.json" in printed
    doc = json.loads((out / "erasure-REQ_17_a.json").read_text())
    assert_matches_schema(doc, "erasure-evidence")
    assert (doc["request_id"], doc["table"], doc["commit"]["version"], doc["before"]["version"], doc["operation"]) == (
        "REQ 17/a", _uri(lake["orders"]), 2, 1, "DELETE")
    assert doc["commit"]["timestamp"] and doc["before"]["timestamp"] and doc["predicate"]
    removed = {Path(f["path"]).name: f for f in doc["removed_files"]}
    a, b = lake["a"].name, lake["b"].name
    assert removed[b]["status"] == "erased" and removed[b]["run_id"] == lake["run"].run_id
    assert removed[a]["status"] == "referenced_elsewhere" and _uri(lake["shallow"]) in removed[a]["detail"]

    found = {(Path(c["of"]).name, c["path"]): (c["status"], c["etag_kind"], c["table"]) for c in doc["copies"]}
    deep, bucket = lake["deep"], lake["bucket"]
    assert found == {
        (a, _uri(deep / a)): ("live_in_table", "md5", _uri(deep)),
        (a, _uri(lake["a"])): ("live_in_table", "same_object", _uri(lake["shallow"])),
        (b, _uri(deep / b)): ("live_in_table", "md5", _uri(deep)),
        (b, _uri(deep / "stray-copy-of-b.parquet")): ("orphan_in_table", "md5", _uri(deep)),
        (b, _uri(bucket / "exports" / "orders-2026.parquet")): ("outside_tables", "md5", None),
        (b, _uri(bucket / "exports" / "old-copy.parquet")): ("erased", "md5", None),
        (b, _uri(lake["replica"] / "sales" / "orders" / b)): ("outside_tables", "opaque", None),
        (b, _uri(lake["replica"] / "backup" / "b.parquet")): ("noncurrent_version", "md5", None),
    }
    assert doc["verdict"]["status"] == "at_risk"
    text = "\n".join(doc["verdict"]["reasons"])
    for expected in (f"{_uri(lake['a'])}: referenced_elsewhere", "2 cop(ies) outside any table",
                     f"copy {_uri(deep / a)}: live in {_uri(deep)}", "noncurrent",
                     f"copy {_uri(deep / 'stray-copy-of-b.parquet')} (orphan_in_table): no vacuum run has deleted "
                     "files in this table"):
        assert expected in text, text
    assert "references this file from its log" not in text  # said once, by the file's own status
    assert doc["audit_chain"]["verified"] and doc["audit_chain"]["row_hash"]

    browser = chromium()
    from PIL import Image

    shot = tmp_path / "shot.png"
    headless(browser, tmp_path, out / "erasure-REQ_17_a.html", f"--screenshot={shot}")
    image = Image.open(shot).convert("RGB")
    red = tuple(int(COLOURS["at_risk"][i:i + 2], 16) for i in (1, 3, 5))
    assert red in {rgb for _, rgb in image.getcolors(maxcolors=1 << 20)}  # the verdict badge


def test_done_on_track_and_deletion_vectors(spark, lake):
    done = erasure_request(spark, lake["audit"], lake["inventory"], CommitQuestion(str(lake["plain"]), 1), "REQ-1")
    assert [f.status for f in done.removed_files] == ["erased"] and not done.copies
    assert (done.verdict.status, done.verdict.reasons) == ("done", [])
    pending = erasure_request(spark, lake["audit"], lake["inventory"], CommitQuestion(str(lake["plain"]), lake["plain_after"]), "REQ-2")
    assert [f.status for f in pending.removed_files] == ["not_vacuumed_since"]
    assert pending.verdict.status == "on_track" and pending.verdict.expected_by < pending.verdict.deadline
    why = pending.verdict.reasons[0]  # the date is the table's worst case, not the file's time travel alone
    assert why.startswith(f"expected by {pending.verdict.expected_by}: ") and "'kept until' counts this alone" in why
    assert "then the next vacuum of" in why and "then an inventory after it" in why
    # Version 6 of the deletion-vector table hides a row of a file that is still live; version 2 hid one of a
    # file a later commit removed for good, which, asked eight days on (past the table's retention of seven),
    # waits for a vacuum (never run on that table).
    vectors = erasure_request(spark, lake["audit"], lake["inventory"], CommitQuestion(str(lake["dv"]), 6), "REQ-3")
    assert [(v.rows_hidden, v.status) for v in vectors.deletion_vectors] == [(1, "live_soft_deleted")]
    assert not vectors.removed_files and vectors.verdict.status == "at_risk"
    export = _uri(lake["bucket"] / "exports" / "dv-file-copy.parquet")
    assert [(c.path, c.status, c.etag_kind) for c in vectors.copies] == [(export, "outside_tables", "md5")]
    assert vectors.verdict.reasons == [
        "1 deleted row(s) stay on disk in 1 live file(s) behind deletion vectors until the files are rewritten: "
        f"REORG TABLE delta.`{_uri(lake['dv'])}` APPLY (PURGE), then a vacuum past the retention",
        f"1 cop(ies) outside any table, which no vacuum erases: {export}"]
    rewritten = erasure_request(spark, lake["audit"], lake["inventory"], CommitQuestion(str(lake["dv"]), 2), "REQ-4",
                                now_ms=epoch_ms() + 8 * 24 * 3_600_000)
    assert [(v.rows_hidden, v.status) for v in rewritten.deletion_vectors] == [(1, "not_vacuumed_since")]
    assert rewritten.verdict.status == "at_risk" and "no vacuum run has deleted files in this table" in \
        rewritten.verdict.reasons[0] and "REORG" not in "".join(rewritten.verdict.reasons)
    for doc in (done, pending, vectors, rewritten):
        assert_matches_schema(json.loads(doc.to_json()), "erasure-evidence")


def test_the_order_before_this_release_still_works_for_one_release_and_says_so(spark, lake):
    """The tables now come first, as in every job; the old order (the question first) is still taken, warned."""
    commit, now = CommitQuestion(str(lake["plain"]), 1), epoch_ms()
    new = erasure_request(spark, lake["audit"], lake["inventory"], commit, "REQ-1", now_ms=now)
    with pytest.warns(DeprecationWarning, match=r"erasure_request\(spark, audit_table, inventory_table, commit"):
        old = erasure_request(spark, commit, "REQ-1", lake["audit"], lake["inventory"], now_ms=now)  # type: ignore[arg-type]
    assert old.to_json() == new.to_json()
    with pytest.warns(DeprecationWarning, match=r"erasure_requests\(spark, audit_table, inventory_table, requests"):
        batch = erasure_requests(spark, [("REQ-1", commit)], lake["audit"], lake["inventory"], now_ms=now)  # type: ignore[arg-type]
    assert [d.to_json() for d in batch.documents] == [new.to_json()]


def test_many_requests_in_one_run_get_the_documents_each_gets_alone(spark, lake, tmp_path, capsys):
    """One pass for all: the same documents as one run each, a refused request named, the rest written."""
    now = epoch_ms()
    asked = [("REQ-1", CommitQuestion(str(lake["plain"]), 1)), ("REQ-2", CommitQuestion(str(lake["plain"]), lake["plain_after"])),
             ("REQ-3", CommitQuestion(str(lake["dv"]), 6)), ("REQ-4", CommitQuestion(str(lake["orders"]), 2)),
             ("REQ-5", CommitQuestion(str(lake["plain"]), 0)), ("REQ-6", CommitQuestion(str(lake["plain"]), 99))]
    batch = erasure_requests(spark, lake["audit"], lake["inventory"], asked, now_ms=now)
    assert [d.request_id for d in batch.documents] == ["REQ-1", "REQ-2", "REQ-3", "REQ-4"] and not batch.ok
    assert "commit 0 removed no files" in batch.refused["REQ-5"] and "00000000000000000099.json" in batch.refused["REQ-6"]
    for (request_id, commit), doc in zip(asked, batch.documents):
        alone = erasure_request(spark, lake["audit"], lake["inventory"], commit, request_id, now_ms=now)
        assert doc.to_json() == alone.to_json(), request_id
    with pytest.raises(ValueError, match="distinct: REQ-1"):
        erasure_requests(spark, lake["audit"], lake["inventory"], asked[:1] * 2)

    out = tmp_path / "evidence"
    flags = [f for request_id, commit in asked for f in ("--request-id", request_id, "--commit",
                                                          f"{commit.table}@{commit.version}")]
    assert main(["erasure", "--audit-table", lake["audit"], "--inventory-table", lake["inventory"], *flags,
                 "--out", str(out)]) == 1
    printed = capsys.readouterr()
    assert sorted(p.name for p in out.glob("*.json")) == [f"erasure-REQ-{i}.json" for i in range(1, 5)]
    assert "request REQ-5:" in printed.err and "request REQ-6:" in printed.err
    with pytest.raises(SystemExit):
        main(["erasure", "--audit-table", lake["audit"], "--inventory-table", lake["inventory"],
              "--request-id", "REQ-1", "--request-id", "REQ-2", "--commit", f"{lake['plain']}@1"])
    assert "as many of each" in capsys.readouterr().err


def test_etag_kinds():
    md5 = "0cc175b9c0f1b6a831c399e269772661"
    assert etag_kind(md5, "SSE-S3", False) == "md5"
    assert etag_kind(f'"{md5}"', None, None) == "md5"
    assert etag_kind(f"{md5}-12", "SSE-S3", True) == "multipart"
    assert etag_kind(md5, "SSE-KMS", False) == "opaque" == etag_kind(f"{md5}-3", "SSE-C", True)
    assert etag_kind("1a2b3c", "NOT-SSE", False) == "other" == etag_kind(None, None, None)


def test_what_holds_a_copy_follows_its_tables_log():
    """A copy inside a table is live there, kept for time travel, or an orphan, by that table's log."""
    table, path, day = "file:///lake/t", "file:///lake/t/x.parquet", date(2026, 11, 2)
    row = {"inventory_date": day, "bucket": "lake", "is_latest": True, "path": path, "version_id": None}

    def held(kind: str | None):
        return holder(row, {"lake": day}, table, {path: {table: kind}} if kind else {}, {})

    assert [held(k)[0] for k in ("add", "remove", None)] == ["live_in_table", "time_travel_in_table", "orphan_in_table"]
    assert table in held("remove")[1]
    assert holder(row, {"lake": day + timedelta(days=1)}, table, {}, {})[0] == "erased"  # not in the newest inventory
