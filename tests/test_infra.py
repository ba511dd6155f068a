"""infra/: S3 Inventory set-up against moto, the CloudFormation templates against cfn-lint and
the command, and the daily schedule (EMR steps, Airflow DAG) against the jobs' own parsers."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import types
from dataclasses import replace
from pathlib import Path

import boto3
import pytest
import yaml
from moto import mock_aws

from infra import daily, s3_inventory
from infra.package import JOBS, build, entry_script
from inventory_etl.cli import build_parser as inventory_parser
from lake_reports.cli import build_parser as reports_parser
from vacuum_jobs.cli import build_parser as vacuum_parser
from vacuum_jobs.cli import build_undo_parser
from vacuum_jobs.restore_purge import UndoCommand

INFRA = Path(__file__).resolve().parents[1] / "infra"
ACCOUNT = "123456789012"  # moto's account
PARSERS = {"inventory_etl": inventory_parser, "vacuum_jobs": vacuum_parser, "lake_reports": reports_parser}


def _run(capsys, *args: str) -> tuple[int, list[dict]]:
    code = s3_inventory.main(list(args))
    return code, json.loads(capsys.readouterr().out)


@pytest.fixture
def s3():
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        for bucket in ("src-a", "src-b", "src-c", "dest"):
            client.create_bucket(Bucket=bucket)
        yield client


def test_enabling_inventory_is_idempotent_and_keeps_other_policy_statements(s3, capsys):
    other = {"Sid": "DenyInsecureTransport", "Effect": "Deny", "Principal": "*", "Action": "s3:*",
             "Resource": "arn:aws:s3:::dest/*", "Condition": {"Bool": {"aws:SecureTransport": "false"}}}
    s3.put_bucket_policy(Bucket="dest", Policy=json.dumps({"Version": "2012-10-17", "Statement": [other]}))
    args = ["--source-bucket", "src-a", "--source-bucket", "src-b", "--destination-bucket", "dest", "--all-versions"]

    code, first = _run(capsys, *args)
    assert code == 0 and [c["action"] for c in first] == ["created", "created", "created"]
    code, second = _run(capsys, *args)
    assert code == 0 and [c["action"] for c in second] == ["unchanged"] * 3

    expected = s3_inventory.inventory_configuration("lake-housekeeping", "dest", "inventory", True, ACCOUNT)
    stored = s3.get_bucket_inventory_configuration(Bucket="src-a", Id="lake-housekeeping")["InventoryConfiguration"]
    assert stored == expected
    assert {"Size", "LastModifiedDate", "StorageClass", "ETag"} <= set(stored["OptionalFields"])

    # A later run for another bucket adds it to the statement; the earlier buckets stay allowed.
    code, third = _run(capsys, "--source-bucket", "src-c", "--destination-bucket", "dest", "--all-versions")
    assert [c["action"] for c in third] == ["created", "updated"]
    statements = json.loads(s3.get_bucket_policy(Bucket="dest")["Policy"])["Statement"]
    assert statements[0] == other
    assert statements[1] == s3_inventory.delivery_statement("dest", "inventory", ["src-a", "src-b", "src-c"], ACCOUNT)


def test_dry_run_current_versions_and_failures(s3, capsys):
    code, planned = _run(capsys, "--source-bucket", "src-a", "--destination-bucket", "dest", "--dry-run")
    assert code == 0 and [c["action"] for c in planned] == ["would_create", "would_create"]
    with pytest.raises(s3.exceptions.ClientError, match="NoSuchInventoryConfig"):
        s3.get_bucket_inventory_configuration(Bucket="src-a", Id="lake-housekeeping")

    sent = []
    setup = s3_inventory.InventorySetup(s3, ACCOUNT)
    s3.meta.events.register("provide-client-params.s3.PutBucketInventoryConfiguration",
                            lambda params, **_: sent.append(params["InventoryConfiguration"]))
    changes = setup.apply(["src-a", "no-such-bucket"], "dest")
    # moto does not keep IncludedObjectVersions (it always answers "All"), so look at what was sent.
    assert [c["IncludedObjectVersions"] for c in sent] == ["Current"]
    assert [c.action for c in changes] == ["created", "failed", "created"]
    assert "NoSuchBucket" in changes[1].detail and "no-such-bucket" in changes[1].resource
    policy = json.loads(s3.get_bucket_policy(Bucket="dest")["Policy"])
    assert policy["Statement"][0]["Condition"]["ArnLike"]["aws:SourceArn"] == ["arn:aws:s3:::src-a"]


_NO_VALUE = object()  # AWS::NoValue: the list item it stands for is left out


def _resolve(node, names: dict):
    """Enough of CloudFormation's intrinsic functions for these templates (Ref, Sub, Join, Split, If: each
    condition's value in ``names``)."""
    if isinstance(node, list):
        return [item for item in (_resolve(item, names) for item in node) if item is not _NO_VALUE]
    if not isinstance(node, dict):
        return node
    if set(node) == {"Ref"}:
        return _NO_VALUE if node["Ref"] == "AWS::NoValue" else names[node["Ref"]]
    if set(node) == {"Fn::If"}:
        condition, then, otherwise = node["Fn::If"]
        return _resolve(then if names[condition] else otherwise, names)
    if set(node) == {"Fn::Sub"}:
        text, extra = (node["Fn::Sub"], {}) if isinstance(node["Fn::Sub"], str) else node["Fn::Sub"]
        values = {**names, **{k: _resolve(v, names) for k, v in extra.items()}}
        return re.sub(r"\$\{([^}]+)\}", lambda m: str(values[m.group(1)]), text)
    if set(node) == {"Fn::Join"}:
        separator, items = node["Fn::Join"]
        return separator.join(_resolve(items, names))
    if set(node) == {"Fn::Split"}:
        separator, text = node["Fn::Split"]
        return _resolve(text, names).split(separator)
    return {key: _resolve(value, names) for key, value in node.items()}


def _template(name: str, parameters: dict) -> dict:
    template = yaml.safe_load((INFRA / "cloudformation" / name).read_text())
    names = {key: spec.get("Default") for key, spec in template["Parameters"].items()}
    names.update(parameters)
    for key, spec in template["Parameters"].items():
        if spec["Type"] == "CommaDelimitedList":
            names[key] = names[key].split(",")
    names["AWS::AccountId"] = ACCOUNT
    names["InventoryDestinationBucket"] = names.get("DestinationBucketName")  # Ref of a bucket is its name
    return _resolve(template["Resources"], names)


def test_cloudformation_templates_lint_clean_and_match_the_command(s3, capsys):
    cfn_lint = Path(sys.executable).with_name("cfn-lint")  # the console script installed beside this Python
    lint = subprocess.run([str(cfn_lint), *map(str, (INFRA / "cloudformation").glob("*.yaml"))],
                          capture_output=True, text=True)
    assert lint.returncode == 0, lint.stdout + lint.stderr

    code, _ = _run(capsys, "--source-bucket", "src-a", "--source-bucket", "src-b", "--destination-bucket", "dest",
                   "--all-versions")
    assert code == 0
    source = _template("inventory-source.yaml", {"SourceBucketName": "src-a", "DestinationBucketName": "dest",
                                                 "IncludedObjectVersions": "All"})
    cfn = source["SourceBucket"]["Properties"]["InventoryConfigurations"][0]
    as_api = {
        "Id": cfn["Id"], "IsEnabled": cfn["Enabled"],
        "Destination": {"S3BucketDestination": {
            "AccountId": cfn["Destination"]["BucketAccountId"], "Bucket": cfn["Destination"]["BucketArn"],
            "Format": cfn["Destination"]["Format"], "Prefix": cfn["Destination"]["Prefix"]}},
        "Schedule": {"Frequency": cfn["ScheduleFrequency"]},
        "IncludedObjectVersions": cfn["IncludedObjectVersions"], "OptionalFields": cfn["OptionalFields"],
    }
    assert as_api == s3.get_bucket_inventory_configuration(Bucket="src-a", Id=cfn["Id"])["InventoryConfiguration"]

    destination = _template("inventory-destination.yaml", {"DestinationBucketName": "dest",
                                                           "SourceBucketNames": "src-a,src-b"})
    (statement,) = destination["InventoryDeliveryPolicy"]["Properties"]["PolicyDocument"]["Statement"]
    (written,) = json.loads(s3.get_bucket_policy(Bucket="dest")["Policy"])["Statement"]
    assert statement == written


def test_package_is_what_spark_submit_needs(tmp_path):
    built = build(tmp_path / "dist")
    assert set(built) == {"archive", "requirements", "logging", *JOBS}
    assert built["logging"].read_text() == (INFRA.parent / "lakeio" / "spark" / "log4j2.properties").read_text()
    for job in JOBS:
        assert built[job].name == entry_script(job)
        compile(built[job].read_text(), str(built[job]), "exec")
    assert "pyspark" not in built["requirements"].read_text() and "deltalake" in built["requirements"].read_text()
    # The archive, not the source tree or an editable install, is what the driver imports.
    probe = subprocess.run([sys.executable, "-c", "import lake_reports.charges, vacuum_jobs; print(vacuum_jobs.__file__)"],
                           cwd=tmp_path, env={"PYTHONPATH": str(built["archive"]), "PATH": "/usr/bin:/bin"},
                           capture_output=True, text=True)
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.strip().startswith(str(built["archive"]))


@pytest.mark.parametrize("job", JOBS)
def test_every_entry_point_tells_its_version(job, capsys):
    import pyspark

    from lakeio import __version__
    with pytest.raises(SystemExit) as done:
        PARSERS[job]().parse_args(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.strip() == f"lake-housekeeping {__version__} (pyspark {pyspark.__version__})"


def _job_and_args(argv: tuple[str, ...]) -> tuple[str, list[str]]:
    script = next(i for i, arg in enumerate(argv) if arg.endswith(".py"))
    job = next(j for j in JOBS if argv[script].endswith("/" + entry_script(j)))
    return job, list(argv[script + 1:])


def test_daily_steps_run_real_commands_in_a_safe_order():
    settings = daily.load_settings(str(INFRA / "daily.example.yaml"))
    steps = daily.daily_steps(settings, "2026-11-22")
    assert [s.name for s in steps] == ["ingest_inventory", "vacuum_dry_run"]  # deletes are off until enabled
    enabled = daily.daily_steps(replace(settings, deletes_enabled=True), "2026-11-22")
    assert [s.name for s in enabled] == ["ingest_inventory", "vacuum_dry_run", "vacuum", "purge"]
    assert [s.name for s in daily.daily_steps(replace(settings, deletes_enabled=True, undo_window_days=None),
                                              "2026-11-22")] == ["ingest_inventory", "vacuum_dry_run", "vacuum"]
    for step in enabled:
        job, args = _job_and_args(step.argv)
        undo = job == "vacuum_jobs" and args[0] in tuple(UndoCommand)
        parsed = (build_undo_parser(args[0]) if undo else PARSERS[job]()).parse_args(args[undo:])  # flags parse
        assert step.argv[step.argv.index("--py-files") + 1] == f"{settings.artifacts}/{settings.archive}"
        if undo:
            assert (parsed.apply, parsed.older_than_days, parsed.audit_table) == (True, 7, settings.audit_table)
        elif job == "vacuum_jobs":
            assert parsed.dry_run == (step.name == "vacuum_dry_run") and parsed.audit_table == settings.audit_table
    assert not enabled[0].refusals_are_reported and all(s.refusals_are_reported for s in enabled[1:])

    checked_in = json.loads((INFRA / "emr" / "steps.example.json").read_text())
    assert checked_in == daily.emr_steps(settings, "2026-11-22")
    assert [s["ActionOnFailure"] for s in checked_in] == ["CANCEL_AND_WAIT", "CONTINUE"]
    assert all(s["HadoopJarStep"]["Jar"] == "command-runner.jar" for s in checked_in)


def test_settings_errors_name_the_problem(tmp_path):
    bad = tmp_path / "s.yaml"
    bad.write_text("artifacts: x\nspark: y\n")
    with pytest.raises(daily.SettingsError, match="unknown setting"):
        daily.load_settings(str(bad))
    bad.write_text("artifacts: x\n")
    with pytest.raises(daily.SettingsError, match=r"missing setting\(s\) \['archive', 'audit_table'"):
        daily.load_settings(str(bad))
    example = yaml.safe_load((INFRA / "daily.example.yaml").read_text())
    bad.write_text(yaml.safe_dump(example | {"deletes_enabled": "yes"}))
    with pytest.raises(daily.SettingsError, match="deletes_enabled must be true or false"):
        daily.load_settings(str(bad))
    bad.write_text(yaml.safe_dump(example | {"undo_window_days": "a week"}))
    with pytest.raises(daily.SettingsError, match="undo_window_days must be a number of days >= 0"):
        daily.load_settings(str(bad))


class _Recorder:
    """Just enough of Airflow's DAG and BashOperator to record what the DAG file builds."""

    dags: list = []
    tasks: list = []

    class DAG:
        def __init__(self, **kwargs):
            self.kwargs = kwargs
            _Recorder.dags.append(self)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    class BashOperator:
        def __init__(self, task_id: str, bash_command: str):
            self.task_id, self.bash_command, self.downstream = task_id, bash_command, []
            _Recorder.tasks.append(self)

        def __rshift__(self, other):
            self.downstream.append(other.task_id)
            return other


def test_airflow_dag_chains_the_daily_steps(tmp_path, monkeypatch):
    settings = yaml.safe_load((INFRA / "daily.example.yaml").read_text()) | {"deletes_enabled": True}
    (tmp_path / "settings.yaml").write_text(yaml.safe_dump(settings))
    monkeypatch.setenv("LAKE_HOUSEKEEPING_SETTINGS", str(tmp_path / "settings.yaml"))
    airflow = types.ModuleType("airflow")
    airflow.DAG = _Recorder.DAG
    operators, bash = types.ModuleType("airflow.operators"), types.ModuleType("airflow.operators.bash")
    bash.BashOperator = _Recorder.BashOperator
    for name, module in {"airflow": airflow, "airflow.operators": operators, "airflow.operators.bash": bash}.items():
        monkeypatch.setitem(sys.modules, name, module)
    _Recorder.dags, _Recorder.tasks = [], []

    source = (INFRA / "airflow" / "lake_housekeeping_dag.py").read_text()
    exec(compile(source, "lake_housekeeping_dag.py", "exec"), {"__file__": str(tmp_path / "dag.py")})

    (dag,) = _Recorder.dags
    assert dag.kwargs["catchup"] is False and dag.kwargs["max_active_runs"] == 1 and dag.kwargs["schedule"]
    assert [(t.task_id, t.downstream) for t in _Recorder.tasks] == [
        ("ingest_inventory", ["vacuum_dry_run"]), ("vacuum_dry_run", ["vacuum"]), ("vacuum", ["purge"]), ("purge", [])]
    for task in _Recorder.tasks:
        rendered = task.bash_command.replace("{{ ds }}", "2026-11-22")
        assert subprocess.run(["bash", "-n", "-c", rendered]).returncode == 0
        command = shlex.split(rendered.split(" || ")[0])
        job, args = _job_and_args(tuple(command))
        undo = job == "vacuum_jobs" and args[0] in tuple(UndoCommand)
        (build_undo_parser(args[0]) if undo else PARSERS[job]()).parse_args(args[undo:])
        assert ("|| [ $? -eq 1 ]" in task.bash_command) == (task.task_id != "ingest_inventory")
        assert "/2026-11-22/" in rendered  # reports are kept per day
