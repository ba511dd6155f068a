"""Pieces the command lines share: progress lines, date arguments, small files anywhere."""

from __future__ import annotations

import argparse
import sys
import time
from datetime import date
from typing import Callable

from pyspark.sql import SparkSession

from lakeio import uris
from lakeio.storage import Storage


def progress_printer(started: float) -> Callable[[str], None]:
    """Timestamped progress lines on stderr, so stdout stays the summary."""

    def report(message: str) -> None:
        print(f"[{time.monotonic() - started:7.1f}s] {message}", file=sys.stderr, flush=True)

    return report


def iso_date(text: str) -> date:
    """argparse type for YYYY-MM-DD."""
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a YYYY-MM-DD date: {text!r}") from None


def add_master_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--master", help="Spark master (default: $SPARK_MASTER, spark-submit's, or local[*])")


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
