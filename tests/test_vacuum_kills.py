"""A vacuum killed part way, then run again: nothing a table needs is lost, every deleted file is in
the audit exactly once as ``deleted``, and no journal is left behind.

``python -m vacuum_jobs`` runs in a process of its own, killed (SIGKILL, tests.syscall_kill) at a
named system call, which never runs: the ``unlink`` of one planned file (the Python worker deleting
it dies, and the run fails with it, exit 1: some files deleted and none recorded), the ``link`` that
would put the audit's next commit in place (the driver dies: every file deleted, nothing recorded),
or the one of a table's ``VACUUM END``. Each test checks in strace's own lines that the call's
process died of the signal, and the driver's exit status. The re-run in the test session reads the killed
run's note back (vacuum_jobs.interrupted). ``VACUUM_SOAK_RUNS`` (default 1) sets how many more
rounds kill at a randomly chosen planned file; ``SOAK_SEED`` picks them.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from lakeio.audit.contract import verify_chain
from tests.lakes import inventory_of, ours, vacuum
from tests.syscall_kill import Killed, run_killed_at

pytestmark = pytest.mark.slow  # vacuum runs in subprocesses, killed mid-run

ROOT = Path(__file__).resolve().parents[1]
TABLES = ("a", "b", "c")


def _lake(tmp_path: Path) -> tuple[list[Path], dict[Path, int]]:
    """Three tables, each with files its log no longer needs (overwritten), and their row counts."""
    tables = []
    for name in TABLES:
        table = tmp_path / "lake" / name
        for i in range(4):
            write_deltalake(str(table), pa.table({"id": list(range(i * 10, i * 10 + 10))}), mode="overwrite")
        tables.append(table)
    return tables, {t: DeltaTable(str(t)).to_pyarrow_table().num_rows for t in tables}


def _needed(table: Path) -> set[Path]:
    return {Path(uri.removeprefix("file://")) for uri in DeltaTable(str(table)).file_uris()}


def _killed_run(tables: list[Path], inventory: str, audit: Path, at: Path, calls: str, in_driver: bool,
                work: Path) -> Killed:
    """The vacuum, killed at the first of ``calls`` on path ``at`` (tests.syscall_kill)."""
    return run_killed_at(
        [sys.executable, "-m", "vacuum_jobs", "--inventory-table", inventory,
         *[a for t in tables for a in ("--table", str(t))], "--retain-hours", "0", "--force-retention",
         "--apply", "--audit-table", str(audit), "--master", "local[2]"], at, calls, work, ROOT,
        in_workers=not in_driver)


def _kill_then_rerun(spark, tmp_path: Path, pick, ends: dict[str, set[tuple[str, bool]]]) -> None:
    """``pick`` names where to kill (the path, its system calls, and whether the driver makes the call
    or a Python worker deleting files); ``ends`` what may end the killed run's history in each table
    ("*": any other): (status, with the run's own failed count, as only the run itself writes)."""
    tables, rows = _lake(tmp_path)
    inventory = inventory_of(spark, tmp_path / "lake", tmp_path)
    audit = tmp_path / "audit"
    planned = vacuum(spark, inventory, tables, dry_run=True, retention_hours=0, enforce_retention_duration=False,
                     audit_table=str(audit))  # the audit's version 0
    candidates = sorted(Path(p.removeprefix("file://")) for p in
                        {r["path"] for r in DeltaTable(str(audit)).to_pyarrow_table().to_pylist()
                         if r["run_id"] == planned.run_id and r["action"] == "would_delete"})
    needed = {t: _needed(t) for t in tables}
    at, calls, in_driver = pick(candidates, audit)

    killed = _killed_run(tables, inventory, audit, at, calls, in_driver, tmp_path)

    # The process that made the call died of the signal: the driver (the run's own exit status), or the worker
    # deleting the file, after which the driver's job fails.
    assert killed.died_of_the_kill(), (killed.traced[-2000:], killed.stderr[-2000:])
    assert killed.returncode == (-signal.SIGKILL if in_driver else 1), (killed.returncode, killed.stderr[-2000:])
    gone_before_rerun = {c for c in candidates if not c.exists()}
    assert at not in candidates or at not in gone_before_rerun  # killed before that very file went
    rerun = vacuum(spark, inventory, tables, dry_run=False, retention_hours=0, enforce_retention_duration=False,
                   audit_table=str(audit))

    assert rerun.ok, [(t.table, t.status, t.reason) for t in rerun.tables] + rerun.audit_problems
    for table in tables:  # nothing a table needs is lost
        assert all(f.exists() for f in needed[table]) and DeltaTable(str(table)).to_pyarrow_table().num_rows == rows[table]
    audit_rows = DeltaTable(str(audit)).to_pyarrow_table().to_pylist()
    deleted = Counter(Path(r["path"].removeprefix("file://")) for r in audit_rows if r["action"] == "deleted")
    assert deleted == Counter(candidates), "every planned file deleted, each recorded once as deleted"
    by_killed_run = {Path(r["path"].removeprefix("file://")) for r in audit_rows
                     if r["action"] == "deleted" and r["run_id"] not in (planned.run_id, rerun.run_id)}
    assert by_killed_run == gone_before_rerun  # recorded as the killed run's, read back by the re-run
    assert not (audit / "_unrecorded").exists() and not list(tmp_path.glob("lake/*/_vacuum_journal"))
    assert verify_chain(spark, str(audit)).ok
    for table in tables:  # the killed run's VACUUM START is closed: by its own END, or by the re-run's FAILED one
        runs = ours(table)
        assert [op for op, _ in runs.pop(rerun.run_id)] == ["VACUUM START", "VACUUM END"]
        (commits,) = runs.values()
        assert [op for op, _ in commits] == ["VACUUM START", "VACUUM END"], table
        ended = commits[1][1]
        assert (json.loads(ended["operationParameters"]["status"]), "numFailedDeletes" in ended["operationMetrics"]
                ) in ends.get(table.name, ends["*"]), (table, ended)
        if "numDeletedFiles" in ended["operationMetrics"]:  # never more, nor fewer, than the run deleted there
            assert int(ended["operationMetrics"]["numDeletedFiles"]) == sum(table in f.parents for f in gone_before_rerun)


# The killed run's own FAILED end (its deletes' job failed), or the one the re-run writes for it.
FAILED = {("FAILED", False)}
# Or the run's own end, with its counts: a run killed in one table's deletes may still end another's
# history (its deletes there done) before it dies.
ANY = FAILED | {("COMPLETED", True), ("FAILED", True)}
POINTS = {
    "at a planned file's unlink": {"*": ANY},
    "at the audit commit's link": {"*": {("COMPLETED", True)}},  # every delete done and its history ended
    # The driver dies putting table a's VACUUM END in place; the others' ENDs went in beside it, or not.
    "at a table's VACUUM END": {"a": FAILED, "*": FAILED | {("COMPLETED", True)}},
}


@pytest.mark.parametrize("point", POINTS)
def test_a_vacuum_killed_at_a_named_point_then_rerun_records_every_delete_once(spark, tmp_path, point):
    def pick(candidates: list[Path], audit: Path) -> tuple[Path, str, bool]:
        if point.startswith("at a planned"):  # in the Python worker that deletes it
            return candidates[len(candidates) // 2], "unlink,unlinkat", False
        if point.startswith("at the audit"):
            return audit / "_delta_log" / f"{1:020d}.json", "link,linkat,rename,renameat,renameat2", True
        log = tmp_path / "lake" / "a" / "_delta_log"  # four overwrites, then our START: the END goes fifth
        return log / f"{5:020d}.json", "link,linkat", True

    _kill_then_rerun(spark, tmp_path, pick, POINTS[point])


def test_soak_vacuums_killed_at_random_planned_files_then_rerun(spark, tmp_path):
    rounds = int(os.environ.get("VACUUM_SOAK_RUNS", "1"))
    chooser = random.Random(os.environ.get("SOAK_SEED", "vacuum-kills"))
    for round_ in range(rounds):
        _kill_then_rerun(spark, tmp_path / f"round-{round_}",
                         lambda candidates, _: (chooser.choice(candidates), "unlink,unlinkat", False), {"*": ANY})
