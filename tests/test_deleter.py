"""The deleters against a real S3 endpoint (moto server) and the local filesystem."""

from __future__ import annotations

import random
import threading
import uuid
from collections import Counter
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lakeio.audit.contract import AuditAction
from lakeio.store.filesystem import Storage
from tests.s3_faults import FaultyS3, s3_client
from vacuum_jobs.delete_tasks import delete_planned
from vacuum_jobs.deletes import DeleteSettings, Target
from vacuum_jobs.local_deletes import delete_local, delete_with_hadoop
from vacuum_jobs.s3_deletes import UNCONFIRMED, DeletedKeys, S3BatchDeleter, _answered, _final


@pytest.fixture
def bucket(s3_endpoint):
    client = s3_client(s3_endpoint)
    name = f"b-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=name)
    return client, name


def put(client, bucket, keys):
    for key in keys:
        client.put_object(Bucket=bucket, Key=key, Body=b"x")
    return [Target("s3://" + bucket + "/t", f"s3://{bucket}/{key}", 1, 0) for key in keys]


def remaining(client, bucket) -> set[str]:
    return {o["Key"] for o in client.list_objects_v2(Bucket=bucket).get("Contents", [])}


def count_calls(client) -> list:
    calls = []
    client.meta.events.register("provide-client-params.s3.DeleteObjects", lambda params, **kw: calls.append(params))
    return calls


def test_deletes_in_batches_of_the_configured_size(bucket):
    client, name = bucket
    targets = put(client, name, [f"t/k{i:02d} with space+plus.parquet" for i in range(25)] + ["keep/me"])
    calls = count_calls(client)
    deleter = S3BatchDeleter(DeleteSettings(if_present=True, batch_size=10, keys_per_second=100_000), client=client)

    outcomes = list(deleter.delete(targets[:25]))

    assert [len(c["Delete"]["Objects"]) for c in calls] == [10, 10, 5]
    assert {o.action for o in outcomes} == {AuditAction.DELETED} and len(outcomes) == 25
    assert remaining(client, name) == {"keep/me"}


@pytest.fixture
def faulty(s3_endpoint):
    proxy = FaultyS3(s3_endpoint, hang_seconds=1.5)
    yield proxy
    proxy.close()


def test_each_fault_s3_deals_is_retried_and_every_key_ends_once(bucket, faulty):
    client, name = bucket
    targets = put(client, name, [f"t/k{i:02d}.parquet" for i in range(50)])
    # One fault in each of the first four batches of ten, each followed by a clean retry.
    faulty.script = ["drop", "ok", "timeout", "ok", "slowdown", "ok", "partial", "ok"]
    slept = []
    deleter = S3BatchDeleter(DeleteSettings(if_present=True, batch_size=10, keys_per_second=100_000, base_backoff_seconds=0.1,
                                            read_timeout_seconds=0.5, endpoint_url=faulty.endpoint),
                             sleep=slept.append)

    outcomes = list(deleter.delete(targets))

    assert sorted(o.target.path for o in outcomes) == sorted(t.path for t in targets)  # each key once
    # The batch whose answer timed out was deleted by that attempt: its retry finds the keys gone, and cannot
    # tell whether the lost attempt or another tool removed them; every other key is this run's delete.
    by_action = Counter(o.action for o in outcomes)
    assert by_action == {AuditAction.DELETED: 40, AuditAction.DELETED_OR_ABSENT: 10}, by_action
    assert remaining(client, name) == set()
    assert faulty.counts() == {"drop": 1, "timeout": 1, "slowdown": 1, "partial": 1, "ok": 5}
    assert [keys for _, fault, keys in faulty.requests if fault == "ok"] == [10, 10, 10, 3, 10]
    assert len([s for s in slept if s >= 0.05]) == 4  # one backoff (0.1 s, jittered) per fault


def test_a_batch_that_keeps_failing_is_reported_key_by_key_and_left_in_place(bucket, faulty):
    client, name = bucket
    targets = put(client, name, [f"t/k{i:02d}.parquet" for i in range(20)])
    faulty.script = ["drop", "slowdown", "drop"]  # the first batch, three times
    deleter = S3BatchDeleter(DeleteSettings(if_present=True, batch_size=10, keys_per_second=100_000, max_attempts=3,
                                            base_backoff_seconds=0.01, endpoint_url=faulty.endpoint))

    outcomes = list(deleter.delete(targets))

    assert sorted(o.target.path for o in outcomes) == sorted(t.path for t in targets)
    failed = sorted(o.target.path.rsplit("/", 1)[1] for o in outcomes if o.action == AuditAction.FAILED)
    assert failed == [f"k{i:02d}.parquet" for i in range(10)]
    assert all("Connection" in o.error for o in outcomes if o.action == AuditAction.FAILED)
    assert remaining(client, name) == {f"t/k{i:02d}.parquet" for i in range(10)}
    assert faulty.counts() == {"drop": 2, "slowdown": 1, "ok": 1}


def test_keys_the_store_refused_whole_give_their_time_back_to_the_run_wide_cap(bucket, faulty):
    """A cap of 100 keys a second and batches of 100: each request holds a second of the cap. One the
    store throttles deleted nothing, and its retry goes after its backoff, not a second later: held to
    the cap's next step, it would meet whatever made the store refuse it (another task deleting in the
    same prefix, in step with it) there again."""
    client, name = bucket
    targets = put(client, name, [f"t/k{i:03d}.parquet" for i in range(200)])
    faulty.script = ["slowdown"]
    slept: list[float] = []
    deleter = S3BatchDeleter(DeleteSettings(if_present=True, batch_size=100, keys_per_second=100, prefix_keys_per_second=100_000,
                                            base_backoff_seconds=0.01, endpoint_url=faulty.endpoint),
                             sleep=slept.append)  # nothing sleeps: each wait is what the cap asked

    outcomes = list(deleter.delete(targets))

    assert {o.action for o in outcomes} == {AuditAction.DELETED} and remaining(client, name) == set()
    assert faulty.counts() == {"slowdown": 1, "ok": 2}
    cap_waits = [s for s in slept if s > 0.05]  # the backoff is at most 0.015 s
    assert len(cap_waits) == 1 and cap_waits[0] <= 1.0, slept  # the second batch's alone: the retry went at once


@pytest.mark.slow
def test_the_run_wide_pace_holds_however_many_tasks_delete(spark, bucket, faulty):
    client, name = bucket
    keys = [f"t{i % 8}/k{i:03d}.parquet" for i in range(240)]  # eight tables: each task deletes in several at once
    put(client, name, keys)
    targets = spark.createDataFrame([(f"s3://{name}/{k.split('/')[0]}", f"s3://{name}/{k}", 1, 0) for k in keys],
                                    "table_root string, path string, length long, modificationTime long")
    pace, batch = 80, 10
    settings = DeleteSettings(if_present=True, batch_size=batch, keys_per_second=pace, endpoint_url=faulty.endpoint)

    outcomes = delete_planned(spark, targets, settings, "run-1").collect()

    assert len(outcomes) == 240 and {r["action"] for r in outcomes} == {AuditAction.DELETED}
    assert remaining(client, name) == set()
    seen = [(at, keys) for at, _, keys in faulty.requests]
    busiest = max(sum(k for t, k in seen if start <= t < start + 1.0) for start, _ in seen)
    tasks = spark.sparkContext.defaultParallelism
    # What the store saw in its busiest second: the pace, plus the first batch of each task at once.
    assert busiest <= pace + tasks * batch, busiest
    assert seen[-1][0] - seen[0][0] >= (240 - tasks * batch) / pace * 0.9


def test_per_key_errors_are_retried_then_reported(bucket):
    client, name = bucket
    targets = put(client, name, ["ok-1", "flaky", "locked", "ok-2"])
    state = {"flaky": 1}

    def report_errors(parsed, **kwargs):
        errors = []
        for entry in list(parsed.get("Deleted", [])):
            key = entry["Key"]
            if key == "locked" or (key == "flaky" and state["flaky"] > 0):
                if key == "flaky":
                    state["flaky"] -= 1
                parsed["Deleted"].remove(entry)
                code = "AccessDenied" if key == "locked" else "InternalError"
                errors.append({"Key": key, "Code": code, "Message": "injected"})
        parsed["Errors"] = parsed.get("Errors", []) + errors

    client.meta.events.register("after-call.s3.DeleteObjects", report_errors)
    deleter = S3BatchDeleter(DeleteSettings(if_present=True, keys_per_second=100_000, max_attempts=3), client=client,
                             sleep=lambda s: None)

    outcomes = {o.target.path.rsplit("/", 1)[1]: o for o in deleter.delete(targets)}

    # Deleted, though the answer said otherwise: its retry finds it gone and cannot say who removed it.
    assert outcomes["flaky"].action == AuditAction.DELETED_OR_ABSENT
    assert outcomes["locked"].action == AuditAction.FAILED and outcomes["locked"].error.startswith("AccessDenied")
    assert outcomes["ok-1"].action == outcomes["ok-2"].action == AuditAction.DELETED


@pytest.mark.parametrize("answer", ["an error naming the key alone", "named nowhere"])
def test_a_version_counts_as_deleted_only_where_the_answer_lists_it_deleted(bucket, answer):
    """moto (and some S3-compatible stores) name a refused version's key without its version id, and
    an answer may leave a key out: neither is taken as deleted. One that is named nowhere is asked
    again, then reported."""
    client, name = bucket
    client.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
    targets = {key: Target(f"s3://{name}/t", f"s3://{name}/t/{key}", 1, 0,
                           (client.put_object(Bucket=name, Key=f"t/{key}", Body=b"x")["VersionId"],))
               for key in ("kept", "gone")}

    def rewrite(parsed, **kwargs):
        ours = [d for d in parsed.get("Deleted", []) if d["Key"] == "t/kept"]
        parsed["Deleted"] = [d for d in parsed.get("Deleted", []) if d not in ours]
        if answer == "an error naming the key alone":
            parsed["Errors"] = [{"Key": d["Key"], "Code": "AccessDenied", "Message": "injected"} for d in ours]

    client.meta.events.register("after-call.s3.DeleteObjects", rewrite)
    calls = count_calls(client)
    deleter = S3BatchDeleter(DeleteSettings(if_present=True, purge_versions=True, max_attempts=3), client=client, sleep=lambda s: None)

    outcomes = {o.target.path.rsplit("/", 1)[1]: o for o in deleter.delete(list(targets.values()))}

    assert outcomes["gone"].action == AuditAction.DELETED and outcomes["kept"].action == AuditAction.FAILED
    if answer == "named nowhere":
        assert outcomes["kept"].error.startswith("NotConfirmed") and len(calls) == 3
    else:
        assert outcomes["kept"].error.startswith("AccessDenied") and len(calls) == 1


_NAMED = st.tuples(st.sampled_from(["k1", "k2"]), st.sampled_from([None, "v1", "v2"]))


@given(entry=_NAMED, listed=st.sets(_NAMED), refused=st.sets(_NAMED))
def test_an_entry_counts_as_deleted_only_where_the_answer_lists_it_and_no_error_names_it(entry, listed, refused):
    """Every answer a ``DeleteObjects`` may give about a key: its versions listed deleted or not, with or
    without their ids, and errors naming the key with or without a version. An entry is deleted only
    where the answer lists its key (with its version, or with none) and no error names it; an entry the
    answer names nowhere is unconfirmed, never deleted."""
    key, version = entry
    asked = {"Key": key, **({"VersionId": version} if version else {})}
    failed = {pair: {"Code": "AccessDenied", "Message": "refused"} for pair in refused}
    answer = [{"Key": k, **({"VersionId": v} if v else {})} for k, v in listed]
    error = _answered(asked, failed, DeletedKeys.of(answer))

    named_in_error = (key, version) in refused or (key, None) in refused
    listed_for_it = (key, version) in listed or (key, None) in listed or (
        version is None and any(k == key for k, _ in listed))
    if error is None:
        assert listed_for_it and not named_in_error
    else:
        assert error["Code"] == ("AccessDenied" if named_in_error else UNCONFIRMED)
    assert (error is None) == (listed_for_it and not named_in_error)


def test_versioned_bucket_purge_deletes_every_listed_version(bucket):
    client, name = bucket
    client.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
    versions = [client.put_object(Bucket=name, Key="orphan", Body=str(i).encode())["VersionId"] for i in range(3)]
    client.put_object(Bucket=name, Key="other", Body=b"x")
    target = Target(f"s3://{name}/t", f"s3://{name}/orphan", 1, 0, tuple(versions))

    plain = list(S3BatchDeleter(DeleteSettings(if_present=True, keys_per_second=100_000), client=client).delete(
        [Target(target.table_root, target.path, 1, 0)]))
    assert plain[0].action == AuditAction.DELETED
    listing = client.list_object_versions(Bucket=name, Prefix="orphan")
    assert len(listing["Versions"]) == 3 and len(listing["DeleteMarkers"]) == 1  # plain delete: a marker

    marker = listing["DeleteMarkers"][0]["VersionId"]
    purge = S3BatchDeleter(DeleteSettings(if_present=True, keys_per_second=100_000, purge_versions=True, batch_size=2), client=client)
    outcome = list(purge.delete([Target(target.table_root, target.path, 1, 0, (*versions, marker))]))
    assert [o.action for o in outcome] == [AuditAction.DELETED]  # one outcome per file, across two batches
    listing = client.list_object_versions(Bucket=name, Prefix="orphan")
    assert not listing.get("Versions") and not listing.get("DeleteMarkers")
    assert remaining(client, name) == {"other"}


class StopsAfter:
    """An epoch-ms clock that reads before the deadline for its first ``checks`` readings, and at it after."""

    def __init__(self, checks: int, stop_at_ms: int):
        self.checks, self.stop_at_ms, self.read = checks, stop_at_ms, 0

    def __call__(self) -> int:
        self.read += 1
        return self.stop_at_ms - 1 if self.read <= self.checks else self.stop_at_ms


@pytest.mark.parametrize("seed", range(8))
def test_once_the_time_runs_out_no_request_starts_a_key_begun_is_finished_and_the_rest_deferred(s3_endpoint, seed):
    """A generator of tables (keys with one to three versions to purge, or plain deletes), batch sizes and the
    batch before which the time runs out: each key ends once; a deferred key keeps every version; every other key
    is wholly deleted (its versions are never split between a request and the deferral); no request starts after
    the time but those finishing a key begun."""
    rng = random.Random(seed)
    client, name = s3_client(s3_endpoint), f"b-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=name)
    client.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
    purge = rng.random() < 0.5
    targets = []
    for t in range(rng.randint(1, 3)):
        for k in range(rng.randint(1, 6)):
            key = f"t{t}/k{k}"
            versions = tuple(client.put_object(Bucket=name, Key=key, Body=b"x")["VersionId"]
                             for _ in range(rng.randint(1, 3) if purge else 1))
            targets.append(Target(f"s3://{name}/t{t}", f"s3://{name}/{key}", 1, 0, versions if purge else ()))
    calls = count_calls(client)
    clock = StopsAfter(rng.randint(0, 6), 1_000)
    settings = DeleteSettings(if_present=True, keys_per_second=100_000, purge_versions=purge, batch_size=rng.randint(1, 4),
                              stop_at_ms=1_000, prefixes_at_once=1)

    outcomes = list(S3BatchDeleter(settings, client=client, clock=clock).delete(targets))

    assert Counter(o.target.path for o in outcomes) == Counter(t.path for t in targets)  # each key once
    left = {o.target.path for o in outcomes if o.action == AuditAction.DEFERRED}
    assert {o.action for o in outcomes} <= {AuditAction.DELETED, AuditAction.DEFERRED}
    versions = client.list_object_versions(Bucket=name)
    live = Counter(f"s3://{name}/{v['Key']}" for v in versions.get("Versions", []))
    for target in targets:
        if target.path in left:  # untouched: every version there, no delete marker over it
            assert live[target.path] == max(1, len(target.version_ids)), target
            assert all(f"s3://{name}/{m['Key']}" != target.path for m in versions.get("DeleteMarkers", []))
        elif purge:
            assert not live[target.path], target
    asked = sum(len(c["Delete"]["Objects"]) for c in calls)
    assert asked == sum(max(1, len(t.version_ids)) for t in targets if t.path not in left)
    if clock.checks == 0:
        assert not calls and len(left) == len(targets)  # out of time from the start: nothing asked


def test_a_key_whose_versions_a_request_began_to_purge_has_the_rest_asked_after_the_time(bucket):
    client, name = bucket
    client.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
    versions = tuple(client.put_object(Bucket=name, Key="t/k", Body=b"x")["VersionId"] for _ in range(3))
    client.put_object(Bucket=name, Key="t/later", Body=b"x")
    calls = count_calls(client)
    settings = DeleteSettings(keys_per_second=100_000, purge_versions=True, batch_size=1, stop_at_ms=1_000)
    outcomes = list(S3BatchDeleter(settings, client=client, clock=StopsAfter(1, 1_000)).delete(
        [Target(f"s3://{name}/t", f"s3://{name}/t/k", 1, 0, versions), Target(f"s3://{name}/t", f"s3://{name}/t/later", 1, 0)]))
    assert {o.target.path.rsplit("/", 1)[1]: o.action for o in outcomes} == {"later": AuditAction.DEFERRED,
                                                                                "k": AuditAction.DELETED}
    assert len(calls) == 3 and remaining(client, name) == {"t/later"}  # one request in time, two finishing k


def test_local_files_left_when_the_time_runs_out_are_deferred_and_stay(tmp_path):
    root = tmp_path / "t"
    root.mkdir()
    files = [root / f"f{i}.parquet" for i in range(4)]
    for f in files:
        f.write_bytes(b"x")
    outcomes = list(delete_local([Target(f"file://{root}", f"file://{f}", 1, 0) for f in files], "run-1",
                                 stop_at_ms=1_000, clock=StopsAfter(2, 1_000)))
    assert [o.action for o in outcomes] == [AuditAction.DELETED] * 2 + [AuditAction.DEFERRED] * 2
    assert [f.exists() for f in files] == [False, False, True, True]
    assert outcomes[-1].error and "--max-minutes" in outcomes[-1].error


def test_versions_object_lock_keeps_are_refused_by_name_and_governance_is_bypassed_only_when_asked(s3_endpoint):
    """On a bucket with Object Lock, a key's delete only adds a marker (allowed); deleting its
    versions is refused while a retention date or a legal hold keeps them. Each refused file names
    its locks; the rest of the batch goes; ``bypass_governance_retention`` erases governance-mode
    versions only, never compliance mode or a legal hold."""
    client = s3_client(s3_endpoint)
    name = f"lock-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=name, ObjectLockEnabledForBucket=True)
    until = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(days=30)
    locks = {"governance": {"Retention": {"Mode": "GOVERNANCE", "RetainUntilDate": until}},
             "compliance": {"Retention": {"Mode": "COMPLIANCE", "RetainUntilDate": until}},
             "held": {"LegalHold": {"Status": "ON"}}, "free": {}}
    targets = {}
    for key, lock in locks.items():
        version = client.put_object(Bucket=name, Key=f"t/{key}", Body=b"x")["VersionId"]
        if "Retention" in lock:
            client.put_object_retention(Bucket=name, Key=f"t/{key}", VersionId=version, **lock)
        elif lock:
            client.put_object_legal_hold(Bucket=name, Key=f"t/{key}", VersionId=version, **lock)
        targets[key] = Target(f"s3://{name}/t", f"s3://{name}/t/{key}", 1, 0, (version,))

    hidden = list(S3BatchDeleter(DeleteSettings(if_present=True), client=client).delete(
        [Target(t.table_root, t.path, 1, 0) for t in targets.values()]))
    assert {o.action for o in hidden} == {AuditAction.DELETED} and all(o.delete_marker_id for o in hidden)

    def purge(**settings) -> dict[str, tuple[AuditAction, str | None]]:
        deleter = S3BatchDeleter(DeleteSettings(if_present=True, purge_versions=True, **settings), client=client)
        return {o.target.path.rsplit("/", 1)[1]: (o.action, o.error) for o in deleter.delete(list(targets.values()))}

    day = until.strftime("%Y-%m-%dT%H:%M:%S")
    first = purge()
    assert first["free"] == (AuditAction.DELETED, None)
    assert {key: action for key, (action, _) in first.items() if key != "free"} == dict.fromkeys(
        ("governance", "compliance", "held"), AuditAction.FAILED)
    version = {key: t.version_ids[0] for key, t in targets.items()}
    assert first["governance"][1].startswith(f"AccessDenied: version {version['governance']} locked until {day}")
    assert "(governance mode)" in first["governance"][1] and "--bypass-governance-retention" in first["governance"][1]
    assert f"locked until {day}" in first["compliance"][1] and "(compliance mode)" in first["compliance"][1]
    assert "--bypass" not in first["compliance"][1]
    assert f"version {version['held']} under a legal hold" in first["held"][1]

    del targets["free"]
    bypassed = purge(bypass_governance_retention=True)
    assert bypassed["governance"] == (AuditAction.DELETED, None)
    assert [bypassed[k][0] for k in ("compliance", "held")] == [AuditAction.FAILED] * 2
    held = {v["Key"] for v in client.list_object_versions(Bucket=name).get("Versions", [])}
    assert held == {"t/compliance", "t/held"}


def test_a_bucket_whose_versioning_is_suspended_records_deletes_of_null_versions_as_final(bucket):
    """Suspended versioning: a delete removes a version written while suspended (id ``null``, as S3
    Inventory lists it) for good and adds a ``null`` marker; one written before keeps its bytes under
    the marker. The decision rests on the state the bucket reports (moto does not model the null
    versions themselves), and a final delete records no marker: restore says so, the undo count skips it."""
    client, name = bucket
    client.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
    before = client.put_object(Bucket=name, Key="t/before.parquet", Body=b"x")["VersionId"]
    client.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Suspended"})
    client.put_object(Bucket=name, Key="t/while.parquet", Body=b"x")
    targets = [Target(f"s3://{name}/t", f"s3://{name}/t/before.parquet", 1, 0, version_id=before),
               Target(f"s3://{name}/t", f"s3://{name}/t/while.parquet", 1, 0, version_id="null")]

    outcomes = {o.target.path.rsplit("/", 1)[1]: o for o in
                S3BatchDeleter(DeleteSettings(if_present=True, keys_per_second=100_000), client=client).delete(targets)}

    assert {n: o.action for n, o in outcomes.items()} == {"before.parquet": "deleted", "while.parquet": "deleted"}
    assert outcomes["while.parquet"].delete_marker_id is None  # final: no marker, no hidden version recorded
    assert outcomes["while.parquet"].row()[7:9] == (None, None)
    # What S3 answers there (a "null" marker) for the two kinds of version, and in an enabled bucket:
    assert not _final("null", targets[0], suspended=True)  # the version from before stays: restorable
    assert _final("null", targets[1], suspended=True) and _final("null", targets[1], suspended=False)
    assert not _final("3HL4kqtJlcpXroDTDmjVBH40Nrjfkd", targets[0], suspended=False)


@pytest.mark.slow
def test_spark_executors_delete_and_a_rerun_after_a_crash_finishes_the_job(spark, bucket, s3_endpoint, tmp_path):
    client, name = bucket
    keys = [f"t/part-{i}.parquet" for i in range(40)]
    put(client, name, keys)
    local = tmp_path / "t" / "p=1" / "gone.parquet"
    local.parent.mkdir(parents=True)
    local.write_bytes(b"x")
    rows = [(f"s3://{name}/t", f"s3://{name}/{k}", 1, 0) for k in keys]
    rows.append((f"file://{tmp_path}/t", f"file://{local}", 1, 0))
    targets = spark.createDataFrame(rows, "table_root string, path string, length long, modificationTime long")
    settings = DeleteSettings(if_present=True, batch_size=7, keys_per_second=100_000, endpoint_url=s3_endpoint)

    client.delete_objects(Bucket=name, Delete={"Objects": [{"Key": k} for k in keys[:15]]})  # the crashed run's work
    outcomes = {r["path"]: r["action"] for r in delete_planned(spark, targets, settings, "run-1").collect()}

    assert remaining(client, name) == set()
    # Asked to delete each key only if it is there, S3 says the first 15 were already gone.
    assert {p for p, a in outcomes.items() if a == AuditAction.ALREADY_ABSENT} == {f"s3://{name}/{k}" for k in keys[:15]}
    assert {a for p, a in outcomes.items() if p not in {f"s3://{name}/{k}" for k in keys[:15]}} == {AuditAction.DELETED}
    assert not local.exists() and not local.parent.exists()  # the emptied partition folder went too
    assert (tmp_path / "t").exists()  # never the table root

    again = {r["path"]: r["action"] for r in delete_planned(spark, targets, settings, "run-2").collect()}
    assert again[f"file://{local}"] == AuditAction.ALREADY_ABSENT  # another run's work


def test_local_deleter_reports_each_outcome(tmp_path):
    root = tmp_path / "t"
    (root / "d").mkdir(parents=True)
    present = root / "d" / "a.parquet"
    present.write_bytes(b"a")
    checksum = root / "d" / ".a.parquet.crc"  # Hadoop's, beside a file Spark wrote: gone with it, as in Delta's VACUUM
    checksum.write_bytes(b"crc")
    kept = root / "d" / ".b.parquet.crc"
    kept.write_bytes(b"crc")
    blocked = root / "d" / "blocked"
    blocked.mkdir()
    outcomes = {o.target.path: o for o in delete_local([
        Target(f"file://{root}", f"file://{present}", 1, 0),
        Target(f"file://{root}", f"file://{root}/d/never-there", 1, 0),
        Target(f"file://{root}", f"file://{blocked}", 1, 0),  # a folder is not a file: reported, not fatal
    ], "run-1")}
    assert outcomes[f"file://{present}"].action == AuditAction.DELETED
    assert not checksum.exists() and kept.exists()
    assert outcomes[f"file://{root}/d/never-there"].action == AuditAction.ALREADY_ABSENT
    assert outcomes[f"file://{blocked}"].action == AuditAction.FAILED and outcomes[f"file://{blocked}"].error


def test_the_checksums_hadoop_wrote_go_with_their_files_on_both_local_paths(spark, tmp_path):
    """Spark writing through Hadoop's local file system leaves ``.<name>.crc`` beside each file: the
    executors' deletes and the driver's Hadoop deletes both take it along, as Delta's VACUUM does."""
    for way in ("executors", "hadoop"):
        table = tmp_path / way
        spark.range(4).repartition(2).write.parquet(str(table / "data"))
        files = sorted((table / "data").glob("part-*.parquet"))
        assert files and all((f.parent / f".{f.name}.crc").exists() for f in files)  # what Hadoop wrote
        targets = [Target(f"file://{table}", f"file://{f}", f.stat().st_size, 0) for f in files]
        deleted = (delete_local(targets, "run-1") if way == "executors"
                   else delete_with_hadoop(Storage(spark), targets, "run-1"))
        assert {o.action for o in deleted} == {AuditAction.DELETED}
        assert not [p.name for p in (table / "data").glob(".part-*.crc")], way


def test_a_retried_delete_task_records_what_its_lost_attempt_deleted(tmp_path):
    """A task attempt deletes, then is lost (its executor dies): its outcomes never reach the
    driver. The retry finds those files gone; they are this run's deletes, not already absent."""
    root = tmp_path / "t"
    root.mkdir()
    files = [root / f"f{i}.parquet" for i in range(4)]
    for path in files[:3]:
        path.write_bytes(b"x")
    targets = [Target(f"file://{root}", f"file://{path}", 1, 0) for path in files]  # f3 was never there

    lost = delete_local(targets, "run-1")
    for _ in range(2):  # the first attempt deletes f0 and f1, then dies
        next(lost)
    retry = {o.target.path: o.action for o in delete_local(targets, "run-1")}
    speculative = {o.target.path: o.action for o in delete_local(targets, "run-1")}  # a twin attempt, after both

    expected = [AuditAction.DELETED] * 3 + [AuditAction.ALREADY_ABSENT]
    assert [retry[t.path] for t in targets] == [speculative[t.path] for t in targets] == expected
    later_run = {o.target.path: o.action for o in delete_local(targets, "run-2")}
    assert set(later_run.values()) == {AuditAction.ALREADY_ABSENT}


def test_batch_size_is_bounded_by_s3s_limit():
    with pytest.raises(ValueError):
        DeleteSettings(batch_size=1001)


@pytest.mark.parametrize("bad", [{"prefix_keys_per_second": 0}, {"keys_per_second": 0.0}, {"prefixes_at_once": 0}])
def test_paces_are_positive_and_the_run_wide_cap_is_optional(bad):
    assert DeleteSettings().keys_per_second is None  # no cap unless asked: each table paces itself
    with pytest.raises(ValueError, match=next(iter(bad))):
        DeleteSettings(**bad)


@pytest.mark.parametrize("prefixes_at_once", [1, 32])
def test_no_targets_no_request(prefixes_at_once):
    deleter = S3BatchDeleter(DeleteSettings(if_present=True, prefixes_at_once=prefixes_at_once), client=object())  # never called
    assert list(deleter.delete([])) == []


def in_tables(client, bucket, tables: dict[str, int]) -> list[Target]:
    """``n`` keys in the folder of each table named, as that table's targets."""
    targets = []
    for table, n in tables.items():
        keys = [f"{table}/k{i:03d}.parquet" for i in range(n)]
        targets += [Target(f"s3://{bucket}/{table}", t.path, 1, 0) for t in put(client, bucket, keys)]
    return targets


def test_a_slowdown_slows_its_own_table_alone(bucket, faulty):
    """One table after the other, so that the scripted SlowDown falls on the first table's first request:
    that table's later requests ask a second of its lowered pace (40 keys/s by 0.7, then 1 % more an
    answer), the other table's the whole batch at the pace it started with."""
    client, name = bucket
    targets = in_tables(client, name, {"hot": 120, "cool": 120})
    faulty.script = ["slowdown"]
    deleter = S3BatchDeleter(DeleteSettings(if_present=True, batch_size=40, prefix_keys_per_second=40, prefixes_at_once=1,
                                            endpoint_url=faulty.endpoint), sleep=lambda s: None)

    outcomes = list(deleter.delete(targets))

    assert sorted(o.target.path for o in outcomes) == sorted(t.path for t in targets)  # each key once
    assert {o.action for o in outcomes} == {AuditAction.DELETED} and remaining(client, name) == set()
    assert [(fault, keys) for _, fault, keys in faulty.requests] == [
        ("slowdown", 40), ("ok", 40), ("ok", 28), ("ok", 28), ("ok", 24),  # hot: the throttled batch resent whole
        ("ok", 40), ("ok", 40), ("ok", 40)]  # cool


def test_the_tables_of_a_task_are_deleted_in_at_once(bucket, faulty):
    client, name = bucket
    targets = in_tables(client, name, {f"t{i}": 5 for i in range(4)})
    faulty.gate = threading.Barrier(4, timeout=30)  # no request is answered before all four are under way
    deleter = S3BatchDeleter(DeleteSettings(if_present=True, prefixes_at_once=4, endpoint_url=faulty.endpoint))

    outcomes = list(deleter.delete(targets))

    assert not faulty.gate.broken and faulty.counts() == {"ok": 4}  # one request per table, all at once
    assert {o.action for o in outcomes} == {AuditAction.DELETED} and len(outcomes) == 20
    assert remaining(client, name) == set()


def test_against_a_store_that_throttles_each_prefix_the_pace_comes_down_to_it(bucket, s3_endpoint):
    """The store takes 200 keys a second per folder; the table starts at 1,000. The store's SlowDowns bring
    the table's pace down to what it takes (far fewer throttled requests than answered ones), and every key
    still ends once, deleted."""
    client, name = bucket
    targets = in_tables(client, name, {"t": 600})
    store = FaultyS3(s3_endpoint, prefix_keys_per_second=200)
    try:
        deleter = S3BatchDeleter(DeleteSettings(if_present=True, batch_size=20, prefix_keys_per_second=1000, endpoint_url=store.endpoint))
        outcomes = list(deleter.delete(targets))
    finally:
        store.close()
    assert sorted(o.target.path for o in outcomes) == sorted(t.path for t in targets)
    assert {o.action for o in outcomes} == {AuditAction.DELETED} and remaining(client, name) == set()
    counts = store.counts()
    assert counts["ok"] == 30 and 1 <= counts.get("throttled", 0) < counts["ok"] / 2, counts
