"""Two vacuums of the same tables at once (a slow run and the next day's, two teams' schedules):
both finish, nothing a table needs is deleted, a file one run deleted is ``already_absent`` for
the other, every file is ``deleted`` in the audit exactly once, and the audit chain verifies,
reporting the fork where both appended after one head.

Interleavings are forced: run A is held at a named point (its last step before deleting, through
the run's own step hook, ``on_step``; its audit commit, through its ``before_commit``) while
run B goes from start to end; then A goes on.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from lakeio.audit.contract import read_audit, verify_chain
from lakeio.spark.steps import Step
from tests.lakes import inventory_of, now_ms, vacuum
from vacuum_jobs.batch_vacuum import BatchVacuum
from vacuum_jobs.options import VacuumOptions

pytestmark = pytest.mark.slow  # whole vacuum runs, two at once

OPTIONS = {"retention_hours": 0, "enforce_retention_duration": False, "min_coverage": 0.0}


def _lake(tmp_path: Path) -> tuple[list[Path], dict[Path, int]]:
    """Two tables whose logs no longer need most of their files (overwritten), and their row counts."""
    tables = []
    for name in ("a", "b"):
        table = tmp_path / "lake" / name
        for i in range(3):
            write_deltalake(str(table), pa.table({"id": list(range(i * 10, i * 10 + 10))}), mode="overwrite")
        tables.append(table)
    return tables, {t: DeltaTable(str(t)).to_pyarrow_table().num_rows for t in tables}


def _held_run(spark, inventory: str, tables: list[Path], audit: Path, hold: Callable):
    """Run A in a thread of its own, paused where ``hold`` puts the pause (the run's hook it returns).
    Returns (start, finish): start runs A until it reaches the pause, finish lets it go and returns
    its report."""
    release, reached, result = threading.Event(), threading.Event(), {}

    def pause() -> None:
        if not release.is_set():
            reached.set()
            assert release.wait(timeout=300), "run A was never let go"

    hooks = hold(pause)
    run = BatchVacuum(spark, VacuumOptions(str(inventory), dry_run=False, audit_table=str(audit), now_ms=now_ms() + 5000,
                                           **OPTIONS), **hooks)
    thread = threading.Thread(name="A", target=lambda: result.update(report=run.execute([str(t) for t in tables])))

    def start() -> None:
        thread.start()
        assert reached.wait(timeout=300), "run A never reached its pause"

    def finish():
        release.set()
        thread.join(timeout=300)
        assert "report" in result, "run A did not finish"
        return result["report"]

    return start, finish


def _at_the_deletes(pause) -> dict:
    """Run A's own step hook: planned and checked again, its next step deletes."""
    return {"on_step": lambda step: pause() if step == Step.DELETING else None}


def _at_the_audit_commit(pause) -> dict:
    """Run A's commit hook: the commit that records its deletes."""
    return {"before_commit": lambda _table: pause()}


@pytest.mark.parametrize("hold", [_at_the_deletes, _at_the_audit_commit], ids=["A held before deleting",
                                                                              "A held at its audit commit"])
def test_two_vacuums_at_once_delete_each_file_once_and_the_audit_verifies(spark, tmp_path, hold):
    tables, rows = _lake(tmp_path)
    inventory = inventory_of(spark, tmp_path / "lake", tmp_path)
    audit = tmp_path / "audit"
    vacuum(spark, inventory, tables, audit_table=str(audit), **OPTIONS)  # a dry run: the audit has a head
    needed = {Path(u.removeprefix("file://")) for t in tables for u in DeltaTable(str(t)).file_uris()}

    start, finish = _held_run(spark, inventory, tables, audit, hold)
    start()
    b = vacuum(spark, inventory, tables, dry_run=False, audit_table=str(audit), now_ms=now_ms() + 5000, **OPTIONS)
    a = finish()

    assert a.ok and b.ok, (a.to_json(), b.to_json())
    planned = a.totals()["candidate_files"]
    assert planned > 0 and b.totals()["candidate_files"] == planned
    first, second = (b, a) if hold is _at_the_deletes else (a, b)  # who reached the files first
    assert (first.totals()["deleted_files"], first.totals()["already_absent_files"]) == (planned, 0)
    assert (second.totals()["deleted_files"], second.totals()["already_absent_files"]) == (0, planned)
    assert all(p.exists() for p in needed) and {t: DeltaTable(str(t)).to_pyarrow_table().num_rows for t in tables} == rows

    recorded = read_audit(spark, str(audit)).where("path IS NOT NULL").select("path", "action", "run_id").collect()
    deleted = Counter(r.path for r in recorded if r.action == "deleted")
    assert len(deleted) == planned and set(deleted.values()) == {1}
    assert {r.run_id for r in recorded if r.action == "already_absent"} == {second.run_id}
    check = verify_chain(spark, str(audit))
    assert check.ok, check.problems
    if hold is _at_the_audit_commit:  # A had read the head before B appended: both follow it
        assert check.forks, check.summary()
