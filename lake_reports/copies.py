"""Other copies of a file's bytes anywhere in the lake: replicas, deep clones, exports, old versions.

The inventory lists every object of every bucket with its size and ETag. Objects of equal size
and ETag are taken as copies, found in Spark with one broadcast join over the inventory dates
since a cut-off (no per-file lookups). ETag equality is evidence, not proof, and its strength
depends on how the ETag was made, which each match states (:func:`etag_kind`). A table that
references the file itself from its log (a shallow clone) holds no copy but keeps the very
object alive: that is reported too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date

from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F

from lakeio.inventory import is_delete_marker
from lakeio.spark.shapes import local_frame
from lakeio.store import uris
from lakeio.text import StrEnum
from lakeio.times import iso_utc

_MD5 = re.compile(r"^[0-9a-f]{32}$")
_MULTIPART = re.compile(r"^[0-9a-f]{32}-\d+$")
_NOT_CONTENT = ("SSE-KMS", "DSSE-KMS", "SSE-C")



class EtagKind(StrEnum):
    """How a copy was matched, and so how strongly it proves equal bytes (ETAG_KINDS says)."""

    SAME_OBJECT = "same_object"
    MD5 = "md5"
    MULTIPART = "multipart"
    OPAQUE = "opaque"
    OTHER = "other"


class CopyStatus(StrEnum):
    """What holds a copy now, and whether anything will erase it (COPY_STATUSES says)."""

    LIVE_IN_TABLE = "live_in_table"
    TIME_TRAVEL_IN_TABLE = "time_travel_in_table"
    ORPHAN_IN_TABLE = "orphan_in_table"
    OUTSIDE_TABLES = "outside_tables"
    NONCURRENT_VERSION = "noncurrent_version"
    ERASED = "erased"


ETAG_KINDS = {
    EtagKind.SAME_OBJECT: "the table's log references this very object (a shallow clone)",
    EtagKind.MD5: "the ETag is the MD5 of the bytes (single-part upload, no SSE-KMS): equal size and MD5 mean equal bytes",
    EtagKind.MULTIPART: "a multipart ETag (MD5 of the parts' MD5s): equal only for equal part sizes, so an equal one is "
                 "strong evidence and a copy uploaded with other part sizes is missed",
    EtagKind.OPAQUE: "SSE-KMS or SSE-C: the ETag is not an MD5 of the bytes; equal tags suggest, do not prove, equal bytes",
    EtagKind.OTHER: "not an S3 ETag form: equality says nothing about the bytes beyond what the store promises",
}
COPY_STATUSES = {
    CopyStatus.LIVE_IN_TABLE: "live in that table: its own rows must be deleted there too",
    CopyStatus.TIME_TRAVEL_IN_TABLE: "removed from that table, kept for time travel: its vacuum erases it",
    CopyStatus.ORPHAN_IN_TABLE: "inside that table, referenced by no commit: its next vacuum erases it",
    CopyStatus.OUTSIDE_TABLES: "in no Delta table: no vacuum will ever erase it",
    CopyStatus.NONCURRENT_VERSION: "a noncurrent version: erased only by a purge or a lifecycle rule",
    CopyStatus.ERASED: "listed by an earlier inventory, not by the newest",
}
# Where a copy's tag and the original's were made differently, the weaker kind stands.
_WEAKEST_FIRST = (EtagKind.OTHER, EtagKind.OPAQUE, EtagKind.MULTIPART, EtagKind.MD5)


@dataclass
class Copy:
    of: str  # the asked file
    path: str
    version_id: str | None
    length: int | None
    e_tag: str | None
    etag_kind: EtagKind
    status: CopyStatus
    table: str | None  # the Delta table that holds (or references) it
    last_listed: str | None  # the newest inventory date listing it
    detail: str


def etag_kind(e_tag: str | None, encryption_status: str | None, multipart: bool | None) -> EtagKind:
    tag = (e_tag or "").strip('"').lower()
    if (encryption_status or "").upper() in _NOT_CONTENT:
        return EtagKind.OPAQUE
    if _MULTIPART.match(tag) or (multipart and _MD5.match(tag) is None and tag):
        return EtagKind.MULTIPART
    return EtagKind.MD5 if _MD5.match(tag) else EtagKind.OTHER


def find_copies(spark: SparkSession, history: DataFrame, newest: dict[str, date], asked: list[str],
                files: DataFrame, roots: list[str], audit: DataFrame) -> tuple[list[Copy], list[str]]:
    """Copies of each ``asked`` file (canonical URIs) in ``history`` (inventory rows, every date since a
    cut-off), by size and ETag, with what holds each now. ``newest``: each bucket's newest inventory date;
    ``files`` (shapes.FILE_ACTIONS) and ``roots``: the tables' logs read; ``audit``: the vacuum audit rows.
    Also returns the asked files no inventory row gives an ETag for (no copy can be looked for)."""
    wanted = F.broadcast(local_frame(spark, [(p,) for p in asked], "of string"))
    objects = history.where(~is_delete_marker() & F.col("e_tag").isNotNull()) \
        .withColumn("canonical", uris.canonical_col(F.col("path")))
    prints = (objects.join(wanted, objects["canonical"] == wanted["of"])
              .groupBy("of").agg(F.max_by(F.struct("length", "e_tag", "encryption_status", "is_multipart_uploaded"),
                                          "inventory_date").alias("print"))
              .select("of", "print.*").collect())
    unknown = sorted(set(asked) - {r["of"] for r in prints})
    if not prints:
        return [], unknown
    fingerprints = F.broadcast(local_frame(spark, [
        (r["of"], r["length"], r["e_tag"], etag_kind(r["e_tag"], r["encryption_status"], r["is_multipart_uploaded"]))
        for r in prints], "of string, length long, e_tag string, of_kind string"))
    # Another key, or a noncurrent version of the file's own key (a retried upload, an in-place copy).
    matches = (objects.join(fingerprints, ["length", "e_tag"])
               .where((F.col("canonical") != F.col("of")) | (F.col("is_latest") == F.lit(False)))
               .groupBy("of", "canonical", "version_id").agg(
                   F.max_by(F.struct("bucket", "inventory_date", "is_latest", "encryption_status",
                                     "is_multipart_uploaded", "length", "e_tag", "of_kind"),
                            "inventory_date").alias("seen"))
               .select("of", F.col("canonical").alias("path"), "version_id", "seen.*").collect())
    found_paths = sorted({r["path"] for r in matches})
    in_logs = _log_rows(spark, files, found_paths + asked)
    deleted = _deleted_by_runs(spark, audit, found_paths)
    copies = [_classify(r, newest, roots, in_logs, deleted) for r in matches]
    for of in asked:  # the very object, referenced by other tables' logs
        owner = uris.owner(of, roots)
        for table, kind in sorted(in_logs.get(of, {}).items()):
            if table != owner:
                copies.append(Copy(of, of, None, None, None, EtagKind.SAME_OBJECT,
                                   CopyStatus.LIVE_IN_TABLE if kind == "add" else CopyStatus.TIME_TRAVEL_IN_TABLE,
                                   table, None,
                                   f"{table} references this file from its log" +
                                   ("" if kind == "add" else ", removed there and kept for time travel")))
    return sorted(copies, key=lambda c: (c.of, c.path, c.version_id or "")), unknown


def _classify(row: Row, newest: dict[str, date], roots: list[str], in_logs: dict[str, dict[str, str]],
              deleted: dict[str, str]) -> Copy:
    kind = etag_kind(row["e_tag"], row["encryption_status"], row["is_multipart_uploaded"])
    if row["of_kind"] != kind:  # the original's tag was made otherwise: the weaker of the two stands
        kind = next(k for k in _WEAKEST_FIRST if k in (kind, row["of_kind"]))
    last = row["inventory_date"]
    owner = uris.owner(row["path"], roots)
    status, detail = holder(row, newest, owner, in_logs, deleted)
    return Copy(row["of"], row["path"], row["version_id"], row["length"], row["e_tag"], kind, status, owner,
                last.isoformat() if last else None, detail)


def holder(row: Row, newest: dict[str, date], owner: str | None, in_logs: dict[str, dict[str, str]],
            deleted: dict[str, str]) -> tuple[CopyStatus, str]:
    """What holds the copy of ``row`` now (its status), and the detail saying so."""
    last = row["inventory_date"]
    if last is None or last < newest.get(row["bucket"], last):
        return CopyStatus.ERASED, (f"last listed by the inventory of {last}, not by that of {newest.get(row['bucket'])}"
                                   + (f"; {deleted[row['path']]}" if row["path"] in deleted else ""))
    if row["is_latest"] is False:
        return (CopyStatus.NONCURRENT_VERSION,
                f"version {row['version_id']} is noncurrent: a purge or a lifecycle rule must delete it")
    if owner is None:
        return CopyStatus.OUTSIDE_TABLES, "no Delta table contains it (a replica, an export): delete it, or it stays"
    state = in_logs.get(row["path"], {}).get(owner)
    status = {"add": CopyStatus.LIVE_IN_TABLE, "remove": CopyStatus.TIME_TRAVEL_IN_TABLE}.get(
        state or "", CopyStatus.ORPHAN_IN_TABLE)
    return status, COPY_STATUSES[status].replace("that table", owner)


def _log_rows(spark: SparkSession, files: DataFrame, paths: list[str]) -> dict[str, dict[str, str]]:
    """Per path, the tables whose logs name it, and how (``add`` over ``remove``)."""
    found: dict[str, dict[str, str]] = {}
    if not paths:
        return found
    wanted = F.broadcast(local_frame(spark, [(p,) for p in sorted(set(paths))], "path string"))
    for r in files.join(wanted, "path").groupBy("path", "table_root").agg(F.min("kind").alias("kind")).collect():
        found.setdefault(r["path"], {})[r["table_root"]] = r["kind"]  # "add" sorts before "remove"
    return found


def _deleted_by_runs(spark: SparkSession, audit: DataFrame, paths: list[str]) -> dict[str, str]:
    if not paths:
        return {}
    wanted = F.broadcast(local_frame(spark, [(p,) for p in paths], "path string"))
    rows = (audit.where(F.col("action") == "deleted").withColumn("path", uris.canonical_col(F.col("path")))
            .join(wanted, "path").groupBy("path").agg(F.min_by(F.struct(
                "run_id", F.unix_millis("timestamp").alias("at_ms")), "timestamp").alias("r"))
            .collect())
    return {r["path"]: f"deleted at {iso_utc(r['r']['at_ms'])} by vacuum run {r['r']['run_id']}" for r in rows}
