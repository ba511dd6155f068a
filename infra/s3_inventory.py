"""``python -m infra.s3_inventory``: switch on the daily S3 Inventory that job 1 reads.

For each source bucket it writes one inventory configuration (daily, Parquet, the
fields job 1 and chargeback need, every version when asked) delivering to a
destination bucket and prefix, and it adds to the destination's bucket policy the one
statement that lets S3 deliver there from those buckets. It reads before it writes and
changes only what differs, so a second run reports everything ``unchanged``.
``cloudformation/`` holds the same configuration as templates; a test keeps them equal.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import asdict, dataclass
from typing import Any

import boto3
from botocore.exceptions import BotoCoreError, ClientError

# Size and LastModifiedDate feed the contract's length and modificationTime; StorageClass
# and IntelligentTieringAccessTier price the chargeback; ETag tells rewritten objects apart;
# the Object Lock fields tell the erasure evidence which versions S3 keeps, and until when.
OPTIONAL_FIELDS = ("Size", "LastModifiedDate", "StorageClass", "ETag", "IsMultipartUploaded",
                   "EncryptionStatus", "IntelligentTieringAccessTier", "ObjectLockRetainUntilDate",
                   "ObjectLockMode", "ObjectLockLegalHoldStatus")
DEFAULT_CONFIG_ID = "lake-housekeeping"
DEFAULT_PREFIX = "inventory"


@dataclass(frozen=True)
class Change:
    resource: str  # e.g. "s3://bucket inventory configuration lake-housekeeping"
    action: str  # created, updated, unchanged, would_create, would_update, failed
    detail: str = ""


def inventory_configuration(config_id: str, destination_bucket: str, prefix: str, all_versions: bool,
                            account_id: str) -> dict[str, Any]:
    """The configuration in the shape of S3's PutBucketInventoryConfiguration API."""
    return {
        "Id": config_id,
        "IsEnabled": True,
        "Destination": {"S3BucketDestination": {
            "AccountId": account_id,
            "Bucket": f"arn:aws:s3:::{destination_bucket}",
            "Format": "Parquet",
            "Prefix": prefix,
        }},
        "Schedule": {"Frequency": "Daily"},
        "IncludedObjectVersions": "All" if all_versions else "Current",
        "OptionalFields": list(OPTIONAL_FIELDS),
    }


def statement_id(prefix: str) -> str:
    """One bucket policy statement per destination prefix (policy statement ids are letters and digits)."""
    return "S3InventoryDelivery" + re.sub(r"[^A-Za-z0-9]", "", prefix)


def delivery_statement(destination_bucket: str, prefix: str, source_buckets: list[str], account_id: str) -> dict[str, Any]:
    """Lets S3 write inventory reports of ``source_buckets`` (of this account) under the prefix, and nothing else."""
    return {
        "Sid": statement_id(prefix),
        "Effect": "Allow",
        "Principal": {"Service": "s3.amazonaws.com"},
        "Action": "s3:PutObject",
        "Resource": f"arn:aws:s3:::{destination_bucket}/{prefix}/*",
        "Condition": {
            "ArnLike": {"aws:SourceArn": sorted(f"arn:aws:s3:::{b}" for b in source_buckets)},
            "StringEquals": {"aws:SourceAccount": account_id, "s3:x-amz-acl": "bucket-owner-full-control"},
        },
    }


class InventorySetup:
    """Reads, compares and (unless ``dry_run``) writes; one change record per resource."""

    def __init__(self, s3: Any, account_id: str, dry_run: bool = False):
        self.s3 = s3
        self.account_id = account_id
        self.dry_run = dry_run
        self._regions: dict[str, str] = {}

    def apply(self, source_buckets: list[str], destination_bucket: str, prefix: str = DEFAULT_PREFIX,
              config_id: str = DEFAULT_CONFIG_ID, all_versions: bool = False) -> list[Change]:
        changes, configured = [], []
        for bucket in source_buckets:
            change = self._configure(bucket, destination_bucket, prefix, config_id, all_versions)
            changes.append(change)
            if change.action != "failed":
                configured.append(bucket)
        if configured:
            changes.append(self._allow_delivery(destination_bucket, prefix, configured))
        return changes

    def _configure(self, bucket: str, destination_bucket: str, prefix: str, config_id: str, all_versions: bool) -> Change:
        resource = f"s3://{bucket} inventory configuration {config_id}"
        desired = inventory_configuration(config_id, destination_bucket, prefix, all_versions, self.account_id)
        try:
            if self._region(bucket) != self._region(destination_bucket):
                return Change(resource, "failed", f"{destination_bucket} is in another region than {bucket}: "
                                                  "S3 delivers inventories within one region")
            current = self._current_configuration(bucket, config_id)
            if current is not None and _same_configuration(current, desired):
                return Change(resource, "unchanged")
            action = "created" if current is None else "updated"
            if not self.dry_run:
                self.s3.put_bucket_inventory_configuration(Bucket=bucket, Id=config_id,
                                                           InventoryConfiguration=desired)
            return Change(resource, action if not self.dry_run else f"would_{action[:-1]}",
                          f"daily Parquet to s3://{destination_bucket}/{prefix}/")
        except (ClientError, BotoCoreError) as exc:
            return Change(resource, "failed", _error(exc))

    def _allow_delivery(self, destination_bucket: str, prefix: str, source_buckets: list[str]) -> Change:
        resource = f"s3://{destination_bucket} bucket policy statement {statement_id(prefix)}"
        try:
            policy = self._current_policy(destination_bucket)
            statements = policy.setdefault("Statement", [])
            existing = next((s for s in statements if s.get("Sid") == statement_id(prefix)), None)
            sources = set(source_buckets)
            if existing is not None:  # keep the buckets earlier runs allowed
                arns = existing.get("Condition", {}).get("ArnLike", {}).get("aws:SourceArn", [])
                sources |= {a.removeprefix("arn:aws:s3:::") for a in ([arns] if isinstance(arns, str) else arns)}
            desired = delivery_statement(destination_bucket, prefix, sorted(sources), self.account_id)
            if existing is not None and _as_lists(existing) == _as_lists(desired):
                return Change(resource, "unchanged")
            action = "created" if existing is None else "updated"
            policy["Statement"] = [s for s in statements if s is not existing] + [desired]
            if not self.dry_run:
                self.s3.put_bucket_policy(Bucket=destination_bucket, Policy=json.dumps(policy))
            return Change(resource, action if not self.dry_run else f"would_{action[:-1]}",
                          "allows delivery from " + ", ".join(sorted(sources)))
        except (ClientError, BotoCoreError) as exc:
            return Change(resource, "failed", _error(exc))

    def _region(self, bucket: str) -> str:
        if bucket not in self._regions:
            location = self.s3.get_bucket_location(Bucket=bucket).get("LocationConstraint")
            self._regions[bucket] = location or "us-east-1"  # S3 answers null for us-east-1
        return self._regions[bucket]

    def _current_configuration(self, bucket: str, config_id: str) -> dict[str, Any] | None:
        try:
            found: dict[str, Any] = self.s3.get_bucket_inventory_configuration(Bucket=bucket, Id=config_id)[
                "InventoryConfiguration"]
            return found
        except ClientError as exc:
            if exc.response["Error"]["Code"] == "NoSuchInventoryConfig":
                return None
            raise

    def _current_policy(self, bucket: str) -> dict[str, Any]:
        try:
            policy: dict[str, Any] = json.loads(self.s3.get_bucket_policy(Bucket=bucket)["Policy"])
            return policy
        except ClientError as exc:
            if exc.response["Error"]["Code"] == "NoSuchBucketPolicy":
                return {"Version": "2012-10-17", "Statement": []}
            raise


def _same_configuration(current: dict[str, Any], desired: dict[str, Any]) -> bool:
    def normal(config: dict[str, Any]) -> dict[str, Any]:
        return {**config, "OptionalFields": sorted(config.get("OptionalFields", []))}

    return normal(current) == normal(desired)


def _as_lists(value: Any) -> Any:
    """A policy with every string made a one-element list and lists sorted (IAM treats them alike)."""
    if isinstance(value, dict):
        return {k: _as_lists(v) for k, v in value.items() if k != "Sid"} | {"Sid": value.get("Sid")}
    if isinstance(value, (list, str)):
        return sorted([value] if isinstance(value, str) else value)
    return value


def _error(exc: Exception) -> str:
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        return f"{error.get('Code')}: {error.get('Message')} ({exc.operation_name})"
    return str(exc)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m infra.s3_inventory", description=__doc__.split("\n\n")[1])
    parser.add_argument("--source-bucket", action="append", required=True, metavar="B",
                        help="a bucket to inventory; repeat for several")
    parser.add_argument("--destination-bucket", required=True, metavar="B", help="where S3 delivers the reports")
    parser.add_argument("--destination-prefix", default=DEFAULT_PREFIX, metavar="P",
                        help=f"prefix in the destination bucket (default: {DEFAULT_PREFIX}); job 1's "
                             "--inventory-root is s3://DESTINATION/PREFIX")
    parser.add_argument("--config-id", default=DEFAULT_CONFIG_ID, metavar="ID",
                        help=f"inventory configuration id (default: {DEFAULT_CONFIG_ID})")
    parser.add_argument("--all-versions", action="store_true",
                        help="list noncurrent versions and delete markers too (versioned buckets)")
    parser.add_argument("--account-id", metavar="ID", help="the buckets' account (default: the caller's)")
    parser.add_argument("--endpoint-url", metavar="URL", help="an S3-compatible endpoint (default: AWS)")
    parser.add_argument("--dry-run", action="store_true", help="report what would change; change nothing")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    prefix = args.destination_prefix.strip("/")
    try:
        account = args.account_id or boto3.client("sts", endpoint_url=args.endpoint_url).get_caller_identity()["Account"]
        s3 = boto3.client("s3", endpoint_url=args.endpoint_url)
    except (ClientError, BotoCoreError) as exc:
        print(f"error: cannot reach AWS: {_error(exc)}", file=sys.stderr)
        return 1
    changes = InventorySetup(s3, account, args.dry_run).apply(
        args.source_bucket, args.destination_bucket, prefix, args.config_id, args.all_versions)
    print(json.dumps([asdict(c) for c in changes], indent=2))
    for change in changes:
        print(f"{change.action:<13} {change.resource}" + (f": {change.detail}" if change.detail else ""),
              file=sys.stderr)
    return 1 if any(c.action == "failed" for c in changes) else 0


if __name__ == "__main__":
    sys.exit(main())
