"""A job's steps, said and timed: each step begins with one log line, and the same words label the
Spark UI's jobs that follow; it lasts until the next begins. The durations go into the job's
result (``step_seconds``), as Delta's VACUUM keeps its phases' times in its stats, so figures are
read from the result, never parsed from log lines. When a job's action ends, returned or raised, the
caller's thread labels its jobs as it did before (:func:`one_run`): a notebook's next query is not shown
under the run's last step.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from typing import Concatenate, ParamSpec, Protocol, TypeVar

from pyspark.sql import SparkSession

from lakeio.text import StrEnum


class Step(StrEnum):
    """Every job's steps, one vocabulary: the keys of a result's ``step_seconds``; a step two jobs share
    has one name."""

    # shared: the logs of the tables a job reads, and the audit table a destructive job appends to
    READING_LOGS = "reading the logs"
    RECORDING = "recording the audit"
    # job 1, ingestion
    READING_MANIFESTS = "reading"
    CHECKING_HELD = "checking"
    VERIFYING = "verifying"
    VALIDATING = "validating"
    WRITING = "writing"
    # job 2, vacuum (the first two and READING_PINS only where there is something to do: catalog names,
    # an audit table, pins)
    RESOLVING_NAMES = "resolving the names"
    READYING_AUDIT = "readying the audit"
    INVENTORY_DATE = "the inventory's date"
    FINDING_TABLES = "finding the Delta tables"
    READING_PINS = "reading the pins"
    CARRYING = "carrying the unchanged tables"  # only with an audit table (vacuum_jobs.carry_forward)
    PLANNING = "planning"
    RECHECKING = "checking the logs again"
    BUDGETING = "weighing the tables"  # only with a budget or a least worth (vacuum_jobs.budget)
    DELETING = "deleting"  # or, in a dry run, listing the candidates
    # restore and purge
    SELECTING = "selecting"
    ACTING = "checking and acting"
    # reports: chargeback and erasure evidence
    READING_INVENTORY = "the inventory"
    SPLITTING = "splitting"
    TREND = "trend"
    READING_AUDIT = "the audit and the inventory"
    ANSWERING = "answering"


# The thread's label for the Spark UI's jobs, as SparkContext.setJobDescription sets it.
JOB_DESCRIPTION = "spark.job.description"


class Steps:
    """The steps of one run of a job. ``on_step`` is told each step's name as it begins (a test holds
    a run there); ``clock`` stands in for ``time.monotonic``."""

    def __init__(self, spark: SparkSession, logger: logging.Logger, *, on_step: Callable[[str], None] | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self._spark = spark
        self._log = logger
        self._on_step = on_step
        self._clock = clock
        self._seconds: dict[str, float] = {}
        self._current: str | None = None
        self._since = clock()

    def restart(self) -> None:
        """Another run of the same job: its steps are timed afresh."""
        self._seconds, self._current, self._since = {}, None, self._clock()

    def begin(self, step: Step, message: str | None = None) -> None:
        """Step ``step`` begins and the one before ends; ``message`` (default: the step's name) is said.
        A step begun again adds to its time."""
        self._close()
        self._current = step.value
        self(message or step.value)
        if self._on_step is not None:
            self._on_step(step)

    def __call__(self, message: str) -> None:
        """Say ``message`` within the current step (a note: no step begins)."""
        self._log.info(message)
        self._spark.sparkContext.setJobDescription(message)

    def seconds(self) -> dict[str, float]:
        """Each step's seconds so far, in the order they first began; the current one up to now."""
        self._close()
        return {step: round(seconds, 3) for step, seconds in self._seconds.items()}

    def _close(self) -> None:
        now = self._clock()
        if self._current is not None:
            self._seconds[self._current] = self._seconds.get(self._current, 0.0) + now - self._since
        self._since = now


class _Job(Protocol):
    progress: Steps


J = TypeVar("J", bound=_Job)
P = ParamSpec("P")
R = TypeVar("R")


def one_run(action: Callable[Concatenate[J, P], R]) -> Callable[Concatenate[J, P], R]:
    """A job's public action: while it runs, its steps label the Spark UI's jobs; once it returns or raises,
    the calling thread's label is the one it had before (none, usually), not the run's last step."""

    @functools.wraps(action)
    def run(job: J, /, *args: P.args, **kwargs: P.kwargs) -> R:
        context = job.progress._spark.sparkContext
        before = context.getLocalProperty(JOB_DESCRIPTION)
        try:
            return action(job, *args, **kwargs)
        finally:
            context.setLocalProperty(JOB_DESCRIPTION, before)  # type: ignore[arg-type]  # None removes it

    return run
