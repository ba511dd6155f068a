"""Each job's result carries its steps' times, measured by one clock the tests can stand in for."""

from __future__ import annotations

import logging

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from lakeio.spark.steps import JOB_DESCRIPTION, Step, Steps, one_run
from tests.lakes import inventory_of, vacuum


def test_a_step_lasts_until_the_next_begins_and_a_repeated_one_adds_up(spark, caplog):
    now = iter([0.0, 1.0, 3.0, 3.5, 6.0, 10.0])
    seen: list[str] = []
    steps = Steps(spark, logging.getLogger("steps-test"), on_step=seen.append, clock=lambda: next(now))
    with caplog.at_level(logging.INFO, "steps-test"):
        steps.begin(Step.READING_LOGS, "reading 3 logs")  # at 1.0
        steps("a note within the step")
        steps.begin(Step.PLANNING)  # at 3.0
        steps.begin(Step.READING_LOGS)  # at 3.5
        steps.begin(Step.PLANNING)  # at 6.0
        assert steps.seconds() == {"reading the logs": 2.0 + 2.5, "planning": 0.5 + 4.0}  # at 10.0
    assert seen == ["reading the logs", "planning", "reading the logs", "planning"]
    assert [r.getMessage() for r in caplog.records] == ["reading 3 logs", "a note within the step", "planning",
                                                        "reading the logs", "planning"]


class _Job:
    def __init__(self, spark):
        self.progress = Steps(spark, logging.getLogger("steps-test"))

    @one_run
    def run(self, fail: bool) -> str:
        self.progress.begin(Step.PLANNING, "planning 3 tables")
        if fail:
            raise RuntimeError("refused")
        return "done"


@pytest.mark.parametrize("caller", [None, "the caller's own label"])
def test_after_a_run_returns_or_raises_the_callers_jobs_keep_their_own_label(spark, caller):
    context = spark.sparkContext
    context.setLocalProperty(JOB_DESCRIPTION, caller)
    job = _Job(spark)
    try:
        assert job.run(False) == "done"
        assert context.getLocalProperty(JOB_DESCRIPTION) == caller
        with pytest.raises(RuntimeError):
            job.run(True)
        assert context.getLocalProperty(JOB_DESCRIPTION) == caller
    finally:
        context.setLocalProperty(JOB_DESCRIPTION, None)


@pytest.mark.slow  # a whole vacuum run
def test_a_vacuum_reports_its_steps_in_order(spark, tmp_path):
    write_deltalake(str(tmp_path / "lake" / "t"), pa.table({"id": [1, 2]}))
    inventory = inventory_of(spark, tmp_path / "lake", tmp_path)
    spark.sparkContext.setJobDescription("a notebook's own query")
    try:
        report = vacuum(spark, inventory, [tmp_path / "lake" / "t"])
        # Its steps labelled its jobs; the caller's label is the caller's again.
        assert spark.sparkContext.getLocalProperty(JOB_DESCRIPTION) == "a notebook's own query"
    finally:
        spark.sparkContext.setLocalProperty(JOB_DESCRIPTION, None)
    assert list(report.step_seconds) == [Step.INVENTORY_DATE, Step.FINDING_TABLES, Step.READING_LOGS, Step.PLANNING,
                                        Step.DELETING]
    assert 0 < sum(report.step_seconds.values()) <= report.elapsed_seconds + 0.01
    assert report.to_dict()["step_seconds"] == report.step_seconds
