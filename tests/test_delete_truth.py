"""A delete on S3 is recorded as this run's only where the store's answer says so.

S3's ``DeleteObjects`` answers "deleted" for a key that is not there, unless each key asks to be deleted
only if it is there (``ETag: *``). The tests' moto server honours that as AWS does (tests.aws_s3);
moto's own server ignores it, and a third store refuses it (tests.s3_faults.FaultyS3).
"""

from __future__ import annotations

import random
import uuid

import pytest

from lakeio.audit.contract import AuditAction
from lakeio.store.delete_if_present import why_deletes_cannot_tell
from tests.s3_faults import FaultyS3, moto_server, s3_client
from vacuum_jobs.deletes import DeleteSettings, Target
from vacuum_jobs.s3_deletes import S3BatchDeleter

pytestmark = pytest.mark.s3


def _bucket(endpoint: str, versioned: bool):
    client = s3_client(endpoint)
    name = f"b-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=name)
    if versioned:
        client.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
    return client, name


def _markers(client, bucket: str) -> int:
    return len(client.list_object_versions(Bucket=bucket).get("DeleteMarkers", []))


@pytest.mark.parametrize("seed", range(6))
def test_a_key_gone_before_the_delete_is_already_absent_and_every_other_is_deleted(s3_endpoint, seed):
    """Generated: a bucket versioned or not, keys of which some were removed before the run (for good, or
    hidden by a delete marker), batches of any size; each key's outcome says which it was."""
    rng = random.Random(seed)
    versioned = rng.random() < 0.5
    client, bucket = _bucket(s3_endpoint, versioned)
    keys = [f"t/part-{i:03d}.parquet" for i in range(rng.randint(1, 40))]
    for key in keys:
        client.put_object(Bucket=bucket, Key=key, Body=b"x")
    gone = set(rng.sample(keys, rng.randint(0, len(keys))))
    for key in gone:
        client.delete_object(Bucket=bucket, Key=key)  # a delete marker on top, where versioned
    markers = _markers(client, bucket)
    settings = DeleteSettings(if_present=True, batch_size=rng.randint(1, 15), keys_per_second=100_000)

    outcomes = {o.target.path.rsplit("/", 1)[1]: o
                for o in S3BatchDeleter(settings, client=client).delete(
                    [Target(f"s3://{bucket}/t", f"s3://{bucket}/{k}", 1, 0) for k in keys])}

    assert {k for k, o in outcomes.items() if o.action == AuditAction.ALREADY_ABSENT} == {k.rsplit("/", 1)[1] for k in gone}
    assert {o.action for k, o in outcomes.items() if f"t/{k}" not in gone} <= {AuditAction.DELETED}
    assert all(o.delete_marker_id is None for k, o in outcomes.items() if f"t/{k}" in gone)
    # a key already gone gets no delete marker of ours; each deleted key of a versioned bucket one
    assert _markers(client, bucket) == markers + (len(keys) - len(gone) if versioned else 0)


def test_a_store_that_honours_the_condition_is_proven_and_one_that_does_not_is_named(s3_endpoint, tmp_path):
    client, bucket = _bucket(s3_endpoint, versioned=True)
    assert why_deletes_cannot_tell(f"s3a://{bucket}/audit/_unrecorded", lambda: client) is None
    assert not client.list_objects_v2(Bucket=bucket).get("Contents")  # the probe leaves no object

    with moto_server(module="moto.server") as plain:  # moto's own: takes the condition and ignores it
        other, name = _bucket(plain, versioned=False)
        why = why_deletes_cannot_tell(f"s3://{name}/audit/_unrecorded", lambda: other)
    assert why and why.startswith(f"{plain} ignores the condition") and "If-Match: *" in why, why

    refusing = FaultyS3(s3_endpoint, refuse_delete_conditions=True)
    try:
        why = why_deletes_cannot_tell(f"s3://{bucket}/audit/_unrecorded",
                                      lambda: s3_client(refusing.endpoint))
    finally:
        refusing.close()
    assert why and why.startswith(f"{refusing.endpoint} refused a conditional delete") and "NotImplemented" in why, why
    assert why_deletes_cannot_tell(None) and why_deletes_cannot_tell(str(tmp_path))  # nowhere of ours on S3 to ask


def test_where_the_store_cannot_tell_a_delete_is_deleted_or_absent(s3_endpoint):
    """Without the condition (a store that ignores or refuses it) S3's "deleted" says nothing of whether
    the key was there: every key deleted without a version is ``deleted_or_absent``, none ``deleted``."""
    client, bucket = _bucket(s3_endpoint, versioned=True)
    for key in ("t/here", "t/gone"):
        client.put_object(Bucket=bucket, Key=key, Body=b"x")
    client.delete_object(Bucket=bucket, Key="t/gone")

    outcomes = list(S3BatchDeleter(DeleteSettings(keys_per_second=100_000), client=client).delete(
        [Target(f"s3://{bucket}/t", f"s3://{bucket}/t/{k}", 1, 0) for k in ("here", "gone")]))

    assert {o.action for o in outcomes} == {AuditAction.DELETED_OR_ABSENT}
    assert all(o.delete_marker_id for o in outcomes)  # what restore takes away again
