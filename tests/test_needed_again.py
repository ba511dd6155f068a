"""Which files a purge keeps of a vacuum run's deletes (vacuum_jobs.needed_again): the cutoff rule without
Spark (the run's own cutoff, lengthened only where the table's retention was raised after the run), then
every rule's wiring on small logs as the replay gives them. On real tables: tests/test_restore_purge.py."""

from __future__ import annotations

import itertools
import math

from lakeio.deltalog.references import EVERY_TOMBSTONE
from lakeio.deltalog.replay import Replay, TableState
from lakeio.spark.shapes import FILE_ACTIONS, local_frame
from lakeio.store.uris import TableRoot
from lakeio.times import MS_PER_HOUR
from vacuum_jobs.needed_again import KeptBecause, RunCutoff, VacuumedTable, needed_again, run_cutoff

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
    assert [k.value for k in KeptBecause] == ["log unreadable", "live again", "pinned", "removed again since the run",
                                              "retention raised since the run", "within a table's retention"]


def test_each_rule_keeps_what_it_names_and_the_first_rule_wins(spark):
    """Table t (7 days now) was vacuumed by run r at retention 0 (its retention then not known: taken as
    raised since), by run q with no table row in the audit; clone c reads some of t's files; u's log
    cannot be read."""
    t, c, u = (TableRoot(f"file:///lake/{n}") for n in "tcu")
    now = STARTED + 24 * MS_PER_HOUR
    hour = int(MS_PER_HOUR)
    log = [  # (table, kind, file, removed at)
        (t, "remove", "removed-after-the-run", STARTED + hour),
        (t, "remove", "removed-before-the-run", STARTED - hour),  # inside the 7 days raised since
        (t, "remove", "removed-long-before", STARTED - 10 * 24 * hour),  # outside them too: erased
        (c, "add", "read-by-the-clone", None),
        (t, "remove", "read-by-the-clone", STARTED - 10 * 24 * hour),
        (c, "remove", "in-the-clones-retention", now - hour),
        (c, "remove", "out-of-the-clones-retention", now - 30 * 24 * hour),
        (t, "remove", "of-a-run-without-a-table-row", STARTED - 24 * hour),
    ]
    files = local_frame(spark, [(table, kind, f"{t}/{name}", 1, 0, at, None, None, None, None)
                                for table, kind, name, at in log], FILE_ACTIONS.schema)
    states = {root: TableState(root, 5, 1, 2, (), (), (), {}, None) for root in (t, c)}
    replay = Replay(states, {u: "cannot list"}, files)
    deletes = local_frame(spark, [(t, f"{t}/{name}", "q" if "without" in name else "r") for _, _, name, _ in log]
                          + [(u, f"{u}/anything", "r")], "table_root string, path string, source_run_id string")
    runs = [VacuumedTable("r", t, STARTED, None, 0.0), VacuumedTable("r", u, STARTED, 3, 0.0)]

    kept = {row["path"].rsplit("/", 1)[1]: (row["rule"], row["needed_by"])
            for row in needed_again(spark, None, replay, deletes, runs, now).collect()}

    assert kept == {
        "removed-after-the-run": (KeptBecause.REMOVED_AGAIN, t),
        "removed-before-the-run": (KeptBecause.RETENTION_RAISED, t),
        "read-by-the-clone": (KeptBecause.LIVE_AGAIN, c),
        "in-the-clones-retention": (KeptBecause.WITHIN_RETENTION, c),
        "of-a-run-without-a-table-row": (KeptBecause.WITHIN_RETENTION, t),  # no cutoff of its run: the table's own
        "anything": (KeptBecause.LOG_UNREADABLE, u),
    }
