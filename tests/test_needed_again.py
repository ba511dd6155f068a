"""Which tombstones a purge keeps for a vacuum run's deletes (vacuum_jobs.needed_again.run_cutoff): the
run's own cutoff, lengthened only where the table's retention was raised after the run; no Spark. The
rules' wiring on real tables: tests/test_restore_purge.py."""

from __future__ import annotations

import itertools
import math

from lakeio.deltalog.references import EVERY_TOMBSTONE
from lakeio.times import MS_PER_HOUR
from vacuum_jobs.needed_again import KeptBecause, RunCutoff, run_cutoff

STARTED = 1_793_491_200_000  # 2026-11-01T00:00:00Z: the vacuum run
NOW = STARTED + 30 * 24 * MS_PER_HOUR
HOURS = [0.0, 1.0, 24.0, 168.0, 720.0, 2000.0]


def test_a_forced_erasure_is_purged_at_the_runs_own_cutoff():
    """--retain-hours 0 --force-retention on a table of 7 days: the run's cutoff is its start, whatever
    the table keeps, as long as the table's retention did not change."""
    assert run_cutoff(STARTED, 0.0, 168.0, 168.0, NOW) == RunCutoff(STARTED, STARTED)


def test_a_retention_raised_after_the_run_lengthens_what_is_kept():
    cutoff = run_cutoff(STARTED, 0.0, 2000.0, 168.0, NOW)
    assert cutoff == RunCutoff(STARTED, NOW - int(2000 * MS_PER_HOUR), 2000.0)


def test_every_combination_keeps_at_least_the_runs_cutoff_and_lengthens_only_for_a_raise():
    for run_hours, now_hours, at_run_hours in itertools.product(HOURS, HOURS, [*HOURS, None]):
        cutoff = run_cutoff(STARTED, run_hours, now_hours, at_run_hours, NOW)
        run = STARTED - int(run_hours * MS_PER_HOUR)
        assert cutoff.run_cutoff_ms == run and cutoff.own_cutoff_ms <= run, (run_hours, now_hours, at_run_hours)
        raised = now_hours > run_hours and (at_run_hours is None or now_hours > at_run_hours)
        lengthened = cutoff.own_cutoff_ms < run
        assert lengthened == (raised and NOW - now_hours * MS_PER_HOUR < run), (run_hours, now_hours, at_run_hours)
        assert (cutoff.raised_to_hours == now_hours) if lengthened else cutoff.raised_to_hours is None


def test_a_run_that_recorded_no_retention_and_a_setting_that_does_not_parse():
    assert run_cutoff(STARTED, None, 168.0, None, NOW) == RunCutoff(None, NOW - int(168 * MS_PER_HOUR))
    assert run_cutoff(STARTED, None, math.inf, None, NOW) == RunCutoff(None, EVERY_TOMBSTONE)
    assert run_cutoff(STARTED, 0.0, math.inf, 168.0, NOW) == RunCutoff(STARTED, EVERY_TOMBSTONE, math.inf)


def test_the_rules_are_tried_in_the_order_the_operator_must_act_on_first():
    assert list(KeptBecause)[0] == KeptBecause.LOG_UNREADABLE
    assert [k.value for k in KeptBecause] == ["log unreadable", "live again", "removed again since the run",
                                              "retention raised since the run", "within a table's retention"]
