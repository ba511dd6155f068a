"""Each job's result carries its steps' times, measured by one clock the tests can stand in for."""

from __future__ import annotations

import logging

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from lakeio.steps import Step, Steps
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


@pytest.mark.slow  # a whole vacuum run
def test_a_vacuum_reports_its_steps_in_order(spark, tmp_path):
    write_deltalake(str(tmp_path / "lake" / "t"), pa.table({"id": [1, 2]}))
    report = vacuum(spark, inventory_of(spark, tmp_path / "lake", tmp_path), [tmp_path / "lake" / "t"])
    assert list(report.step_seconds) == [Step.INVENTORY_DATE, Step.FINDING_TABLES, Step.READING_LOGS, Step.PLANNING,
                                        Step.DELETING]
    assert 0 < sum(report.step_seconds.values()) <= report.elapsed_seconds + 0.01
    assert report.to_dict()["step_seconds"] == report.step_seconds
