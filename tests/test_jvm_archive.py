"""The JVM class-data archive: written only by a JVM that exited cleanly, then used by every driver
JVM the jobs launch, unless turned off."""

from __future__ import annotations

import subprocess
import sys

import pytest

from lakeio.spark import jvm_archive

# A workload: a session, one job, then the JVM's exit (which writes the archive). With "kill", the
# JVM is killed before its exit instead: what a crash or an OOM kill during the dump leaves.
WORKLOAD = """
import os, signal, sys
from pyspark import SparkContext
from lakeio.spark import jvm_archive
from lakeio.spark.session import get_spark
spark = get_spark("workload")
spark.range(10).selectExpr("sum(id)").collect()
if sys.argv[1] == "kill":
    os.kill(SparkContext._gateway.proc.pid, signal.SIGKILL)
sys.exit(jvm_archive.exit_jvm(spark))
"""

# Prints the driver JVM's own arguments, after a job ran, and PYSPARK_SUBMIT_ARGS after the launch.
PROBE = """
import os
from lakeio.spark.session import get_spark
spark = get_spark("probe")
assert spark.range(5).count() == 5
for argument in spark.sparkContext._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments():
    print("jvm argument:", argument)
print("submit args after:", os.environ["PYSPARK_SUBMIT_ARGS"])
"""


@pytest.mark.slow  # two JVMs' workloads, and the archive they write
def test_only_a_cleanly_exited_jvm_writes_the_archive_and_every_launch_then_uses_it(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setenv("PYSPARK_SUBMIT_ARGS", "--driver-memory 1g pyspark-shell")
    monkeypatch.delenv(jvm_archive.SETTING, raising=False)
    archive = jvm_archive.path()
    assert str(archive).startswith(str(tmp_path))

    # Killed before its exit: nothing is promoted, and no partial file stays behind.
    assert jvm_archive.create(["-c", WORKLOAD, "kill"]) is None
    assert not archive.exists() and not list(archive.parent.glob("*.tmp"))
    assert jvm_archive.submit_args("pyspark-shell") is None  # no archive: launched as before

    assert jvm_archive.create(["-c", WORKLOAD, "exit"]) == archive
    assert archive.stat().st_size > 10 * 2 ** 20 and not list(archive.parent.glob("*.tmp"))
    flag = f"-XX:SharedArchiveFile={archive}"
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    arguments = [line.removeprefix("jvm argument: ") for line in done.stdout.splitlines()
                 if line.startswith("jvm argument: ")]
    assert flag in arguments and "-Xmx1g" in arguments, arguments  # the launch's own options are kept
    assert "submit args after: --driver-memory 1g pyspark-shell" in done.stdout  # as its children will see them


def test_a_launch_that_sets_driver_java_options_or_turns_it_off_is_left_alone(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv(jvm_archive.SETTING, raising=False)
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path / "conf"))
    archive = jvm_archive.path()
    archive.parent.mkdir(parents=True)
    archive.write_bytes(b"an archive")
    assert jvm_archive.submit_args("") == f"--driver-java-options -XX:SharedArchiveFile={archive} pyspark-shell"
    assert jvm_archive.submit_args("--driver-java-options -Dx=1 pyspark-shell") is None
    assert jvm_archive.submit_args("--conf spark.driver.extraJavaOptions=-Dx=1 pyspark-shell") is None
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "spark-defaults.conf").write_text("spark.driver.extraJavaOptions -Dproxy=on\n")
    assert jvm_archive.submit_args("pyspark-shell") is None
    (tmp_path / "conf" / "spark-defaults.conf").write_text("spark.executor.memory 2g\n")
    assert jvm_archive.submit_args("pyspark-shell") is not None
    monkeypatch.setenv(jvm_archive.SETTING, "off")
    assert jvm_archive.submit_args("pyspark-shell") is None
