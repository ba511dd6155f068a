"""moto's S3 server deciding every request by one IAM user's policies, as AWS decides a role's.

moto evaluates IAM policies (``moto.iam.access_control``), but only for the access key that signed
a request, and a Spark session's Python workers and S3 connector keep the credentials they
started with. Here the harness names who is calling instead (:meth:`IamS3.acting`: a file the
server reads at each request) and moto's own evaluation of that user's policies decides; with
nobody named, every request passes, for the test's own set-up and checks. Where moto's simulation
falls short of AWS's documented rules, this server follows AWS:

- a ``DeleteObjects`` is authorized key by key (``s3:DeleteObject``, or ``s3:DeleteObjectVersion``
  for a key asked with a version; with ``x-amz-bypass-governance-retention``, also
  ``s3:BypassGovernanceRetention``; under a condition on the key's own ETag, ``s3:GetObject`` too, where
  ``ETag: *`` needs nothing more), never as one request on the bucket; a refused key is an
  ``AccessDenied`` entry of the answer, the rest are deleted;
- a refusal names the user, the action and the resource, as AWS's ``AccessDenied`` messages do
  for requests within an account;
- an SSE-KMS object's key is used by S3 for the caller, who must hold the KMS permission on it
  (through S3: ``kms:ViaService``): ``kms:Decrypt`` to GET it or copy from it, ``kms:GenerateDataKey``
  to write one (a PUT, a copy's target, a multipart upload begun), under the key asked for or the
  bucket's default; a HEAD, a delete and SSE-S3 need none. moto stores the key but asks nobody;
- a HEAD of a version needs ``s3:GetObjectVersion`` (moto asks ``s3:GetObject``), and its answer shows
  the version's Object Lock retention only to a caller with ``s3:GetObjectRetention``, its legal hold
  only with ``s3:GetObjectLegalHold``.

moto evaluates no ``StringLike`` condition, so a ``ListBucket`` statement's ``s3:prefix``
scoping is not enforced here (``tests/test_iam_policies.py`` checks the documents themselves).

Run as ``python -m tests.iam_s3 -H 127.0.0.1 -p 0`` (moto's server's own arguments), with
``LAKE_IAM_ACTING`` naming the file; :func:`iam_s3` does that.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests import aws_s3

ACTING = "LAKE_IAM_ACTING"  # the environment variable naming the file that names the calling user
ACCOUNT = "123456789012"  # moto's default account


def _acting() -> str | None:
    path = os.environ.get(ACTING)
    try:
        return Path(path).read_text().strip() or None if path else None
    except FileNotFoundError:
        return None


REGION = "us-east-1"  # the server's, where its KMS keys live
# A HEAD's Object Lock headers, each shown only to a caller holding its permission.
LOCK_HEADERS = {"s3:GetObjectRetention": ("x-amz-object-lock-mode", "x-amz-object-lock-retain-until-date"),
                "s3:GetObjectLegalHold": ("x-amz-object-lock-legal-hold",)}


def _decision(user: str, action: str, resource: str) -> bool:
    """moto's evaluation of ``user``'s policies (inline, attached, its groups'): an explicit deny wins,
    else some statement must allow. A KMS action is one S3 asks for on the user's behalf."""
    from moto.iam.access_control import IAMPolicy, IAMUserAccessKey, PermissionResult

    caller = IAMUserAccessKey.__new__(IAMUserAccessKey)  # its policies without an access key of its own
    caller.account_id, caller.partition, caller._owner_user_name = ACCOUNT, "aws", user
    context = {"kms:ViaService": f"s3.{REGION}.amazonaws.com"} if action.startswith("kms:") else None
    results = [IAMPolicy(p).is_action_permitted(action, resource, None, context) for p in caller.collect_policies()]
    return PermissionResult.PERMITTED in results and PermissionResult.DENIED not in results


def _kms_needed(response: Any, action: str, resource: str) -> list[tuple[str, str]]:
    """The KMS permissions (action, key ARN) S3 needs of the caller for this object request (see the module's
    docstring)."""
    from urllib.parse import parse_qs, unquote, urlparse

    bucket, _, key = resource.split(":::", 1)[1].partition("/")
    backend, query, headers = response.backend, response.querystring, response.headers

    def kms_key_of(bucket: str, key: str, version: str | None) -> str | None:
        found = backend.get_object(bucket, key, version_id=version)
        return found.kms_key_id if found is not None and found.encryption == "aws:kms" else None

    needs: list[tuple[str, str | None]] = []
    if action in ("s3:GetObject", "s3:GetObjectVersion") and response.method == "GET" and key:
        needs.append(("kms:Decrypt", kms_key_of(bucket, key, query.get("versionId", [None])[0])))
    elif action == "s3:PutObject" and key and "uploadId" not in query and (response.method == "PUT" or "uploads" in query):
        source = headers.get("x-amz-copy-source")
        if source:
            parsed = urlparse(source)
            source_bucket, source_key = unquote(parsed.path).lstrip("/").split("/", 1)
            needs.append(("kms:Decrypt", kms_key_of(source_bucket, source_key, parse_qs(parsed.query).get(
                "versionId", [None])[0])))
        default = (backend.get_bucket(bucket).encryption or {}).get("Rule", {}).get("ApplyServerSideEncryptionByDefault", {})
        algorithm = headers.get("x-amz-server-side-encryption") or default.get("SSEAlgorithm")
        if algorithm == "aws:kms":
            needs.append(("kms:GenerateDataKey", headers.get("x-amz-server-side-encryption-aws-kms-key-id")
                          or default.get("KMSMasterKeyID")))
    return [(a, k if k.startswith("arn:") else f"arn:aws:kms:{REGION}:{ACCOUNT}:key/{k}") for a, k in needs if k]


def _denied(user: str, action: str, resource: str) -> Exception:
    """AWS's refusal, noted in the refusals file (:meth:`IamS3.refused`)."""
    from moto.s3.exceptions import S3AccessDeniedError, S3ClientError

    with open(_refusals(Path(os.environ[ACTING])), "a") as noted:
        noted.write(f"{user} {action} {resource}\n")

    error = S3AccessDeniedError()
    S3ClientError.__init__(error, "AccessDenied", f"User: arn:aws:iam::{ACCOUNT}:user/{user} is not authorized to "
                           f"perform: {action} on resource: \"{resource}\" because no identity-based policy allows "
                           f"the {action} action")
    return error


def _patch() -> None:
    """Authorize every S3 request as the acting user (see the module's docstring)."""
    import xmltodict
    from moto.core.authorization import ActionAuthenticatorMixin
    from moto.iam.access_control import S3IAMRequest
    from moto.s3.responses import S3Response

    authorize = ActionAuthenticatorMixin._authenticate_and_authorize_action

    def as_acting(self: Any, iam_request_cls: type, resource: str = "*") -> None:
        user = _acting()
        if user is None or iam_request_cls is not S3IAMRequest:
            return authorize(self, iam_request_cls, resource)  # moto's own: with no auth configured, a pass
        # The IAM action moto's S3 maps the request to (``data["Action"]``, set before it authorizes), as AWS
        # names it (ListObjectsV2 is s3:ListBucket); since moto 5.2.6 ``_get_action()`` is the API operation's name.
        action = f"s3:{self.data.get('Action') or self._get_action()}"
        if action == "s3:GetObject" and self.method == "HEAD" and "versionId" in self.querystring:
            action = "s3:GetObjectVersion"
        if action == "s3:DeleteObject" and "/" not in resource.split(":::", 1)[1]:
            return None  # a DeleteObjects: decided key by key, below
        if not _decision(user, action, resource):
            raise _denied(user, action, resource)
        for kms_action, key in _kms_needed(self, action, resource):
            if not _decision(user, kms_action, key):
                raise _denied(user, kms_action, key)
        return None

    delete_keys = S3Response._bucket_response_delete_keys

    def key_by_key(self: Any, bucket_name: str, authenticated: bool = True) -> Any:
        user = _acting()
        if user is None:
            return delete_keys(self, bucket_name, authenticated)
        request = xmltodict.parse(self.body, strip_whitespace=False)
        objects = request["Delete"].get("Object", [])
        objects = objects if isinstance(objects, list) else [objects]
        refused = []
        bypass = self.headers.get("x-amz-bypass-governance-retention", "").lower() == "true"
        for entry in objects:
            resource = f"arn:aws:s3:::{bucket_name}/{entry['Key']}"
            for action in ("s3:DeleteObjectVersion" if entry.get("VersionId") else "s3:DeleteObject",
                           *(["s3:BypassGovernanceRetention"] if bypass else []),
                           *(["s3:GetObject"] if entry.get("ETag") not in (None, "*") else [])):
                if not _decision(user, action, resource):
                    refused.append((entry, "AccessDenied", _denied(user, action, resource).message))
                    break
        return aws_s3.deleting_only(self, bucket_name, authenticated, delete_keys, request, refused)

    head_object = S3Response.head_object

    def locks_shown_as_allowed(self: Any, bucket_name: str, query: dict[str, Any], key_name: str,
                               headers: dict[str, Any]) -> Any:
        status, answer, body = head_object(self, bucket_name, query, key_name, headers)
        user = _acting()
        if user is not None:
            resource = f"arn:aws:s3:::{bucket_name}/{key_name}"
            for action, names in LOCK_HEADERS.items():
                if not _decision(user, action, resource):
                    answer = {k: v for k, v in answer.items() if k.lower() not in names}
        return status, answer, body

    ActionAuthenticatorMixin._authenticate_and_authorize_action = as_acting  # type: ignore[method-assign]
    S3Response._bucket_response_delete_keys = key_by_key  # type: ignore[method-assign]
    S3Response.head_object = locks_shown_as_allowed  # type: ignore[method-assign]


class IamS3:
    """The server's endpoint, its IAM users, and who is calling."""

    def __init__(self, endpoint: str, acting_file: Path):
        import boto3

        self.endpoint = endpoint
        self._acting_file = acting_file
        self._refusals = _refusals(acting_file)
        self.iam = boto3.client("iam", endpoint_url=endpoint, region_name="us-east-1")

    def user(self, name: str, policy: dict[str, Any]) -> str:
        """A new IAM user holding ``policy`` (inline) alone; its name."""
        self.iam.create_user(UserName=name)
        self.iam.put_user_policy(UserName=name, PolicyName="job", PolicyDocument=json.dumps(policy))
        return name

    def refused(self) -> list[str]:
        """Each request refused since the last call, as ``user action resource``."""
        lines = self._refusals.read_text().splitlines() if self._refusals.exists() else []
        self._refusals.write_text("")
        return lines

    @contextmanager
    def acting(self, user: str) -> Iterator[None]:
        """Every request within is decided by ``user``'s policies."""
        self._acting_file.write_text(user)
        try:
            yield
        finally:
            self._acting_file.write_text("")


def _refusals(acting_file: Path) -> Path:
    return acting_file.with_name(acting_file.name + ".refused")


@contextmanager
def iam_s3(tmp_dir: Path) -> Iterator[IamS3]:
    """This server in a process of its own (tests.s3_faults.moto_server), nobody acting yet."""
    from tests.s3_faults import moto_server

    acting = tmp_dir / f"acting-{uuid.uuid4().hex[:8]}"
    acting.write_text("")
    with moto_server(module="tests.iam_s3", env={ACTING: str(acting)}) as endpoint:
        yield IamS3(endpoint, acting)


if __name__ == "__main__":
    from moto.server import main

    aws_s3.patch()  # AWS's conditional deletes, decided after the IAM check of each key
    _patch()
    main()
