"""The one Spark session builder both jobs use.

Master comes from the flag, else ``SPARK_MASTER``, else whatever spark-submit set,
else ``local[*]``. Delta's SQL extension and catalog are configured only when Delta's
jars are already on the classpath: we detect them, we never download them.
"""

from __future__ import annotations

import os
import sys

from pyspark import SparkConf, SparkContext
from pyspark.sql import SparkSession

DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
DELTA_CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"


def _class_on_classpath(class_name: str) -> bool:
    """True when the (already launched) JVM can load ``class_name``."""
    SparkContext._ensure_initialized()
    jvm = SparkContext._jvm
    loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
    try:
        loader.loadClass(class_name)
        return True
    except Exception:  # py4j raises Py4JJavaError(ClassNotFoundException)
        return False


def delta_jars_present() -> bool:
    """Whether Delta Lake's Spark jars can be loaded by this driver."""
    return _class_on_classpath(DELTA_EXTENSION)


def _local_cores(master: str) -> int:
    """Cores of a ``local``, ``local[N]`` or ``local[*]`` master."""
    inside = master[master.find("[") + 1:master.find("]")] if "[" in master else "1"
    count = inside.split(",")[0]
    return os.cpu_count() or 1 if count == "*" else max(1, int(count))


def get_spark(app_name: str, master: str | None = None) -> SparkSession:
    """Build (or reuse) the session: UTC, quiet logs, Delta configured if its jars exist."""
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    conf = SparkConf()
    master = master or os.environ.get("SPARK_MASTER") or conf.get("spark.master", None) or "local[*]"
    builder = (
        SparkSession.builder.appName(app_name)
        .master(master)
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.ui.enabled", os.environ.get("SPARK_UI_ENABLED", "false"))
        # No _SUCCESS markers inside Delta tables we write.
        .config("spark.hadoop.mapreduce.fileoutputcommitter.marksuccessfuljobs", "false")
        .config("spark.hadoop.parquet.enable.summary-metadata", "false")
    )
    if master.startswith("local"):
        # Python workers on this machine must be this interpreter (the venv), not whatever "python3" is.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        # 200 shuffle partitions is a cluster default; on one machine a few per core will do.
        builder = builder.config("spark.sql.shuffle.partitions", str(2 * _local_cores(master)))
    if delta_jars_present():
        builder = builder.config("spark.sql.extensions", DELTA_EXTENSION).config(
            "spark.sql.catalog.spark_catalog", DELTA_CATALOG
        )
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(os.environ.get("SPARK_LOG_LEVEL", "ERROR"))
    if not master.startswith("local"):
        _ship_project(spark)
    return spark


PROJECT_PACKAGES = ("lakeio", "inventory_etl", "vacuum_jobs", "lake_reports")


def _ship_project(spark: SparkSession) -> None:
    """Executors on a cluster run our Python code too (deletes, row checks): send them this project's packages.

    Harmless when spark-submit --py-files already shipped them. Third-party libraries
    (deltalake, boto3, pyarrow) must be installed on the executors.
    """
    import importlib
    import tempfile
    import zipfile
    from pathlib import Path

    archive = Path(tempfile.mkdtemp(prefix="lake-housekeeping-")) / "lake_housekeeping.zip"
    with zipfile.ZipFile(archive, "w") as out:
        for package in PROJECT_PACKAGES:
            folder = Path(importlib.import_module(package).__file__).parent
            for source in folder.rglob("*.py"):
                out.write(source, Path(package) / source.relative_to(folder))
    spark.sparkContext.addPyFile(str(archive))
