"""Pieces both command lines share: progress lines and date arguments."""

from __future__ import annotations

import argparse
import sys
import time
from datetime import date
from typing import Callable


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
