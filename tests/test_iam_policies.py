"""Each job's shipped IAM policy (infra.iam_policies), enforced: the job runs as a user holding that
policy alone, on moto's S3 API deciding every request by it (tests.iam_s3).

With the whole policy the job does its work. Without any one of its statements, for every role, it
fails (or fails the table the statement concerns) in one line naming what S3 refused and where, and
deletes nothing it did not plan; a statement that only informs a run (a purge's lifecycle rules)
leaves it working, with a line naming what it could not read. The vacuum's role cannot delete outside
the tables' prefixes, nor under a ``_delta_log/``. The lake's and the housekeeping tables' buckets
encrypt with SSE-KMS, the deliveries' with SSE-S3: the KMS statement is one of those statements.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path

import boto3
import pyarrow as pa
import pytest
import yaml
from deltalake import DeltaTable, write_deltalake

import infra
from infra.iam_policies import Place, Role, Scope, cloudformation, policy
from inventory_etl.cli import main as ingest_main
from inventory_etl.ingestion import IngestInventory
from inventory_etl.producer import write_delivery
from lake_reports.cli import main as reports_main
from lakeio.audit.contract import read_audit
from tests.iam_s3 import iam_s3
from tests.s3_faults import point_s3a_at, s3_client, s3a_settings
from tests.test_erasure_versions import _listing
from vacuum_jobs.cli import main as vacuum_main
from vacuum_jobs.deletes import DeleteSettings, Target
from vacuum_jobs.interrupted import note_intent, run_ended
from vacuum_jobs.s3_deletes import S3BatchDeleter

KEY = "arn:aws:kms:eu-west-1:123456789012:key/0b1c2d3e-0000-4000-8000-000000000001"
SCOPES = {
    "one bucket of tables": Scope((Place.of("s3://lake-a/warehouse/"),), Place.of("s3://ops/housekeeping/inventory"),
                                  Place.of("s3://ops/housekeeping/vacuum_audit"), Place.of("s3://ops/housekeeping/reports"),
                                  Place.of("s3://inventory-destination/inventory"), kms_keys=(KEY,)),
    "tables in two buckets, no history, no deletes, governance bypassed": Scope(
        (Place.of("s3a://lake-a/warehouse"), Place.of("s3://lake-b/gold/tables/")), Place.of("s3://ops/inv"),
        Place.of("s3://ops/audit"), None, Place.of("s3://dest/inventory"), history=False, deletes=False,
        bypass_governance=True),
}


def _actions(statement: dict) -> list[str]:
    return [statement["Action"]] if isinstance(statement["Action"], str) else statement["Action"]


def _resources(statement: dict) -> list[str]:
    return [statement["Resource"]] if isinstance(statement["Resource"], str) else statement["Resource"]


@pytest.mark.parametrize("scope", SCOPES)
@pytest.mark.parametrize("role", list(Role))
def test_no_statement_grants_a_wildcard_action_a_whole_bucket_or_an_unscoped_listing(role, scope):
    statements = policy(role, SCOPES[scope])["Statement"]
    assert len({s["Sid"] for s in statements}) == len(statements) and all(s["Sid"].isalnum() for s in statements)
    for s in statements:
        if s["Sid"] == "UseKmsKeysThroughS3":  # the keys named, used by S3 alone
            assert _resources(s) == list(SCOPES[scope].kms_keys) and s["Condition"] == {
                "StringEquals": {"kms:ViaService": ["s3.eu-west-1.amazonaws.com"]}}, s
            writes = role is not Role.REPORTS or SCOPES[scope].reports is not None
            assert set(_actions(s)) == {"kms:Decrypt", *(["kms:GenerateDataKey"] if writes else [])}, s
            continue
        assert all(a.startswith("s3:") and "*" not in a for a in _actions(s)), s
        for resource in _resources(s):
            bucket, _, key = resource.removeprefix("arn:aws:s3:::").partition("/")
            assert resource.startswith("arn:aws:s3:::") and "*" not in bucket and not key.startswith("*"), s
        if set(_actions(s)) & {"s3:ListBucket", "s3:ListBucketVersions"}:
            assert s["Condition"]["StringLike"]["s3:prefix"] and _actions(s) in (["s3:ListBucket"],
                                                                                ["s3:ListBucketVersions"]), s
    allowed = {a for s in statements if s["Effect"] == "Allow" for a in _actions(s)}
    logs = [r for s in statements if s["Effect"] == "Allow" and "s3:PutObject" in _actions(s) for r in _resources(s)
            if "_delta_log" in r]
    if role in (Role.VACUUM, Role.UNDO):
        assert {"Effect": "Deny", "Action": ["s3:DeleteObject", "s3:DeleteObjectVersion"]}.items() <= \
            statements[-1].items()  # whatever else is granted: never a delete in a table's log
    under_tables = {a for s in statements if s["Effect"] == "Allow" for a in _actions(s) if a.startswith("s3:Delete")
                    and any(r.startswith(t.objects("")) for t in SCOPES[scope].tables for r in _resources(s))}
    assert under_tables == ({"s3:DeleteObject"} if role is Role.VACUUM and SCOPES[scope].deletes else
                            {"s3:DeleteObjectVersion"} if role is Role.UNDO else set()), under_tables
    assert bool(logs) == (role is Role.VACUUM and SCOPES[scope].history), logs
    assert ("s3:BypassGovernanceRetention" in allowed) == (role is Role.UNDO and SCOPES[scope].bypass_governance)
    assert ("kms:Decrypt" in allowed) == bool(SCOPES[scope].kms_keys)


@pytest.mark.parametrize("key", ["alias/lake", "arn:aws:kms:eu-west-1:123456789012:alias/lake", "0b1c2d3e",
                                 "arn:aws:s3:::lake-a", "arn:aws-cn:kms:cn-north-1:123456789012:key/0b1c2d3e"])
def test_a_kms_key_not_named_by_its_arn_is_refused_by_the_command(key, capsys):
    from infra.iam_policies import main

    with pytest.raises(SystemExit) as exited:
        main(["vacuum", "--tables", "s3://l/w", "--inventory-table", "s3://o/i", "--audit-table", "s3://o/a",
              "--kms-key", key])
    assert exited.value.code == 2 and f"{key}: expected a KMS key's ARN" in capsys.readouterr().err


def test_the_cloudformation_template_is_the_commands_and_resolves_to_its_policies():
    from tests.test_infra import _resolve

    template = (Path(infra.__file__).parent / "cloudformation" / "job-policies.yaml").read_text()
    assert template == cloudformation(), "python -m infra.iam_policies cloudformation > infra/cloudformation/job-policies.yaml"
    values = {"TablesBucketName": "lake-a", "TablesPrefix": "warehouse", "HousekeepingBucketName": "ops",
              "InventoryTablePrefix": "housekeeping/inventory", "AuditTablePrefix": "housekeeping/vacuum_audit",
              "ReportsPrefix": "housekeeping/reports", "InventoryDestinationBucketName": "inventory-destination",
              "InventoryDestinationPrefix": "inventory"}
    resources = yaml.safe_load(template)["Resources"]
    for role in Role:
        document = resources[f"{role.value.capitalize()}Policy"]["Properties"]["PolicyDocument"]
        for key in (KEY, None):
            names = {**values, "AWS::Region": "eu-west-1", "AWS::AccountId": "123456789012",
                     "KmsKeyId": key.rsplit("/", 1)[1] if key else "", "HasKmsKeyId": key is not None}
            expected = replace(SCOPES["one bucket of tables"], kms_keys=(key,) if key else ())
            assert _unordered(_resolve(document, names)) == _unordered(policy(role, expected)), (role, key)


def _unordered(node):
    """A policy with its lists of names as sets (resources, prefixes: their order means nothing)."""
    if isinstance(node, dict):
        return {k: _unordered(v) for k, v in node.items()}
    if isinstance(node, list):
        return sorted(node) if all(isinstance(v, str) for v in node) else [_unordered(v) for v in node]
    return node


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with iam_s3(tmp_path_factory.mktemp("iam")) as running:
        yield running


class Lake:
    """A lake bucket with tables under ``warehouse/``, an ops bucket with the inventory and audit tables,
    and another bucket nobody's policy names; every one new, on the server."""

    def __init__(self, spark, server, tmp_path, object_lock: bool = False):
        self.server, self.spark, self.tmp_path = server, spark, tmp_path
        self.client = s3_client(server.endpoint)
        tag = uuid.uuid4().hex[:10]
        self.lake, self.ops, self.other, self.deliveries = f"lake-{tag}", f"ops-{tag}", f"other-{tag}", f"dest-{tag}"
        for bucket in (self.lake, self.ops, self.other, self.deliveries):
            self.client.create_bucket(Bucket=bucket, ObjectLockEnabledForBucket=object_lock and bucket == self.lake)
        self.client.put_bucket_versioning(Bucket=self.lake, VersioningConfiguration={"Status": "Enabled"})
        # The tables and the housekeeping tables under a KMS key of the account's, the deliveries under SSE-S3.
        self.key = boto3.client("kms", endpoint_url=server.endpoint, region_name="us-east-1").create_key()[
            "KeyMetadata"]["Arn"] if _kms_over_http(spark) else None
        kms = {"SSEAlgorithm": "aws:kms", "KMSMasterKeyID": self.key} if self.key else {"SSEAlgorithm": "AES256"}
        for bucket, default in ((self.lake, kms), (self.ops, kms), (self.deliveries, {"SSEAlgorithm": "AES256"})):
            self.client.put_bucket_encryption(Bucket=bucket, ServerSideEncryptionConfiguration={
                "Rules": [{"ApplyServerSideEncryptionByDefault": default}]})
        conf = spark.sparkContext._jsc.hadoopConfiguration()
        for bucket in (self.lake, self.ops, self.other, self.deliveries):  # this server for these buckets
            for key, value in s3a_settings(server.endpoint).items():
                if key.startswith("fs.s3a."):
                    conf.set(key.replace("fs.s3a.", f"fs.s3a.bucket.{bucket}.", 1), value)
        self.options = {"AWS_ENDPOINT_URL": server.endpoint, "AWS_ALLOW_HTTP": "true", "AWS_REGION": "us-east-1",
                        "AWS_S3_ALLOW_UNSAFE_RENAME": "true"}
        self.inventory = f"s3://{self.ops}/housekeeping/inventory"
        self.audit = f"s3://{self.ops}/housekeeping/vacuum_audit"
        self.reports = f"s3://{self.ops}/housekeeping/reports"
        self.scope = Scope((Place.of(f"s3://{self.lake}/warehouse/"),), Place.of(self.inventory), Place.of(self.audit),
                           Place.of(self.reports), Place.of(f"s3://{self.deliveries}/inventory"),
                           kms_keys=(self.key,) if self.key else ())

    @contextmanager
    def connected(self, monkeypatch) -> Iterator[Lake]:
        """The lake, with this server as the endpoint of what reads the cluster's alone (pyarrow) and of
        deltalake's commits for the block; the session's own S3 server after it."""
        conf = self.spark.sparkContext._jsc.hadoopConfiguration()
        before = conf.get("fs.s3a.endpoint")
        conf.set("fs.s3a.endpoint", self.server.endpoint)
        monkeypatch.setenv("AWS_ENDPOINT_URL", self.server.endpoint)
        try:
            yield self
        finally:
            conf.set("fs.s3a.endpoint", before)

    def table(self, name: str) -> tuple[str, list[str]]:
        """A table whose third commit (an overwrite) removed the files of the first two; those files."""
        root = f"s3://{self.lake}/warehouse/{name}"
        for mode, ids in (("append", [1]), ("append", [2]), ("overwrite", [3])):
            write_deltalake(root, pa.table({"id": ids}), mode=mode, storage_options=self.options)
        removed = sorted(f"{root}/{n}" for n in DeltaTable(root, storage_options=self.options).vacuum(
            retention_hours=0, enforce_retention_duration=False, dry_run=True))
        return root, removed

    def inventory_taken(self) -> None:
        when = datetime.now(timezone.utc) - timedelta(hours=1)
        manifest = write_delivery(str(self.tmp_path / "dest"), self.lake, "daily", _listing(self.client, self.lake), when,
                                  versioned=True)
        assert not IngestInventory(self.spark, self.inventory, {}).execute([manifest]).refused

    def delivered(self) -> None:
        """An S3 Inventory delivery of the lake bucket in the deliveries bucket, laid out as S3 delivers it."""
        local = self.tmp_path / f"delivery-{uuid.uuid4().hex[:6]}"
        write_delivery(str(local), self.lake, "daily", _listing(self.client, self.lake),
                       datetime.now(timezone.utc) - timedelta(hours=1), versioned=True,
                       destination_bucket=self.deliveries)
        for path in local.rglob("*"):
            if path.is_file():
                self.client.upload_file(str(path), self.deliveries, f"inventory/{path.relative_to(local)}")

    def as_user(self, role: Role, command, argv: list[str], capsys, without: str = "",
                scope: Scope | None = None) -> tuple[int, str]:
        """``command`` (a job's main) run as a user holding ``role``'s policy alone (``without`` the statement of
        that Sid; for ``scope``, the lake's by default): its exit status, and what it printed (its summary,
        then stderr)."""
        document = policy(role, scope or self.scope)
        document["Statement"] = [s for s in document["Statement"] if s["Sid"] != without]
        user = self.server.user(f"{role}-{uuid.uuid4().hex[:6]}", document)
        capsys.readouterr()
        with self.server.acting(user):
            code = command(argv)
        printed = capsys.readouterr()
        return code, printed.out + printed.err

    def killed_run(self, root: str, files: list[str]) -> str:
        """A vacuum run that noted ``files`` of table ``root``, deleted them and died before its audit
        append: the next run reads its deletes back from the keys' versions. Its id."""
        run_id = f"killed-{uuid.uuid4().hex[:8]}"
        targets = self.spark.createDataFrame([(root, path, 1, 0, None) for path in files],
                                             "table_root string, path string, length long, modificationTime long, "
                                             "version_id string")
        note_intent(self.spark, self.audit, run_id, targets, None, None, {})
        for path in files:
            self.client.delete_object(Bucket=self.lake, Key=path.split("/", 3)[3])
        run_ended(run_id)
        return run_id

    def keys(self, bucket: str) -> set[str]:
        return {o.key for o in _listing(self.client, bucket) if o.is_latest and not o.is_delete_marker}

    def vacuum(self, user: str, tables: list[str], capsys) -> tuple[int, dict, str]:
        """The vacuum's command line as ``user``: its exit status, its report, what it printed to stderr."""
        report = f"{self.reports}/{uuid.uuid4().hex[:8]}.json"
        capsys.readouterr()
        with self.server.acting(user):
            code = vacuum_main(["--inventory-table", self.inventory, *[a for t in tables for a in ("--table", t)],
                                "--audit-table", self.audit, "--retention-hours", "0", "--force-retention", "--apply",
                                "--history", "--report", report, "--s3-endpoint-url", self.server.endpoint])
        printed = capsys.readouterr().err
        bucket, key = report.removeprefix("s3://").split("/", 1)
        try:
            written = json.loads(self.client.get_object(Bucket=bucket, Key=key)["Body"].read())
        except self.client.exceptions.NoSuchKey:
            written = {}
        return code, written, printed


def _beyond_design(lake: Lake, refused: list[str]) -> list[str]:
    """The refusals (``user action resource``) other than two an engine makes above the places a policy
    names, by design and surviving them: Hadoop 3.3's S3 connector deleting the empty folder markers
    above what it wrote (3.4 keeps them), and Delta 3.3 looking for a new table's root in the folders
    above it (a ``_delta_log`` there)."""
    places = [p.removeprefix("s3://") for p in (lake.inventory, lake.audit, lake.reports)]

    def above(folder: str) -> bool:
        return any(place.startswith(folder) and place != folder.rstrip("/") for place in places)

    def by_design(line: str) -> bool:
        _user, action, resource = line.split(" ", 2)
        key = resource.split(":::", 1)[1]
        if action == "s3:DeleteObject" and key.endswith("/"):
            return above(key)  # a folder marker
        return action == "s3:GetObject" and key.endswith("/_delta_log") and above(key.removesuffix("_delta_log"))

    return [line for line in refused if not by_design(line)]


def _kms_over_http(spark) -> bool:
    """Whether Spark's S3 connector writes SSE-KMS objects over plain HTTP, as moto's server speaks. The AWS
    SDK v2 (hadoop-aws 3.4 on) does; v1 (hadoop-aws 3.3) refuses any request carrying SSE-KMS (a rename's copy
    of an SSE-KMS object) without HTTPS, which AWS always has: with it the lake uses SSE-S3."""
    version = spark.sparkContext._jvm.org.apache.hadoop.util.VersionInfo.getVersion()
    return tuple(int(n) for n in version.split(".")[:2]) >= (3, 4)


@pytest.fixture
def lake(spark, s3, server, tmp_path, monkeypatch):
    with Lake(spark, server, tmp_path).connected(monkeypatch) as connected:
        yield connected


def _killed_and_planned(lake) -> tuple[str, list[str], str, list[str]]:
    """Table ``orders`` with two files to delete, and a killed run's deletes in table ``killed`` for the
    next run to read back: ``orders``' root and files, the killed run's id and files."""
    root, removed = lake.table("orders")
    killed_root, killed_files = lake.table("killed")
    lake.inventory_taken()
    return root, removed, lake.killed_run(killed_root, killed_files), killed_files


@pytest.mark.slow
@pytest.mark.s3a
def test_the_vacuum_role_settles_a_killed_run_vacuums_and_writes_its_history_audit_and_report(spark, lake, capsys):
    root, removed, killed, killed_files = _killed_and_planned(lake)
    user = lake.server.user(f"vacuum-{uuid.uuid4().hex[:6]}", policy(Role.VACUUM, lake.scope))
    before = lake.keys(lake.lake)
    lake.server.refused()

    code, report, printed = lake.vacuum(user, [root], capsys)

    assert code == 0, printed
    assert _beyond_design(lake, lake.server.refused()) == []  # nothing the policy should grant and does not
    assert report["tables"][0]["counts"]["deleted_files"] == len(removed), report
    assert before - lake.keys(lake.lake) == {p.split("/", 3)[3] for p in removed}
    operations = [c["operation"] for c in DeltaTable(root, storage_options=lake.options).history()]
    assert operations[:2] == ["VACUUM END", "VACUUM START"]
    settled = read_audit(spark, lake.audit).where(f"run_id = '{killed}' and path is not null").collect()
    assert sorted((r["path"], r["action"]) for r in settled) == [(p, "deleted") for p in killed_files]


@pytest.mark.slow
@pytest.mark.s3a
def test_a_day_of_housekeeping_with_each_job_as_its_own_role(spark, lake, capsys):
    """Ingestion, vacuum, restore, vacuum again, purge, the erasure evidence: each as a user holding its
    own policy alone, on a versioned lake bucket; S3 refuses none of their requests."""
    root, removed = lake.table("orders")
    lake.delivered()
    lake.server.refused()
    code, printed = lake.as_user(Role.INGESTION, ingest_main, [
        "--inventory-table", lake.inventory, "--inventory-root", f"s3://{lake.deliveries}/inventory",
        "--report", f"{lake.reports}/ingestion.json"], capsys)
    assert code == 0, printed
    vacuum_user = lake.server.user(f"vacuum-{uuid.uuid4().hex[:6]}", policy(Role.VACUUM, lake.scope))
    code, report, printed = lake.vacuum(vacuum_user, [root], capsys)
    assert code == 0 and report["tables"][0]["counts"]["deleted_files"] == 2, printed
    undo = ["--audit-table", lake.audit, "--apply", "--s3-endpoint-url", lake.server.endpoint]

    code, printed = lake.as_user(Role.UNDO, vacuum_main, ["restore", "--run-id", report["run_id"], *undo], capsys)
    assert code == 0 and {p.split("/", 3)[3] for p in removed} <= lake.keys(lake.lake), printed
    code, report, printed = lake.vacuum(vacuum_user, [root], capsys)
    assert code == 0, printed
    code, printed = lake.as_user(Role.UNDO, vacuum_main, ["purge", "--older-than-days", "0",
                                                          "--report", f"{lake.reports}/purge.json", *undo], capsys)
    assert code == 0, printed
    left = {o.key for o in _listing(lake.client, lake.lake) if not o.is_delete_marker}
    assert not left & {p.split("/", 3)[3] for p in removed}  # every version of the deleted files erased

    code, printed = lake.as_user(Role.REPORTS, reports_main, [
        "erasure", "--audit-table", lake.audit, "--inventory-table", lake.inventory, *[a for p in removed for a in (
            "--path", p)], "--report", f"{lake.reports}/erasure.json"], capsys)
    assert code in (0, 1) and "access denied" not in printed.lower(), printed  # 1: a table over the deadline
    erasure = json.loads(lake.client.get_object(Bucket=lake.ops, Key="housekeeping/reports/erasure.json")["Body"].read())
    assert {a["status"] for a in erasure["answers"]} == {"erasure_unconfirmed"}, erasure["answers"]
    assert _beyond_design(lake, lake.server.refused()) == []  # nothing a policy should grant and does not


SAMPLE = Scope((Place.of("s3://l/w/"),), Place.of("s3://o/h/i"), Place.of("s3://o/h/a"), Place.of("s3://o/h/r"),
               Place.of("s3://d/inventory"), kms_keys=(KEY,))
SIDS = {role: [s["Sid"] for s in policy(role, SAMPLE)["Statement"] if s["Effect"] == "Allow"] for role in Role}


def _naming(lines: list[str], statement: dict) -> list[str]:
    """The lines that name one of ``statement``'s actions and one of its resources (an S3 prefix up to
    its wildcard, a key's ARN)."""
    actions = [statement["Action"]] if isinstance(statement["Action"], str) else statement["Action"]
    resources = [statement["Resource"]] if isinstance(statement["Resource"], str) else statement["Resource"]
    where = [r.removeprefix("arn:aws:s3:::").split("*")[0] for r in resources]
    return [line for line in lines if any(a in line for a in actions) and any(w in line for w in where)]


def _statement(lake: Lake, role: Role, sid: str) -> dict:
    [statement] = [s for s in policy(role, lake.scope)["Statement"] if s["Sid"] == sid]
    return statement


def _kms_skip(lake: Lake, sid: str) -> None:
    if sid == "UseKmsKeysThroughS3" and lake.key is None:
        pytest.skip("SSE-KMS over plain HTTP needs the AWS SDK v2 in Spark's S3 connector (hadoop-aws 3.4 on)")


def _report(lake: Lake, sid: str, name: str) -> list[str]:
    """``--report`` into the reports folder; none without the KMS statement, whose key the job then first
    needs where it reads or writes its tables, not where it proves the folder writable."""
    return [] if sid == "UseKmsKeysThroughS3" else ["--report", f"{lake.reports}/{name}-{uuid.uuid4().hex[:6]}.json"]


@pytest.mark.slow
@pytest.mark.s3a
@pytest.mark.parametrize("sid", SIDS[Role.VACUUM])
def test_without_any_one_statement_the_vacuum_fails_in_a_line_naming_it_and_deletes_nothing_unplanned(lake, capsys, sid):
    _kms_skip(lake, sid)
    root, removed, _, _ = _killed_and_planned(lake)
    document = policy(Role.VACUUM, lake.scope)
    document["Statement"].remove(_statement(lake, Role.VACUUM, sid))
    user = lake.server.user(f"vacuum-{uuid.uuid4().hex[:6]}", document)
    before = lake.keys(lake.lake)

    code, report, printed = lake.vacuum(user, [root], capsys)

    assert code == 1, (printed, report)
    assert before - lake.keys(lake.lake) <= {p.split("/", 3)[3] for p in removed}  # nothing it did not plan
    lines = [*printed.splitlines(), *report.get("audit_problems", []),
             *(m for t in report.get("tables", []) for m in (t["reason"], t["history"], *t["errors"]) if m)]
    assert _naming(lines, _statement(lake, Role.VACUUM, sid)), (sid, [line for line in lines if " INFO " not in line])


class Housekept:
    """A lake its jobs have been over: an inventory ingested, a vacuum run that deleted two files of each
    table (``restore-<Sid>`` and ``purge-<Sid>``: one a restore may change, one a purge may, for each of the
    undo role's statements), and a delivery of S3 Inventory waiting in the deliveries bucket. The lake's
    bucket has S3 Object Lock on: a legal hold keeps a version of ``purge-ReadObjectLocksUnderTables``; of
    table ``locked``'s two, governance-mode retention keeps one, a legal hold the other."""

    def __init__(self, lake: Lake):
        self.lake = lake
        self.tables = {name: lake.table(name) for name in [
            *(f"{command}-{sid}" for sid in SIDS[Role.UNDO] for command in ("restore", "purge")), "locked"]}
        lake.inventory_taken()
        lake.delivered()
        report = lake.tmp_path / "vacuum.json"
        code = vacuum_main(["--inventory-table", lake.inventory, "--audit-table", lake.audit, "--report", str(report),
                            *[a for root, _ in self.tables.values() for a in ("--table", root)],
                            "--retention-hours", "0", "--force-retention", "--apply",
                            "--s3-endpoint-url", lake.server.endpoint])
        assert code == 0
        self.run_id = json.loads(report.read_text())["run_id"]
        self.until = (datetime.now(timezone.utc) + timedelta(days=30)).replace(microsecond=0)
        governed, held = self.tables["locked"][1]
        for path in (self.tables["purge-ReadObjectLocksUnderTables"][1][0], held):
            lake.client.put_object_legal_hold(**self.hidden(path), LegalHold={"Status": "ON"})
        lake.client.put_object_retention(**self.hidden(governed), Retention={"Mode": "GOVERNANCE",
                                                                             "RetainUntilDate": self.until})

    def hidden(self, path: str) -> dict[str, str]:
        """The version of ``path`` the vacuum's delete marker hides, as boto3 names it."""
        key = path.split("/", 3)[3]
        [version] = [o.version_id for o in _listing(self.lake.client, self.lake.lake)
                     if o.key == key and not o.is_delete_marker]
        return {"Bucket": self.lake.lake, "Key": key, "VersionId": version}

    def versions(self, bucket: str, prefix: str = "") -> set[tuple[str, str]]:
        return {(o.key, o.version_id) for o in _listing(self.lake.client, bucket) if o.key.startswith(prefix)}


@pytest.fixture(scope="module")
def housekept(spark, s3_endpoint, server, tmp_path_factory):
    point_s3a_at(spark, s3_endpoint)  # as the s3 fixture does
    lake = Lake(spark, server, tmp_path_factory.mktemp("housekept"), object_lock=True)
    with pytest.MonkeyPatch.context() as monkeypatch, lake.connected(monkeypatch):
        monkeypatch.setenv("AWS_ALLOW_HTTP", "true")
        return Housekept(lake)


@pytest.fixture
def housekeeping(housekept, monkeypatch):
    monkeypatch.setenv("AWS_ALLOW_HTTP", "true")
    with housekept.lake.connected(monkeypatch):
        yield housekept


@pytest.mark.slow
@pytest.mark.s3a
@pytest.mark.parametrize("sid", SIDS[Role.INGESTION])
def test_without_any_one_statement_the_ingestion_fails_in_a_line_naming_it_and_commits_nothing(housekeeping, capsys,
                                                                                                 sid):
    lake = housekeeping.lake
    _kms_skip(lake, sid)
    log = housekeeping.versions(lake.ops, "housekeeping/inventory/_delta_log/")
    code, printed = lake.as_user(Role.INGESTION, ingest_main, [
        "--inventory-table", lake.inventory, "--inventory-root", f"s3://{lake.deliveries}/inventory",
        *_report(lake, sid, "ingestion")], capsys, without=sid)

    assert code == 1 and "Traceback" not in printed, printed
    assert _naming(printed.splitlines(), _statement(lake, Role.INGESTION, sid)), (sid, printed)
    assert housekeeping.versions(lake.ops, "housekeeping/inventory/_delta_log/") == log  # no delivery ingested


@pytest.mark.slow
@pytest.mark.s3a
@pytest.mark.parametrize("sid", SIDS[Role.REPORTS])
def test_without_any_one_statement_the_erasure_evidence_fails_in_a_line_naming_it(housekeeping, capsys, sid):
    """The reports role's widest job: the audit, the inventory and the tables' logs read, a report written."""
    lake = housekeeping.lake
    _kms_skip(lake, sid)
    root, removed = housekeeping.tables[f"purge-{SIDS[Role.UNDO][0]}"]
    code, printed = lake.as_user(Role.REPORTS, reports_main, [
        "erasure", "--audit-table", lake.audit, "--inventory-table", lake.inventory, "--path", removed[0],
        "--commit", f"{root}@2", *_report(lake, sid, "erasure")], capsys, without=sid)

    assert code == 1 and "Traceback" not in printed, printed
    assert _naming(printed.splitlines(), _statement(lake, Role.REPORTS, sid)), (sid, printed)


# Statements that inform an undo and never decide it: without one, the run does its work and says in a line
# what it could not read.
INFORMING = {"ReadLifecycleRules"}


@pytest.mark.slow
@pytest.mark.s3a
@pytest.mark.parametrize("sid", SIDS[Role.UNDO])
def test_without_any_one_statement_a_restore_or_a_purge_fails_in_a_line_naming_it_and_deletes_nothing_unplanned(
        housekeeping, capsys, sid):
    """The restore first, on a table of its own; where it needs no such statement, the purge (its widest
    form: every table the inventory shows re-checked), on another."""
    lake = housekeeping.lake
    _kms_skip(lake, sid)
    undo = ["--audit-table", lake.audit, "--apply", "--s3-endpoint-url", lake.server.endpoint]
    outcomes = []
    for command, flags in (("restore", ["--run-id", housekeeping.run_id]),
                           ("purge", ["--older-than-days", "0", "--inventory-table", lake.inventory])):
        root, removed = housekeeping.tables[f"{command}-{sid}"]
        prefix = root.split("/", 3)[3] + "/"
        before = housekeeping.versions(lake.lake, prefix)
        code, printed = lake.as_user(Role.UNDO, vacuum_main, [
            command, *flags, "--table", root, *_report(lake, sid, command), *undo], capsys, without=sid)
        lost = {key for key, _ in before - housekeeping.versions(lake.lake, prefix)}
        assert lost <= {p.split("/", 3)[3] for p in removed} and "Traceback" not in printed, (command, printed)
        outcomes.append((command, code, _naming(printed.splitlines(), _statement(lake, Role.UNDO, sid))))
        if code == 1:
            break
    codes = [code for _, code, _ in outcomes]
    assert codes == ([0, 0] if sid in INFORMING else [0] * (len(codes) - 1) + [1]), (sid, outcomes, printed[-3000:])
    assert outcomes[-1][2], (sid, outcomes, printed[-3000:])


@pytest.mark.slow
@pytest.mark.s3a
def test_the_undo_role_names_each_lock_a_purge_meets_and_bypasses_governance_only_when_its_policy_says_so(
        housekeeping, capsys):
    """With its whole policy the purge names each lock and its date; told to bypass governance by a role
    whose policy does not say so, it names the permission S3 refused (the table is named ``locked``: S3's
    refusal, not a word in a path, tells a lock); with the bypass granted, only the legal hold stays."""
    lake = housekeeping.lake
    root, (governed, held) = housekeeping.tables["locked"]
    purge = ["purge", "--older-than-days", "0", "--table", root, "--audit-table", lake.audit, "--apply",
             "--s3-endpoint-url", lake.server.endpoint]
    day = housekeeping.until.strftime("%Y-%m-%dT%H:%M:%S")

    code, printed = lake.as_user(Role.UNDO, vacuum_main, purge, capsys)
    assert code == 1, printed
    assert [line for line in printed.splitlines() if governed in line and f"locked until {day}" in line
            and "governance mode" in line], printed
    assert [line for line in printed.splitlines() if held in line and "under a legal hold" in line], printed

    code, printed = lake.as_user(Role.UNDO, vacuum_main, [*purge, "--bypass-governance-retention"], capsys)
    assert code == 1 and _naming(printed.splitlines(), {"Action": "s3:BypassGovernanceRetention",
                                                        "Resource": f"arn:aws:s3:::{lake.lake}/warehouse/*"}), printed
    assert lake.client.head_object(**housekeeping.hidden(governed))  # still there

    bypassing = replace(lake.scope, bypass_governance=True)
    code, printed = lake.as_user(Role.UNDO, vacuum_main, [*purge, "--bypass-governance-retention"], capsys,
                                 scope=bypassing)
    assert code == 1 and "under a legal hold" in printed, printed  # the hold stays: no flag bypasses it
    versions = {o.key for o in _listing(lake.client, lake.lake) if not o.is_delete_marker}
    assert governed.split("/", 3)[3] not in versions and held.split("/", 3)[3] in versions


@pytest.mark.slow
@pytest.mark.s3a
def test_the_vacuum_role_deletes_nothing_outside_the_tables_prefixes_nor_a_log(lake):
    """Asked directly, as a log naming ``../`` paths or another bucket would have it asked: S3 refuses."""
    lake.table("orders")
    outside = {(lake.other, "warehouse/orders/part-0.parquet"), (lake.lake, "elsewhere/part-0.parquet"),
               (lake.lake, "warehouse/orders/_delta_log/00000000000000000000.json")}
    for bucket, key in outside:
        if bucket == lake.other or key.startswith("elsewhere"):
            lake.client.put_object(Bucket=bucket, Key=key, Body=b"x")
    user = lake.server.user(f"vacuum-{uuid.uuid4().hex[:6]}", policy(Role.VACUUM, lake.scope))
    targets = [Target(f"s3://{lake.lake}/warehouse/orders", f"s3://{bucket}/{key}", 1, 0) for bucket, key in outside]
    with lake.server.acting(user):
        outcomes = list(S3BatchDeleter(DeleteSettings(endpoint_url=lake.server.endpoint)).delete(targets))
    assert {o.action.value for o in outcomes} == {"failed"}
    for o in outcomes:
        assert "AccessDenied" in o.error and "s3:DeleteObject" in o.error, o.error
    for bucket, key in outside:
        lake.client.head_object(Bucket=bucket, Key=key)  # still there

