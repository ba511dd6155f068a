"""The one Spark session builder every job uses.

The cluster decides: master and every setting come from spark-submit (``--master``,
``--conf``, ``spark-defaults.conf``) or from a session that already runs (notebooks,
Databricks). Only what nobody set is filled in: ``local[*]`` when there is no master,
a few shuffle partitions per core on a local master, no console progress bars, and a driver
JVM we launch ourselves starts from the class-data archive if there is one
(lakeio.spark.jvm_archive). Delta's
SQL extension and catalog are configured only when Delta's jars are already on the
classpath: we detect them, we never download them.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyspark
from pyspark import SparkConf, SparkContext
from pyspark.sql import SparkSession

from lakeio.errors import HousekeepingError
from lakeio.spark import jvm_archive

DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
DELTA_CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"
# Settings the jobs depend on for their results, not the cluster's business: set on our session only.
SESSION_SETTINGS = {"spark.sql.session.timeZone": "UTC"}
# Set on our session unless the launch conf names them: with them the plans stay fast at a cluster's
# 200 shuffle partitions. Without this one, adaptive execution leaves a cached frame at 200
# partitions and every later job over it runs 200 tasks (benchmarks/RESULTS.md, "Figures behind
# the code's rules").
SESSION_TUNING = {"spark.sql.optimizer.canChangeCachedPlanOutputPartitioning": "true"}
# Set the same way, to the session's default parallelism: past 32 files Spark lists the files a
# read names in a job of one task per file (up to 10,000), which costs more than the reading.
LISTING_PARALLELISM = "spark.sql.sources.parallelPartitionDiscovery.parallelism"
# Filled in only where neither spark-submit nor the cluster's defaults say otherwise.
DEFAULTS = {
    "spark.ui.showConsoleProgress": "false",
    # No _SUCCESS markers or summary files inside the Delta tables we write.
    "spark.hadoop.mapreduce.fileoutputcommitter.marksuccessfuljobs": "false",
    "spark.hadoop.parquet.enable.summary-metadata": "false",
}
# How a driver JVM we launch logs: the run's own lines only, Spark's errors (shipped in the package).
LOG_CONFIG = Path(__file__).with_name("log4j2.properties")
log = logging.getLogger(__name__)


# An object of the driver's JVM reached through py4j (a Hadoop path, a Delta transaction): untyped on this side.
JvmObject = Any


def jvm_of(spark: SparkSession) -> JvmObject:
    """The session's JVM view (py4j: untyped on this side); a session without one (Spark Connect) is refused."""
    jvm = spark.sparkContext._jvm
    if jvm is None:
        raise HousekeepingError("a classic (JVM) Spark session is needed: Spark Connect is not supported")
    return jvm


def jvm_class(class_name: str) -> JvmObject:
    """The (already launched) JVM's class ``class_name``, loaded where ``--jars`` puts classes (the
    context class loader, not the one ``Class.forName`` alone asks). Raises when there is none."""
    SparkContext._ensure_initialized()
    jvm = SparkContext._jvm
    assert jvm is not None
    return jvm.java.lang.Thread.currentThread().getContextClassLoader().loadClass(class_name)


def _class_on_classpath(class_name: str) -> bool:
    """True when the (already launched) JVM can load ``class_name``."""
    try:
        jvm_class(class_name)
        return True
    except Exception:  # py4j raises Py4JJavaError(ClassNotFoundException)
        return False


# The classes that say which jars a run has: Delta's (whose reader then reads our tables) and the S3 connector.
S3A_FILE_SYSTEM = "org.apache.hadoop.fs.s3a.S3AFileSystem"


def engine_jars() -> str:
    """Which Delta and S3 connector jars this driver loads, by jar name: what every run says in its first
    line. deltalake commits our tables either way (lakeio.tables.write: put-if-absent on every store)."""
    delta, s3a = _jar_of(DELTA_EXTENSION), _jar_of(S3A_FILE_SYSTEM)
    said = f"Delta's jars ({delta})" if delta else "no Delta jars"
    return f"{said}; deltalake commits our tables; " + (f"S3 connector {s3a}" if s3a else "no S3 connector (s3a://)")


def _jar_of(class_name: str) -> str | None:
    """The file name of the jar ``class_name`` is loaded from; None when it cannot be loaded."""
    try:
        source = jvm_class(class_name).getProtectionDomain().getCodeSource()
    except Exception:  # py4j raises Py4JJavaError(ClassNotFoundException)
        return None
    return os.path.basename(str(source.getLocation().getPath())) if source is not None else class_name


def delta_jars_present() -> bool:
    """Whether Delta Lake's Spark jars can be loaded by this driver."""
    return _class_on_classpath(DELTA_EXTENSION)


def _local_cores(master: str) -> int:
    """Cores of a ``local``, ``local[N]`` or ``local[*]`` master."""
    inside = master[master.find("[") + 1:master.find("]")] if "[" in master else "1"
    count = inside.split(",")[0]
    return os.cpu_count() or 1 if count == "*" else max(1, int(count))


def _launch_conf(master: str | None = None) -> SparkConf:
    """The conf a new session starts with: spark-submit's and the cluster's, then our fill-ins.

    ``SparkConf()`` only sees spark-submit's settings once the JVM gateway is up (before,
    it is an empty Python dict), so the gateway is started (or joined) first. An explicit
    ``master`` (our ``--master`` flag) wins; else spark-submit's; else ``$SPARK_MASTER``;
    else ``local[*]``.
    """
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ  # spark-submit started this driver and its JVM
    # Under ``python -m`` pyspark's launcher runs spark-submit itself, which sets a master of its
    # own (local[*]) unless PYSPARK_SUBMIT_ARGS names one: only a master somebody named comes first.
    launch_args = os.environ.get("PYSPARK_SUBMIT_ARGS", "")
    named_at_launch = submitted or "--master" in launch_args or "spark.master" in launch_args
    _start_jvm(submitted, launch_args)
    conf = SparkConf()
    if not submitted:
        # pyspark's own launcher turns progress bars on, as for an interactive shell; they garble the log.
        conf.set("spark.ui.showConsoleProgress", "false")
    launched = conf.get("spark.master", None)
    chosen = (master or (launched if named_at_launch else None) or os.environ.get("SPARK_MASTER") or launched
              or "local[*]")
    conf.setMaster(chosen)
    for key, value in DEFAULTS.items():
        conf.setIfMissing(key, value)
    if chosen.startswith("local"):
        # 200 shuffle partitions is a cluster default; on one machine a few per core will do.
        conf.setIfMissing("spark.sql.shuffle.partitions", str(2 * _local_cores(chosen)))
        conf.setIfMissing("spark.ui.enabled", os.environ.get("SPARK_UI_ENABLED", "false"))
        # Python workers on this machine must be this interpreter (the venv), not whatever "python3" is.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if delta_jars_present():
        conf.setIfMissing("spark.sql.extensions", DELTA_EXTENSION)
        conf.setIfMissing("spark.sql.catalog.spark_catalog", DELTA_CATALOG)
    return conf


def _start_jvm(submitted: bool, launch_args: str) -> None:
    """Start (or join) the driver JVM; one this process launches starts from the class-data archive
    when there is one (lakeio.spark.jvm_archive), and logs as :data:`LOG_CONFIG` says."""
    with_archive = (None if submitted or SparkContext._gateway is not None
                    else jvm_archive.submit_args(launch_args, also=_quiet_jvm_options()))
    if with_archive is None:
        SparkContext._ensure_initialized()
        return
    os.environ["PYSPARK_SUBMIT_ARGS"] = with_archive
    try:
        SparkContext._ensure_initialized()
    finally:  # for this launch only: child processes choose for themselves
        if launch_args:
            os.environ["PYSPARK_SUBMIT_ARGS"] = launch_args
        else:
            del os.environ["PYSPARK_SUBMIT_ARGS"]


def _quiet_jvm_options() -> list[str]:
    """The Java option that makes a driver we launch log as :data:`LOG_CONFIG` says; none where the
    user's Spark configures its logging ($SPARK_CONF_DIR) or the run logs at DEBUG (Spark's own lines too)."""
    if any(logging.getLogger(name).isEnabledFor(logging.DEBUG) for name in PROJECT_PACKAGES):
        return []
    spark_home = os.environ.get("SPARK_HOME") or os.path.dirname(pyspark.__file__)
    conf_dir = os.environ.get("SPARK_CONF_DIR") or os.path.join(spark_home, "conf")
    if any(os.path.exists(os.path.join(conf_dir, name)) for name in ("log4j2.properties", "log4j2.xml", "log4j2.yaml")):
        return []
    global JVM_LOG
    JVM_LOG = _new_jvm_log()
    return [f"-Dlog4j2.configurationFile={LOG_CONFIG.as_uri()}", f"-Dlakehousekeeping.log={JVM_LOG}"]


JVM_LOG: Path | None = None  # the log file of the driver JVM this process launched, where LOG_CONFIG applies
JVM_LOGS_KEPT_DAYS = 7


def _new_jvm_log() -> Path:
    """A log file of its own for the driver this process launches, in the user's cache; those older than
    :data:`JVM_LOGS_KEPT_DAYS` go."""
    folder = jvm_archive.cache_dir() / "logs"
    folder.mkdir(parents=True, exist_ok=True)
    old = time.time() - JVM_LOGS_KEPT_DAYS * 86400
    for earlier in folder.glob("spark-*.log"):
        with contextlib.suppress(OSError):
            if earlier.stat().st_mtime < old:
                earlier.unlink()
    return folder / f"spark-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}.log"


def get_spark(app_name: str, master: str | None = None) -> SparkSession:
    """The running session if there is one (notebooks, Databricks), else a new one from ``_launch_conf``."""
    spark = SparkSession.getActiveSession()
    if spark is None:
        conf = _launch_conf(master)
        conf.setIfMissing("spark.app.name", app_name)
        spark = SparkSession.builder.config(conf=conf).getOrCreate()
        local = (spark.sparkContext.master or "").startswith("local")
        # A laptop run stays quiet; a cluster keeps its own log4j settings unless told otherwise.
        level = os.environ.get("SPARK_LOG_LEVEL", "ERROR" if local else None)
        if level:
            spark.sparkContext.setLogLevel(level)
        if not local:
            _ship_project(spark)
    for key, value in SESSION_SETTINGS.items():
        spark.conf.set(key, value)
    launched_with = spark.sparkContext.getConf()
    tuning = {**SESSION_TUNING, LISTING_PARALLELISM: str(spark.sparkContext.defaultParallelism)}
    for key, value in tuning.items():
        if not launched_with.contains(key):
            spark.conf.set(key, value)
    log.info("spark %s, master %s, application %s, %s shuffle partitions, adaptive execution %s; %s",
             spark.version, spark.sparkContext.master, spark.sparkContext.applicationId,
             spark.conf.get("spark.sql.shuffle.partitions"), spark.conf.get("spark.sql.adaptive.enabled"),
             engine_jars())
    return spark


# (session, key) -> (the value before the first block, the blocks inside): see session_setting.
_HELD: dict[tuple[int, str], tuple[str | None, list[tuple[object, str]]]] = {}
_HELD_LOCK = threading.Lock()


@contextmanager
def session_setting(spark: SparkSession, key: str, value: str) -> Iterator[None]:
    """``key`` set to ``value`` on the session for the block, then as it was (set or not) again.

    For the few settings a step needs for itself (plans are made when an action runs, so it
    must run inside the block). Blocks may nest, or overlap in threads sharing a session (two
    ingestions at once): when one ends, the newest block still open sets the value, and when
    the last ends the value from before the first is back. Other queries planned meanwhile see
    the value too, so blocks stay short."""
    slot, block = (id(spark), key), (object(), value)
    with _HELD_LOCK:
        before, blocks = _HELD.get(slot) or (spark.conf.get(key, None), [])
        spark.conf.set(key, value)
        blocks.append(block)
        _HELD[slot] = (before, blocks)
    try:
        yield
    finally:
        with _HELD_LOCK:
            blocks.remove(block)
            if blocks:
                spark.conf.set(key, blocks[-1][1])
            else:
                del _HELD[slot]
                if before is None:
                    spark.conf.unset(key)
                else:
                    spark.conf.set(key, before)


# Spark's loggers that report at length what we catch and report in one line: a failed task's trace
# (local executors log in the driver's JVM) and the read of a folder whose name is hidden
# (``_delta_log/``, read on purpose).
TASK_FAILURE_LOGGERS = ("org.apache.spark.executor.Executor", "org.apache.spark.scheduler.TaskSetManager")
HIDDEN_FOLDER_LOGGER = "org.apache.spark.sql.execution.datasources.DataSource"
# logger -> (its own level before the first block, or None when it had none; blocks open): see quiet_logs.
_QUIET: dict[str, tuple[object, int]] = {}


@contextmanager
def quiet_logs(spark: SparkSession, *loggers: str) -> Iterator[None]:
    """Spark's ``loggers`` silent for the block, then as configured again (blocks may nest or overlap
    in threads). A logger that had no level of its own gets none back: it follows the root and
    Spark's console filter again. A JVM without log4j 2 keeps its logs as they are."""
    try:
        log4j = jvm_of(spark).org.apache.logging.log4j
        context = log4j.LogManager.getContext(False)
        configured = context.getConfiguration().getLoggers()
        with _HELD_LOCK:
            for name in loggers:
                own = configured.get(name)
                before, blocks = _QUIET.get(name) or (own.getLevel() if own is not None else None, 0)
                log4j.core.config.Configurator.setLevel(name, log4j.Level.OFF)
                _QUIET[name] = (before, blocks + 1)
    except Exception:  # py4j: no such class, or another logging back end
        log.debug("cannot quiet %s", loggers, exc_info=True)
        yield
        return
    try:
        yield
    finally:
        with _HELD_LOCK:
            for name in loggers:
                before, blocks = _QUIET.pop(name)
                if blocks > 1:
                    _QUIET[name] = (before, blocks - 1)
                elif before is not None:
                    log4j.core.config.Configurator.setLevel(name, before)
                else:
                    context.getConfiguration().removeLogger(name)
                    context.updateLoggers()


# PySpark 4 logs every SQL error it raises, as JSON, to these Python loggers: where we catch the
# error and say it in one line, the dump only doubles it.
QUERY_ERROR_LOGGERS = ("SQLQueryContextLogger", "DataFrameQueryContextLogger")


@contextmanager
def quiet_query_errors() -> Iterator[None]:
    """PySpark's JSON dump of a failed query off for the block (an error we catch and report)."""
    try:
        from pyspark.logger import PySparkLogger  # its own class: a plain logger of that name breaks PySpark's calls
    except ImportError:  # PySpark 3.5 logs no such thing
        yield
        return
    loggers = [PySparkLogger.getLogger(name) for name in QUERY_ERROR_LOGGERS]
    before = [logger.disabled for logger in loggers]
    for logger in loggers:
        logger.disabled = True
    try:
        yield
    finally:
        for logger, was in zip(loggers, before):
            logger.disabled = was


# Spark's error conditions for a file that is not there: at planning (a read naming it) and in a task.
_MISSING_FILE_CONDITIONS = ("PATH_NOT_FOUND", "FAILED_READ_FILE.FILE_NOT_EXIST")
_MISSING_FILE_CLASS = "java.io.FileNotFoundException"  # Spark 3.5 throws its own subclass of it


def is_missing_file(error: BaseException) -> bool:
    """Spark failed because a file it was to read is gone: told by the error's condition or by a
    ``FileNotFoundException`` in the Java causes, never by its message (which varies by version)."""
    if isinstance(error, FileNotFoundError):
        return True
    condition = getattr(error, "getCondition", None) or getattr(error, "getErrorClass", None)
    if condition is not None and (condition() or "") in _MISSING_FILE_CONDITIONS:
        return True
    throwable = getattr(error, "java_exception", None) or getattr(error, "_origin", None)
    while throwable is not None:
        kind = throwable.getClass()
        while kind is not None:
            if kind.getName() == _MISSING_FILE_CLASS:
                return True
            kind = kind.getSuperclass()
        throwable = throwable.getCause()
    return False


PROJECT_PACKAGES = ("lakeio", "inventory_etl", "vacuum_jobs", "lake_reports")


class WorkerPythonError(HousekeepingError, RuntimeError):
    """Spark's Python workers cannot run this project's code."""


_WORKERS_CHECKED: set[str] = set()  # applications whose workers import the project


def check_workers(spark: SparkSession) -> None:
    """Once per application: Spark's Python workers can import this project, before a job needs
    them to. A notebook's or script's own session often starts the system ``python3`` on its
    workers, where a task would fail deep inside a job (``ModuleNotFoundError: inventory_etl``).
    Where only the project's own packages are missing they are shipped (as ``get_spark`` does on
    a cluster); anything else raises :class:`WorkerPythonError` saying what to set. Local workers
    that run this very interpreter need no check (the job costs a cold process seconds)."""
    context = spark.sparkContext
    if context.applicationId in _WORKERS_CHECKED:
        return
    if (context.master or "").startswith("local") and _this_interpreter(context.pythonExec):
        _WORKERS_CHECKED.add(str(context.applicationId))
        return
    missing, problem = _probe_workers(context)
    if missing in PROJECT_PACKAGES:
        _ship_project(spark)
        missing, problem = _probe_workers(context)
    if problem:
        raise WorkerPythonError(
            f"Spark's Python workers {problem}. Start the session with the Python that has lake-housekeeping "
            f"installed: PYSPARK_PYTHON={sys.executable} in the environment before the session starts "
            "(os.environ[\"PYSPARK_PYTHON\"] = sys.executable ahead of SparkSession.builder); on a cluster, "
            "install the package on the executors")
    _WORKERS_CHECKED.add(str(context.applicationId))


def _this_interpreter(command: str | None) -> bool:
    """Whether ``command`` (PySpark's worker Python) names the driver's interpreter: the same path,
    not the same binary (a virtualenv's python links to the system one, but its packages differ)."""
    found = shutil.which(command) if command else None
    return found is not None and os.path.abspath(found) == os.path.abspath(sys.executable)


def _probe_workers(context: SparkContext) -> tuple[str | None, str | None]:
    """(the module a worker cannot import, what went wrong), or (None, None). One task."""
    packages = PROJECT_PACKAGES

    def probe(_: int) -> tuple[str | None, str | None]:  # nested, so that it travels by value: a worker that lacks our packages can run it
        import importlib
        import sys as worker

        for name in packages:
            try:
                importlib.import_module(name)
            except Exception as exc:  # the module missing, which may be one this package imports
                found = f"run {worker.executable} (Python {worker.version.split()[0]})"
                return getattr(exc, "name", None) or name, f"{found}, which cannot import {name}: {exc!r}"
        return None, None

    context.setJobDescription("checking that Spark's Python workers import lake-housekeeping")
    try:
        found: tuple[str | None, str | None] = context.parallelize([0], 1).map(probe).first()
        return found
    except Exception as exc:
        return None, f"do not start ({str(exc).strip().splitlines()[0][:300]})"
    finally:
        context.setJobDescription(None)  # type: ignore[arg-type]


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
            folder = Path(str(importlib.import_module(package).__file__)).parent
            for source in folder.rglob("*.py"):
                out.write(source, Path(package) / source.relative_to(folder))
    spark.sparkContext.addPyFile(str(archive))
