"""The one seam where the jobs reach S3 themselves, through boto3 (Spark's own reads go through S3A).

Every client the jobs make comes from :func:`client`: the deletes', the history's, the settling of a
killed run's, restore's and purge's, and the probes of what a store honours. The few calls on one key
that more than one job makes (read a small object, put one only if absent, list a key's versions) are
here too, so that each store answer is read one way: by its error code, since each client carries
exception classes of its own.
"""

from __future__ import annotations

from typing import Any

from lakeio.store import uris

# A boto3 S3 client: botocore builds its methods at run time, so it is untyped here.
S3Client = Any

NOT_FOUND = ("NoSuchKey", "404")  # a GET or HEAD of a key that is not there
# S3's answers to a conditional put where the key exists (412), or another conditional write to it is under way (409).
PUT_REFUSED = ("PreconditionFailed", "ConditionalRequestConflict")


def client(endpoint_url: str | None = None, **config: Any) -> S3Client:
    """A boto3 S3 client (``endpoint_url``: an S3-compatible endpoint; default: boto3's own resolution),
    with botocore ``Config`` settings ``config`` (``retries``, ``read_timeout``, ``max_pool_connections``...;
    what is not given is botocore's default). Each client from a session of its own: boto3's default session
    is not safe to make clients from in several threads at once (clients made so can carry different
    exception classes)."""
    import boto3
    from botocore.config import Config

    return boto3.session.Session().client("s3", endpoint_url=endpoint_url, config=Config(**config))


def error_code(exc: BaseException) -> str | None:
    """The S3 error code of a botocore ``ClientError`` (None for any other exception)."""
    response = getattr(exc, "response", None) or {}
    code = response.get("Error", {}).get("Code")
    return None if code is None else str(code)


def read_text(s3: S3Client, uri: str) -> str | None:
    """The object at ``uri`` (``s3://``) as text; None where no such key is."""
    from botocore.exceptions import ClientError

    bucket, key = uris.bucket_and_key(uri)
    try:
        body: bytes = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    except ClientError as exc:
        if error_code(exc) in NOT_FOUND:
            return None
        raise
    return body.decode()


def put_if_absent(s3: S3Client, uri: str, body: bytes) -> bool:
    """Put ``body`` at ``uri`` only where no object is (``If-None-Match: *``); False where one is, or another
    conditional write to it is under way. Only for a store proven to honour it (lakeio.store.put_if_absent)."""
    from botocore.exceptions import ClientError

    bucket, key = uris.bucket_and_key(uri)
    try:
        s3.put_object(Bucket=bucket, Key=key, Body=body, IfNoneMatch="*")
    except ClientError as exc:
        if error_code(exc) in PUT_REFUSED:
            return False
        raise
    return True


def holds_keys_under(s3: S3Client, folder: str) -> bool:
    """Whether any key lies under ``folder`` (``s3://``)."""
    bucket, key = uris.bucket_and_key(folder.rstrip("/") + "/")
    return bool(s3.list_objects_v2(Bucket=bucket, Prefix=key, MaxKeys=1).get("KeyCount"))


def key_versions(s3: S3Client, path: str) -> list[dict[str, Any]]:
    """Every version and delete marker of exactly this key (``marker`` says which)."""
    bucket, key = uris.bucket_and_key(path)
    found: list[dict[str, Any]] = []
    params = {"Bucket": bucket, "Prefix": key}
    while True:
        page = s3.list_object_versions(**params)
        found += [dict(v, marker=False) for v in page.get("Versions", []) if v["Key"] == key]
        found += [dict(m, marker=True) for m in page.get("DeleteMarkers", []) if m["Key"] == key]
        if not page.get("IsTruncated") or page.get("NextKeyMarker") != key:
            return found
        params.update(KeyMarker=page["NextKeyMarker"], VersionIdMarker=page["NextVersionIdMarker"])
