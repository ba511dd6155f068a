"""Job 2 as users run it: one fresh ``python -m vacuum_jobs --discover --dry-run`` process; and the
bare Spark program that finds the same candidates, cold alike.

The session start (process launch to the job's first log line, ``spark <version>, master ...``)
is measured apart: it is the same for any Spark program, and the targets compare the job after it.
The job's steps are its report's own ``step_seconds``; what the process spends outside the run
(the session's end, writing the report, the exit) is the job's time less theirs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from lakeio.cli import LOG_FORMAT
from lakeio.spark import jvm_archive

OUTSIDE_THE_RUN = "outside the run: the report, the exit"
_SESSION_LINE = "spark "
_TIME_FORMAT = "%Y-%m-%d %H:%M:%S,%f"
assert LOG_FORMAT.startswith("%(asctime)s "), "the session line this module reads starts with its time"


@dataclass(frozen=True)
class ColdRun:
    session_s: float  # launch to the first log line after the session started
    job_s: float  # that line to the end of the process
    steps_s: dict[str, float]  # the report's step_seconds and OUTSIDE_THE_RUN; none for the bare program
    candidates: int
    jvm_archive: bool  # whether its driver JVM started from the class-data archive (lakeio.spark.jvm_archive)
    output: str = ""  # what the program printed
    carried: int = 0  # tables carried forward unread (vacuum_jobs.carry_forward)


def run_cli(inventory: str, shuffle_partitions: int, options: Sequence[str] = (), jars: str | None = None,
            conf: Mapping[str, str] | None = None) -> ColdRun:
    """One cold process over every Delta table ``inventory`` shows, with more ``options`` of the command
    and a session launched with ``jars`` and ``conf``; raises when the run fails."""
    with tempfile.TemporaryDirectory(prefix="cold-run-") as scratch:
        report_path = os.path.join(scratch, "report.json")
        fresh = _fresh(["vacuum_jobs", "--inventory-table", inventory, "--discover", "--dry-run",
                        "--report", report_path, *options], shuffle_partitions, jars, conf)
        with open(report_path) as source:
            report = json.load(source)
    steps = dict(report["step_seconds"])
    steps[OUTSIDE_THE_RUN] = max(fresh.job_s - sum(steps.values()), 0.0)
    candidates = sum(t["counts"]["candidate_files"] for t in report["tables"])
    carried = sum(1 for t in report["tables"] if t["reason_code"] == "unchanged")
    return ColdRun(fresh.session_s, fresh.job_s, steps, candidates, fresh.archive, carried=carried)


def run_bare(inventory: str, roots: list[str], cutoff_ms: int, shuffle_partitions: int) -> ColdRun:
    """The least Spark program (benchmarks.bare_spark) in a cold process of its own: the floor
    under ``run_cli`` that any Spark job pays, timed the same way (it logs no steps)."""
    return run_module(["benchmarks.bare_spark", "--inventory", inventory, "--cutoff-ms", str(cutoff_ms), *roots],
                      shuffle_partitions)


def run_module(module_args: list[str], shuffle_partitions: int, jars: str | None = None,
               conf: Mapping[str, str] | None = None) -> ColdRun:
    """Any ``python -m`` program in a cold process, timed the same way; it prints its candidates last.
    ``jars``: a ``--jars`` list for its session (Delta's own VACUUM, benchmarks.delta_vacuum)."""
    fresh = _fresh(module_args, shuffle_partitions, jars, conf)
    return ColdRun(fresh.session_s, fresh.job_s, {}, int(fresh.stdout.split()[-1]), fresh.archive, fresh.stdout)


@dataclass(frozen=True)
class _Fresh:
    launched: float
    session_at: float  # the session's first log line (lakeio.spark.session.get_spark)
    ended: float
    stdout: str
    archive: bool

    @property
    def session_s(self) -> float:
        return self.session_at - self.launched

    @property
    def job_s(self) -> float:
        return self.ended - self.session_at


def _fresh(module_args: list[str], shuffle_partitions: int, jars: str | None = None,
           conf: Mapping[str, str] | None = None) -> _Fresh:
    """``python -m`` ``module_args`` in a fresh process, launched as users launch the jobs."""
    settings = {"spark.sql.shuffle.partitions": str(shuffle_partitions), **(conf or {})}
    launch_args = (f"{f'--jars {jars} ' if jars else ''}"
                   + "".join(f"--conf {key}={value} " for key, value in settings.items()) + "pyspark-shell")
    archive = jvm_archive.submit_args(launch_args) is not None
    launched = time.time()
    done = subprocess.run([sys.executable, "-m", *module_args], env={**os.environ, "PYSPARK_SUBMIT_ARGS": launch_args},
                          capture_output=True, text=True, check=False)
    ended = time.time()
    if done.returncode != 0:
        raise SystemExit(f"the cold run of {module_args[0]} failed ({done.returncode}): {done.stderr[-2000:]}")
    lines = [(at, line.split(": ", 1)[1]) for line in done.stderr.splitlines() if (at := _stamp(line)) is not None]
    session_at = next(at for at, message in lines if message.startswith(_SESSION_LINE))
    return _Fresh(launched, session_at, ended, done.stdout, archive)


def _stamp(line: str) -> float | None:
    try:
        return datetime.strptime(line[:23], _TIME_FORMAT).timestamp()
    except ValueError:
        return None
