"""Job 1 killed for real (SIGKILL of the whole process) and run again: the table is always
exactly the deliveries, row for row, and every engine reads it.

The job runs as ``python -m inventory_etl`` in its own process group; the re-run uses the
test session. ``SOAK_RUNS`` sets how many rounds the soak test plays (two overlapping runners
given the deliveries in random order, either or both killed at a random point): 1 by default,
the test then taking about 45 s alone. The kill at a named point below and test_ingest_overlap's
forced interleavings are the deterministic cases. ``SOAK_RUNS=20`` (and another ``SOAK_SEED``)
for a deeper soak.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from inventory_etl.discovery import discover
from inventory_etl.ingestion import IngestInventory
from inventory_etl.producer import InventoryObject, write_delivery
from lakeio.inventory import read_inventory
from lakeio.store.filesystem import Storage
from tests.syscall_kill import run_killed_at

pytestmark = pytest.mark.slow  # jobs in subprocesses, killed mid-write

ROOT = Path(__file__).resolve().parents[1]
DELIVERED = datetime(2026, 11, 21, 1, 0, tzinfo=timezone.utc)


def _deliveries(root: Path, buckets: int, rows: int) -> dict[tuple[str, str], int]:
    """One delivery per bucket, several report files each; returns how often each (bucket, key) is listed."""
    expected: Counter = Counter()
    for b in range(buckets):
        objects = [InventoryObject(f"t/part-{i:07d}.parquet", i, 1_763_000_000_000 + i) for i in range(rows)]
        write_delivery(str(root), f"bucket{b}", "daily", objects, DELIVERED, rows_per_file=max(rows // 4, 1))
        expected.update((f"bucket{b}", o.key) for o in objects)
    return dict(expected)


def _start_job(table: Path, root: Path | None = None, manifests: list[str] = (), master: str = "local[2]"
               ) -> subprocess.Popen:
    source = ["--inventory-root", str(root)] if root else [a for m in manifests for a in ("--manifest", m)]
    return subprocess.Popen(
        [sys.executable, "-m", "inventory_etl", "--inventory-table", str(table), *source, "--master", master],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )


def _kill(job: subprocess.Popen) -> str:
    """Kill the job's whole process group; what it printed to stderr since last read."""
    try:
        os.killpg(job.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    job.wait(timeout=60)
    rest = job.stderr.read()
    job.stderr.close()
    return rest


def _last_step(progress: str) -> str:
    """The job's last progress line, e.g. ``writing``: where the kill landed."""
    marker = " INFO inventory_etl.ingestion: "
    steps = [line.split(marker, 1)[1].split()[0] for line in progress.splitlines() if marker in line]
    return steps[-1] if steps else "reading"


def _wait_for_work(job: subprocess.Popen) -> None:
    """Past the JVM's start: the job's own work starts once it reads manifests."""
    for line in job.stderr:
        if "reading" in line and "manifest" in line:
            return


def _work_seconds(job: subprocess.Popen) -> float:
    _wait_for_work(job)
    started = time.monotonic()
    assert job.wait(timeout=300) == 0, job.stderr.read()[-2000:]
    job.stderr.close()
    return time.monotonic() - started


def _committed_task(table: Path) -> bool:
    """A write task committed its output (Spark's v1 committer) while the job is still running."""
    return any(table.glob("**/_temporary/0/task_*"))


def _rerun(spark, table: Path, root: Path):
    manifests = discover(Storage(spark), str(root)).manifests
    return IngestInventory(spark, str(table)).execute(manifests)


def _assert_exact(spark, table: Path, expected: dict[tuple[str, str], int]) -> None:
    """Delta-rs, pyarrow (the log's files) and Spark all read exactly the delivered rows."""
    dt = DeltaTable(str(table))
    by_deltalake = Counter((r["bucket"], r["key"]) for r in dt.to_pyarrow_table(columns=["bucket", "key"]).to_pylist())
    assert by_deltalake == expected
    by_pyarrow = sum(pq.ParquetFile(uri.removeprefix("file://")).metadata.num_rows for uri in dt.file_uris())
    assert by_pyarrow == sum(expected.values())
    by_spark = read_inventory(spark, str(table)).groupBy("bucket").count().collect()
    assert {r["bucket"]: r["count"] for r in by_spark} == dict(Counter(b for b, _ in expected))


def test_a_run_killed_after_some_write_tasks_committed_leaves_nothing_for_the_rerun_to_sweep_in(spark, tmp_path):
    root, table = tmp_path / "dest", tmp_path / "inv"
    expected = _deliveries(root, buckets=4, rows=60_000)
    job = _start_job(table, root)
    deadline = time.monotonic() + 300
    while not _committed_task(table):
        if job.poll() is not None:
            pytest.fail(f"the job ended (exit {job.returncode}) before a write task committed: {job.stderr.read()[-2000:]}")
        if time.monotonic() > deadline:
            _kill(job)
            pytest.fail("no write task committed within 300 s")
        time.sleep(0.01)
    _kill(job)
    assert not (table / "_delta_log").exists(), "the killed run must not have committed"

    result = _rerun(spark, table, root)

    assert [d.status for d in result.deliveries] == ["ingested"] * 4
    _assert_exact(spark, table, expected)
    assert {d.status for d in _rerun(spark, table, root).deliveries} == {"skipped"}  # held now: nothing to redo


# The system calls that move a staged commit into place, on every file system writer we meet.
COMMIT_MOVES = "link,linkat,rename,renameat,renameat2"


def test_a_run_killed_at_its_first_commit_leaves_no_table_the_rerun_refuses(spark, tmp_path):
    """SIGKILL at the very system call that would put ``00000000000000000000.json`` in place, which never
    runs (tests.syscall_kill): whatever the writer staged stays in ``_delta_log/``, no table yet.
    deltalake's commit only: Delta's JVM writer renames from a random name, which strace's path filter
    cannot single out (test_ingest_overlap leaves its staged names in a log by hand)."""
    root, table = tmp_path / "dest", tmp_path / "inv"
    expected = _deliveries(root, buckets=2, rows=1_000)
    first_commit = table / "_delta_log" / f"{0:020d}.json"
    job = run_killed_at([sys.executable, "-m", "inventory_etl", "--inventory-table", str(table),
                         "--inventory-root", str(root), "--master", "local[2]"], first_commit, COMMIT_MOVES,
                        tmp_path, ROOT)
    staged = sorted(p.name for p in (table / "_delta_log").iterdir())
    assert job.died_of_the_kill() and job.returncode == -signal.SIGKILL, (job.returncode, job.stderr[-2000:])
    assert not first_commit.exists() and staged, staged

    result = _rerun(spark, table, root)

    assert [d.status for d in result.deliveries] == ["ingested"] * 2, [d.error for d in result.deliveries]
    _assert_exact(spark, table, expected)


EARLY, LATE = datetime(2026, 11, 21, 1, 0, tzinfo=timezone.utc), datetime(2026, 11, 21, 13, 0, tzinfo=timezone.utc)


def _two_deliveries_per_partition(root: Path, buckets: int) -> dict[str, tuple[str, frozenset[str]]]:
    """An earlier and a later delivery of each bucket's partition, with keys of their own (a union of
    the two would show): manifest -> (bucket, its keys)."""
    found = {}
    for b in range(buckets):
        for when, tag, rows in ((EARLY, "early", 3_000), (LATE, "late", 2_000)):
            objects = [InventoryObject(f"t/{tag}-{i:06d}.parquet", i, 1_763_000_000_000 + i) for i in range(rows)]
            manifest = write_delivery(str(root), f"bucket{b}", "daily", objects, when, rows_per_file=rows // 3)
            found[manifest] = (f"bucket{b}", frozenset(o.key for o in objects))
    return found


def _each_partition_holds_one_delivery(table: Path, deliveries: dict[str, tuple[str, frozenset[str]]]) -> None:
    if not (table / "_delta_log").exists():
        return
    held: dict[str, set[str]] = {}
    for row in DeltaTable(str(table)).to_pyarrow_table(columns=["bucket", "key"]).to_pylist():
        held.setdefault(row["bucket"], set()).add(row["key"])
    for bucket, keys in held.items():
        assert keys in [k for b, k in deliveries.values() if b == bucket], f"{bucket} holds no single delivery"


def test_soak_two_overlapping_runners_killed_at_random_points_then_rerun(spark, tmp_path):
    rounds = int(os.environ.get("SOAK_RUNS", "1"))
    chance = random.Random(int(os.environ.get("SOAK_SEED", "11")))
    deliveries = _two_deliveries_per_partition(tmp_path / "dest", buckets=2)
    newest = Counter((b, k) for m, (b, keys) in deliveries.items() if "T13-00Z" in m for k in keys)
    whole = _work_seconds(_start_job(tmp_path / "alone", manifests=list(deliveries)))  # how long one run's work lasts
    outcomes: Counter = Counter()
    for round_ in range(rounds):
        table = tmp_path / f"inv{round_}"
        if chance.random() < 0.5:  # half the rounds start from a table holding some deliveries already
            IngestInventory(spark, str(table)).execute(chance.sample(list(deliveries), 2))
        jobs = [_start_job(table, manifests=chance.sample(list(deliveries), chance.randint(1, len(deliveries))),
                           master="local[1]") for _ in range(2)]
        for job in jobs:
            _wait_for_work(job)
        time.sleep(chance.uniform(0.0, whole))
        for name, job in zip("AB", jobs):
            if chance.random() < 0.6:
                finished = job.poll() is not None
                last = _last_step(_kill(job))
                outcomes[f"{name} finished" if finished else f"{name} killed while {last}"] += 1
            else:
                assert job.wait(timeout=300) in (0, 1), job.stderr.read()[-2000:]  # 1: it lost a partition to the other
                job.stderr.close()
                outcomes[f"{name} ran to the end"] += 1
        _each_partition_holds_one_delivery(table, deliveries)

        result = IngestInventory(spark, str(table)).execute(chance.sample(list(deliveries), len(deliveries)))

        assert not result.refused, [d.error for d in result.refused]
        _assert_exact(spark, table, dict(newest))
    print(f"soak: {rounds} round(s), {dict(outcomes)}")
