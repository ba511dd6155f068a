"""Our vacuums in each table's own history (vacuum_jobs.history): VACUUM START and END, as Delta writes them,
where Delta's rule writes them, read back with deltalake (and delta-spark in the jars run); a writer that
takes a version first keeps it, on local disk and on moto's S3, and every commit is decided from the
table's state at the version it goes after."""

from __future__ import annotations

import itertools
import json
import uuid
from pathlib import Path

import boto3
import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from demo.lake import build_lake
from lakeio.deltalog.replay import TableState
from lakeio.store import put_if_absent
from lakeio.store.uris import TableRoot
from tests.lakes import inventory_of, ours, vacuum
from tests.s3_faults import FaultyS3, s3_client
from vacuum_jobs.batch_vacuum import BatchVacuum
from vacuum_jobs.cli import main
from vacuum_jobs.deletes import DeleteSettings
from vacuum_jobs.history import (
    DELTA_RECORDS_ON,
    END,
    START,
    HistoryNotWritten,
    HistorySetting,
    LogWriter,
    TableHistory,
    close_killed_run,
    end_commit,
    history_setting,
    history_writer,
    start_commit,
)
from vacuum_jobs.options import VacuumOptions
from vacuum_jobs.report import NOT_RECORDED, ReasonCode
from vacuum_jobs.targets import TableTarget, TargetsError, from_file

# The names Delta's VacuumCommand writes (DeltaOperations.VacuumStart / VacuumEnd, DeltaOperationMetrics).
DELTA_START_PARAMETERS = {"retentionCheckEnabled", "defaultRetentionMillis"}  # + specifiedRetentionMillis if given
DELTA_START_METRICS = {"numFilesToDelete", "sizeOfDataToDelete"}
DELTA_END_METRICS = {"numDeletedFiles", "numVacuumedDirectories"}
ASKED = HistorySetting(True, "asked by the test")


@pytest.mark.slow
def test_a_real_run_records_start_and_end_in_each_table_with_deltas_names(spark, tmp_path):
    lake = build_lake(tmp_path / "lake")
    rows = lake.row_counts()
    inventory = inventory_of(spark, lake.bucket_dir, tmp_path)
    versions = {name: DeltaTable(str(path)).version() for name, path in lake.tables.items()}

    dry = vacuum(spark, inventory, list(lake.tables.values()), dry_run=True)
    assert {name: DeltaTable(str(path)).version() for name, path in lake.tables.items()} == versions
    assert all(t.history is None for t in dry.tables)

    off = lake.tables["customers"]  # a table of the tables file that says history: false
    targets = [TableTarget(str(path), history=False if path == off else None) for path in lake.tables.values()]
    real = vacuum(spark, inventory, targets, dry_run=False, audit_table=str(tmp_path / "audit"))

    assert {t.status for t in real.tables} == {"vacuumed"}, [(t.table, t.reason) for t in real.tables]
    assert DeltaTable(str(off)).version() == versions["customers"] and not ours(off)
    assert next(t for t in real.tables if t.table.endswith("/customers")).history == "off: history: false in the tables file"
    for name, path in lake.tables.items():
        if path == off:
            continue
        report = next(t for t in real.tables if t.table.endswith(f"/{name}"))
        (run, commits), = ours(path).items()
        assert run == real.run_id
        (started, start), (ended, end) = commits
        assert (started, ended) == (START, END)
        assert (start["version"], end["version"]) == (versions[name] + 1, versions[name] + 2)
        assert report.history == (f"{START} at version {versions[name] + 1}, {END} at version {versions[name] + 2} "
                                  "(on: Delta's default on file://)")
        assert DELTA_START_PARAMETERS <= set(start["operationParameters"])
        assert "specifiedRetentionMillis" not in start["operationParameters"]  # the run was given none, as Delta
        assert set(start["operationMetrics"]) == DELTA_START_METRICS
        c = report.counts
        planned = c.deleted_files + c.already_absent_files + c.failed_files
        assert int(start["operationMetrics"]["numFilesToDelete"]) == planned == c.candidate_files
        assert int(start["operationMetrics"]["sizeOfDataToDelete"]) == c.candidate_bytes
        assert json.loads(end["operationParameters"]["status"]) == "COMPLETED"
        assert DELTA_END_METRICS <= set(end["operationMetrics"])
        assert int(end["operationMetrics"]["numDeletedFiles"]) == c.deleted_files
        assert start["engineInfo"].startswith("lake-housekeeping/") and start["readVersion"] == versions[name]
    assert lake.row_counts() == rows
    assert sum(t.counts.deleted_files for t in real.tables) > 0

    # The next run plans over those commits: nothing moved, nothing refused; --no-history writes none.
    before = {name: DeltaTable(str(path)).version() for name, path in lake.tables.items()}
    code = main(["--inventory-table", inventory, *[a for p in lake.tables.values() for a in ("--table", str(p))],
                 "--apply", "--no-history", "--report", str(tmp_path / "again.json")])
    again = json.loads((tmp_path / "again.json").read_text())
    assert code == 0 and {t["status"] for t in again["tables"]} == {"vacuumed"}
    assert {t["history"] for t in again["tables"]} == {"off: the run's setting (--no-history)"}
    assert {name: DeltaTable(str(path)).version() for name, path in lake.tables.items()} == before
    assert lake.row_counts() == rows


def _overwritten_twice(spark, tmp_path: Path) -> tuple[Path, str]:
    """A table of versions 0-2, each overwriting the last (two stale files), and its inventory."""
    table = tmp_path / "lake" / "t"
    for i in range(3):
        write_deltalake(str(table), pa.table({"id": [i]}), mode="overwrite")
    return table, inventory_of(spark, tmp_path / "lake", tmp_path)


@pytest.mark.slow
def test_a_failed_delete_still_ends_the_history_and_says_failed(spark, tmp_path):
    table, inventory = _overwritten_twice(spark, tmp_path)
    gone = sorted(set(table.glob("*.parquet")) - {Path(u.removeprefix("file://")) for u in DeltaTable(str(table)).file_uris()})
    gone[0].unlink()
    gone[0].mkdir()  # listed as a file by the inventory, a folder by now: its delete fails
    (gone[0] / "inside").write_bytes(b"x")

    report = vacuum(spark, inventory, [table], dry_run=False, retention_hours=0, enforce_retention_duration=False)

    (only,) = report.tables
    assert (only.status, only.reason_code) == ("failed", ReasonCode.DELETES_FAILED) and only.counts.failed_files == 1
    (start_name, start), (end_name, end) = ours(table)[report.run_id]
    assert json.loads(end["operationParameters"]["status"]) == "FAILED"
    assert end["operationMetrics"]["numFailedDeletes"] == "1"
    assert int(end["operationMetrics"]["numDeletedFiles"]) == only.counts.deleted_files == len(gone) - 1
    assert DeltaTable(str(table)).to_pyarrow_table().num_rows == 1


@pytest.mark.slow
def test_a_table_whose_history_a_writer_took_is_vacuumed_and_the_summary_says_why_it_has_none(spark, tmp_path):
    table, inventory = _overwritten_twice(spark, tmp_path)

    def alter_first(version: int) -> None:  # another writer changes the table's metadata at our START's version
        DeltaTable(str(table)).alter.set_table_properties({"delta.appendOnly": "false"})

    options = VacuumOptions(inventory, dry_run=False, retention_hours=0, enforce_retention_duration=False)
    report = BatchVacuum(spark, options, before_history=alter_first).execute([str(table)])

    (only,) = report.tables
    assert only.status == "vacuumed" and only.counts.deleted_files == 2
    assert only.history_incomplete and only.history.startswith(f"{NOT_RECORDED}: ")
    assert report.ok and not only.history_failed  # a rule kept the commit out: said, not an error (exit 0)
    assert "version 3, committed by another writer during the run, changed" in only.history
    assert f"          history: {only.history}" in report.summary().splitlines()
    assert not ours(table) and DeltaTable(str(table)).to_pyarrow_table().num_rows == 1


def test_the_tables_file_switches_history_per_table(tmp_path):
    listed = tmp_path / "tables.yaml"
    listed.write_text("- table: /lake/a\n  history: false\n- /lake/b\n")
    assert [t.history for t in from_file(str(listed))] == [False, None]
    listed.write_text("- table: /lake/a\n  history: 'no'\n")
    with pytest.raises(TargetsError, match="history must be true or false"):
        from_file(str(listed))


@pytest.fixture(params=["file", "s3"])
def store(request, tmp_path):
    """A table root on local disk or in a bucket of moto's S3 server, with deltalake's storage options."""
    if request.param == "file":
        return f"file://{tmp_path}/t", None, LogWriter(lambda: None)
    endpoint = request.getfixturevalue("s3_endpoint")
    request.getfixturevalue("monkeypatch").setenv("AWS_ENDPOINT_URL", endpoint)
    client = s3_client(endpoint)
    bucket = f"history-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=bucket)
    options = {"AWS_ENDPOINT_URL": endpoint, "AWS_ALLOW_HTTP": "true", "AWS_REGION": "us-east-1",
               "AWS_S3_ALLOW_UNSAFE_RENAME": "true"}
    return f"s3://{bucket}/t", options, LogWriter(lambda: client, proof_folder=f"s3://{bucket}/ours")


@pytest.mark.s3
def test_a_writer_that_takes_the_version_first_keeps_it_and_ours_goes_to_the_next(store):
    root, options, writer = store
    write_deltalake(root, pa.table({"id": [1]}), storage_options=options)
    table = TableHistory.of(_state(root, 0), ASKED)
    taken = []

    def writer_first(version: int) -> None:  # another writer commits the very version we are about to put
        if not taken:
            taken.append(version)
            write_deltalake(root, pa.table({"id": [2]}), mode="append", storage_options=options)

    writer.before_put = writer_first
    start = writer.commit(table, 0, start_commit("run-1", 168, True, 168, 0, 0))
    end = writer.commit(table, start, end_commit("run-1", 0, 0))

    assert taken == [1] and (start, end) == (2, 3)
    history = {h["version"]: h["operation"] for h in DeltaTable(root, storage_options=options).history()}
    assert history == {0: "WRITE", 1: "WRITE", 2: START, 3: END}
    assert sorted(DeltaTable(root, storage_options=options).to_pyarrow_table().column("id").to_pylist()) == [1, 2]


@pytest.mark.s3
def test_a_commit_taken_by_a_metadata_change_stops_our_history_and_names_its_version(store):
    root, options, writer = store
    write_deltalake(root, pa.table({"id": [1]}), storage_options=options)

    def alter_first(version: int) -> None:
        writer.before_put = None
        DeltaTable(root, storage_options=options).alter.set_table_properties({"delta.appendOnly": "false"})

    writer.before_put = alter_first
    with pytest.raises(HistoryNotWritten, match="version 1, committed by another writer during the run, changed"):
        writer.commit(TableHistory.of(_state(root, 0), ASKED), 0, start_commit("run-1", 168, True, 168, 0, 0))
    assert DeltaTable(root, storage_options=options).version() == 1


def _state(root: str, version: int = 3, configuration: dict | None = None, protocol: tuple = (1, 2, (), ())) -> TableState:
    reader, writer, reader_features, writer_features = protocol
    return TableState(TableRoot(root), version, reader, writer, reader_features, writer_features, (),
                      configuration or {}, None)


def test_stores_and_tables_whose_commits_we_cannot_make_safely_are_noted_not_written(tmp_path):
    cases = {
        "abfss:// has no put-if-absent": _state("abfss://c@a.dfs.core.windows.net/t"),
        "a commit coordinator owns this table's commits": _state(
            f"file://{tmp_path}/t", configuration={"delta.coordinatedCommits.commitCoordinator-preview": "dynamodb"}),
        "catalog-managed table": _state(f"file://{tmp_path}/t", protocol=(3, 7, ("catalogManaged",), ("catalogManaged",))),
        "unknown table feature.s.: someNewFeature": _state(f"file://{tmp_path}/t", protocol=(3, 7, (), ("someNewFeature",))),
        "protocol .4, 7. is newer": _state(f"file://{tmp_path}/t", protocol=(4, 7, (), ())),
        r"off: Delta's default on s3://": _state("s3://bucket/t"),
    }
    for why, state in cases.items():
        setting = history_setting(state.table_root) if why.startswith("off") else ASKED
        with pytest.raises(HistoryNotWritten, match=why):
            LogWriter(lambda: None).commit(TableHistory.of(state, setting, 168.0), 3, end_commit("run-1", 0, 0))
    assert not (tmp_path / "t").exists()


def test_history_follows_deltas_rule_unless_the_table_the_run_or_the_session_says_otherwise():
    """Delta's VacuumCommand.shouldLogVacuum: its session setting where set, else the schemes it trusts with
    concurrent writes, never S3; a table's setting (tables file) and the run's come before it. Delta's setting
    never turns S3 on: in Delta it commits through Delta's own log store, and says nothing of other writers."""
    for scheme in ["file", "s3", "hdfs", "abfss", "gs", "wasbs", "adl", "s3n"]:
        root = "file:///lake/t" if scheme == "file" else f"{scheme}://bucket/t"
        for table, run, session in itertools.product([None, True, False], repeat=3):
            decided = history_setting(root, table, run, session)
            ours_ = next((v for v in (table, run) if v is not None), None)
            trusted = scheme in DELTA_RECORDS_ON
            expected = ours_ if ours_ is not None else (session if session is not None else True) if trusted else False
            assert decided.on == expected, (root, table, run, session)
            assert str(decided).startswith("on: " if decided.on else "off: ")
            if ours_ is None:
                says_default = session is None or (session is False and not trusted)
                assert (f"Delta's default on {scheme}://" in decided.rule) == says_default, decided.rule
    assert "s3" not in DELTA_RECORDS_ON and "s3a" not in DELTA_RECORDS_ON
    refused = history_setting("s3://b/t", session=True)
    assert not refused.on and "only --history" in refused.rule and "Delta's" in refused.rule
    assert "every writer of the table commits with S3 conditional writes" in history_setting("s3://b/t").rule


@pytest.mark.s3
def test_a_log_with_a_dynamodb_log_stores_temp_files_gets_no_commit(store):
    root, options, writer = store
    write_deltalake(root, pa.table({"id": [1]}), storage_options=options)
    trace = f"{root}/_delta_log/.tmp/00000000000000000001.json.{uuid.uuid4()}"
    if root.startswith("s3://"):
        bucket, key = trace.removeprefix("s3://").split("/", 1)
        writer._s3().put_object(Bucket=bucket, Key=key, Body=b"{}")
    else:
        Path(trace.removeprefix("file://")).parent.mkdir()
        Path(trace.removeprefix("file://")).write_text("{}")
    table = TableHistory.of(_state(root, 0), ASKED)
    with pytest.raises(HistoryNotWritten, match=r"DynamoDB log store's temp files \(_delta_log/.tmp/\)"):
        writer.commit(table, 0, start_commit("run-1", None, True, 168, 0, 0))
    assert DeltaTable(root, storage_options=options).version() == 0


@pytest.mark.s3
def test_end_lands_after_many_commits_by_another_writer_and_reads_every_one_of_them(store):
    root, options, writer = store
    write_deltalake(root, pa.table({"id": [0]}), storage_options=options)
    table = TableHistory.of(_state(root, 0), ASKED)
    start = writer.commit(table, 0, start_commit("run-1", None, True, 168, 0, 0))
    for i in range(1, 23):  # another writer, busy while the run deletes
        write_deltalake(root, pa.table({"id": [i]}), mode="append", storage_options=options)

    end = writer.commit(table, start, end_commit("run-1", 0, 0))

    assert (start, end) == (1, 24)
    commits = {h["version"]: h for h in DeltaTable(root, storage_options=options).history()}
    assert (commits[1]["operation"], commits[24]["operation"]) == (START, END)
    assert commits[24]["readVersion"] == 23  # the version END was decided from: every commit up to it read
    assert DeltaTable(root, storage_options=options).to_pyarrow_table().num_rows == 23


@pytest.fixture
def faulty(s3_endpoint):
    """The fault proxy in front of moto's server, a bucket behind it, and the writer a run makes to reach it."""
    proxy = FaultyS3(s3_endpoint)
    client = s3_client(s3_endpoint)
    bucket = f"history-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=bucket)
    options = {"AWS_ENDPOINT_URL": s3_endpoint, "AWS_ALLOW_HTTP": "true", "AWS_REGION": "us-east-1",
               "AWS_S3_ALLOW_UNSAFE_RENAME": "true"}
    root = f"s3://{bucket}/t"
    write_deltalake(root, pa.table({"id": [1]}), storage_options=options)
    put_if_absent.prove(f"s3://{bucket}/ours", "the test's", lambda: s3_client(proxy.endpoint))
    proxy.puts.clear()  # proven before the test's script: its puts are the commits'
    yield proxy, root, options, history_writer(DeleteSettings(endpoint_url=proxy.endpoint), proof_folder=f"s3://{bucket}/ours")
    proxy.close()


def test_a_409_is_tried_again_at_the_same_version(faulty):
    proxy, root, options, writer = faulty
    proxy.put_script = ["conflict", "conflict"]  # another conditional write to the key under way, twice
    version = writer.commit(TableHistory.of(_state(root, 0), ASKED), 0,
                            start_commit("run-1", None, True, 168, 0, 0))
    key = "/" + root.removeprefix("s3://") + "/_delta_log/00000000000000000001.json"
    assert version == 1 and proxy.puts == [("conflict", key), ("conflict", key), ("ok", key)]
    assert [h["operation"] for h in DeltaTable(root, storage_options=options).history()] == [START, "WRITE"]


def test_a_put_whose_answer_was_lost_is_not_committed_twice(faulty):
    proxy, root, options, writer = faulty
    proxy.put_script = ["lost"]  # S3 took the commit; its answer never came, the retry is told the key exists
    version = writer.commit(TableHistory.of(_state(root, 0), ASKED), 0,
                            start_commit("run-1", None, True, 168, 0, 0))
    assert version == 1 and [fault for fault, _ in proxy.puts] == ["lost", "ok"]
    assert [h["operation"] for h in DeltaTable(root, storage_options=options).history()] == [START, "WRITE"]
    assert len(ours(root, options)["run-1"]) == 1


@pytest.mark.delta_jars
@pytest.mark.slow
def test_a_killed_runs_start_closed_after_in_commit_timestamps_were_enabled_leaves_a_table_delta_writes(spark, tmp_path):
    """The END that closes a killed run's START is decided from the table as it is now: in-commit timestamps
    turned on since the START give the END one, and delta-spark appends to the table and describes it."""
    path = tmp_path / "t"
    spark.sql(f"CREATE TABLE delta.`{path}` (id INT) USING delta")
    spark.sql(f"INSERT INTO delta.`{path}` VALUES (1)")
    root = f"file://{path}"
    writer = LogWriter(lambda: None)
    start = writer.commit(TableHistory.of(_state(root, 1), ASKED), 1,
                          start_commit("killed", None, True, 168, 1, 10))
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('delta.enableInCommitTimestamps' = 'true')")
    spark.sql(f"INSERT INTO delta.`{path}` VALUES (2)")

    problems = close_killed_run(spark, writer, "killed", {root: 1}, {root: 1},
                                lambda state: TableHistory.of(state, ASKED))

    assert not problems, problems
    (_, started), (_, ended) = ours(path)["killed"]
    assert started["version"] == start and ended["version"] == start + 3 and "inCommitTimestamp" in ended
    spark.sql(f"INSERT INTO delta.`{path}` VALUES (3)")
    described = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").orderBy("version").collect()
    assert [r.operation for r in described][start:] == [START, "SET TBLPROPERTIES", "WRITE", END, "WRITE"]
    assert sorted(r.id for r in spark.read.format("delta").load(str(path)).collect()) == [1, 2, 3]
    assert spark.read.format("delta").option("versionAsOf", start - 1).load(str(path)).count() == 1


@pytest.mark.s3
@pytest.mark.slow
def test_many_tables_committed_to_at_once_get_every_start_and_end_each_time(s3_endpoint, monkeypatch):
    """commit_each puts into up to 16 tables at once from one writer: its client is made once, for every
    thread (made lazily by each, clients could differ in their exception classes, and a missing commit
    file read as an error: 'cannot write its log'). Ten fresh writers in a row, twenty tables each."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_endpoint)
    client = s3_client(s3_endpoint)
    bucket = f"history-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=bucket)
    options = {"AWS_ENDPOINT_URL": s3_endpoint, "AWS_ALLOW_HTTP": "true", "AWS_REGION": "us-east-1"}
    roots = [f"s3://{bucket}/t{i}" for i in range(20)]
    for root in roots:
        write_deltalake(root, pa.table({"id": [1]}), storage_options=options)
    versions = dict.fromkeys(roots, 0)
    for round_ in range(10):
        monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)  # as in a fresh driver: no client made yet
        writer = history_writer(DeleteSettings(endpoint_url=s3_endpoint), proof_folder=f"s3://{bucket}/ours")
        run = f"run-{round_}"
        for commit in (start_commit(run, None, True, 168, 0, 0), end_commit(run, 0, 0)):
            written = writer.commit_each([(TableHistory.of(_state(r, versions[r]), ASKED), versions[r], commit)
                                          for r in roots])
            assert all(isinstance(v, int) for v in written), [str(v) for v in written if not isinstance(v, int)]
            versions = dict(zip(roots, written))
    for root in roots:
        assert [op for run in ours(root, options).values() for op, _ in run] == [START, END] * 10


def test_a_killed_runs_start_is_found_by_version_whatever_the_clocks_of_the_commits_after_it(tmp_path):
    """A writer whose clock runs behind commits after the START: the look for it goes by version, from the one the
    killed run planned from, and the START is closed."""
    root = f"file://{tmp_path}/t"
    write_deltalake(str(tmp_path / "t"), pa.table({"id": [1]}))
    writer = LogWriter(lambda: None)
    start = writer.commit(TableHistory.of(_state(root, 0), ASKED), 0, start_commit("killed", None, True, 168, 1, 10))
    behind = {"commitInfo": {"timestamp": 1000, "operation": "WRITE", "engineInfo": "a writer whose clock is behind"}}
    (tmp_path / "t" / "_delta_log" / f"{start + 1:020d}.json").write_text(json.dumps(behind) + "\n")

    found = writer.find(root, start + 1, "killed", 0)
    assert found == {START: start}
    closed = writer.commit(TableHistory.of(_state(root, start + 1), ASKED), start + 1, end_commit("killed", 1, None))
    assert closed == start + 2
    again = writer.commit(TableHistory.of(_state(root, start + 1), ASKED), start + 1, end_commit("killed", 1, None))
    assert again == closed  # a second settler's END meets the first one's: one END for the run
    assert [op for op, _ in ours(tmp_path / "t")["killed"]] == [START, END]


def test_a_put_that_landed_though_every_answer_was_lost_is_the_commit(faulty):
    proxy, root, options, writer = faulty
    proxy.put_script = ["lost"] * 20  # the first put lands; every answer, the retries' 412s too, is lost
    version = writer.commit(TableHistory.of(_state(root, 0), ASKED), 0, start_commit("run-1", None, True, 168, 0, 0))
    assert version == 1 and [h["operation"] for h in DeltaTable(root, storage_options=options).history()] == [START, "WRITE"]
    assert len(ours(root, options)["run-1"]) == 1


@pytest.mark.s3
def test_history_on_s3_without_a_folder_of_ours_there_to_prove_the_store_writes_nothing(store, tmp_path):
    """The store's put-if-absent is proven in the audit's folder: with the audit on a local disk, or none, a table on S3
    gets no commit, and says why."""
    root, options, writer = store
    if not root.startswith("s3://"):
        pytest.skip("a local disk's put-if-absent needs no proof")
    write_deltalake(root, pa.table({"id": [1]}), storage_options=options)
    for folder in (None, f"file://{tmp_path}/audit/_unrecorded"):
        writer.proof_folder = folder
        with pytest.raises(HistoryNotWritten, match="history on S3 needs an --audit-table on S3"):
            writer.commit(TableHistory.of(_state(root, 0), ASKED), 0, start_commit("run-1", None, True, 168, 0, 0))
    assert not ours(root, options)
