"""Each job's result carries its steps' times, measured by one clock the tests can stand in for."""

from __future__ import annotations

import logging

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from lakeio.steps import Steps
from tests.lakes import inventory_of, vacuum
from vacuum_jobs.batch_vacuum import STEP_DELETING, STEP_FINDING, STEP_INVENTORY, STEP_LOGS, STEP_PLANNING


def test_a_step_lasts_until_the_next_begins_and_a_repeated_one_adds_up(spark, caplog):
    now = iter([0.0, 1.0, 3.0, 3.5, 6.0, 10.0])
    seen: list[str] = []
    steps = Steps(spark, logging.getLogger("steps-test"), on_step=seen.append, clock=lambda: next(now))
    with caplog.at_level(logging.INFO, "steps-test"):
        steps.begin("reading", "reading 3 logs")  # at 1.0
        steps("a note within the step")
        steps.begin("planning")  # at 3.0
        steps.begin("reading")  # at 3.5
        steps.begin("planning")  # at 6.0
        assert steps.seconds() == {"reading": 2.0 + 2.5, "planning": 0.5 + 4.0}  # at 10.0
    assert seen == ["reading", "planning", "reading", "planning"]
    assert [r.getMessage() for r in caplog.records] == ["reading 3 logs", "a note within the step", "planning",
                                                        "reading", "planning"]


@pytest.mark.slow  # a whole vacuum run
def test_a_vacuum_reports_its_steps_in_order(spark, tmp_path):
    write_deltalake(str(tmp_path / "lake" / "t"), pa.table({"id": [1, 2]}))
    report = vacuum(spark, inventory_of(spark, tmp_path / "lake", tmp_path), [tmp_path / "lake" / "t"])
    assert list(report.step_seconds) == [STEP_INVENTORY, STEP_FINDING, STEP_LOGS, STEP_PLANNING, STEP_DELETING]
    assert 0 < sum(report.step_seconds.values()) <= report.elapsed_seconds + 0.01
    assert report.to_dict()["step_seconds"] == report.step_seconds
