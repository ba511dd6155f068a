"""A run's budget (vacuum_jobs.budget): at most max_deletes files, the costliest tables first, the rest deferred
and taken first by the next run; and min_reclaimable_bytes, which skips a table not worth its vacuum."""

from __future__ import annotations

import json
import os
import random
import shutil
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from inventory_etl.ingestion import IngestInventory
from inventory_etl.producer import objects_in_folder, write_delivery
from lakeio.audit.contract import verify_chain
from lakeio.errors import InvalidOption
from lakeio.spark.shapes import CANDIDATES
from lakeio.store.uris import TableRoot
from tests.lakes import inventory_of, now_ms, ours, vacuum
from tests.report_schemas import assert_matches_schema
from vacuum_jobs import TableStatus
from vacuum_jobs.budget import OUT_OF_TIME, Worth, spend
from vacuum_jobs.cli import main as vacuum_main
from vacuum_jobs.options import VacuumOptions
from vacuum_jobs.report import ReasonCode, RunTables, TableReport
from vacuum_jobs.vacuum_plan import Decision, VacuumPlan

pytestmark = pytest.mark.slow  # four runs over one lake, each with its own inventory

DAY_S = 86_400
# table -> its orphans' sizes in bytes: what each is worth a month follows their sum (all STANDARD)
ORPHANS = {"a": [5000 + i for i in range(6)], "b": [20_000] * 4, "c": [100] * 10, "d": [1000] * 3}


def _lake(bucket: Path) -> dict[str, Path]:
    """One small table per name, with its orphans written ten days ago (candidates at the default retention)."""
    tables = {}
    for name, sizes in ORPHANS.items():
        table = bucket / name
        write_deltalake(str(table), pa.table({"id": [1]}))
        for i, size in enumerate(sizes):
            orphan = table / f"orphan-{i:02d}.parquet"
            orphan.write_bytes(b"x" * size)
            os.utime(orphan, (now_ms() / 1000 - 10 * DAY_S,) * 2)
        tables[name] = table
    return tables


def _orphans_left(tables: dict[str, Path]) -> dict[str, list[int]]:
    return {name: sorted(p.stat().st_size for p in table.glob("orphan-*")) for name, table in tables.items()}


def _run(spark, bucket: Path, work: Path, tables: dict[str, Path], **options):
    report = vacuum(spark, inventory_of(spark, bucket, work), [str(t) for t in tables.values()], **options)
    assert_matches_schema(report.to_dict(), "vacuum-report")
    return report, {Path(t.table).name: t for t in report.tables}


def test_budgeted_runs_take_the_costliest_first_defer_the_rest_and_the_next_run_takes_those_first(spark, tmp_path):
    bucket, audit = tmp_path / "lake", str(tmp_path / "audit")
    tables = _lake(bucket)
    budget = {"max_deletes": 8, "audit_table": audit}

    # A dry run with the budget plans exactly what the applied run then deletes.
    dry, by = _run(spark, bucket, tmp_path / "dry", tables, **budget)
    assert dry.plan is not None
    planned = {Path(root).name: sorted(length for _, length in files) for root, files in dry.plan.files().items()}
    assert planned == {"b": [20_000] * 4, "a": [5002, 5003, 5004, 5005]}  # b costs most; a's largest, to the budget
    assert by["c"].status == by["d"].status == TableStatus.DEFERRED

    first, by = _run(spark, bucket, tmp_path / "run1", tables, dry_run=False, **budget)
    assert first.ok and first.totals()["deleted_files"] == 8
    assert {n: t.status for n, t in by.items()} == {"a": TableStatus.VACUUMED, "b": TableStatus.VACUUMED,
                                                    "c": TableStatus.DEFERRED, "d": TableStatus.DEFERRED}
    assert by["a"].reason_code is ReasonCode.BUDGET_SPENT and by["a"].counts.deferred_files == 2
    assert by["a"].counts.deferred_bytes == 5000 + 5001
    assert (by["c"].counts.deferred_files, by["c"].counts.deferred_bytes) == (10, 1000)
    assert by["c"].reason_code is ReasonCode.BUDGET_SPENT and by["c"].candidate_usd_per_month > 0
    assert _orphans_left(tables) == {"a": [5000, 5001], "b": [], "c": [100] * 10, "d": [1000] * 3}
    assert "3 table(s) with 15 candidate(s)" in first.summary() and "2 deferred" in first.summary()
    assert "the next run with this audit table takes them first" in first.summary()

    # The tables the first run left work in go first, costliest first; b, cheaper now, has nothing left.
    second, by = _run(spark, bucket, tmp_path / "run2", tables, dry_run=False, **budget)
    assert second.totals()["deleted_files"] == 8
    assert _orphans_left(tables) == {"a": [], "b": [], "c": [100] * 7, "d": []}
    assert by["c"].status == TableStatus.VACUUMED and by["c"].counts.deferred_files == 7

    third, by = _run(spark, bucket, tmp_path / "run3", tables, dry_run=False, **budget)
    assert third.totals()["deleted_files"] == 7 and "nothing deferred" in third.summary()
    assert _orphans_left(tables) == {name: [] for name in ORPHANS}
    check = verify_chain(spark, audit)
    assert not check.problems and check.runs == 4

    # One run without a budget over the same lake deletes the same files in all.
    again = _lake(tmp_path / "again")
    whole, _ = _run(spark, tmp_path / "again", tmp_path / "whole", again, dry_run=False)
    assert whole.totals()["deleted_files"] == 8 + 8 + 7 == sum(len(s) for s in ORPHANS.values())


def test_a_table_whose_candidates_are_worth_less_than_the_least_is_skipped_and_said(spark, tmp_path):
    bucket = tmp_path / "lake"
    tables = _lake(bucket)
    report, by = _run(spark, bucket, tmp_path / "run", tables, dry_run=False, min_reclaimable_bytes=2000)
    assert by["c"].status == TableStatus.SKIPPED and by["c"].reason_code is ReasonCode.NOT_WORTH_IT
    assert "less than --min-reclaimable-bytes 2,000" in (by["c"].reason or "")
    assert _orphans_left({"c": tables["c"]}) == {"c": [100] * 10}
    assert all(by[n].status == TableStatus.VACUUMED for n in "abd") and report.ok


def test_a_budget_given_wrongly_is_refused_before_spark_naming_the_flag(capsys):
    with pytest.raises(InvalidOption, match="max_deletes must be a whole number >= 1, not 0"):
        VacuumOptions("s3://lake/inventory", max_deletes=0)
    with pytest.raises(InvalidOption, match="min_reclaimable_bytes must be a whole number >= 0, not -1"):
        VacuumOptions("s3://lake/inventory", min_reclaimable_bytes=-1)
    for minutes in (0, -1.5, float("nan"), float("inf"), True, "10"):
        with pytest.raises(InvalidOption, match="max_minutes must be a number of minutes > 0"):
            VacuumOptions("s3://lake/inventory", max_minutes=minutes)
    for flag, value, said in (("--max-deletes", "0", "--max-deletes must be a whole number >= 1, not 0"),
                              ("--max-minutes", "0", "--max-minutes must be a number of minutes > 0, not 0.0"),
                              ("--max-minutes", "soon", "argument --max-minutes: invalid float value: 'soon'")):
        with pytest.raises(SystemExit) as exited:
            vacuum_main(["--inventory-table", "s3://lake/inventory", "--table", "s3://lake/t", flag, value])
        err = capsys.readouterr().err
        assert exited.value.code == 2 and said in err and len(err.strip().splitlines()[-1]) < 200, err


def test_the_budget_orders_the_tables_by_the_runs_prices_as_the_chargeback_does(spark, tmp_path, capsys):
    """b's orphans, four times a's bytes, lie in GLACIER: at the list prices a costs more a month and goes first; with
    a prices file (the chargeback's --prices) that prices GLACIER above STANDARD, b does. A class only the file names
    is priced too."""
    bucket, work = tmp_path / "lake", tmp_path / "run"
    tables = {name: table for name, table in _lake(bucket).items() if name in "ab"}
    objects = [replace(o, storage_class="GLACIER" if o.key.startswith("b/") else "STANDARD")
               for o in objects_in_folder(str(bucket))]
    manifest = write_delivery(str(work / "inventory-dest"), "lake", "daily", objects, datetime.now(timezone.utc))
    inventory = str(work / "inventory")
    assert not IngestInventory(spark, inventory, {"lake": str(bucket)}).execute([manifest]).refused

    def first_taken(report_file: Path, *flags: str, inventory: str = inventory) -> str:
        assert vacuum_main(["--inventory-table", inventory, "--max-deletes", "4", "--report", str(report_file),
                            *[a for t in tables.values() for a in ("--table", str(t))], *flags]) == 0
        by = {Path(t["table"]).name: t for t in json.loads(report_file.read_text())["tables"]}
        assert sorted(t["status"] for t in by.values()) == ["deferred", "dry_run"], by
        return next(name for name, t in by.items() if t["status"] == "dry_run")

    prices = tmp_path / "prices.yaml"
    prices.write_text("glacier: 0.1\n")
    assert first_taken(tmp_path / "list.json") == "a"
    assert first_taken(tmp_path / "priced.json", "--prices", str(prices)) == "b"
    report = vacuum(spark, inventory, [str(t) for t in tables.values()], max_deletes=4, prices={"GLACIER": 0.1})
    assert {Path(t.table).name: t.status for t in report.tables} == {"a": TableStatus.DEFERRED, "b": TableStatus.DRY_RUN}

    # A class the list does not hold, named by the file: the table whose objects lie in it is priced at it.
    objects = [replace(o, storage_class="OUTPOSTS") if o.key.startswith("a/") else o for o in objects]
    manifest = write_delivery(str(tmp_path / "again"), "lake", "daily", objects, datetime.now(timezone.utc))
    assert not IngestInventory(spark, str(tmp_path / "again" / "inventory"), {"lake": str(bucket)}).execute([manifest]).refused
    prices.write_text("OUTPOSTS: 1.0\nGLACIER: 0.1\n")
    assert first_taken(tmp_path / "outposts.json", "--prices", str(prices), inventory=str(tmp_path / "again" / "inventory")) == "a"

    # A prices file or mapping that cannot be used: one line naming it, before Spark.
    for text, said in (("STANDARD: -1\n", "STANDARD: price must be a number >= 0, not -1"),
                       ("GLACIER: .nan\n", "GLACIER: price must be a number >= 0, not nan"),
                       ("- STANDARD\n", "expected a mapping of storage class to USD per GB-month")):
        prices.write_text(text)
        with pytest.raises(SystemExit) as exited:
            vacuum_main(["--inventory-table", "s3://lake/inventory", "--table", "s3://lake/t", "--prices", str(prices)])
        err = capsys.readouterr().err.strip().splitlines()[-1]
        assert exited.value.code == 2 and f"--prices {prices}: {said}" in err, err
    with pytest.raises(InvalidOption, match="prices: GLACIER: price must be a number >= 0, not 'cheap'"):
        VacuumOptions("s3://lake/inventory", prices={"GLACIER": "cheap"})


def test_a_budgeted_run_without_an_audit_table_says_the_next_run_cannot_know_what_it_deferred(spark, tmp_path):
    bucket = tmp_path / "lake"
    tables = _lake(bucket)
    shutil.rmtree(tables.pop("a"))
    report, by = _run(spark, bucket, tmp_path / "run", tables, max_deletes=3)
    assert [n for n, t in by.items() if t.status == TableStatus.DEFERRED] == ["c", "d"]
    assert "without an --audit-table the next run cannot know them" in report.summary()


@pytest.mark.parametrize("seed", range(12))
def test_whatever_the_lake_and_budget_the_run_takes_a_prefix_of_its_order_and_defers_the_rest_whole(spark, seed):
    """A generator of lakes (tables of random files, some left work in before) and budgets: the budget is spent
    exactly (or the candidates run out), on the earlier runs' tables first, then the costliest; at most one
    table is cut, keeping its largest files; every table after it is deferred whole, its counts saying so."""
    rng = random.Random(seed)
    sizes = {TableRoot(f"file:///lake/t{i}"): [rng.choice([0, 10, 100, 1000, 5000]) for _ in range(rng.randint(0, 6))]
             for i in range(rng.randint(1, 7))}
    rows = [(root, f"{root}/f{j}", size, 0) for root, files in sizes.items() for j, size in enumerate(files)]
    plan = VacuumPlan.of({root: Decision.VACUUM for root in sizes}, spark.createDataFrame(rows, CANDIDATES.schema))
    worths = {root: Worth(len(files), sum(files), sum(files) * 1e-9) for root, files in sizes.items()}
    first = {root for root in sizes if rng.random() < 0.3}
    max_deletes = rng.randint(1, 1 + sum(len(f) for f in sizes.values()))
    run_tables = RunTables({root: TableReport(root) for root in sizes})

    kept = {root: sorted(length for _, length in files) for root, files in
            spend(plan, worths, run_tables, max_deletes=max_deletes, min_reclaimable_bytes=0, first=first).files().items()}

    total = sum(len(f) for f in sizes.values())
    assert sum(len(k) for k in kept.values()) == min(max_deletes, total)
    assert all(r in kept for r in sizes if not sizes[r])  # a table with nothing to delete costs no budget
    order = sorted((r for r in sizes if sizes[r]), key=lambda r: (r not in first, -worths[r].usd_per_month, r))
    taken = [r for r in order if r in kept]
    assert order[:len(taken)] == taken  # a prefix of the order, first the earlier runs' tables
    cut = [r for r in taken if len(kept[r]) < len(sizes[r])]
    assert len(cut) <= 1 and (not cut or cut[0] == taken[-1])
    for root in cut:
        assert kept[root] == sorted(sizes[root])[len(sizes[root]) - len(kept[root]):]  # its largest files
        assert run_tables[root].counts.deferred_files == len(sizes[root]) - len(kept[root])
        assert run_tables[root].reason_code is ReasonCode.BUDGET_SPENT
    for root in order[len(taken):]:
        report = run_tables[root]
        assert report.status == TableStatus.DEFERRED and (report.counts.deferred_files, report.counts.deferred_bytes) == (
            len(sizes[root]), sum(sizes[root]))


def test_a_run_whose_time_is_gone_before_its_deletes_defers_them_whole_and_the_next_budget_takes_them_first(spark,
                                                                                                       tmp_path):
    """--max-minutes shorter than planning takes: the tables to vacuum are deferred whole, nothing deleted, no
    VACUUM START written; though it deleted nothing, the next run with a budget of deletes takes them first,
    ahead of costlier tables."""
    bucket, audit = tmp_path / "lake", str(tmp_path / "audit")
    tables = _lake(bucket)
    cheap = {name: tables[name] for name in "cd"}
    late, by = _run(spark, bucket, tmp_path / "run1", cheap, dry_run=False, audit_table=audit, max_minutes=0.0001)
    assert late.ok and late.totals()["deleted_files"] == 0 and late.totals()["deferred_files"] == 13
    assert all(t.status == TableStatus.DEFERRED and t.history is None for t in by.values()), late.summary()
    assert by["c"].reason.startswith(OUT_OF_TIME) and "--max-minutes 0.0001" in by["c"].reason
    assert by["c"].candidate_usd_per_month > 0 and "budget: 0.0001 minute(s); 2 table(s) with 13" in late.summary()
    assert _orphans_left(cheap) == {"c": [100] * 10, "d": [1000] * 3}
    assert not ours(tables["c"])

    first, by = _run(spark, bucket, tmp_path / "run2", tables, dry_run=False, audit_table=audit, max_deletes=13)
    assert _orphans_left(tables) == {"a": ORPHANS["a"], "b": ORPHANS["b"], "c": [], "d": []}
    assert by["a"].status == by["b"].status == TableStatus.DEFERRED
    assert not verify_chain(spark, audit).problems


def test_a_tables_file_gives_the_runs_budget_and_a_flag_given_too_wins(spark, tmp_path, capsys):
    bucket = tmp_path / "lake"
    tables = _lake(bucket)
    inventory = inventory_of(spark, bucket, tmp_path / "run")
    listed = tmp_path / "tables.yaml"
    listed.write_text("max_deletes: 5\nmax_minutes: 600\nmin_reclaimable_bytes: 2000\ntables:\n"
                      + "".join(f"  - {tables[name]}\n" for name in "abcd"))
    report = tmp_path / "report.json"
    code = vacuum_main(["--inventory-table", inventory, "--tables-file", str(listed), "--max-deletes", "4",
                        "--report", str(report)])
    doc = json.loads(report.read_text())
    assert code == 0 and (doc["max_deletes"], doc["max_minutes"]) == (4, 600), capsys.readouterr().out
    by = {Path(t["table"]).name: t for t in doc["tables"]}
    assert by["c"]["reason_code"] == "not_worth_it" and by["b"]["counts"]["candidate_files"] == 4  # b: the costliest
    assert by["a"]["status"] == by["d"]["status"] == "deferred"

    for text, said in (("max_deletes: 0\ntables: [s3://lake/t]\n", "tables.yaml: max_deletes must be a whole number >= 1"),
                       ("max_minutes: soon\ntables: [s3://lake/t]\n", "tables.yaml: max_minutes must be a number of minutes"),
                       ("max_delete: 5\ntables: [s3://lake/t]\n", "tables.yaml: unknown key(s) ['max_delete'] beside tables")):
        listed.write_text(text)
        with pytest.raises(SystemExit) as exited:
            vacuum_main(["--inventory-table", "s3://lake/inventory", "--tables-file", str(listed)])
        assert exited.value.code == 2 and said in capsys.readouterr().err, text
