"""Proof, before a job's first commit, that its store puts a commit only where none is.

Every commit of ours is a put-if-absent: deltalake's into our own tables (``If-None-Match: *`` on
S3, lakeio.tables.write) and ours into a table's history (vacuum_jobs.history). Two writers of one
version are then told apart by the store: the second is refused and reads the log again. AWS S3
enforces the condition; an S3-compatible store may take the header and ignore it, and there the
later of two commits of one version silently replaces the earlier, and with it a day's delivery or
the record of a run's deletes. So each job, before it commits or deletes anything, puts a probe
object twice with the condition in a folder of ours (the inventory or audit table's) and expects
the second put refused, then removes it: once per endpoint and process. A local disk's create-or-fail
(a hard link, a no-replace rename) needs no proof.

deltalake can serialise its commits through DynamoDB instead (``AWS_S3_LOCKING_PROVIDER=dynamodb``
with ``DELTA_DYNAMO_TABLE_NAME``, the table Delta's own ``S3DynamoDBLogStore`` uses): where that is
set, our own tables need no proof, but a table's history (our put, not deltalake's) still does.
"""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Callable
from typing import Any

from lakeio.errors import HousekeepingError
from lakeio.store import s3, uris
from lakeio.text import first_line

LOCKING_PROVIDER = "AWS_S3_LOCKING_PROVIDER"

_proven: set[str] = set()  # endpoints proven in this process
_lock = threading.Lock()


class PutIfAbsentUnproven(HousekeepingError):
    """The store took a second put of one key under ``If-None-Match: *`` (two writers could overwrite each
    other's commits there), or the probe itself was refused. Raised before anything is committed or deleted."""


def deltalake_locks_commits() -> bool:
    """Whether deltalake serialises its S3 commits through DynamoDB (its locking provider is set)."""
    return os.environ.get(LOCKING_PROVIDER, "").strip().lower() == "dynamodb"


def prove(folder: str, what: str, client_of: Callable[[], Any] | None = None) -> None:
    """Prove that the S3 store a client reaches (``client_of`` makes it; default: boto3's, as deltalake
    resolves it: AWS_ENDPOINT_URL and the usual credentials) honours ``If-None-Match: *``, with a probe
    in ``folder`` (an ``s3://`` folder of ours: the probe is written and removed there); ``what`` names
    the commits that rely on it, in the refusal. Once per endpoint and process; nothing for other schemes."""
    folder = uris.canonical(folder)  # s3a:// and s3n:// name the same store
    if uris.scheme_of(folder) != "s3":
        return
    from botocore.exceptions import BotoCoreError, ClientError

    client = client_of() if client_of is not None else s3.client()
    endpoint = str(client.meta.endpoint_url)
    with _lock:
        if endpoint in _proven:
            return
        bucket, key = uris.bucket_and_key(uris.join(folder, f".put-if-absent-probe-{uuid.uuid4().hex}"))
        try:
            try:
                client.put_object(Bucket=bucket, Key=key, Body=b"does this store honour If-None-Match?\n", IfNoneMatch="*")
            except ClientError as exc:  # a fresh key: only a retry of this very put, whose answer was lost, finds it
                if s3.error_code(exc) not in s3.PUT_REFUSED:
                    raise
            try:
                client.put_object(Bucket=bucket, Key=key, Body=b"a second put of the key\n", IfNoneMatch="*")
            except ClientError as exc:
                if s3.error_code(exc) not in s3.PUT_REFUSED:
                    raise
            else:
                raise PutIfAbsentUnproven(
                    f"{endpoint} (bucket {bucket}) does not honour conditional writes: it took a second put of "
                    f"s3://{bucket}/{key} under If-None-Match: *, so two runs at once could overwrite each other's "
                    f"commits ({what}); use a store that honours it, or for our own tables deltalake's DynamoDB "
                    f"locking ({LOCKING_PROVIDER}=dynamodb with DELTA_DYNAMO_TABLE_NAME, the table Delta's "
                    "S3DynamoDBLogStore uses; docs/operations.md)") from None
            finally:
                client.delete_object(Bucket=bucket, Key=key)
        except (ClientError, BotoCoreError) as exc:  # refused, or not reached: said in one line all the same
            raise PutIfAbsentUnproven(f"s3://{bucket}/{key}: cannot prove that {endpoint} honours conditional "
                                      f"writes ({what}): {first_line(exc)}") from None
        _proven.add(endpoint)
