"""Chargeback and erasure evidence on a small lake whose every byte is accounted for by hand.

The lake (bucket ``lake``), built with ``deltalake`` plus files written here:

- ``orders``: commit 0 adds A, commit 1 adds B, commit 2 deletes B's only row (B is a
  tombstone within the default 7-day retention); a stale orphan (1,000 B, 30 days old,
  plus a 700 B noncurrent version of it), a recent orphan (3,000 B) and ``_SUCCESS``;
- ``events`` (retention 1 hour): C, then an overwrite with D (C becomes reclaimable two
  hours later; D is in STANDARD_IA); ``events/inner`` is a nested table with E;
- ``flags``: a table with deletion vectors, as Delta's writer wrote it (tests.feature_lake);
- ``exports/report.csv`` (5,000 B, in no table) and ``exports/old.csv``: a delete marker
  over a 400 B GLACIER noncurrent version.

Yesterday's inventory lacks the stale orphan, so ``orders`` grew 1,000 B in one day.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from demo.lake import read_all_rows
from inventory_etl.ingestion import IngestInventory
from inventory_etl.producer import InventoryObject, objects_in_folder, write_delivery
from lake_reports import html_report
from lake_reports.charges import Chargeback, ChargebackOptions
from lake_reports.cli import main
from lake_reports.erasure_evidence import CommitQuestion, ErasureEvidence, ErasureOptions
from lakeio.prices import BYTES_PER_GB, PriceError, load_prices
from lakeio.spark.shapes import OUTCOMES
from lakeio.times import MS_PER_HOUR, midnight_utc_ms
from tests.browser import chromium, headless
from tests.conftest import documentation
from tests.feature_lake import copy_table
from tests.lakes import now_ms, vacuum
from tests.report_schemas import assert_matches_schema
from vacuum_jobs.recording import write_audit
from vacuum_jobs.report import RunReport, TableReport

pytestmark = pytest.mark.slow

DAY_MS = 24 * MS_PER_HOUR
PRICES = {"STANDARD": 2.0, "STANDARD_IA": 1.0, "GLACIER": 0.5}


def _new_file(table: Path, before: set[str]) -> Path:
    (added,) = set(DeltaTable(str(table)).file_uris()) - before
    return Path(added.removeprefix("file://"))


def _write(path: Path, size: int, age_ms: int, now: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * size)
    os.utime(path, ((now - age_ms) / 1000, (now - age_ms) / 1000))
    return path


def _size(*paths: Path) -> int:
    return sum(p.stat().st_size for p in paths)


def _log_bytes(table: Path) -> int:
    return sum(p.stat().st_size for p in (table / "_delta_log").rglob("*") if p.is_file())


@pytest.fixture(scope="module")
def lake(spark, tmp_path_factory):
    root = tmp_path_factory.mktemp("reports")
    bucket, now = root / "lake", now_ms()
    orders, events, inner, flags = bucket / "orders", bucket / "events", bucket / "events" / "inner", bucket / "flags"
    write_deltalake(str(orders), pa.table({"id": [1, 2, 3]}))
    a = _new_file(orders, set())
    known = set(DeltaTable(str(orders)).file_uris())
    write_deltalake(str(orders), pa.table({"id": [4]}), mode="append")
    b = _new_file(orders, known)
    DeltaTable(str(orders)).delete("id = 4")  # commit 2 removes B
    stale = _write(orders / "orphan-stale.parquet", 1000, 30 * DAY_MS, now)
    recent = _write(orders / "orphan-recent.parquet", 3000, MS_PER_HOUR, now)
    _write(orders / "_SUCCESS", 0, 30 * DAY_MS, now)
    write_deltalake(str(events), pa.table({"v": ["c"]}),
                    configuration={"delta.deletedFileRetentionDuration": "interval 1 hours"})
    c = _new_file(events, set())
    write_deltalake(str(events), pa.table({"v": ["d", "d"]}), mode="overwrite")
    d = _new_file(events, set())
    write_deltalake(str(inner), pa.table({"v": ["e"]}))
    e = _new_file(inner, set())
    copy_table("partitioned_deletion_vectors", flags)
    report = _write(bucket / "exports" / "report.csv", 5000, 10 * DAY_MS, now)

    objects = [dataclasses.replace(o, storage_class="STANDARD_IA") if o.key == f"events/{d.name}" else o
               for o in objects_in_folder(str(bucket))]
    objects += [
        InventoryObject("orders/orphan-stale.parquet", 700, now - 40 * DAY_MS, is_latest=False, version_id="v0"),
        InventoryObject("exports/old.csv", None, now - DAY_MS, is_delete_marker=True, version_id="v2",
                        storage_class=None),
        InventoryObject("exports/old.csv", 400, now - 50 * DAY_MS, is_latest=False, version_id="v1",
                        storage_class="GLACIER"),
    ]
    today = datetime.fromtimestamp(now / 1000, tz=timezone.utc)
    yesterday = [o for o in objects if o.key != "orders/orphan-stale.parquet" or not o.is_latest]
    inventory = root / "inventory"
    manifests = [write_delivery(str(root / "dest"), "lake", "daily", objs, when, versioned=True)
                 for objs, when in ((yesterday, today - timedelta(days=1)), (objects, today))]
    result = IngestInventory(spark, str(inventory), {"lake": str(bucket)}).execute(manifests)
    assert not result.refused, result.refused
    return dict(root=root, bucket=bucket, now=now, inventory=str(inventory), objects=objects,
                orders=orders, events=events, inner=inner, flags=flags,
                a=a, b=b, c=c, d=d, e=e, stale=stale, recent=recent, report=report)


def _uri(path: Path) -> str:
    return f"file://{path}"


def test_chargeback_splits_every_byte_and_prices_it(spark, lake):
    now = lake["now"] + 2 * MS_PER_HOUR  # events' tombstone C is then past its 1-hour retention
    result = Chargeback(spark, ChargebackOptions(lake["inventory"], prices=load_prices(None) | PRICES,
                                                 now_ms=now)).execute()
    tables = {(t.table or "untracked"): t for t in result.tables()}
    by = {name.removeprefix(_uri(lake["bucket"]) + "/"): t for name, t in tables.items()}
    orders, events, inner = by["orders"], by["events"], by["events/inner"]

    assert orders.bytes_by_category == {
        "live": _size(lake["a"]), "time_travel": _size(lake["b"]), "reclaimable": 1000,
        "log": _log_bytes(lake["orders"]), "other": 3000, "noncurrent": 700}
    assert orders.objects_by_category["other"] == 2  # the recent orphan and _SUCCESS
    assert events.bytes_by_category == {"live": _size(lake["d"]), "reclaimable": _size(lake["c"]),
                                        "log": _log_bytes(lake["events"])}
    assert inner.bytes_by_category == {"live": _size(lake["e"]), "log": _log_bytes(lake["inner"])}
    assert by["untracked"].bytes_by_category == {"untracked": 5000, "noncurrent": 400, "delete_marker": 0}
    assert by["untracked"].objects_by_category == {"untracked": 1, "noncurrent": 1, "delete_marker": 1}
    # A delete marker has no storage class (not one the inventory failed to name): no "UNKNOWN 0 B".
    assert [(c.storage_class, c.bytes) for c in result.cells if c.category == "delete_marker"] == [("NONE", 0)]
    assert "UNKNOWN" not in {c.storage_class for c in result.cells}
    flags = by["flags"]
    on_disk = sum(p.stat().st_size for p in lake["flags"].rglob("*") if p.is_file())
    assert sum(flags.bytes_by_category.values()) == on_disk
    live_sizes = pa.table(DeltaTable(str(lake["flags"])).get_add_actions(flatten=True)).column("size_bytes")
    assert flags.bytes_by_category["live"] > sum(live_sizes.to_pylist())  # plus their deletion vector files

    # Every inventory row is counted once: the split adds up to the bucket's totals.
    assert result.bucket_totals == {"lake": {"objects": len(lake["objects"]),
                                             "bytes": sum(o.size or 0 for o in lake["objects"])}}
    assert result.balanced and result.ok

    # Cost: bytes / 2^30 x the class's price.
    assert events.bytes_by_storage_class["STANDARD_IA"] == _size(lake["d"])
    expected_events = (_size(lake["d"]) * 1.0 + (_size(lake["c"]) + _log_bytes(lake["events"])) * 2.0) / BYTES_PER_GB
    assert events.usd_per_month == pytest.approx(expected_events)
    assert by["untracked"].usd_per_month == pytest.approx((5000 * 2.0 + 400 * 0.5) / BYTES_PER_GB)

    # Trend: yesterday's inventory lacked the stale orphan.
    assert orders.growth_bytes == 1000 and orders.growth_bytes_per_day == 1000
    assert events.growth_bytes == 0
    dates = sorted({p.inventory_date for p in result.trend})
    assert len(dates) == 2


def test_two_inventory_configurations_are_charged_once(spark, lake):
    """A bucket with a daily and a weekly configuration lists every object twice on one date."""
    today = datetime.fromtimestamp(lake["now"] / 1000, tz=timezone.utc)
    inventory = lake["root"] / "inventory-two-configs"
    for when in (today - timedelta(days=1), today):  # the trend counts each object once on every date too
        manifests = [write_delivery(str(lake["root"] / "dest-two"), "lake", config, lake["objects"], when,
                                    versioned=True) for config in ("daily", "weekly")]
        assert not IngestInventory(spark, str(inventory), {"lake": str(lake["bucket"])}).execute(manifests).refused

    def charge(table: str):
        return Chargeback(spark, ChargebackOptions(table, prices=load_prices(None) | PRICES,
                                                   now_ms=lake["now"])).execute()

    twice, once = charge(str(inventory)), charge(lake["inventory"])
    assert twice.cells == once.cells
    assert twice.bucket_totals == once.bucket_totals == {
        "lake": {"objects": len(lake["objects"]), "bytes": sum(o.size or 0 for o in lake["objects"])}}
    per_date: dict[str, tuple[int, int]] = {}
    for p in twice.trend:
        objects, size = per_date.get(p.inventory_date, (0, 0))
        per_date[p.inventory_date] = (objects + p.objects, size + p.bytes)
    assert len(per_date) == 2
    assert set(per_date.values()) == {(len(lake["objects"]), sum(o.size or 0 for o in lake["objects"]))}


def test_chargeback_cli_writes_csv_json_and_html(spark, lake, tmp_path, capsys):
    prices = tmp_path / "prices.yaml"
    prices.write_text("STANDARD: 2.0\nstandard_ia: 1.0\nGLACIER: 0.5\n")
    out = tmp_path / "out"
    assert main(["chargeback", "--inventory-table", lake["inventory"], "--prices", str(prices),
                 "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "totals match the inventory" in printed
    doc = json.loads((out / "chargeback.json").read_text())
    assert_matches_schema(doc, "chargeback")
    assert doc["balanced"] and doc["prices_usd_per_gb_month"]["STANDARD_IA"] == 1.0
    cells = (out / "chargeback_cells.csv").read_text().splitlines()
    assert cells[0] == "inventory_date,bucket,table,category,storage_class,objects,bytes,usd_per_month"
    assert sum(int(line.split(",")[6]) for line in cells[1:]) == sum(o.size or 0 for o in lake["objects"])
    assert (out / "chargeback_tables.csv").read_text().count("\n") == 1 + 5  # four tables and the untracked area
    html = (out / "chargeback.html").read_text()
    assert "<script" not in html and "http://" not in html.replace("http://www.w3.org/2000/svg", "")
    for chart in ('id="top-tables"', 'id="storage-classes"', 'id="trend"'):
        assert chart in html


def test_the_chargeback_summary_adds_up_and_says_what_its_figures_are(spark, lake):
    """Each row's columns hold every category once (so they add up to its total); a cost below a cent is
    not "$0.00"; reclaimable bytes are the inventory's, which a vacuum since has not changed."""
    from lake_reports.charges import CATEGORIES, SUMMARY_COLUMNS

    held = [c for _, categories in SUMMARY_COLUMNS for c in categories]
    assert sorted(held) == sorted(CATEGORIES)  # each in one column
    result = Chargeback(spark, ChargebackOptions(lake["inventory"], now_ms=lake["now"] + 2 * MS_PER_HOUR)).execute()
    summary = result.summary()
    header, *rows = summary.splitlines()[1:1 + len(result.tables()) + 1]
    assert header.split()[:8] == ["table", "total", "live", "timetravel", "reclaim", "log", "noncurr", "other"]
    assert all("<$0.01" in row and "0.00" not in row for row in rows), rows  # the lake's few KiB
    assert "<$0.01/month" in summary.splitlines()[0]
    assert f"reclaim: what the inventory of {result.inventory_date} lists" in summary


def test_chargeback_refuses_bad_input_clearly(spark, lake, tmp_path, capsys):
    bad = tmp_path / "prices.json"
    bad.write_text('{"STANDARD": "cheap"}')
    with pytest.raises(PriceError, match="STANDARD: price must be a number"):
        load_prices(str(bad))
    assert main(["chargeback", "--inventory-table", str(tmp_path / "nothing"), "--out", str(tmp_path)]) == 1
    assert "no Delta table there" in capsys.readouterr().err
    result = Chargeback(spark, ChargebackOptions(lake["inventory"], prices={"STANDARD": 1.0})).execute()
    assert result.unpriced == ["GLACIER", "STANDARD_IA"] and not result.ok


def test_readme_sql_runs_on_spark(spark, lake):
    """The chargeback SQL docs/chargeback.md shows, run as documented against the inventory table."""
    from lakeio.tables.read import read_delta

    section = documentation().split("### SQL over the inventory table", 1)[1].split("\n## ", 1)[0]
    queries = re.findall(r"```sql\n(.*?)```", section, flags=re.S)
    assert len(queries) == 3
    read_delta(spark, lake["inventory"]).createOrReplaceTempView("inventory")
    per_class, per_prefix, growth = (spark.sql(q).collect() for q in queries)
    today = max(r["inventory_date"] for r in per_class)
    expected: dict[str, int] = {}
    for o in lake["objects"]:
        if not o.is_delete_marker:
            expected[o.storage_class] = expected.get(o.storage_class, 0) + o.size
    assert {r["storage_class"]: r["bytes"] for r in per_class if r["inventory_date"] == today} == expected
    prefixes = {r["prefix"]: r["bytes"] for r in per_prefix}
    assert prefixes["exports/report.csv"] == 5000 and prefixes["orders/orphan-stale.parquet"] == 1000
    assert [r["growth"] for r in growth] == [None, 1000]  # yesterday lacked the stale orphan
    assert growth[-1]["noncurrent_bytes"] == 700 + 400


def test_html_report_renders_in_headless_chromium(spark, lake, tmp_path):
    browser = chromium()
    from PIL import Image

    result = Chargeback(spark, ChargebackOptions(lake["inventory"], now_ms=lake["now"] + 2 * MS_PER_HOUR)).execute()
    page, shot = tmp_path / "chargeback.html", tmp_path / "shot.png"
    page.write_text(html_report.render(result))
    headless(browser, tmp_path, page, f"--screenshot={shot}")
    colours = {rgb for _, rgb in Image.open(shot).convert("RGB").getcolors(maxcolors=1 << 20)}
    for name in ("live", "time_travel", "reclaimable", "log", "noncurrent"):  # bars of the top-tables chart
        hex_colour = html_report.COLOURS[name]
        assert tuple(int(hex_colour[i:i + 2], 16) for i in (1, 3, 5)) in colours, name

    # On a desktop and in a narrow window alike nothing is cut off on the right: the page is as wide as the
    # window (the charts shrink; the wide table scrolls in its own box). The report has no scripts; a copy
    # with one measures the laid-out page, and Chromium prints the DOM it leaves.
    measured = tmp_path / "measured.html"
    measured.write_text(page.read_text().replace("</body>", "<script>document.body.setAttribute('data-overflow', "
                                                 "document.documentElement.scrollWidth - window.innerWidth)"
                                                 "</script></body>"))
    for width in (1280, 700):
        dom = headless(browser, tmp_path, measured, "--dump-dom", width=width)
        overflow = re.search(r'data-overflow="(-?\d+)"', dom)
        assert overflow and int(overflow.group(1)) <= 0, f"at {width} px the page is {overflow and overflow.group(1)} px too wide"
    legend = re.search(r'<p class="legend">(.*?)</p>', page.read_text()).group(1)
    shown = {c for t in result.tables()[:html_report.TOP_TABLES] for c, n in t.bytes_by_category.items() if n}
    assert set(re.findall(r"</i>([a-z ]+)</span>", legend)) == {c.replace("_", " ") for c in shown}


def _run_row(spark, audit: str, table: Path, path: Path, action: str, error: str | None, at_ms: int,
             run_id: str = "run-failed") -> str:
    """An audit entry as a run on S3 would leave it when a delete fails (local deletes do not fail as root)."""
    run = RunReport(run_id, "", "", datetime.now(timezone.utc).date().isoformat(), dry_run=False,
                    tables=[TableReport(_uri(table), "failed", "1 deletion(s) failed", 0, 168.0)])
    outcomes = spark.createDataFrame([(_uri(table), _uri(path), 1, at_ms, action, error, at_ms, None, None, None)],
                                     OUTCOMES.schema)
    write_audit(spark, audit, run, at_ms, outcomes)
    return run.run_id


def test_erasure_evidence_per_file_and_per_table(spark, lake, tmp_path):
    audit = str(tmp_path / "audit")
    run_ms = lake["now"] + 2 * MS_PER_HOUR
    dry = vacuum(spark, lake["inventory"], [lake["orders"], lake["events"]], dry_run=True, audit_table=audit,
                 now_ms=run_ms)
    real = vacuum(spark, lake["inventory"], [lake["events"]], dry_run=False, audit_table=audit, now_ms=run_ms)
    assert not lake["c"].exists()
    # A later run records deleting C again (S3 answers "deleted" for a key already gone): C was erased by the first.
    _run_row(spark, audit, tmp_path / "rerun", lake["c"], "deleted", None, run_ms + DAY_MS, "run-again")
    asked_ms = run_ms + 5 * DAY_MS
    evidence = ErasureEvidence(spark, ErasureOptions(audit, lake["inventory"], deadline_days=7.0, now_ms=asked_ms))
    report = evidence.execute(
        paths=[str(lake["c"]), str(lake["a"]), str(lake["stale"]), str(lake["report"])],
        commits=[CommitQuestion(str(lake["orders"]), 2), CommitQuestion(str(lake["orders"]), 99)])
    answers = {Path(a.path.removeprefix("file://")).name: a for a in report.answers}

    assert answers[lake["c"].name].status == "erased" and answers[lake["c"].name].run_id == real.run_id
    assert answers[lake["a"].name].status == "live"
    stale = answers["orphan-stale.parquet"]
    assert stale.status == "not_vacuumed_since" and dry.run_id in stale.detail
    assert answers["report.csv"].status == "not_in_a_table"
    removed = answers[lake["b"].name]  # B, removed by commit 2 of orders
    assert removed.asked_as.endswith("orders@2") and removed.status == "within_retention"
    assert removed.asked_as == f"{removed.table}@2" and removed.table.startswith("file:///")  # asked as a bare path
    b_removed_ms = next(json.loads(line)["remove"]["deletionTimestamp"]
                        for line in (lake["orders"] / "_delta_log" / f"{2:020d}.json").read_text().splitlines()
                        if "remove" in json.loads(line))
    assert removed.when == datetime.fromtimestamp((b_removed_ms + 7 * DAY_MS) / 1000, tz=timezone.utc).isoformat(
        timespec="seconds")
    assert report.refused and "cannot read commit 99" in report.refused[0]

    tables = {Path(t.table.removeprefix("file://")).name: t for t in report.tables}
    events = tables["events"]
    # retention 1 h + 5 days since the run + the run's inventory lag (run start - midnight of the inventory date)
    today = datetime.fromtimestamp(lake["now"] / 1000, tz=timezone.utc).date()
    expected_hours = 1 + 5 * 24 + (run_ms - midnight_utc_ms(today)) / MS_PER_HOUR
    assert events.retention_hours == 1 and events.last_deleting_run == real.run_id
    assert events.worst_case_days == pytest.approx(expected_hours / 24)
    assert events.over_deadline == (expected_hours / 24 > 7.0)
    assert tables["orders"].over_deadline and tables["orders"].worst_case_days is None  # only ever dry-run
    flags = tables["flags"]
    adds = pa.table(DeltaTable(str(lake["flags"])).get_add_actions(flatten=True)).column("num_records").to_pylist()
    assert flags.soft_deleted_rows == sum(adds) - read_all_rows(lake["flags"]) > 0
    assert flags.files_with_deletion_vectors > 0 and tables["events"].soft_deleted_rows == 0
    assert not report.ok


def test_erasure_reports_failed_deletes_and_the_cli(spark, lake, tmp_path, capsys):
    audit = str(tmp_path / "audit")
    run_id = _run_row(spark, audit, lake["orders"], lake["stale"], "failed", "AccessDenied: no s3:DeleteObject",
                      lake["now"])
    code = main(["erasure", "--audit-table", audit, "--inventory-table", lake["inventory"], "--deadline-days", "7",
                 "--path", str(lake["stale"]), "--table", _uri(lake["orders"]), "--report", str(tmp_path / "e.json")])
    printed = capsys.readouterr().out
    assert code == 1  # 7 days' retention plus any time since the run is over a 7-day deadline
    doc = json.loads((tmp_path / "e.json").read_text())
    (answer,) = doc["answers"]
    assert answer["status"] == "delete_failed" and answer["run_id"] == run_id and "AccessDenied" in answer["detail"]
    assert [t["table"] for t in doc["tables"]] == [_uri(lake["orders"])]
    assert "delete_failed" in printed
    with pytest.raises(SystemExit) as usage:
        main(["erasure", "--audit-table", audit, "--inventory-table", lake["inventory"], "--commit", "t@x"])
    assert usage.value.code == 2


def test_erasure_notices_files_gone_without_a_recorded_run(spark, lake, tmp_path):
    """C is past its 1-hour retention, no run recorded deleting it, and a newer inventory no longer lists it."""
    c_key = f"events/{lake['c'].name}"
    today = datetime.fromtimestamp(lake["now"] / 1000, tz=timezone.utc)
    manifest = write_delivery(str(tmp_path / "dest"), "lake", "daily", [o for o in lake["objects"] if o.key != c_key],
                              today, versioned=True)
    inventory = str(tmp_path / "inventory")
    assert not IngestInventory(spark, inventory, {"lake": str(lake["bucket"])}).execute([manifest]).refused
    audit = str(tmp_path / "audit")
    _run_row(spark, audit, lake["orders"], lake["stale"], "failed", "SlowDown", lake["now"])
    options = ErasureOptions(audit, inventory, tables=[str(lake["events"])], now_ms=lake["now"] + 2 * MS_PER_HOUR)
    report = ErasureEvidence(spark, options).execute(paths=[str(lake["c"]), str(lake["d"])])
    assert [(Path(a.path).name, a.status) for a in report.answers] == [
        (lake["c"].name, "gone_unrecorded"), (lake["d"].name, "live")]
    (events,) = report.tables
    assert events.over_deadline and events.worst_case_days is None and "no vacuum run" in events.problem


def test_erasure_names_the_run_that_found_a_file_already_gone(spark, lake, tmp_path):
    """C is past its 1-hour retention and still listed, but another tool deleted it before the vacuum
    reached it: the run records it as already absent, and the evidence names that run."""
    lake["c"].unlink(missing_ok=True)
    audit = str(tmp_path / "audit")
    run = vacuum(spark, lake["inventory"], [lake["events"]], dry_run=False, audit_table=audit,
                 now_ms=lake["now"] + 2 * MS_PER_HOUR)
    assert run.totals()["already_absent_files"] == 1 and run.totals()["deleted_files"] == 0, run.summary()
    options = ErasureOptions(audit, lake["inventory"], now_ms=lake["now"] + 3 * MS_PER_HOUR)
    (answer,) = ErasureEvidence(spark, options).execute(paths=[str(lake["c"])]).answers
    assert (answer.status, answer.run_id) == ("absent_when_vacuumed", run.run_id)
    assert answer.when and f"vacuum run {run.run_id}" in answer.detail
