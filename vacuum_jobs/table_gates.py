"""Each table of a run meets its gates before it is planned: catalog-managed, protocol, retention.

Under a guard of its own: a log that parses but says something the protocol does not allow refuses
that table alone, with the first line of why. A table whose retention the run would shorten below its
own ``delta.deletedFileRetentionDuration`` is refused where the run enforces it (as Delta's retention
check does). A table that passes gets its policy (deltalog.policy: its cutoff), and, where the run
deletes in it, the run decides its history.
"""

from __future__ import annotations

from collections.abc import Callable

from lakeio.deltalog import gates
from lakeio.deltalog.policy import TablePolicy
from lakeio.deltalog.replay import Replay, TableState
from lakeio.text import first_line
from lakeio.times import cutoff_ms, iso_utc
from vacuum_jobs.options import VacuumOptions
from vacuum_jobs.report import ReasonCode, RunTables
from vacuum_jobs.targets import TableTarget

# A table the run deletes in, its state and its own retention: where the run decides its history.
DecideHistory = Callable[[TableTarget, TableState, float], None]


class TableGates:
    """The gates of one run's options (``decide_history``: told each table the run will delete in, as it passes)."""

    def __init__(self, options: VacuumOptions, decide_history: DecideHistory):
        self.options, self.decide_history = options, decide_history

    def apply(self, targets: list[TableTarget], replay: Replay, run_tables: RunTables,
                     now_ms: int) -> list[TablePolicy]:
        """Each table's gates and policy under a guard of its own: a log that parses but says
        something the protocol does not allow refuses that table alone, with the first line of why."""
        policies = []
        for target in targets:
            state = replay.states.get(target.root)
            if state is None:
                continue  # already refused with its reason
            try:
                policy = self._gate(target, state, run_tables, now_ms)
            except Exception as exc:
                run_tables.refuse(target.root, ReasonCode.LOG_NOT_UNDERSTOOD,
                                  f"cannot make sense of its log: {first_line(exc)}")
                continue
            if policy is not None:
                policies.append(policy)
        return policies

    def _gate(self, target: TableTarget, state: TableState, run_tables: RunTables,
              now_ms: int) -> TablePolicy | None:
        """The table's policy, or None when a gate skipped or refused it (said in its report)."""
        root = target.root
        skip = gates.catalog_managed(state)
        if skip:
            run_tables.skip(root, ReasonCode.CATALOG_MANAGED, skip)
            return None
        refusal = gates.unknown_protocol(state)
        if refusal:
            run_tables.refuse(root, ReasonCode.UNSUPPORTED_PROTOCOL, refusal)
            return None
        try:
            table_hours = gates.table_retention_hours(state)
        except ValueError as exc:
            run_tables.refuse(root, ReasonCode.RETENTION_SETTING_INVALID, f"delta.deletedFileRetentionDuration: {exc}")
            return None
        hours = next(h for h in (target.retention_hours, self.options.retention_hours, table_hours) if h is not None)
        if hours < table_hours and self.options.enforce_retention_duration:
            run_tables.refuse(root, ReasonCode.RETENTION_BELOW_TABLE, f"retention {hours:g} h is shorter than the "
                              f"table's delta.deletedFileRetentionDuration ({table_hours:g} h), which the run enforces")
            return None
        cutoff = cutoff_ms(now_ms, hours)
        try:
            policy = TablePolicy.for_state(state, cutoff)
        except ValueError as exc:
            run_tables.refuse(root, ReasonCode.LOG_NOT_UNDERSTOOD, str(exc))
            return None
        report = run_tables[root]
        report.retention_hours, report.cutoff = hours, iso_utc(cutoff)
        report.dry_run = self.options.dry_run or bool(target.dry_run)
        if not report.dry_run:
            self.decide_history(target, state, table_hours)
        return policy
