"""What a vacuum run deletes, as one frozen value: the tables it acts on and how, and their files.

A dry run reports this value and a real run deletes it: the targets of the tables to vacuum are
exactly what the deletes take, those of the tables in a dry run exactly what the report, the audit
and ``--list-candidates`` name. A step after planning (the logs' re-check, the versions a versioned
bucket keeps, the bound of a plan reviewed before) returns a new plan, never changes one. The plan a
run reports is materialized: its targets are rows, not a query that a later read would run again.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from lakeio.inventory import is_current
from lakeio.spark.shapes import CANDIDATES, of_tables
from lakeio.store import uris
from lakeio.store.uris import TableRoot
from lakeio.text import StrEnum


class Decision(StrEnum):
    """What the run does with a table it planned and still acts on (the others are refused or skipped,
    their reports say why)."""

    VACUUM = "vacuum"
    DRY_RUN = "dry_run"


@dataclass(frozen=True)
class VacuumPlan:
    """Each table the run acts on, with its decision (in the run's order), and ``targets``: the files,
    shapes.CANDIDATES (plus ``version_id`` and, where versions are purged, ``version_ids`` once
    :meth:`with_versions` added them). Equal plans decide alike; :meth:`files` compares their targets."""

    decisions: Mapping[TableRoot, Decision]
    targets: DataFrame = field(compare=False, repr=False)

    @classmethod
    def of(cls, decisions: Mapping[TableRoot, Decision], candidates: DataFrame) -> VacuumPlan:
        """The plan of ``decisions`` over ``candidates`` (the rows of other tables left out)."""
        CANDIDATES.check(candidates)
        return cls(MappingProxyType(dict(decisions)), of_tables(candidates, list(decisions)))

    def tables(self, decision: Decision) -> list[TableRoot]:
        return [root for root, decided in self.decisions.items() if decided == decision]

    def targets_of(self, decision: Decision) -> DataFrame:
        """The targets of the tables with ``decision``."""
        return of_tables(self.targets, self.tables(decision))

    def without(self, tables: Collection[TableRoot] = (), files: DataFrame | None = None) -> VacuumPlan:
        """This plan less ``tables`` and less ``files`` (``table_root``, ``path``)."""
        decisions = {root: decided for root, decided in self.decisions.items() if root not in tables}
        targets = self.targets if files is None else self.targets.join(files, ["table_root", "path"], "left_anti")
        return VacuumPlan(MappingProxyType(decisions), of_tables(targets, list(decisions)) if tables else targets)

    def largest(self, root: TableRoot, files: int) -> VacuumPlan:
        """This plan with only the ``files`` largest targets of ``root`` (then in path order): where a budget ran out."""
        rank = F.row_number().over(Window.partitionBy("table_root").orderBy(F.desc_nulls_last("length"), "path"))
        mine = self.targets.where(F.col("table_root") == root)
        return VacuumPlan(self.decisions, self.targets.where(F.col("table_root") != root).unionByName(
            mine.withColumn("_rank", rank).where(F.col("_rank") <= files).drop("_rank")))

    def within(self, reviewed: VacuumPlan) -> VacuumPlan:
        """This plan less every target ``reviewed`` (a plan made before: a dry run's) does not name."""
        return VacuumPlan(self.decisions, self.targets.join(reviewed.targets.select("table_root", "path"),
                                                            ["table_root", "path"], "left_semi"))

    def with_versions(self, all_versions: DataFrame, purge: bool) -> VacuumPlan:
        """Each target's current version as the inventory (every version of every key) lists it:
        ``version_id``, what a delete marker will hide, recorded for restore and purge; and, when
        ``purge``, every listed version (delete markers included: ``version_ids``, deleted for good)."""
        listed = all_versions.where(F.col("version_id").isNotNull()).select(
            uris.canonical_col(F.col("path")).alias("path"), "version_id", "modificationTime",
            is_current().alias("current"))
        versions = listed.groupBy("path").agg(
            F.max_by(F.when(F.col("current"), F.col("version_id")), F.struct("current", "modificationTime"))
            .alias("version_id"),
            *([F.sort_array(F.collect_set("version_id")).alias("version_ids")] if purge else []))
        return VacuumPlan(self.decisions, self.targets.join(versions, "path", "left"))

    def materialized(self) -> VacuumPlan:
        """The same plan, its targets computed once: what the run notes, deletes and records is one set
        of rows, whatever a second run of the joins behind them would pick."""
        return VacuumPlan(self.decisions, self.targets.localCheckpoint(eager=True))

    def files(self) -> dict[TableRoot, list[tuple[str, int | None]]]:
        """Every target, ``(path, length)`` in path order, by table (each decided table, with none too),
        collected on the driver: for a plan one can read (a test, a notebook); ``targets`` is the frame."""
        found: dict[TableRoot, list[tuple[str, int | None]]] = {root: [] for root in self.decisions}
        for row in self.targets.select("table_root", "path", "length").orderBy("table_root", "path").collect():
            found[TableRoot(row["table_root"])].append((row["path"], row["length"]))
        return found
