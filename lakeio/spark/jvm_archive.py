"""A class-data-sharing archive for the driver JVMs this project launches: a cold process starts sooner.

A fresh driver JVM spends seconds loading and verifying Spark's classes, in its session start and
again in its first queries. Java's dynamic CDS archive keeps them parsed and verified on disk, mapped
at start. A process of our own, running a small workload (``python -m demo.warmup``), writes it on
exit; :func:`submit_args` then hands it to every driver JVM that ``get_spark`` launches (a
``python -m`` job or a test, in client mode whatever the master; never under ``spark-submit``,
whose JVM is already running).

An archive is used only once the JVM that wrote it exited cleanly: a truncated archive crashes the
JVM that maps it (SIGBUS), while one from another Java or Spark is refused by the JVM, quietly.
``LAKE_JVM_ARCHIVE=off`` turns it off.
"""

from __future__ import annotations

import glob
import hashlib
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pyspark
from pyspark import SparkContext
from pyspark.sql import SparkSession

SETTING = "LAKE_JVM_ARCHIVE"  # "off", or unset


def cache_dir() -> Path:
    """The project's folder in the user's cache (outside any work tree): JVM archives, fetched jars."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "lake-housekeeping"


def path() -> Path:
    """Where the archive of this Java and this PySpark lives (in the user's cache folder)."""
    java_home = os.environ.get("JAVA_HOME")
    java = os.path.join(java_home, "bin", "java") if java_home else shutil.which("java") or "java"
    identity = f"{os.path.realpath(java)}|{os.path.dirname(pyspark.__file__)}|{pyspark.__version__}"
    return cache_dir() / f"spark-{pyspark.__version__}-{hashlib.sha256(identity.encode()).hexdigest()[:12]}.jsa"


def submit_args(launch_args: str, also: Sequence[str] = ()) -> str | None:
    """``PYSPARK_SUBMIT_ARGS`` (now ``launch_args``) that launch the driver JVM from the archive, with the
    Java options ``also``; None when there is neither (no archive, or it is turned off), or the launch sets
    the driver's Java options itself (which ours would replace)."""
    if names_driver_java_options(launch_args):
        return None
    archive = path()
    usable = os.environ.get(SETTING, "").lower() != "off" and archive.is_file()
    options = [*([f"-XX:SharedArchiveFile={archive}"] if usable else []), *also]
    if not options:
        return None
    return f"--driver-java-options {shlex.quote(' '.join(options))} {launch_args or 'pyspark-shell'}"


def names_driver_java_options(launch_args: str) -> bool:
    """In the launch's arguments, or in spark-defaults.conf."""
    if "java-options" in launch_args or "extraJavaOptions" in launch_args:
        return True
    spark_home = os.environ.get("SPARK_HOME") or os.path.dirname(pyspark.__file__)
    defaults = os.path.join(os.environ.get("SPARK_CONF_DIR") or os.path.join(spark_home, "conf"), "spark-defaults.conf")
    try:
        with open(defaults) as conf:
            return "spark.driver.extraJavaOptions" in conf.read()
    except OSError:
        return False


def create(workload: list[str]) -> Path | None:
    """Run ``python <workload>`` with its driver JVM writing an archive on exit; the archive once that
    JVM exited cleanly, else None (and nothing left behind). The workload must end with
    :func:`exit_jvm`, so that its process ends after the JVM's."""
    final = path()
    final.parent.mkdir(parents=True, exist_ok=True)
    for stale in glob.glob(f"{final}.*.tmp"):
        if not _alive(int(stale.rsplit(".", 2)[1])):
            os.remove(stale)
    partial = Path(f"{final}.{os.getpid()}.tmp")
    env = {**os.environ, SETTING: "off",
           "PYSPARK_SUBMIT_ARGS": f"--driver-java-options {shlex.quote(f'-XX:ArchiveClassesAtExit={partial} -Xlog:disable')} "
                                  + os.environ.get("PYSPARK_SUBMIT_ARGS", "pyspark-shell")}
    done = subprocess.run([sys.executable, *workload], env=env, check=False)
    if done.returncode != 0 or not partial.is_file() or partial.stat().st_size == 0:
        partial.unlink(missing_ok=True)
        return None
    os.replace(partial, final)
    return final


def exit_jvm(spark: SparkSession) -> int:
    """Stop ``spark`` and wait for its driver JVM to exit (writing its archive, when asked to): the
    JVM's exit status, 0 for a clean exit."""
    spark.stop()
    gateway = SparkContext._gateway
    process = getattr(gateway, "proc", None)
    if gateway is None or process is None:  # not a JVM this process launched
        return 0
    gateway.shutdown()
    process.stdin.close()  # the gateway JVM exits when its stdin closes
    return int(process.wait())


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
