"""Whether an S3 store's batch deletes can tell a key it removed from a key that was already gone.

S3's ``DeleteObjects`` answers "deleted" for a key that does not exist, so a vacuum over an inventory
that lists keys removed since would record their erasure as its own. S3 tells the two apart when each
key of the request carries a condition: ``ETag: *`` (the key must exist, as ``If-Match: *`` on one
``DeleteObject``), answered ``NoSuchKey`` for a key already gone; that needs ``s3:DeleteObject`` alone
(a condition on a key's own ETag would need ``s3:GetObject`` too). An S3-compatible store may ignore
the condition (and answer "deleted" all the same) or refuse a request that carries it. So before a
vacuum deletes on S3 it asks once, per endpoint and process, in a folder of ours (the audit table's):
put a probe, remove it, then delete it again under the condition. Only where the store refuses that
last delete do the run's "deleted" answers mean removed by this run; elsewhere they are recorded
``deleted_or_absent``, and the run says why.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from typing import Any

from lakeio.store import s3, uris
from lakeio.text import first_line

# S3's answers to a delete under ``ETag: *`` of a key that is not there (404), or a condition not met (412).
ABSENT = ("NoSuchKey", "PreconditionFailed")
EVERY_ETAG = "*"

_asked: dict[str, str | None] = {}  # endpoint -> None (it tells) or why it cannot
_lock = threading.Lock()


def why_deletes_cannot_tell(folder: str | None, client_of: Callable[[], Any] | None = None) -> str | None:
    """None where the S3 store a client reaches (``client_of`` makes it; default: boto3's, as the deleter
    resolves it) answers a conditional delete of a missing key with ``NoSuchKey``, proven with a probe in
    ``folder`` (an ``s3://`` folder of ours); else why its deletes cannot tell, in a clause. Once per
    endpoint and process."""
    if folder is None or uris.scheme_of(uris.canonical(folder)) != "s3":
        return "no --audit-table on S3 to prove in that the store's deletes tell a missing key (If-Match: *)"
    from botocore.exceptions import BotoCoreError, ClientError

    client = client_of() if client_of is not None else s3.client()
    endpoint = str(client.meta.endpoint_url)
    with _lock:
        if endpoint not in _asked:
            bucket, key = uris.bucket_and_key(uris.join(uris.canonical(folder), f".delete-if-present-probe-{uuid.uuid4().hex}"))
            try:
                client.put_object(Bucket=bucket, Key=key, Body=b"does this store's DeleteObjects honour ETag: *?\n")
                client.delete_object(Bucket=bucket, Key=key)
                answer = client.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": key, "ETag": EVERY_ETAG}],
                                                                      "Quiet": False})
            except (ClientError, BotoCoreError) as exc:
                _asked[endpoint] = f"{endpoint} refused a conditional delete (s3://{bucket}/{key}: {first_line(exc, 160)})"
            else:
                codes = {e.get("Code") for e in answer.get("Errors", [])}
                _asked[endpoint] = None if codes & set(ABSENT) else (
                    f"{endpoint} ignores the condition of a conditional delete (it answered a delete of the missing "
                    f"s3://{bucket}/{key} under If-Match: * as " + (", ".join(sorted(c for c in codes if c)) or "deleted") + ")")
        return _asked[endpoint]
