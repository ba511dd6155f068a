"""Two of our processes writing our own tables at once: every commit lands, nothing is recorded twice.

Each case runs the jobs from their command lines in two OS processes (never threads of one JVM): A in
a process of its own, B in the test's process, on a local disk and on moto's S3 server through
``s3a://``, with and without Delta's jars. The interleaving is forced: process A is held at its first
commit into our tables, after it read the table it commits against (tests.held_process), while B runs
from start to end; then A goes on, and must find its version taken and commit after B. With Delta's jars our commits used to go
through Delta's S3 log store, safe for one JVM only: A's PUT replaced B's commit, and both exited 0.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from inventory_etl.cli import main as ingest_main
from inventory_etl.ingestion import IngestInventory
from inventory_etl.producer import objects_in_folder, write_delivery
from lakeio.audit import journal as audit_journal
from lakeio.audit.contract import read_audit, verify_chain
from lakeio.store.filesystem import Storage
from lakeio.tables.pins import pins_in_force
from tests.conftest import JARS
from tests.lakes import inventory_of, ours, vacuum
from tests.s3_faults import FaultyS3, s3a_settings
from tests.test_erasure_versions import _listing
from vacuum_jobs.cli import main as vacuum_main
from vacuum_jobs.deletes import DeleteSettings

pytestmark = [pytest.mark.slow, pytest.mark.jars_too]  # whole jobs in processes of their own, with Delta's jars too

REPO = Path(__file__).resolve().parents[1]
VACUUM = ("--retention-hours", "0", "--force-retention", "--min-coverage", "0", "--apply")


def _env(endpoint: str | None = None) -> dict[str, str]:
    """A job's environment as on a cluster: the jars (where this run has them) and S3A's endpoint in Spark's conf,
    the clients' endpoint in the environment."""
    conf = " ".join(f"--conf spark.hadoop.{k}={v}" for k, v in s3a_settings(endpoint).items()) if endpoint else ""
    env = {**os.environ, "PYSPARK_SUBMIT_ARGS": f"{f'--jars {JARS}' if JARS else ''} {conf} --driver-memory 1g pyspark-shell"}
    if endpoint:
        env.update(AWS_ENDPOINT_URL=endpoint, AWS_ALLOW_HTTP="true")
    return env


def _run(env: dict[str, str], module: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", module, *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=600)


def _here(module: str, *args: str) -> subprocess.CompletedProcess:
    """``module``'s command line in this test's own process (the second OS process, its Spark session warm)."""
    main = {"vacuum_jobs": vacuum_main, "inventory_etl": ingest_main}[module]
    return subprocess.CompletedProcess([module, *args], main(list(args)), "", "")


class Held:
    """``python -m module args`` in a process of its own, held at its first commit (tests.held_process)."""

    def __init__(self, work: Path, env: dict[str, str], module: str, *args: str, at: str = "commit"):
        self.folder = work / f"held-{uuid.uuid4().hex[:8]}"
        self.folder.mkdir(parents=True)
        self.process = subprocess.Popen([sys.executable, "-m", "tests.held_process", str(self.folder), at, module, *args],
                                        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 600
        while not (self.folder / "reached").exists():
            if self.process.poll() is not None or time.monotonic() > deadline:
                out, err = self.process.communicate(timeout=60)
                pytest.fail(f"{module} never reached its commit (status {self.process.returncode}): {out[-2000:]}{err[-3000:]}")
            time.sleep(0.05)

    def release(self) -> subprocess.CompletedProcess:
        (self.folder / "release").write_text("go on\n")
        out, err = self.process.communicate(timeout=600)
        return subprocess.CompletedProcess(self.process.args, self.process.returncode, out, err)

    def kill(self) -> None:
        """SIGKILL at the held point; the process must have died of it, not ended on its own."""
        self.process.send_signal(signal.SIGKILL)
        out, err = self.process.communicate(timeout=60)
        assert self.process.returncode == -signal.SIGKILL, (self.process.returncode, out[-2000:], err[-3000:])


def _ok(*done: subprocess.CompletedProcess) -> None:
    for d in done:
        assert d.returncode == 0, d.stdout[-2000:] + d.stderr[-3000:]


def _overwritten(table: str, options: dict | None = None) -> None:
    """Three commits, the last replacing the rows: the first two commits' files are the vacuum's candidates."""
    for i in range(3):
        write_deltalake(table, pa.table({"id": list(range(i * 10, i * 10 + 10))}), mode="overwrite", storage_options=options)


class Lake:
    """Tables, an inventory of them and an audit table, on a local disk or in moto's buckets."""

    def __init__(self, spark, tmp_path: Path, s3=None, endpoint: str | None = None, names=("a", "b")):
        self.s3, self.endpoint, self.work = s3, endpoint, tmp_path
        self.options = ({"AWS_ENDPOINT_URL": endpoint, "AWS_ALLOW_HTTP": "true", "AWS_REGION": "us-east-1"}
                        if endpoint else None)
        if s3 is None:
            self.tables = [str(tmp_path / "lake" / n) for n in names]
            for t in self.tables:
                _overwritten(t)
            self.inventory = inventory_of(spark, tmp_path / "lake", tmp_path)
            self.audit = str(tmp_path / "audit")
            self.roots = self.tables
        else:
            lake, ours_ = f"lake-{uuid.uuid4().hex[:10]}", f"hk-{uuid.uuid4().hex[:10]}"
            for bucket in (lake, ours_):
                s3.create_bucket(Bucket=bucket)
            self.roots = [f"s3://{lake}/warehouse/{n}" for n in names]
            for t in self.roots:
                _overwritten(t, self.options)
            self.tables = ["s3a" + t.removeprefix("s3") for t in self.roots]
            manifest = write_delivery(str(tmp_path / "dest"), lake, "daily", _listing(s3, lake),
                                      datetime.now(timezone.utc) - timedelta(hours=1))
            self.inventory, self.audit = f"s3a://{ours_}/inventory", f"s3a://{ours_}/audit"
            assert not IngestInventory(spark, self.inventory, {}).execute([manifest]).refused

    def files(self) -> set[str]:
        """Every data file of the lake's tables, as their stores list them."""
        if self.s3 is None:
            return {str(p) for t in self.tables for p in Path(t).glob("*.parquet")}
        bucket = self.roots[0].removeprefix("s3://").split("/")[0]
        return {o.key for o in _listing(self.s3, bucket) if o.is_latest and not o.is_delete_marker
                and o.key.endswith(".parquet")}

    def vacuum_args(self, table: str, *more: str) -> tuple[str, ...]:
        return ("--inventory-table", self.inventory, "--table", table, "--audit-table", self.audit, *VACUUM, *more,
                *(("--s3-endpoint-url", self.endpoint) if self.endpoint else ()))


ON_S3 = pytest.param("s3", marks=pytest.mark.s3a)  # in the runs with Spark's S3 connector (make test-jars)


@pytest.fixture(params=["local", ON_S3])
def lake(request, spark, tmp_path):
    if request.param == "local":
        return Lake(spark, tmp_path)
    if "hadoop-aws" not in (JARS or ""):
        pytest.skip("on S3 the jobs read through s3a://: hadoop-aws is not on this run's classpath")
    return Lake(spark, tmp_path, request.getfixturevalue("s3"), request.getfixturevalue("s3_endpoint"))


def test_two_vacuums_sharing_one_audit_table_each_record_every_delete_once(spark, lake):
    env = _env(lake.endpoint)
    before = lake.files()
    a = Held(lake.work, env, "vacuum_jobs", *lake.vacuum_args(lake.tables[0]))  # held at its audit commit
    b = _here("vacuum_jobs", *lake.vacuum_args(lake.tables[1]))
    _ok(b, a.release())

    vanished = before - lake.files()
    assert len(vanished) == 4  # two replaced commits' files in each table
    rows = read_audit(spark, lake.audit).collect()
    deleted = Counter(r.path for r in rows if r.action == "deleted")
    assert set(deleted.values()) == {1} and {p.rsplit("/", 1)[1] for p in deleted} == {p.rsplit("/", 1)[1] for p in vanished}
    assert len({r.run_id for r in rows if r.action == "table_vacuumed"}) == 2  # both runs' rows are there
    check = verify_chain(spark, lake.audit)
    assert check.ok, check.problems


def test_two_ingestions_of_other_days_and_buckets_at_once_keep_every_delivered_row(spark, lake, tmp_path):
    """Job 1 twice at once into one inventory table: the held run commits after the other, both days in."""
    env = _env(lake.endpoint)
    inventory = lake.inventory.rsplit("/", 1)[0] + "/inventory-two"
    manifests = []
    for i, (bucket, day) in enumerate([("first", datetime(2026, 11, 20, 1, tzinfo=timezone.utc)),
                                       ("second", datetime(2026, 11, 21, 1, tzinfo=timezone.utc))]):
        folder = tmp_path / f"objects-{i}"
        for n in range(3 + i):
            (folder / f"k{n}.bin").parent.mkdir(parents=True, exist_ok=True)
            (folder / f"k{n}.bin").write_bytes(b"x" * (n + 1))
        manifest = write_delivery(str(tmp_path / f"dest-{i}"), bucket, "daily", objects_in_folder(str(folder)), day)
        manifests.append(manifest)
    a = Held(tmp_path, env, "inventory_etl", "--inventory-table", inventory, "--manifest", manifests[0])
    b = _here("inventory_etl", "--inventory-table", inventory, "--manifest", manifests[1])
    _ok(b, a.release())

    table = DeltaTable(("s3" + inventory.removeprefix("s3a")) if lake.endpoint else inventory,
                       storage_options=lake.options).to_pyarrow_table().to_pylist()
    assert Counter(r["bucket"] for r in table) == {"first": 3, "second": 4}


def test_two_pins_at_once_both_land_and_a_vacuum_reading_the_pins_mid_change_keeps_what_they_held(spark, lake):
    """A pins version 1 and is held at its commit into the pins table; meanwhile B pins version 0 and a vacuum
    reads the pins table and deletes (both in the test's process). The vacuum read one committed version of
    the pins: it keeps version 0's file and deletes version 1's, A's pin not being in yet. A then commits
    after B (both pins land) and, looking for its version's files once its commit is in, says its pin is
    broken rather than held; ``pins`` says so too."""
    env = _env(lake.endpoint)
    pins, table = lake.audit.rsplit("/", 1)[0] + "/pins", lake.tables[0]
    files = {v: DeltaTable(lake.roots[0], version=v, storage_options=lake.options).file_uris() for v in (0, 1)}
    a = Held(lake.work, env, "vacuum_jobs", "pin", "--pins-table", pins, f"{table}@1", "--reason", "model a")
    _ok(_here("vacuum_jobs", "pin", "--pins-table", pins, f"{table}@0", "--reason", "model b"),
        _here("vacuum_jobs", *lake.vacuum_args(table, "--pins-table", pins)))
    left = lake.files()
    assert all(f.split("/")[-1] in {p.split("/")[-1] for p in left} for f in files[0])
    assert not any(f.split("/")[-1] in {p.split("/")[-1] for p in left} for f in files[1])

    late = a.release()
    assert late.returncode == 1 and "is broken" in late.stderr and "are gone" in late.stderr, late.stderr[-3000:]
    assert sorted(p.version for p in pins_in_force(spark, pins)) == [0, 1]  # neither commit lost
    assert _here("vacuum_jobs", "pins", "--pins-table", pins).returncode == 1  # version 1 broken, said so


def test_two_runs_settling_one_killed_run_record_its_deletes_once_and_close_its_start_once(spark, lake):
    """A run killed right before it records leaves its note; two later runs settle it at once: its rows go in
    once, and one VACUUM END closes its START in each table's log."""
    env = _env(lake.endpoint)
    history = ("--history",) if lake.endpoint else ()  # on S3 only when asked: Delta's own default
    before = lake.files()
    killed = Held(lake.work, env, "vacuum_jobs", *lake.vacuum_args(lake.tables[0], *history), at="end")
    killed.kill()  # deleted, its START written, killed as it was about to close it
    gone = before - lake.files()
    assert len(gone) == 2

    a = Held(lake.work, env, "vacuum_jobs", *lake.vacuum_args(lake.tables[1], *history))  # held at the settled rows
    b = _here("vacuum_jobs", *lake.vacuum_args(lake.tables[1], *history))
    _ok(b, a.release())

    rows = read_audit(spark, lake.audit).collect()
    [settled] = {r.run_id for r in rows if r.action == "table_failed"}
    recorded = Counter((r.path, r.action) for r in rows if r.run_id == settled and r.path is not None)
    assert set(recorded.values()) == {1} and {a for _, a in recorded} == {"deleted"} and len(recorded) == 2, recorded
    commits = ours(lake.roots[0], lake.options)[settled]
    assert [op for op, _ in commits] == ["VACUUM START", "VACUUM END"], commits
    check = verify_chain(spark, lake.audit)
    assert check.ok, check.problems


@pytest.mark.s3a
def test_a_store_that_ignores_if_none_match_is_refused_before_anything_is_deleted(spark, s3, s3_endpoint, tmp_path):
    if "hadoop-aws" not in (JARS or ""):
        pytest.skip("on S3 the jobs read through s3a://: hadoop-aws is not on this run's classpath")
    lake = Lake(spark, tmp_path, s3, s3_endpoint)
    proxy = FaultyS3(s3_endpoint, drop_if_none_match=True)
    try:
        before = lake.files()
        lake.endpoint = proxy.endpoint
        done = _run(_env(proxy.endpoint), "vacuum_jobs", *lake.vacuum_args(lake.tables[0]))
        assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-3000:]
        [line] = [ln for ln in (done.stdout + done.stderr).splitlines() if "does not honour conditional writes" in ln]
        assert proxy.endpoint in line and "If-None-Match" in line and "Traceback" not in done.stderr, done.stderr
        assert lake.files() == before
        ingest = _run(_env(proxy.endpoint), "inventory_etl", "--inventory-table", lake.inventory.replace(
            "/inventory", "/inventory-elsewhere"), "--manifest", str(next((tmp_path / "dest").rglob("manifest.json"))))
        assert ingest.returncode == 1 and "does not honour conditional writes" in ingest.stdout + ingest.stderr
    finally:
        proxy.close()


@pytest.mark.parametrize("store", ["local", ON_S3])
def test_a_journal_folder_goes_only_while_it_holds_nothing_another_runs_note_stays(spark, tmp_path, store, request):
    """A run removing its note removes the journal folder only where the file system finds it empty in the
    delete itself: another run's note, written after any listing, stays."""
    if store == "s3":
        if "hadoop-aws" not in (JARS or ""):
            pytest.skip("Spark's S3 connector is not on this run's classpath")
        s3 = request.getfixturevalue("s3")
        bucket = f"hk-{uuid.uuid4().hex[:10]}"
        s3.create_bucket(Bucket=bucket)
        audit = f"s3a://{bucket}/audit"
    else:
        audit = str(tmp_path / "audit")
    storage = Storage(spark)
    journal = audit_journal.journal_of(audit)
    for run in ("mine", "theirs"):
        storage.write_bytes(f"{journal}/{run}/intent/part-0.parquet", b"a note")

    audit_journal.drop(spark, audit, "mine")
    assert storage.exists(f"{journal}/theirs/intent/part-0.parquet") and not storage.exists(f"{journal}/mine")
    assert not storage.remove_if_empty(journal) and storage.exists(f"{journal}/theirs/intent/part-0.parquet")
    audit_journal.drop(spark, audit, "theirs")
    assert not storage.exists(journal) or not storage.list(journal)


@pytest.mark.s3a
def test_a_history_run_over_twenty_tables_on_s3_writes_every_start_and_end(spark, s3, s3_endpoint, tmp_path):
    """The run's history commits go to twenty tables from its threads at once, through one client made once."""
    if "hadoop-aws" not in (JARS or ""):
        pytest.skip("on S3 the jobs read through s3a://: hadoop-aws is not on this run's classpath")
    lake = Lake(spark, tmp_path, s3, s3_endpoint, names=[f"t{i:02d}" for i in range(20)])
    run = vacuum(spark, lake.inventory, lake.tables, dry_run=False, retention_hours=0, enforce_retention_duration=False,
                 min_coverage=0.0, audit_table=lake.audit, history=True, delete=DeleteSettings(endpoint_url=s3_endpoint))
    assert run.ok, [(t.table, t.history) for t in run.tables]
    for root in lake.roots:
        assert [op for op, _ in ours(root, lake.options)[run.run_id]] == ["VACUUM START", "VACUUM END"], root
