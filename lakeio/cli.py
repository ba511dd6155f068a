"""Pieces the command lines share: common flags, logging, date arguments, small files anywhere."""

from __future__ import annotations

import argparse
import functools
import logging
import os
import sys
import uuid
from collections.abc import Callable, Iterable
from datetime import date
from typing import Protocol

import pyspark
from pyspark.sql import SparkSession

from lakeio import __version__, uris
from lakeio.delta_write import DeltaStorageError
from lakeio.spark import PROJECT_PACKAGES
from lakeio.storage import Storage
from lakeio.text import first_line

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


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


def _is_local(path: str) -> bool:
    return uris.scheme_of(path) in (None, "file")


def read_text(spark: SparkSession, path: str) -> str:
    """A small input file (tables list, prices) from a local path or any Hadoop URI (``s3://``)."""
    if _is_local(path):
        with open(uris.local_path(uris.to_uri(path))) as source:
            return source.read()
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


def check_report_destination(spark: SparkSession, path: str | None, flag: str = "--report") -> str | None:
    """Why a report cannot be written to ``path`` (a file written and removed beside it, the way the
    report will be written), None when it can: asked before a run changes anything."""
    if not path:
        return None
    probe = f"{path}.probe-{uuid.uuid4().hex[:8]}"
    try:
        write_text(spark, probe, "")
        if _is_local(probe):
            os.remove(uris.local_path(uris.to_uri(probe)))
        else:
            Storage(spark).delete(probe)
    except Exception as exc:  # noqa: BLE001 - whatever the store says, in one line
        return f"{flag} {path} cannot be written: {first_line(exc)}"
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
    """An entry point whose store cannot be reached by deltalake says so in one line, exit status 1,
    where a chain of nested causes would end the run (every other refusal is the job's own)."""

    @functools.wraps(main)
    def guarded(*args, **kwargs) -> int:
        try:
            return main(*args, **kwargs)
        except DeltaStorageError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1

    return guarded
