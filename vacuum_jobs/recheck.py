"""The last look before deleting: has a table's log moved since it was planned?

Another writer may commit between planning and deleting; a RESTORE can even re-add a
file whose tombstone had expired, so that a planned candidate is live again. Right
before the deletes start, each table's ``_delta_log/`` is listed again. For a table
whose version moved, the commits since the planned version are read, and every file
they name (data files and deletion vectors, added or removed) is taken out of the
candidates. A table whose new commits cannot all be read, or that changed its protocol
or metadata (retention, partitioning, UniForm), deletes nothing this run.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lakeio.deltalog.commits import commit_file
from lakeio.deltalog.keep import keep_set
from lakeio.deltalog.replay import replay_logs
from lakeio.deltalog.segments import LogSegment, log_segments
from lakeio.store import uris
from lakeio.store.filesystem import Storage
from lakeio.store.uris import TableRoot

_EVERY_TOMBSTONE = -(2 ** 63)  # a cutoff before every deletion: every action of the new commits counts


@dataclass
class Recheck:
    moved: dict[TableRoot, tuple[int, int]] = field(default_factory=dict)  # (planned version, now)
    refused: dict[TableRoot, str] = field(default_factory=dict)  # why it must not delete now
    referenced: DataFrame | None = None  # (table_root, path) of every file the new commits name


def recheck_logs(spark: SparkSession, storage: Storage, planned: dict[str, int]) -> Recheck:
    """``planned`` maps each table root (as given to the log listing) to the version it was planned at."""
    result = Recheck()
    segments, failures = log_segments(storage, list(planned))
    for root, reason in failures.items():
        result.refused[uris.table_root(root)] = f"log changed since planning and cannot be listed: {reason}"
    since: list[LogSegment] = []
    for segment in segments:
        before = planned[segment.table_root]
        if segment.version == before:
            continue
        root = segment.root
        result.moved[root] = (before, segment.version)
        if segment.version < before:
            result.refused[root] = f"log went back from version {before} to {segment.version} since planning"
            continue
        new_commits = tuple((v, commit_file(segment.table_root, v)) for v in range(before + 1, segment.version + 1))
        since.append(LogSegment(segment.table_root, segment.version, commits=new_commits))
    if not since:
        return result
    replay = replay_logs(spark, since)
    for root, reason in replay.failures.items():
        result.refused[root] = f"commits since planning cannot be read: {reason}"
    for root, state in replay.states.items():
        if state.min_reader_version is not None or state.schema_string is not None:
            result.refused[root] = "protocol or metadata changed since planning: vacuum it in the next run"
    result.referenced = keep_set(replay.files.withColumn("cutoff_ms", F.lit(_EVERY_TOMBSTONE))).select(
        "table_root", "path")
    return result
