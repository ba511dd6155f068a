"""``python -m infra.iam_policies``: the IAM policy of each job's role, scoped to your buckets and prefixes.

One policy per role, each statement named (``Sid``) for what it lets the job do:

- ``ingestion`` (job 1): read the S3 Inventory deliveries; read and write the inventory table.
- ``vacuum`` (job 2): read the inventory table; list and read each table's ``_delta_log/``,
  never its data; delete under the tables' prefixes (left out for a dry-run role); put its
  history commits into ``_delta_log/`` (only with history); read and write the audit table;
  write reports. Whatever else it holds, it may never delete under a ``_delta_log/``.
- ``undo`` (``restore`` and ``purge``): what a vacuum reads, the version verbs under the tables'
  prefixes (list versions, delete versions, read a refused version's Object Lock), the buckets'
  lifecycle rules; ``BypassGovernanceRetention`` only when asked.
- ``reports`` (``lake_reports``): read the inventory and audit tables and the tables' logs;
  write reports.

Where the buckets encrypt with SSE-KMS (``--kms-key``), each role may also use those keys, through
S3 alone (``kms:ViaService``): ``kms:Decrypt`` to read, ``kms:GenerateDataKey`` where it writes.
SSE-S3 needs nothing; deletes, version listings and restores (a delete marker removed) use no key.

No statement grants a ``*`` action or a whole bucket's objects; ``s3:ListBucket`` is scoped by
``s3:prefix``. ``cloudformation/job-policies.yaml`` creates the same documents as managed
policies; a test keeps the two equal. ``tests/test_iam_policies.py`` runs each job as a user
holding only its policy, on moto's S3 API with authorization on.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from typing import Any

from lakeio.errors import InvalidOption
from lakeio.text import StrEnum

Statement = dict[str, Any]


class Role(StrEnum):
    """Whose policy: the jobs' commands, in _JOBS."""

    INGESTION = "ingestion"
    VACUUM = "vacuum"
    UNDO = "undo"
    REPORTS = "reports"


@dataclass(frozen=True)
class Place:
    """An S3 prefix: a bucket and the key prefix under it (ending in ``/``, or empty for the bucket)."""

    bucket: str
    prefix: str

    @classmethod
    def of(cls, uri: str) -> Place:
        scheme, _, rest = uri.partition("://")
        bucket, _, key = rest.partition("/")
        if scheme not in ("s3", "s3a") or not bucket:
            raise InvalidOption(f"{uri}: expected s3://bucket[/prefix]")
        key = key.strip("/")
        return cls(bucket, f"{key}/" if key else "")

    def objects(self, below: str = "*") -> str:
        return f"arn:aws:s3:::{self.bucket}/{self.prefix}{below}"

    def folder(self) -> list[str]:
        """Its objects, and the folder's own key, which Spark's S3 connector probes (a HEAD) first."""
        return [f"arn:aws:s3:::{self.bucket}/{self.prefix.rstrip('/')}", self.objects()] if self.prefix else [self.objects()]

    @property
    def bucket_arn(self) -> str:
        return f"arn:aws:s3:::{self.bucket}"


@dataclass(frozen=True)
class Scope:
    """Where the jobs' data lives: every option of the command, as a value."""

    tables: tuple[Place, ...]  # the prefixes the Delta tables live under (each table a folder below)
    inventory_table: Place
    audit_table: Place
    reports: Place | None = None  # where --report files and chargeback output go on S3
    deliveries: Place | None = None  # the S3 Inventory destination (ingestion)
    history: bool = True  # the vacuum writes VACUUM START/END commits into the tables' logs
    deletes: bool = True  # the vacuum may delete (false: a role for dry runs)
    bypass_governance: bool = False  # purge --bypass-governance-retention
    kms_keys: tuple[str, ...] = ()  # the ARNs of the KMS keys the buckets encrypt objects with (SSE-KMS)


def kms_region(arn: str) -> str:
    """The region of a KMS key's ARN; a ValueError for anything else (an alias names no key in a policy; the
    policies name S3 in the aws partition, and S3's service name in kms:ViaService is that partition's)."""
    found = re.fullmatch(r"arn:aws:kms:([\w-]+|\$\{AWS::Region\}):(\d{12}|\$\{AWS::AccountId\}):key/[^\s/]+", arn)
    if found is None:
        raise InvalidOption(f"{arn}: expected a KMS key's ARN, arn:aws:kms:<region>:<account>:key/<key id> (a policy "
                            "cannot name a key by its alias; the policies are written for the aws partition, not "
                            "aws-cn or aws-us-gov)")
    return found.group(1)


def _allow(sid: str, actions: list[str], resources: list[str]) -> Statement:
    return {"Sid": sid, "Effect": "Allow", "Action": actions if len(actions) > 1 else actions[0],
            "Resource": sorted(set(resources)) if len(set(resources)) > 1 else resources[0]}


def _listing(places: list[tuple[str, Place]], action: str = "s3:ListBucket") -> list[Statement]:
    """One ``action`` statement per bucket, scoped to the prefixes listed there (``StringLike`` on
    ``s3:prefix``), named for what it lists (``ListTables``, ``ListHousekeeping``, both)."""
    by_bucket: dict[str, tuple[set[str], list[Place]]] = {}
    for label, place in places:
        labels, listed = by_bucket.setdefault(place.bucket, (set(), []))
        labels.add(label)
        listed.append(place)
    statements: list[Statement] = []
    for bucket, (labels, listed) in by_bucket.items():
        sid = "List" + "And".join(sorted(labels))
        taken = sum(1 for s in statements if s["Sid"].rstrip("0123456789") == sid)  # Sids are unique in a policy
        statements.append({"Sid": f"{sid}{taken + 1}" if taken else sid, "Effect": "Allow", "Action": action,
                           "Resource": f"arn:aws:s3:::{bucket}",
                           "Condition": {"StringLike": {"s3:prefix": sorted({p.prefix + "*" for p in listed})}}})
    return statements


# Spark's S3 connector, and Delta's writers, write a folder as its owner does: they list and probe
# (a HEAD of the folder's own key) first, and tidy after (checkpoints, expired log files, a probe
# the jobs write to prove a destination writable before they change anything).
_OWN_FOLDER = ["s3:GetObject", "s3:PutObject", "s3:DeleteObject"]


def policy(role: Role, scope: Scope) -> dict[str, Any]:
    """The policy document of ``role``'s IAM role for ``scope``."""
    tables = [t.objects() for t in scope.tables]
    logs = [t.objects("*/_delta_log*") for t in scope.tables]  # the folder's own key too: a probe
    listed: list[tuple[str, Place]] = []
    statements: list[Statement] = []

    def own(sid: str, place: Place) -> None:
        listed.append(("Housekeeping", place))
        statements.append(_allow(f"Write{sid}", _OWN_FOLDER, place.folder()))

    def read(sid: str, places: list[Place], label: str = "Housekeeping") -> None:
        listed.extend((label, p) for p in places)
        statements.append(_allow(f"Read{sid}", ["s3:GetObject"], [r for p in places for r in p.folder()]))

    if role is Role.INGESTION:
        if scope.deliveries is None:
            raise InvalidOption("the ingestion role needs the S3 Inventory destination (--inventory-destination)")
        read("InventoryDeliveries", [scope.deliveries], "InventoryDeliveries")
        own("InventoryTable", scope.inventory_table)
    elif role is Role.REPORTS:
        read("InventoryAndAudit", [scope.inventory_table, scope.audit_table])
    else:
        read("InventoryTable", [scope.inventory_table])
        own("AuditTable", scope.audit_table)
    if role is not Role.INGESTION:
        listed.extend(("Tables", t) for t in scope.tables)
        statements.append(_allow("ReadTableLogs", ["s3:GetObject"], logs))
    if scope.reports is not None:
        own("Reports", scope.reports)
    lake_buckets = sorted({t.bucket_arn for t in scope.tables})
    if role is Role.VACUUM:
        if scope.history:
            statements.append(_allow("PutHistoryCommits", ["s3:PutObject"], [t.objects("*/_delta_log/*")
                                                                              for t in scope.tables]))
        if scope.deletes:
            # whether a bucket's versioning is suspended decides whether a delete was final; each key is asked
            # with If-Match: * (deleted only if there), which needs s3:DeleteObject alone: a condition on the key's
            # own ETag would need s3:GetObject on the data too, which this role never gets
            statements.append(_allow("DeleteUnderTables", ["s3:DeleteObject", "s3:GetBucketVersioning"],
                                     tables + lake_buckets))
            # a killed run's deletes are read back from its keys' versions
            statements += _listing([("VersionsUnderTables", t) for t in scope.tables], "s3:ListBucketVersions")
    elif role is Role.UNDO:
        statements += [*_listing([("VersionsUnderTables", t) for t in scope.tables], "s3:ListBucketVersions"),
                       # informs, never decides: without it a purge warns that it could not read them
                       _allow("ReadLifecycleRules", ["s3:GetLifecycleConfiguration"], lake_buckets),
                       _allow("DeleteVersionsUnderTables", ["s3:DeleteObjectVersion"], tables),
                       _allow("ReadObjectLocksUnderTables", ["s3:GetObjectVersion", "s3:GetObjectRetention",
                                                             "s3:GetObjectLegalHold"], tables)]
        if scope.bypass_governance:
            statements.append(_allow("BypassGovernanceRetention", ["s3:BypassGovernanceRetention"], tables))
    if scope.kms_keys:  # S3 uses the key for the caller: to read (every role), to write (all but a reader's)
        writes = role is not Role.REPORTS or scope.reports is not None
        statements.append({**_allow("UseKmsKeysThroughS3", ["kms:Decrypt", *(["kms:GenerateDataKey"] if writes else [])],
                                    list(scope.kms_keys)),
                           "Condition": {"StringEquals": {"kms:ViaService": sorted(
                               {f"s3.{kms_region(k)}.amazonaws.com" for k in scope.kms_keys})}}})
    if role in (Role.VACUUM, Role.UNDO):
        statements.append({"Sid": "NeverDeleteTableLogs", "Effect": "Deny",
                           "Action": ["s3:DeleteObject", "s3:DeleteObjectVersion"],
                           "Resource": sorted({t.objects("*/_delta_log/*") for t in scope.tables})})
    return {"Version": "2012-10-17", "Statement": _listing(listed) + statements}


# The template's parameters, as placeholders the scope is spelled in (each a ${Name} of Fn::Sub).
TEMPLATE_SCOPE = Scope(
    tables=(Place("${TablesBucketName}", "${TablesPrefix}/"),),
    inventory_table=Place("${HousekeepingBucketName}", "${InventoryTablePrefix}/"),
    audit_table=Place("${HousekeepingBucketName}", "${AuditTablePrefix}/"),
    reports=Place("${HousekeepingBucketName}", "${ReportsPrefix}/"),
    deliveries=Place("${InventoryDestinationBucketName}", "${InventoryDestinationPrefix}/"),
    kms_keys=("arn:aws:kms:${AWS::Region}:${AWS::AccountId}:key/${KmsKeyId}",))
_PARAMETERS = {
    "TablesBucketName": "The bucket the Delta tables live in.",
    "TablesPrefix": "The prefix the tables live under, without slashes at its ends (warehouse: s3://BUCKET/warehouse/<table>).",
    "HousekeepingBucketName": "The bucket of the inventory table, the audit table and the reports.",
    "InventoryTablePrefix": "The inventory table's folder in it (housekeeping/inventory).",
    "AuditTablePrefix": "The vacuum audit table's folder in it (housekeeping/vacuum_audit).",
    "ReportsPrefix": "The folder the jobs write --report files and chargeback output to (housekeeping/reports).",
    "InventoryDestinationBucketName": "The bucket S3 Inventory delivers to (infra/cloudformation/inventory-destination.yaml).",
    "InventoryDestinationPrefix": "The prefix of its reports (inventory).",
}
# The one optional parameter: a template's statement names a key only when given one.
_KMS_PARAMETER = {"KmsKeyId": {"Type": "String", "Default": "", "Description": (
    "The id of the KMS key (in this stack's account and region) the buckets encrypt objects with, where they use "
    "SSE-KMS (empty: none, as with SSE-S3). Keys elsewhere: python -m infra.iam_policies ROLE --kms-key ARN.")}}


_JOBS = {Role.INGESTION: "python -m inventory_etl", Role.VACUUM: "python -m vacuum_jobs",
         Role.UNDO: "python -m vacuum_jobs restore and purge", Role.REPORTS: "python -m lake_reports"}


def cloudformation() -> str:
    """``cloudformation/job-policies.yaml``: one managed policy per role, with the history commits and the
    deletes on (the command's defaults), the KMS key's statement where its id is given, each attached to
    the role whose name is given."""
    import yaml

    def sub(node: Any) -> Any:
        if isinstance(node, dict):
            return {k: sub(v) for k, v in node.items()}
        if isinstance(node, list):
            return [sub(v) for v in node]
        return {"Fn::Sub": node} if isinstance(node, str) and "${" in node else node

    parameters: dict[str, Any] = {name: {"Type": "String", "Description": text} for name, text in _PARAMETERS.items()}
    parameters.update(_KMS_PARAMETER)
    conditions: dict[str, Any] = {"HasKmsKeyId": {"Fn::Not": [{"Fn::Equals": [{"Ref": "KmsKeyId"}, ""]}]}}
    resources = {}
    for role in Role:
        document = sub(policy(role, TEMPLATE_SCOPE))
        document["Statement"] = [{"Fn::If": ["HasKmsKeyId", s, {"Ref": "AWS::NoValue"}]}
                                 if s["Sid"] == "UseKmsKeysThroughS3" else s for s in document["Statement"]]
        name = f"{role.value.capitalize()}RoleName"
        parameters[name] = {"Type": "String", "Default": "",
                            "Description": f"The IAM role {_JOBS[role]} runs as, given this policy (empty: none)."}
        conditions[f"Has{name}"] = {"Fn::Not": [{"Fn::Equals": [{"Ref": name}, ""]}]}
        resources[f"{role.value.capitalize()}Policy"] = {"Type": "AWS::IAM::ManagedPolicy", "Properties": {
            "Description": f"lake-housekeeping: what {_JOBS[role]} needs, and no more",
            "PolicyDocument": document,
            "Roles": {"Fn::If": [f"Has{name}", [{"Ref": name}], {"Ref": "AWS::NoValue"}]}}}
    template = {"AWSTemplateFormatVersion": "2010-09-09",
                "Description": "lake-housekeeping: the IAM policy of each job's role (written by python -m "
                               "infra.iam_policies cloudformation; a test keeps the two equal).",
                "Parameters": parameters, "Conditions": conditions, "Resources": resources}
    return yaml.safe_dump(template, sort_keys=False, width=120)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m infra.iam_policies", description=__doc__.split("\n\n")[1])
    parser.add_argument("role", choices=[*(r.value for r in Role), "cloudformation"],
                        help="whose policy (cloudformation: the template of all four, no other argument)")
    parser.add_argument("--tables", action="append", metavar="S3_PREFIX",
                        help="a prefix the Delta tables live under, e.g. s3://lake-a/warehouse/ (repeat for several)")
    parser.add_argument("--inventory-table", metavar="S3_URI", help="the inventory table")
    parser.add_argument("--audit-table", metavar="S3_URI", help="the vacuum audit table")
    parser.add_argument("--reports", metavar="S3_PREFIX", help="where reports are written on S3 (default: none)")
    parser.add_argument("--inventory-destination", metavar="S3_PREFIX",
                        help="where S3 delivers the inventory reports (ingestion)")
    parser.add_argument("--no-history", action="store_true",
                        help="vacuum: no history commits (--history off): no write into any table's log")
    parser.add_argument("--dry-run-only", action="store_true", help="vacuum: no delete permission at all")
    parser.add_argument("--bypass-governance-retention", action="store_true",
                        help="undo: allow purge --bypass-governance-retention")
    parser.add_argument("--kms-key", action="append", default=[], metavar="KEY_ARN",
                        help="the ARN of a KMS key the buckets encrypt objects with (SSE-KMS; repeat for several); "
                             "SSE-S3 needs none")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.role == "cloudformation":
        print(cloudformation(), end="")
        return 0
    if not (args.tables and args.inventory_table and args.audit_table):
        parser.error("--tables, --inventory-table and --audit-table are required")
    try:
        scope = Scope(tuple(Place.of(t) for t in args.tables), Place.of(args.inventory_table), Place.of(args.audit_table),
                      Place.of(args.reports) if args.reports else None,
                      Place.of(args.inventory_destination) if args.inventory_destination else None,
                      history=not args.no_history, deletes=not args.dry_run_only,
                      bypass_governance=args.bypass_governance_retention, kms_keys=tuple(args.kms_key))
        document = policy(Role(args.role), scope)
    except ValueError as exc:
        parser.error(str(exc))
    print(json.dumps(document, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
