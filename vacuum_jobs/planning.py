"""Job 2's planning: the run's logs read, each table gated, every table planned against the inventory.

One listing of each ``_delta_log/`` and one set of Spark jobs read every log; each table then meets
the gates (vacuum_jobs.table_gates); the lake's other tables
are read for the files they need; and one pass plans them all (vacuum_jobs.plan). A log file a
writer's cleanup removes between the read and the plan refuses its table alone (LogFileVanished),
and the others are read and planned again.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from pyspark.sql import SparkSession

from lakeio.deltalog.pinned import PinnedRead, forecast, read_pinned
from lakeio.deltalog.policy import TablePolicy
from lakeio.deltalog.references import NO_TOMBSTONE, References, needed_elsewhere, retention_cutoffs
from lakeio.deltalog.replay import LogFileVanished, Replay, naming_vanished_logs, read_logs
from lakeio.inventory import InventorySnapshot
from lakeio.pins import Pin
from lakeio.spark.steps import Step, Steps
from lakeio.store.filesystem import Storage
from lakeio.store.uris import TableRoot
from lakeio.times import iso_utc
from vacuum_jobs.options import VacuumOptions
from vacuum_jobs.plan import Plan, TablePlan, plan_tables
from vacuum_jobs.report import ReasonCode, RunTables
from vacuum_jobs.table_gates import DecideHistory, TableGates
from vacuum_jobs.targets import TableTarget


@dataclass(frozen=True)
class Planned:
    """What planning left: the logs read (released by the run once it is done), the plan (None when no
    table was left to plan), and the lake's tables whose references are unknown, with why."""

    replay: Replay
    plan: Plan | None
    references_unknown: dict[TableRoot, str]
    pins: PinnedRead | None = None  # the run's pins, each with its status; None without pins


class Planning:
    """The logs read, the gates applied and the tables planned for one run (``decide_history``: told each
    table the run will delete in, as its gates pass it)."""

    def __init__(self, spark: SparkSession, storage: Storage, options: VacuumOptions, progress: Steps,
                 decide_history: DecideHistory):
        self.spark, self.storage, self.options, self.progress = spark, storage, options, progress
        self.gates = TableGates(options, decide_history)

    def read_and_plan(self, inventory: InventorySnapshot, targets: list[TableTarget], run_tables: RunTables,
                      all_roots: list[TableRoot], now_ms: int, *, recorded: bool, pins: Sequence[Pin] = (),
                      unread: Collection[TableRoot] = ()) -> Planned:
        """Read the logs, apply the gates, plan (None when no table is left to plan). The plan reads
        log files the summary read once more (checkpoints, and commits Spark dropped from its cache):
        one that a writer's log cleanup removed in between refuses its own table, and the others are
        read and planned again without it (its log is then read afresh for what it needs from them).
        ``pins``' versions are read first: their files are kept, in the run's tables and wherever a pinned
        version of any table names another table's file. ``unread``: tables of the lake whose logs are known to
        name nothing outside their roots (vacuum_jobs.carry_forward), so not read for the others."""
        in_run = {t.root for t in targets}
        lake = sorted(set(all_roots) | in_run | set(unread))
        others = [root for root in lake if root not in in_run and root not in unread]
        vanished: dict[TableRoot, str] = {}
        pinned = self._read_pins(pins, now_ms) if pins else None
        while True:
            replay = self._read_logs(targets, run_tables)
            policies = self.gates.apply(targets, replay, run_tables, now_ms)
            if not policies:
                return Planned(replay, None, {}, pinned)  # nothing planned: no file of the run is at stake
            try:
                with naming_vanished_logs([p.table_root for p in policies] + others):
                    outside = self._read_other_logs(others)
                    references = self._references(replay, outside, policies, lake, now_ms, pinned)
                    plan = self._plan(inventory, replay, policies, run_tables, lake, references, pinned, now_ms,
                                      recorded=recorded)
            except LogFileVanished as lost:
                replay.release()
                why = f"a file of its log vanished while the run planned (a writer's log cleanup?): {lost.cause}"
                if lost.table_root in run_tables:
                    run_tables.refuse(lost.table_root, ReasonCode.LOG_VANISHED, f"{why}; vacuum it in the next run")
                    targets = [t for t in targets if t.root != lost.table_root]
                    others.append(lost.table_root)  # listed afresh, for the files it needs from the others
                else:
                    others.remove(lost.table_root)
                    vanished[lost.table_root] = why
                continue
            except BaseException:
                replay.release()
                raise
            if pinned is not None:
                self._forecast(pinned, replay, outside, now_ms)
            return Planned(replay, plan, {**references.unknown, **vanished}, pinned)

    def _read_logs(self, targets: list[TableTarget], run_tables: RunTables) -> Replay:
        """One listing of each ``_delta_log/`` (not of the data), then every log on Spark at once. Sets each
        table's version; refuses a table whose log cannot be read."""
        self.progress.begin(Step.READING_LOGS, f"reading the logs of {len(targets)} table(s)")
        replay = read_logs(self.spark, self.storage, [t.uri for t in targets],
                           check_paths=False,  # the plan checks them in its pass
                           keep_commits=True)  # the plan reads the actions from the commits the summary parsed
        for root, version in replay.versions.items():
            run_tables[root].version = version
        for root, reason in replay.failures.items():
            run_tables.refuse(root, ReasonCode.UNREADABLE_LOG, f"unreadable log: {reason}")
        return replay

    def _read_pins(self, pins: Sequence[Pin], now_ms: int) -> PinnedRead:
        """The pinned versions resolved and their logs read, before the run's own logs."""
        self.progress.begin(Step.READING_PINS, f"reading {len(pins)} pinned version(s)")
        return read_pinned(self.spark, self.storage, pins, now_ms)

    @staticmethod
    def _forecast(pinned: PinnedRead, replay: Replay, outside: Replay | None, now_ms: int) -> None:
        """When Delta's log cleanup may take each pinned version, by its table's settings now."""
        states = {**(outside.states if outside is not None else {}), **replay.states}
        for status in pinned.versions.statuses.values():
            state = states.get(status.pin.root)
            forecast(status, state.configuration if state is not None else None, now_ms)

    def _read_other_logs(self, roots: list[TableRoot]) -> Replay | None:
        """The summaries of the lake's other Delta tables: for the files they need from the run's tables."""
        if not roots:
            return None
        self.progress(f"reading the logs of {len(roots)} other Delta table(s) for the files they reference")
        return read_logs(self.spark, self.storage, roots, check_paths=False)

    def _references(self, replay: Replay, outside: Replay | None, policies: list[TablePolicy], lake: list[TableRoot],
                    now_ms: int, pinned: PinnedRead | None) -> References:
        """What each Delta table of the lake needs from another's folder, by its own retention (or the
        run's, where that keeps more), and what each pinned version reads there. A table whose references
        cannot be read is named, not guessed."""
        cutoffs = retention_cutoffs(replay.states.values(), now_ms)
        for policy in policies:
            cutoffs[policy.table_root] = min(cutoffs[policy.table_root], policy.cutoff_ms)
        references = needed_elsewhere(replay, cutoffs, lake)
        references.unknown.update({root: f"unreadable log: {why}" for root, why in replay.failures.items()})
        if outside is not None:
            references = references.add(
                needed_elsewhere(outside, retention_cutoffs(outside.states.values(), now_ms), lake, check_paths=True))
            references.unknown.update({root: f"unreadable log: {why}" for root, why in outside.failures.items()})
        for version, _ in pinned.rounds if pinned is not None else ():
            references = references.add(needed_elsewhere(version, dict.fromkeys(version.states, NO_TOMBSTONE), lake))
        return references

    def _plan(self, inventory: InventorySnapshot, replay: Replay, policies: list[TablePolicy],
              run_tables: RunTables, lake: list[TableRoot], references: References, pinned: PinnedRead | None,
              now_ms: int, *, recorded: bool) -> Plan:
        """The candidates of every table in one pass (``recorded``: the run has an audit table, which reads
        them again). Sets each table's counts, coverage, missing files, the tables referencing it and when it is
        quiet until (:func:`quiet_until`); refuses a table whose log rows the plan cannot read."""
        self.progress.begin(Step.PLANNING, f"planning {len(policies)} table(s) against the inventory")
        deleting = any(not run_tables[p.table_root].dry_run for p in policies)
        cutoffs = {p.table_root: p.cutoff_ms for p in policies}
        # Cached where anything reads the plan again (the deletes, the audit, the budget's weighing), so that no
        # log file is needed from storage after this.
        priced = tuple(self.options.prices) if self.options.budgeted else ()
        plan = plan_tables(self.spark, inventory.rows, replay.files, policies, inventory.as_of_ms, lake,
                           cache=deleting or recorded or self.options.budgeted, priced=priced,
                           log_rows=replay.rows,
                           references=references.frame, pinned=pinned.files if pinned is not None else None)
        for root, reason in plan.refused.items():
            run_tables.refuse(root, ReasonCode.UNREADABLE_LOG, f"unreadable log: {reason}")
        for root, table_plan in plan.tables.items():
            report = run_tables[root]
            report.counts = table_plan.counts
            report.missing = table_plan.missing
            report.coverage = table_plan.coverage
            report.referenced_by = table_plan.referenced_by
            report.quiet_until = quiet_until(table_plan, cutoffs[root], now_ms)
        for index, (files, first) in plan.pins_missing.items():
            assert pinned is not None, "only pinned files can be missing"
            pinned.broken(index, f"{files} of its file(s) written before the inventory was taken are not in it, e.g. "
                                 f"{first}: Delta cannot read the version whole")
        return plan

    def check_coverage(self, plan: Plan, run_tables: RunTables) -> None:
        """Refuse tables whose plan cannot be trusted: the inventory does not cover them."""
        for root, table_plan in plan.tables.items():
            coverage = table_plan.coverage
            if coverage is not None and coverage < self.options.min_coverage:
                run_tables.refuse(root, ReasonCode.INVENTORY_COVERAGE, f"inventory does not cover this table: it lists "
                                  f"{coverage:.0%} of the {table_plan.old_live_files} live file(s) written before it was taken")


def quiet_until(plan: TablePlan, cutoff_ms: int, now_ms: int) -> str | None:
    """The first moment at which the clock alone may make a file of the table a candidate that is not one now, its
    log, the inventory and the lake's other tables staying as they are (ISO-8601 UTC); None when the clock alone
    never does. The retention moves the cutoff with the clock: a tombstone's file is kept until its deletion is
    older than the cutoff, a file too recent until its modification is. A pinned or referenced file is released by
    its pin's end or another table's retention, which the table's plan does not hold: with either, the run's clock."""
    if plan.counts.pinned_files or plan.counts.referenced_files:
        return iso_utc(now_ms)
    if plan.released_ms is None:
        return None
    return iso_utc(plan.released_ms + (now_ms - cutoff_ms) + 1)
