"""Files one Delta table needs that another table's folder holds (docs/DESIGN.md "References
across the lake").

A shallow clone names its source's files by absolute URI, and a table may name, by a
relative path, a file under a Delta table nested in its folder. Delta's own VACUUM of the
owner deletes such a file once the owner's log no longer needs it, and the other table
breaks. The inventory shows every table of the lake, so a plan can keep them: each is
kept by the table that owns it, naming the table that needs it.

Only two kinds of actions can name a file another table owns: those whose path needed
the full resolution (absolute URIs; the summary pass counted them per log file, and only
those files are read again, see ``Replay.rare_files``) and those of a table with another
table nested in its folder.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import reduce

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from lakeio.deltalog import gates
from lakeio.deltalog.keep import keep_set
from lakeio.deltalog.ownership import with_owner
from lakeio.deltalog.replay import Replay, TableState, unresolvable
from lakeio.spark.shapes import REFERENCES, local_frame, of_tables
from lakeio.store.uris import TableRoot
from lakeio.times import cutoff_ms

# A table whose retention cannot be read keeps every tombstone it names.
EVERY_TOMBSTONE = -(2 ** 62)
# A pinned version is read from its adds: none of its tombstones is needed.
NO_TOMBSTONE = 2 ** 62


@dataclass
class References:
    """What the tables of one or more replays need from other tables' folders."""

    frame: DataFrame | None = None  # shapes.REFERENCES; None when no table names another's file
    unknown: dict[TableRoot, str] = field(default_factory=dict)  # tables whose references we could not read

    def add(self, other: References) -> References:
        frames = [f for f in (self.frame, other.frame) if f is not None]
        return References(reduce(DataFrame.unionByName, frames) if frames else None, {**self.unknown, **other.unknown})


def retention_cutoffs(states: Iterable[TableState], now_ms: int) -> dict[TableRoot, int]:
    """Each table's own cutoff (``delta.deletedFileRetentionDuration``, 7 days by default); a
    table whose setting does not parse keeps every tombstone."""
    cutoffs = {}
    for state in states:
        try:
            cutoffs[state.table_root] = cutoff_ms(now_ms, gates.table_retention_hours(state))
        except ValueError:
            cutoffs[state.table_root] = EVERY_TOMBSTONE
    return cutoffs


def needed_elsewhere(replay: Replay, cutoffs: Mapping[TableRoot, int], roots: Iterable[str],
                     check_paths: bool = False) -> References:
    """The files the tables of ``replay`` need (live, or a tombstone not older than the table's
    entry in ``cutoffs``) that another table among ``roots`` owns, as (``table_root``: the owner,
    ``path``, ``referenced_by``). Lazy: nothing is read until the caller's own pass.

    With ``check_paths``, a table whose rare actions name a file we cannot resolve (so we cannot
    say which file it needs) lands in ``unknown``; a replay whose tables are planned leaves that to
    the plan, which refuses such a table."""
    roots = sorted(set(roots))
    nesting = [r for r in replay.states if _holds_another(roots, r)]
    sources = [replay.rare_files] if replay.rare_files is not None else []
    if nesting:
        sources.append(of_tables(replay.files, nesting))
    if not sources:
        return References()
    unknown = unresolvable(replay.rare_files) if check_paths and replay.rare_files is not None else {}
    spark = replay.files.sparkSession
    limits = local_frame(spark, [(root, cutoffs.get(root, EVERY_TOMBSTONE)) for root in replay.states],
                         "table_root string, cutoff_ms long")
    actions = reduce(DataFrame.unionByName, sources).join(F.broadcast(limits), "table_root")
    needed = keep_set(actions).select(F.col("table_root").alias("referenced_by"), "path")
    owned = with_owner(needed, roots).where(F.col("table_root").isNotNull()
                                            & (F.col("table_root") != F.col("referenced_by")))
    return References(REFERENCES.check(owned.select(*REFERENCES.columns)), unknown)


def _holds_another(sorted_roots: list[str], root: str) -> bool:
    """Whether a root of ``sorted_roots`` lies inside ``root``: the first one at or after ``root/`` in sort
    order would (a search, not a scan: a run has as many tables to ask about as roots to ask of)."""
    at = bisect.bisect_left(sorted_roots, root + "/")
    return at < len(sorted_roots) and sorted_roots[at].startswith(root + "/")
