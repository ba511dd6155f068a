"""The storage failures everyone meets are said in one line that says what to do.

The first case is real: this Spark has no file system for ``s3://`` (no hadoop-aws here), so a
vacuum of an ``s3://`` table, and a delete against a bucket moto does not have, fail as they
would on a fresh cluster. So are an unknown access key, a wrong secret (moto's server checking
signatures) and a port no one listens at: what S3 or the socket said leads the line. The others are
the messages S3A, the AWS SDK and boto3 give for them.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from lakeio.text import first_line, storage_advice
from tests.lakes import inventory_of
from tests.s3_faults import moto_server
from vacuum_jobs.cli import main
from vacuum_jobs.delete_tasks import delete_planned
from vacuum_jobs.deletes import DeleteSettings


@pytest.mark.slow
def test_a_scheme_without_a_file_system_names_the_connector(spark, tmp_path, capsys):
    bucket = tmp_path / "lake"
    (bucket / "t").mkdir(parents=True)
    (bucket / "t" / "data.parquet").write_bytes(b"x")
    inventory = inventory_of(spark, bucket, tmp_path)
    assert main(["--inventory-table", inventory, "--table", "s3://lake-prod/warehouse/t", "--dry-run"]) == 1
    out = capsys.readouterr().out
    assert 'reason: unreadable log: s3://lake-prod/warehouse/t/_delta_log: cannot list: no file system for "s3://" ' \
           "on this Spark: use s3a:// URIs with hadoop-aws on the classpath" in out
    assert "An error occurred while calling" not in out


@pytest.mark.slow
def test_a_delete_in_a_bucket_that_does_not_exist_says_so(spark, s3_endpoint):
    missing = f"gone-{uuid.uuid4().hex[:10]}"
    targets = spark.createDataFrame([(f"s3://{missing}/t", f"s3://{missing}/t/a.parquet", 1, 0, [])],
                                    "table_root string, path string, length long, modificationTime long, "
                                    "version_ids array<string>")
    outcomes = delete_planned(spark, targets, DeleteSettings(endpoint_url=s3_endpoint), "run").collect()
    assert [r["action"] for r in outcomes] == ["failed"]
    assert outcomes[0]["error"].startswith("NoSuchBucket: ") and "(no such bucket: check the bucket name" in \
        outcomes[0]["error"], outcomes[0]["error"]


MESSAGES = {
    "s3a 403": ("java.nio.file.AccessDeniedException: s3a://lake/t/_delta_log: getFileStatus on s3a://lake/t/_delta_log:"
                " com.amazonaws.services.s3.model.AmazonS3Exception: Forbidden (Service: Amazon S3; Status Code: 403; "
                "Error Code: 403 Forbidden; Request ID: 4B2E)", "access denied: the credentials this job runs with"),
    "boto3 principal": ("An error occurred (AccessDenied) when calling the ListObjectsV2 operation: User: "
                        "arn:aws:sts::123456789012:assumed-role/vacuum/i-0abc is not authorized to perform: "
                        "s3:ListBucket on resource: \"arn:aws:s3:::lake\"",
                        "access denied: arn:aws:sts::123456789012:assumed-role/vacuum/i-0abc may not s3:ListBucket on "
                        "arn:aws:s3:::lake: grant it"),
    "deltalake chain": ("Kernel error -> The operation lacked the necessary privileges to complete for path t/_delta_log/"
                        "0.json\n  \x1b[31m↳\x1b[0m 403 Forbidden\n   \x1b[31m↳\x1b[0m <Error><Code>AccessDenied</Code>"
                        "<Message>User\n    \x1b[31m↳\x1b[0m arn:aws:iam::123456789012:user/undo is not authorized to "
                        "perform\n     \x1b[31m↳\x1b[0m kms:Decrypt on resource\n      \x1b[31m↳\x1b[0m \"arn:aws:kms:"
                        "eu-west-1:123456789012:key/k-1\" because no identity-based policy allows it</Message></Error>",
                        "access denied: arn:aws:iam::123456789012:user/undo may not kms:Decrypt on "
                        "arn:aws:kms:eu-west-1:123456789012:key/k-1: grant it"),
    "no bucket": ("org.apache.hadoop.fs.s3a.UnknownStoreException: `s3a://lake-prod/t': Bucket does not exist",
                  "no such bucket: check the bucket name"),
    "sdk no bucket": ("com.amazonaws.services.s3.model.AmazonS3Exception: The specified bucket does not exist "
                      "(Service: Amazon S3; Status Code: 404; Error Code: NoSuchBucket)", "no such bucket"),
    "expired": ("com.amazonaws.services.s3.model.AmazonS3Exception: The provided token has expired. (Service: Amazon "
                "S3; Status Code: 400; Error Code: ExpiredToken)", "the AWS credentials have expired"),
    "s3a class": ("java.lang.RuntimeException: java.lang.ClassNotFoundException: Class "
                  "org.apache.hadoop.fs.s3a.S3AFileSystem not found",
                  "the Hadoop connector is missing (org.apache.hadoop.fs.s3a.S3AFileSystem): put hadoop-aws"),
    "s3a refused": ("org.apache.hadoop.fs.s3a.AWSClientIOException: getFileStatus on s3a://lake/t/_delta_log: "
                    "software.amazon.awssdk.core.exception.SdkClientException: Unable to execute HTTP request: Connect "
                    "to 127.0.0.1:9 [/127.0.0.1] failed: Connection refused", "the endpoint at 127.0.0.1:9 does not answer"),
    "s3a unknown key": ("java.nio.file.AccessDeniedException: s3a://lake/t/_delta_log: getFileStatus on s3a://lake/t/"
                        "_delta_log: software.amazon.awssdk.services.s3.model.S3Exception: The AWS Access Key Id you "
                        "provided does not exist in our records. (Service: S3, Status Code: 403, Request ID: 1)",
                        "the store does not know this access key"),
    "gs": ('org.apache.hadoop.fs.UnsupportedFileSystemException: No FileSystem for scheme "gs"',
           'no file system for "gs://" on this Spark: put the Cloud Storage connector'),
}


@pytest.mark.parametrize("case", sorted(MESSAGES))
def test_common_storage_failures_lead_with_what_to_do(case):
    message, advice = MESSAGES[case]
    wrapped = RuntimeError(f"An error occurred while calling o688.getFileSystem.\n: {message}\n\tat org.apache.x(X.java:1)")
    line = first_line(wrapped)
    assert line.startswith(advice) and "\n" not in line and line.endswith("]"), line
    assert storage_advice("java.io.FileNotFoundException: s3a://lake/t/part-1.parquet") is None


def test_a_failed_tasks_error_is_its_own_reason_whole_without_spark_s_wrapping():
    path = "file:///lake/" + "a-long-table-name/" * 20 + "_delta_log/00000000000000000001.json"
    wrapped = RuntimeError(
        "An error occurred while calling o88.collectToPython.\n: org.apache.spark.SparkException: Job aborted due to "
        "stage failure: Task 0 in stage 3.0 failed 1 times, most recent failure: Lost task 0.0 in stage 3.0 (TID 3) "
        f"(localhost executor driver): org.apache.spark.SparkException: [FAILED_READ_FILE.NO_HINT] Encountered error "
        f"while reading file {path}.  SQLSTATE: KD001\n\tat org.apache.spark.x(X.scala:1)\n"
        f"Caused by: java.io.EOFException: Unexpected end of input in {path}\n\tat java.io.X(X.java:2)")
    assert first_line(wrapped) == (f"SparkException: Encountered error while reading file {path}. "
                                   f"(cause: EOFException: Unexpected end of input in {path})")


def test_a_python_workers_error_is_its_own_last_line_not_pysparks_wrapping():
    """What S3 refused an executor's boto3 call, named whole (the action and the resource), not
    "An exception was thrown from the Python worker"."""
    refused = ('botocore.errorfactory.AccessDenied: An error occurred (AccessDenied) when calling the ListObjectVersions '
               'operation: User: arn:aws:iam::123456789012:user/vacuum is not authorized to perform: '
               's3:ListBucketVersions on resource: "arn:aws:s3:::lake-a"')
    wrapped = RuntimeError("\n  An exception was thrown from the Python worker. Please see the stack trace below.\n"
                           "Traceback (most recent call last):\n  File \"/w/interrupted.py\", line 152, in _looked_at\n"
                           "    versions = key_versions(client, path)\n"
                           f"{refused}\n")
    line = first_line(wrapped)
    assert "\n" not in line and "An error occurred (AccessDenied) when calling the ListObjectVersions" in line
    assert 's3:ListBucketVersions on resource: "arn:aws:s3:::lake-a"' in line, line


_DENYING_SERVER = """
import http.server, sys
class Deny(http.server.BaseHTTPRequestHandler):
    def _deny(self):
        body = b"<Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>"
        self.send_response(403)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    do_GET = do_HEAD = do_PUT = do_POST = _deny
    def log_message(self, *args):
        pass
server = http.server.HTTPServer(("127.0.0.1", 0), Deny)
print(server.server_address[1], flush=True)
server.serve_forever()
"""


def test_a_store_deltalake_cannot_read_is_one_line_with_what_to_do(spark, monkeypatch, capsys):
    """An ``s3://`` inventory table read by deltalake (before any Spark session) whose store denies
    access: one line naming the table and what to do, exit 1, no chain of nested causes. The store is
    a process of its own: deltalake holds the GIL, so a server thread of this process could not answer."""
    import subprocess
    import sys

    server = subprocess.Popen([sys.executable, "-c", _DENYING_SERVER], stdout=subprocess.PIPE, text=True)
    try:
        port = int(server.stdout.readline())
        monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
        monkeypatch.setenv("AWS_ALLOW_HTTP", "true")
        from lake_reports.cli import main as reports_main

        assert reports_main(["erasure", "--verify", "--audit-table", "s3://denied-bucket/audit"]) == 1
    finally:
        server.terminate()
        server.wait()
    err = capsys.readouterr().err
    said = [line for line in err.splitlines() if not line.startswith(("20", "WARN"))]  # less the log's own lines
    assert len(said) == 1 and said[0].startswith("error: s3://denied-bucket/audit: access denied: "), said
    assert "Traceback" not in err and "↳" not in err


def _closed_port() -> str:
    """An endpoint no one listens at: a port bound, then let go."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{probe.getsockname()[1]}"


@pytest.fixture(scope="module")
def strict_s3():
    """moto's server holding one IAM access key, checking every request's signature after it made it:
    (endpoint, known key id, its secret)."""
    import boto3

    with moto_server(authenticated_after=2) as endpoint:
        iam = boto3.client("iam", endpoint_url=endpoint, region_name="us-east-1")
        iam.create_user(UserName="vacuum")
        key = iam.create_access_key(UserName="vacuum")["AccessKey"]
        yield endpoint, key["AccessKeyId"], key["SecretAccessKey"]


# (how the endpoint is set up, what the line must lead with): what S3 or the socket said, not a guess.
FIRST_CAUSES = {
    "closed port": "the endpoint at 127.0.0.1:",
    "unknown key": "the store does not know this access key (InvalidAccessKeyId)",
    "wrong secret": "the secret key does not match the access key (SignatureDoesNotMatch)",
}


@pytest.mark.slow  # a moto server of its own, and deltalake's retries against a closed port
@pytest.mark.parametrize("case", sorted(FIRST_CAUSES))
def test_what_s3_or_the_socket_said_leads_a_storage_error(spark, strict_s3, case, monkeypatch, capsys):
    """deltalake's read of an audit table (before any Spark), and the deleter's boto3 calls, against
    moto's server checking signatures or a port no one listens at."""
    from lake_reports.cli import main as reports_main

    endpoint, key_id, secret = strict_s3
    if case == "closed port":
        endpoint = _closed_port()
    key_id, secret = {"unknown key": ("AKIAUNKNOWNKEY000000", secret), "wrong secret": (key_id, "not-its-secret")}.get(
        case, (key_id, secret))
    for name, value in {"AWS_ENDPOINT_URL": endpoint, "AWS_ALLOW_HTTP": "true", "AWS_ACCESS_KEY_ID": key_id,
                        "AWS_SECRET_ACCESS_KEY": secret, "AWS_MAX_ATTEMPTS": "1"}.items():
        monkeypatch.setenv(name, value)
    assert reports_main(["erasure", "--verify", "--audit-table", "s3://lake/audit"]) == 1
    said = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(said) == 1 and said[0].startswith(f"error: s3://lake/audit: {FIRST_CAUSES[case]}"), said
    if case != "wrong secret":  # the deleter's tasks sign with the session's key, which moto's IAM does not hold
        targets = spark.createDataFrame([("s3://lake/t", "s3://lake/t/part-0.parquet", 1, 0, [])],
                                        "table_root string, path string, length long, modificationTime long, "
                                        "version_ids array<string>")
        settings = DeleteSettings(endpoint_url=endpoint, max_attempts=1)  # a refused connection is retried, else
        (outcome,) = delete_planned(spark, targets, settings, "run").collect()
        assert outcome["action"] == "failed" and f"({FIRST_CAUSES[case]}" in outcome["error"], outcome["error"]


# A line of the run's own: its log (lakeio.cli.LOG_FORMAT, our packages' loggers), or what it says is wrong.
OUR_LINE = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} [A-Z]+ (lakeio|inventory_etl|vacuum_jobs|lake_reports)\.|"
                      r"(error|warning): ")


@pytest.mark.slow
def test_a_commit_beside_a_stale_checksum_is_refused_quietly_in_one_whole_line(spark, tmp_path):
    """Hadoop's local file system checks a file against the ``.crc`` beside it: a commit changed after
    Spark wrote it fails every read. The job's own process says so once, whole, with what to do, and
    prints nothing else: no line of the JVM's start, no line of Spark's."""
    lake = tmp_path / "lake"
    good, broken = lake / "good", lake / ("a-table-whose-path-is-long-" * 6) / "nested" / "broken"
    for table in (good, broken):
        for start in (0, 10):
            write_deltalake(str(table), pa.table({"id": list(range(start, start + 10))}), mode="append")
    commit = broken / "_delta_log" / "00000000000000000001.json"
    written = spark.sparkContext._jvm.org.apache.hadoop.fs.Path(commit.as_uri())
    out = written.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()).create(written, True)
    out.write(bytearray(commit.read_bytes()))  # through Hadoop, which writes the .crc beside it
    out.close()
    assert (commit.parent / f".{commit.name}.crc").exists()
    commit.write_text('{"commitInfo": {}}\n' + commit.read_text())  # still valid JSON, no longer its checksum
    inventory = inventory_of(spark, lake, tmp_path)
    report = tmp_path / "report.json"

    done = subprocess.run([sys.executable, "-m", "vacuum_jobs", "--inventory-table", inventory, "--discover", "--dry-run",
                           "--report", str(report)], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYSPARK_SUBMIT_ARGS": "--driver-memory 1g pyspark-shell"})

    assert done.returncode == 1, done.stderr[-2000:]
    # Quiet: the run's own lines only (lakeio/spark/log4j2.properties), but the JDK's notice of the incubator module
    # Spark 4 loads, which no logging setting reaches.
    theirs = [ln for ln in done.stderr.splitlines() if not OUR_LINE.match(ln)
              and ln != "WARNING: Using incubator modules: jdk.incubator.vector"]
    assert not theirs, theirs
    reason = {Path(t["table"]).name: t["reason"] for t in json.loads(report.read_text())["tables"]}["broken"]
    assert str(commit) in reason and f".{commit.name}.crc" in reason and "delete the stale .crc" in reason, reason
    assert reason.endswith("]") and "…" not in reason and "SQLSTATE" not in reason, reason
    assert f"reason: {reason}" in done.stdout


def test_a_task_that_fails_in_an_executor_is_the_jobs_own_words_and_spark_writes_its_log_file(tmp_path):
    """A report file the executors cannot read (its size is the manifest's, its bytes are not Parquet): the
    job's lines say which, Spark's report of the task (the executor's error, the Python traceback, the
    JVM's frames) goes to the run's log file, and none of it to the terminal."""
    from datetime import datetime, timezone

    from inventory_etl.producer import InventoryObject, write_delivery

    manifest = Path(write_delivery(str(tmp_path / "dest"), "lake", "daily", [InventoryObject("t/a.parquet", 3, 0)],
                                   datetime.now(timezone.utc)))
    [report] = (manifest.parents[1] / "data").glob("*.parquet")
    report.write_bytes(b"x" * report.stat().st_size)
    cache = tmp_path / "cache"

    done = subprocess.run([sys.executable, "-m", "inventory_etl", "--inventory-table", str(tmp_path / "inventory"),
                           "--manifest", str(manifest), "--no-verify-checksums"], capture_output=True, text=True,
                          timeout=600, env={**os.environ, "XDG_CACHE_HOME": str(cache), "LAKE_JVM_ARCHIVE": "off",
                                            "PYSPARK_SUBMIT_ARGS": "--driver-memory 1g pyspark-shell"})

    assert done.returncode == 1, done.stderr[-2000:]
    theirs = [ln for ln in done.stderr.splitlines() if not OUR_LINE.match(ln)
              and ln != "WARNING: Using incubator modules: jdk.incubator.vector"]
    assert not theirs, theirs
    assert str(report) in done.stdout + done.stderr
    [spark_log] = (cache / "lake-housekeeping" / "logs").glob("spark-*.log")
    assert "Exception in task" in spark_log.read_text() or "Lost task" in spark_log.read_text()
