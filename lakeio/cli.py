"""Pieces the command lines share: common flags, logging, date arguments, small files anywhere."""

from __future__ import annotations

import argparse
import functools
import logging
import os
import re
import sys
import uuid
from collections.abc import Callable, Iterable, Iterator
from datetime import date
from typing import Any, Protocol
from urllib.parse import urlsplit

import pyspark
from pyspark.sql import SparkSession

from lakeio import __version__
from lakeio.errors import BadInputFile, HousekeepingError
from lakeio.spark import session as sessions
from lakeio.spark.session import PROJECT_PACKAGES, get_spark
from lakeio.store import s3, uris
from lakeio.store.filesystem import Storage
from lakeio.tables.write import DeltaStorageError
from lakeio.text import first_line

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def program(module: str) -> str:
    """How the user started ``module``'s job, for its usage lines: the packaged entry script under
    spark-submit (infra.package's ``run_<module>.py``), the installed console script, or ``python -m``."""
    launched = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    if launched == f"run_{module}.py":
        return f"spark-submit ... {launched}"
    if launched == module.replace("_", "-"):
        return launched
    return f"python -m {module}"


def add_common_arguments(parser: argparse.ArgumentParser) -> None:
    """``--master``, ``--log-level`` and ``--version``, alike on every entry point."""
    parser.add_argument("--master",
                        help="Spark master (default: spark-submit's, else $SPARK_MASTER, else local[*])")
    parser.add_argument("--log-level", choices=LEVELS, default="INFO",
                        help="progress on stderr at this level and above (default: INFO)")
    add_version_argument(parser)


def add_version_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--version", action="version",
                        version=f"lake-housekeeping {__version__} (pyspark {pyspark.__version__})")


def setup_logging(level: str) -> None:
    """Progress and warnings on stderr, one format for every job; stdout stays the summary."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    for name in PROJECT_PACKAGES:
        logger = logging.getLogger(name)
        logger.handlers[:] = [handler]
        logger.setLevel(level)
        logger.propagate = False


def iso_date(text: str) -> date:
    """argparse type for YYYY-MM-DD."""
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a YYYY-MM-DD date: {text!r}") from None


# What each metavar of a place option names (tests/test_cli_inputs.py gives every such option bad values).
PLACE_METAVARS = {"TABLE": "table", "DIR": "folder", "FILE": "file", "FILE.json": "file", "URI": "any",
                  "BUCKET=URI": "folder", "TABLE@VERSION": "table"}


# Schemes whose stores the jobs reach with or without Hadoop (deltalake and boto3 read some); any other
# scheme must have a Hadoop file system on this Spark, or the option naming it is refused before the run.
KNOWN_STORES = ("file", "s3", "s3a", "s3n", "gs", "abfs", "abfss", "wasb", "wasbs", "hdfs")


def place(metavar: str, *, local: bool = False) -> Callable[[str], str]:
    """An argparse type for an option naming a place of the kind ``metavar`` says (:data:`PLACE_METAVARS`;
    ``local``: on this machine's disk only): refused at once, before any Spark, when it is empty or, on the
    local disk, is a file where a folder or table is meant or a folder where a file is. What only the
    store can say (a bucket, a permission) the run says when it reaches it, in one line."""
    kind = PLACE_METAVARS[metavar]

    def checked(text: str) -> str:
        value = place_of(metavar, text)
        if not value.strip():
            raise argparse.ArgumentTypeError(f"empty: expected a {metavar} (a local path or a URI)")
        if local and not _is_local(value):
            raise argparse.ArgumentTypeError(f"{value}: expected a folder on this machine's disk")
        if why := uris.malformed(value):
            raise argparse.ArgumentTypeError(why)
        if kind != "any" and _is_local(value) and value.strip() == value:
            on_disk = uris.local_path(uris.to_uri(value))
            if kind in ("table", "folder") and os.path.isfile(on_disk):
                raise argparse.ArgumentTypeError(f"{value} is a file: expected a "
                                                 + ("table's folder" if kind == "table" else "folder"))
            if kind == "file" and os.path.isdir(on_disk):
                raise argparse.ArgumentTypeError(f"{value} is a folder: expected a file")
        return text

    checked.__name__ = metavar  # argparse names the type in its messages
    return checked


def place_of(metavar: str, text: str) -> str:
    """The place in an option's value: ``URI`` of ``BUCKET=URI``, ``TABLE`` of ``TABLE@VERSION``."""
    if metavar == "BUCKET=URI" and "=" in text:
        return text.partition("=")[2]
    if metavar == "TABLE@VERSION" and "@" in text:
        return text.rpartition("@")[0]
    return text


def open_session(app: str, parser: argparse.ArgumentParser, args: argparse.Namespace) -> SparkSession:
    """The run's logging and Spark session; an option naming a place whose scheme no file system on this
    Spark serves is a usage error (exit status 2) here, before anything is read or written."""
    setup_logging(args.log_level)
    spark = get_spark(app, args.master)
    storage = Storage(spark)
    on_s3: list[tuple[str, str]] = []
    for action in _place_actions(parser):
        values = getattr(args, action.dest, None)
        for value in values if isinstance(values, list) else [values] if values else []:
            scheme = uris.scheme_of(place_of(str(action.metavar), value))
            if scheme in ("s3", "s3a", "s3n") and PLACE_METAVARS[str(action.metavar)] == "table":
                on_s3.append((action.option_strings[0], place_of(str(action.metavar), value)))
            if scheme is None or scheme in KNOWN_STORES:
                continue
            try:
                storage.check_scheme(scheme)
            except Exception as exc:  # noqa: BLE001 - the JVM's reason, in one line
                parser.error(f"{action.option_strings[0]} {value}: {first_line(exc)}")
    if on_s3:
        check_endpoints(spark, on_s3)
    return spark


class EndpointUnreachable(HousekeepingError, OSError):
    """An S3 endpoint the run's places are reached through does not answer."""


ENDPOINT_SECONDS = 5  # a store that has not answered in this long, twice, is not there
_AWS_HOST = re.compile(r"(^|\.)amazonaws\.com(\.cn)?$", re.IGNORECASE)


def check_endpoints(spark: SparkSession, places: list[tuple[str, str]]) -> None:
    """Each endpoint named for the first S3 table (``(option, uri)``) answers: Spark's S3 connector's
    (``fs.s3a.endpoint``) and the Python clients' (``AWS_ENDPOINT_URL``), where set. Said within seconds,
    naming the endpoint, where the connector's own retries would take minutes; any answer at all (a refusal,
    no such key) passes: the run says what it means where it meets it. AWS's own endpoints are not asked. The
    question is a HEAD of the table's first commit, which every role that reads the table may ask."""
    from botocore.exceptions import (
        ClientError,
        ConnectionClosedError,
        ConnectTimeoutError,
        EndpointConnectionError,
        NoCredentialsError,
        ReadTimeoutError,
    )

    option, place = places[0]
    bucket, key = uris.bucket_and_key(uris.join(place, "_delta_log", "00000000000000000000.json"))
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()
    s3a = (hadoop.get("fs.s3a.endpoint") or "").strip()
    if s3a and "://" not in s3a:
        s3a = ("http://" if (hadoop.get("fs.s3a.connection.ssl.enabled") or "").lower() == "false" else "https://") + s3a
    named = (e for e in (s3a, os.environ.get("AWS_ENDPOINT_URL", "").strip()) if e)
    # Hadoop's own default (fs.s3a.endpoint = s3.amazonaws.com on 3.3) and AWS's regional names are AWS's.
    for endpoint in dict.fromkeys(e for e in named if not _AWS_HOST.search(urlsplit(e).hostname or "")):
        client = s3.client(endpoint, connect_timeout=ENDPOINT_SECONDS, read_timeout=ENDPOINT_SECONDS,
                           retries={"total_max_attempts": 2})
        try:
            client.head_object(Bucket=bucket, Key=key)
        except (EndpointConnectionError, ConnectTimeoutError, ReadTimeoutError, ConnectionClosedError) as exc:
            raise EndpointUnreachable(
                f"{place}: the endpoint at {urlsplit(endpoint).netloc or endpoint} does not answer ({type(exc).__name__}, "
                f"twice within {ENDPOINT_SECONDS} s; {option}): check the endpoint URL (AWS_ENDPOINT_URL, "
                "fs.s3a.endpoint, --s3-endpoint-url), the network, and that the service is up") from None
        except (ClientError, NoCredentialsError):
            pass  # it answered


def _place_actions(parser: argparse.ArgumentParser) -> Iterator[argparse.Action]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _place_actions(sub)
        elif action.option_strings and action.metavar in PLACE_METAVARS:
            yield action


def _is_local(path: str) -> bool:
    return uris.scheme_of(path) in (None, "file")


def read_text(spark: SparkSession | None, path: str) -> str:
    """A small input file (tables list, prices) from a local path, or any Hadoop URI (``s3://``) through ``spark``."""
    if _is_local(path):
        with open(uris.local_path(uris.to_uri(path))) as source:
            return source.read()
    if spark is None:
        raise BadInputFile(f"{path}: a remote file is read once Spark runs")
    return Storage(spark).read_bytes(path).decode("utf-8")


def write_text(spark: SparkSession, path: str, text: str) -> None:
    """A report to a local path or any Hadoop URI, so that cluster runs can keep theirs on S3."""
    if _is_local(path):
        with open(uris.local_path(uris.to_uri(path)), "w") as out:
            out.write(text)
    else:
        Storage(spark).write_bytes(path, text.encode("utf-8"))


def write_lines(spark: SparkSession, path: str, lines: Iterable[str]) -> None:
    """One line per item to a local path, streamed (a list as long as the lake's); to any other URI in one
    object, which S3 takes whole."""
    if _is_local(path):
        with open(uris.local_path(uris.to_uri(path)), "w") as out:
            out.writelines(f"{line}\n" for line in lines)
    else:
        write_text(spark, path, "".join(f"{line}\n" for line in lines))


def make_folder(path: str, flag: str = "--out") -> str | None:
    """Create the local folder ``path`` (with its parents); why it cannot be, or None."""
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        return f"{flag} {path} cannot be made: {exc.strerror or first_line(exc)}"
    return None


def check_report_destination(spark: SparkSession, path: str | None, flag: str = "--report") -> str | None:
    """Why a report cannot be written to ``path`` (a file written and removed beside it, the way the
    report will be written), None when it can: asked before a run changes anything."""
    return _probe(spark, path, flag, f"{path}.probe-{uuid.uuid4().hex[:8]}") if path else None


def check_folder_writable(spark: SparkSession, folder: str | None, flag: str) -> str | None:
    """Why nothing can be written into ``folder`` (a file written and removed in it), None when it can."""
    if not folder:
        return None
    if _is_local(folder) and (why := make_folder(uris.local_path(uris.to_uri(folder)), flag)):
        return why
    return _probe(spark, folder, flag, uris.join(uris.to_uri(folder), f".probe-{uuid.uuid4().hex[:8]}"))


def _probe(spark: SparkSession, place: str, flag: str, probe: str) -> str | None:
    try:
        write_text(spark, probe, "")
        if _is_local(probe):
            os.remove(uris.local_path(uris.to_uri(probe)))
        else:
            Storage(spark).delete(probe)
    except Exception as exc:  # noqa: BLE001 - whatever the store says, in one line
        return f"{flag} {place} cannot be written: {first_line(exc)}"
    return None


class RunResult(Protocol):
    """What every job's result offers its command line: a verdict, a summary and a JSON report."""

    @property
    def ok(self) -> bool: ...

    def summary(self) -> str: ...

    def to_json(self) -> str: ...


def report_out(spark: SparkSession, report: RunResult, path: str | None, *, refused: bool = False) -> int:
    """Print a run's summary (a ``refused`` run's, which says why, as its error line) and write its JSON report
    where asked; the exit status: 0 when it is ok, else 1 (also when the report cannot be written: the
    summary is out by then)."""
    if refused:
        print(f"error: {report.summary()}", file=sys.stderr)
    else:
        print(report.summary())
    if path:
        try:
            write_text(spark, path, report.to_json() + "\n")
        except Exception as exc:  # noqa: BLE001 - whatever the store says, in one line
            print(f"error: --report {path} cannot be written: {first_line(exc)}", file=sys.stderr)
            return 1
    return 0 if report.ok else 1


def as_flag(exc: ValueError, prefix: str = "--") -> str:
    """An options error ("retention_hours must be >= 0") in the words of the flag that set it."""
    name, _, rest = str(exc).partition(" ")
    return f"{prefix}{name.replace('_', '-')} {rest}"


def one_line_errors(main: Callable[..., int]) -> Callable[..., int]:
    """An entry point that ends in one ``error:`` line, exit status 1, whatever it raises: a store
    deltalake cannot reach says so, anything else is its first line with its root cause (the traceback is
    logged at DEBUG, for a bug report). Usage errors stay argparse's (exit status 2)."""

    @functools.wraps(main)
    def guarded(*args: Any, **kwargs: Any) -> int:
        try:
            return main(*args, **kwargs)
        except (DeltaStorageError, EndpointUnreachable) as exc:
            print(f"error: {exc}", file=sys.stderr)
        except Exception as exc:  # noqa: BLE001 - no input may end in a traceback
            logging.getLogger(main.__module__).debug("%s failed", main.__module__, exc_info=True)
            spark_log = f"Spark's log: {sessions.JVM_LOG}; " if sessions.JVM_LOG is not None else ""
            print(f"error: {first_line(exc)} ({spark_log}--log-level DEBUG prints the traceback)", file=sys.stderr)
        return 1

    return guarded
