"""Job 1 as one action: S3 Inventory deliveries in, one partition per (date, bucket, config) out.

Steps, each a method: load manifests, keep the newest delivery per partition, skip what the
table already holds and refuse what is older, skip dates ``keep_days`` no longer keeps,
verify data files, read reports, validate rows, write. A delivery that fails any step is
refused with the file and the problem; the others still go in. Each (inventory_date, bucket,
config_id) partition holds exactly one delivery, replaced whole only by one at least as new.

The write's commit enforces that last rule itself (see ``lakeio.tables.write``): each partition
is claimed with its delivery's time and identity, so two runs committing one partition at once
conflict, and the loser either goes on top (its delivery is newer) or is refused by name.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from functools import reduce
from typing import Any

from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

from inventory_etl.manifest import DELIVERY_FOLDER, DeliveryError, Manifest, parse_manifest
from inventory_etl.reports import PROBLEM, SOURCE_FILE, read_report, to_contract
from inventory_etl.verify import verify_data_files
from lakeio.errors import InvalidOption
from lakeio.inventory import EARLIER_PARTITION_COLUMNS, INVENTORY_SCHEMA, PARTITION_COLUMNS, held_partitions
from lakeio.spark import catalog
from lakeio.spark.session import check_workers
from lakeio.spark.steps import Step, Steps, one_run
from lakeio.spark.tasks import by_key
from lakeio.store import put_if_absent, uris
from lakeio.store.filesystem import Storage
from lakeio.store.put_if_absent import PutIfAbsentUnproven
from lakeio.tables.read import TableNotFound, partition_columns, read_delta
from lakeio.tables.write import (
    BeforeCommit,
    Claim,
    IncompatibleTable,
    check_target,
    deltalake_uri,
    held_claims,
    partition_folder,
    partition_string,
    write_delta,
)
from lakeio.text import StrEnum, first_line, human_bytes

log = logging.getLogger(__name__)


class DeliveryStatus(StrEnum):
    """What a run did with one delivery."""

    INGESTED = "ingested"
    REFUSED = "refused"  # ``error`` says why
    SUPERSEDED = "superseded"  # a newer delivery of its partition went in instead
    SKIPPED = "skipped"  # nothing to do: the table holds it already, or --keep-days keeps no such date


@dataclass
class DeliveryOutcome:
    manifest_uri: str
    status: DeliveryStatus
    source_bucket: str | None = None
    config_id: str | None = None
    inventory_date: str | None = None
    file_format: str | None = None
    rows: int = 0
    bytes: int = 0
    error: str | None = None
    superseded_by: str | None = None  # the newer delivery of the same partition that went in instead
    reason: str | None = None  # why it was skipped, or what to know about it (an empty delivery)


@dataclass
class IngestResult:
    inventory_table: str
    deliveries: list[DeliveryOutcome]
    elapsed_seconds: float = 0.0
    step_seconds: dict[str, float] = field(default_factory=dict)  # each step's time: reading, checking, ..., writing
    table_version: int | None = None
    partitions_dropped: int = 0  # by keep_days, in the write's own commit
    notes: list[str] = field(default_factory=list)

    @property
    def ingested(self) -> list[DeliveryOutcome]:
        return [d for d in self.deliveries if d.status == DeliveryStatus.INGESTED]

    @property
    def refused(self) -> list[DeliveryOutcome]:
        return [d for d in self.deliveries if d.status == DeliveryStatus.REFUSED]

    @property
    def superseded(self) -> list[DeliveryOutcome]:
        return [d for d in self.deliveries if d.status == DeliveryStatus.SUPERSEDED]

    @property
    def skipped(self) -> list[DeliveryOutcome]:
        return [d for d in self.deliveries if d.status == DeliveryStatus.SKIPPED]

    def to_dict(self) -> dict[str, Any]:
        return {
            "inventory_table": self.inventory_table,
            "deliveries_ingested": len(self.ingested),
            "deliveries_refused": len(self.refused),
            "deliveries_superseded": len(self.superseded),
            "deliveries_skipped": len(self.skipped),
            "rows": sum(d.rows for d in self.ingested),
            "bytes": sum(d.bytes for d in self.ingested),
            "elapsed_seconds": round(self.elapsed_seconds, 3),
            "step_seconds": self.step_seconds,
            "table_version": self.table_version,
            "partitions_dropped": self.partitions_dropped,
            "notes": self.notes,
            "deliveries": [asdict(d) for d in self.deliveries],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    @property
    def ok(self) -> bool:
        """No delivery was refused (the job exits 0)."""
        return not self.refused

    def summary(self) -> str:
        """What the run did, one line per delivery (skips of days the table holds are only counted)."""
        summary = self.to_dict()
        lines = [
            f"inventory table  {self.inventory_table}" + (f" (version {self.table_version})" if self.table_version is not None else ""),
            f"deliveries       {summary['deliveries_ingested']} ingested, {summary['deliveries_refused']} refused, "
            f"{summary['deliveries_superseded']} superseded, {summary['deliveries_skipped']} skipped",
            f"rows             {summary['rows']:,}",
            f"bytes            {summary['bytes']:,} ({human_bytes(summary['bytes'])})",
            f"elapsed          {summary['elapsed_seconds']:.1f} s",
        ]
        for d in self.deliveries:
            where = f"{d.source_bucket}/{d.config_id} {d.inventory_date}" if d.source_bucket else d.manifest_uri
            if d.status == DeliveryStatus.INGESTED:
                lines.append(f"  ingested  {where}: {d.rows:,} rows ({d.file_format})" + (f"; {d.reason}" if d.reason else ""))
            elif d.status == DeliveryStatus.SKIPPED:
                if d.reason != HELD:  # a daily run skips the window's held days: counted only
                    lines.append(f"  skipped   {where}: {d.reason}")
            elif d.status == DeliveryStatus.SUPERSEDED:
                lines.append(f"  superseded {where}: by the newer delivery {d.superseded_by}")
            else:  # REFUSED
                lines.append(f"  REFUSED   {where}: {d.error}")
        lines += [f"  note      {n}" for n in self.notes]
        return "\n".join(lines)


HELD = "the table already holds this delivery"
# Compressed report bytes per row, at least (the benchmark's regular synthetic rows take 25 in Parquet; real keys and
# ETags take more): the validation sizes its tasks by the rows this bounds, before any report is read.
REPORT_BYTES_PER_ROW = 16
# What a delivery's rows are before the write: the contract's columns, then what refusals name.
CONTRACT_ROWS = StructType([*INVENTORY_SCHEMA.fields, StructField(PROBLEM, StringType()), StructField(SOURCE_FILE, StringType())])


@dataclass
class _Accepted:
    manifest: Manifest
    rows: DataFrame  # contract columns + _problem


def ingest(
    spark: SparkSession,
    inventory_table: str,
    manifests: list[str],
    *,
    path_roots: Mapping[str, str] | None = None,
    verify_checksums: bool = True,
    allow_older: bool = False,
    keep_days: int | None = None,
) -> IngestResult:
    """Ingest S3 Inventory deliveries into the inventory Delta table.

    Args:
        spark: the session to run in.
        inventory_table: the table to write (a URI or a catalog name); created on the first run.
        manifests: the deliveries' ``manifest.json`` URIs.
        path_roots: per source bucket, where its keys live when not at ``s3://<bucket>/`` (tests, mirrors).
        verify_checksums: check ``manifest.checksum`` and each report file's MD5 before reading it.
        allow_older: let a delivery replace a partition even where the table holds a newer delivery of it.
        keep_days: keep the N newest inventory dates of each bucket and configuration (this run's
            included) and drop their older partitions in the same commit; default: keep every date.

    Returns:
        The :class:`IngestResult`: one outcome per delivery. A delivery that cannot be ingested
        exactly is refused and reported there, never raised: check ``result.ok``.
    """
    return IngestInventory(spark, inventory_table, path_roots, verify_checksums=verify_checksums,
                           allow_older=allow_older, keep_days=keep_days).execute(manifests)


class IngestInventory:
    """Ingest a set of manifests into the inventory table."""

    def __init__(
        self,
        spark: SparkSession,
        inventory_table: str,
        path_roots: Mapping[str, str] | None = None,
        verify_checksums: bool = True,
        allow_older: bool = False,
        keep_days: int | None = None,
        *,
        before_commit: BeforeCommit | None = None,
    ):
        """``before_commit`` is told the table each commit is about to go into (tests hold a run there)."""
        self.spark = spark
        self.before_commit = before_commit
        self.storage = Storage(spark)
        self.inventory_table = uris.to_uri(catalog.resolve(spark, inventory_table, must_be_delta=False))
        self.path_roots = {bucket: uris.to_uri(root) for bucket, root in (path_roots or {}).items()}
        self.verify_checksums = verify_checksums
        self.allow_older = allow_older
        if keep_days is not None and keep_days < 1:
            raise InvalidOption("keep_days must be at least 1")
        self.keep_days = keep_days
        self.progress = Steps(spark, log)
        check_workers(spark)

    @one_run
    def execute(self, manifest_uris: list[str]) -> IngestResult:
        started = time.monotonic()
        self.progress.restart()
        result = IngestResult(self.inventory_table, [])
        manifests = self._load_manifests(list(dict.fromkeys(uris.to_uri(u) for u in manifest_uris)), result)
        manifests = self._not_into_an_earlier_layout(manifests, result)
        manifests = self._into_a_table_of_ours(manifests, result)
        manifests = self._newest_per_partition(manifests, result)
        manifests = self._against_table(manifests, result)
        manifests = self._within_keep_days(manifests, result)
        manifests = self._verify_data_files(manifests, result)
        accepted = self._read_reports(manifests, result)
        accepted = self._validate_rows(accepted, result)
        self._write(accepted, result)
        result.elapsed_seconds, result.step_seconds = time.monotonic() - started, self.progress.seconds()
        return result

    def _load_manifests(self, manifest_uris: list[str], result: IngestResult) -> list[Manifest]:
        self.progress.begin(Step.READING_MANIFESTS, f"reading {len(manifest_uris)} manifest(s)")
        loaded = []
        for uri in manifest_uris:
            try:
                body = self._read(uri)
                try:
                    checksum = self._read(uris.join(uris.parent(uri), "manifest.checksum")) if self.verify_checksums else None
                except DeliveryError:
                    parse_manifest(uri, body, None)  # a manifest that does not parse says so, checksum or none
                    raise
                manifest = parse_manifest(uri, body, checksum)
                try:
                    partition_folder(PARTITION_COLUMNS, _partition(manifest))
                except ValueError as exc:
                    raise DeliveryError(uri, f"cannot be a partition of the inventory table: {exc}") from None
                loaded.append(manifest)
            except DeliveryError as exc:
                self._refuse(result, uri, exc)
        return loaded

    def _not_into_an_earlier_layout(self, manifests: list[Manifest], result: IngestResult) -> list[Manifest]:
        """A table partitioned as earlier releases did would let configurations overwrite each other."""
        if manifests and partition_columns(self.inventory_table) == list(EARLIER_PARTITION_COLUMNS):
            problem = (f"{self.inventory_table}: written by an earlier release, partitioned by "
                       f"{', '.join(EARLIER_PARTITION_COLUMNS)}; copy it once into a new table with "
                       f"--inventory-table NEW --migrate-from {self.inventory_table}, then ingest into NEW")
            for m in manifests:
                self._refuse(result, m.uri, DeliveryError(m.uri, problem), m)
            return []
        return manifests

    def _into_a_table_of_ours(self, manifests: list[Manifest], result: IngestResult) -> list[Manifest]:
        """A target that is not empty and not an inventory table is refused from its log alone, and so is
        a store that does not put a commit only where none is (lakeio.store.put_if_absent), before any delivery
        is verified or read."""
        if not manifests:
            return manifests
        try:
            check_target(self.spark, INVENTORY_SCHEMA, self.inventory_table, PARTITION_COLUMNS)
            if not put_if_absent.deltalake_locks_commits():
                put_if_absent.prove(self.inventory_table, f"the inventory table {self.inventory_table}'s")
        except (IncompatibleTable, PutIfAbsentUnproven) as exc:
            for m in manifests:
                self._refuse(result, m.uri, exc, m)  # the table's fault: named as the write would name it
            return []
        return manifests

    def _newest_per_partition(self, manifests: list[Manifest], result: IngestResult) -> list[Manifest]:
        """Several deliveries of one (date, bucket, config): the newest goes in, the others are superseded."""
        newest: dict[tuple[str, ...], Manifest] = {}
        for m in sorted(manifests, key=_delivery_order):
            newest[_partition_key(m)] = m
        for m in manifests:
            winner = newest[_partition_key(m)]
            if winner is not m:
                self.progress(f"superseded {m.uri} by {winner.uri}")
                result.deliveries.append(self._outcome(m, DeliveryStatus.SUPERSEDED, superseded_by=winner.uri))
        return [m for m in manifests if newest[_partition_key(m)] is m]

    def _against_table(self, manifests: list[Manifest], result: IngestResult) -> list[Manifest]:
        """A delivery the table already holds is skipped; one older than the delivery its partition
        holds is refused unless ``allow_older`` (it would turn the table back in time). The claims
        in the log say which delivery each partition holds; a partition written before claims
        existed is asked for its manifest (and holds a claim once re-ingested)."""
        if not manifests:
            return manifests
        self.progress.begin(Step.CHECKING_HELD, f"checking which deliveries {self.inventory_table} holds")
        keys = [_partition_key(m) for m in manifests]
        claims = held_claims(self.inventory_table, PARTITION_COLUMNS, keys)
        unclaimed = set(keys) - set(claims) if not self.allow_older else set()
        if unclaimed:
            unclaimed &= self._partitions()
        by_manifest = self._held_deliveries(unclaimed) if unclaimed else {}
        kept = []
        for m in manifests:
            key = _partition_key(m)
            held = claims.get(key)
            holds = by_manifest.get(key)
            if (held.identity == _claim(m).identity if held is not None
                    else holds is not None and uris.canonical(holds) == uris.canonical(m.uri)):
                self._skip(result, m, HELD)  # unclaimed: written by Delta's own writer, or before claims existed
                continue
            if held is not None:
                newer = not self.allow_older and held.rank > _claim(m).rank
            else:
                newer = holds is not None and _delivery_folder(holds) > m.delivery_folder and all(
                    DELIVERY_FOLDER.match(f) for f in (_delivery_folder(holds), m.delivery_folder))
            if newer:
                holds = by_manifest.get(key) or self._held_deliveries({key}).get(key, "a newer delivery")
                self._refuse(result, m.uri, DeliveryError(
                    m.uri, f"older than the delivery the table holds for this partition ({holds}); "
                           "pass --allow-older-delivery to go back to it"), m)
            else:
                kept.append(m)
        return kept

    def _partitions(self) -> set[tuple[str, str, str]]:
        """Every (date, bucket, config) the table holds rows of, spelled as partition values."""
        return {(partition_string(day) or "", bucket, config) for day, bucket, config in held_partitions(self.inventory_table)}

    def _within_keep_days(self, manifests: list[Manifest], result: IngestResult) -> list[Manifest]:
        """With ``keep_days``, a delivery of a date its own (bucket, config) no longer keeps is not
        written (it would be dropped again): skipped, said why."""
        if self.keep_days is None or not manifests:
            return manifests
        expired = set(self._expired([_partition_key(m) for m in manifests]))
        for m in manifests:
            if _partition_key(m) in expired:
                self._skip(result, m, f"{m.source_bucket}/{m.config_id} keeps its {self.keep_days} newest date(s) "
                                      f"(--keep-days), all later than {m.inventory_date}")
        return [m for m in manifests if _partition_key(m) not in expired]

    def _held_deliveries(self, partitions: set[tuple[str, str, str]]) -> dict[tuple[str, ...], str]:
        """The delivery each of these partitions holds, in one Spark job: the first row of
        each is enough, since a partition only ever holds one delivery."""
        by_day: dict[str, DataFrame] = {}
        firsts = []
        for day, bucket, config in sorted(partitions):
            if day not in by_day:
                try:
                    by_day[day] = read_delta(self.spark, self.inventory_table, {PARTITION_COLUMNS[0]: day})
                except TableNotFound:
                    return {}
            rows = by_day[day]
            if "manifest_uri" not in rows.columns:
                return {}  # not an inventory table of ours: the write refuses it with the reason
            firsts.append(rows.where((F.col("bucket") == bucket) & (F.col("config_id") == config))
                          .select(F.lit(day).alias("day"), "bucket", "config_id", "manifest_uri").limit(1))
        return {(r["day"], r["bucket"], r["config_id"]): r["manifest_uri"] for r in _union(firsts).collect()}

    def _read(self, uri: str) -> bytes:
        try:
            if not self.storage.exists(uri):
                raise DeliveryError(uri, "file not found")
            return self.storage.read_bytes(uri)
        except DeliveryError:
            raise
        except Exception as exc:  # py4j error from the store: a scheme, a bucket, a permission
            raise DeliveryError(uri, f"cannot read: {first_line(exc)}") from None

    def _verify_data_files(self, manifests: list[Manifest], result: IngestResult) -> list[Manifest]:
        if not manifests:
            return []
        what = "sizes and MD5 sums" if self.verify_checksums else "sizes"
        self.progress.begin(Step.VERIFYING, f"verifying {what} of {sum(len(m.files) for m in manifests)} data file(s)")
        problems = verify_data_files(self.spark, manifests, check_md5=self.verify_checksums)
        for manifest in manifests:
            if manifest.uri in problems:
                self._refuse(result, manifest.uri, problems[manifest.uri], manifest)
        return [m for m in manifests if m.uri not in problems]

    def _read_reports(self, manifests: list[Manifest], result: IngestResult) -> list[_Accepted]:
        accepted = []
        for manifest in manifests:
            try:
                if not manifest.files:  # an empty bucket or prefix: the partition becomes empty
                    accepted.append(_Accepted(manifest, self.spark.createDataFrame([], CONTRACT_ROWS)))
                    continue
                rows = to_contract(read_report(self.spark, manifest), manifest, self.path_roots)
                accepted.append(_Accepted(manifest, rows))
            except DeliveryError as exc:
                self._refuse(result, manifest.uri, exc, manifest)
        return accepted

    def _validate_rows(self, accepted: list[_Accepted], result: IngestResult) -> list[_Accepted]:
        """One aggregate over all deliveries; per delivery only if that one fails, to find the culprit."""
        if not accepted:
            return []
        self.progress.begin(Step.VALIDATING, f"validating rows of {len(accepted)} deliver{'y' if len(accepted) == 1 else 'ies'}")
        try:
            stats = self._row_stats(accepted)
        except Exception:
            stats = {}
            for a in accepted:
                try:
                    stats.update(self._row_stats([a]))
                except Exception as exc:
                    stats[a.manifest.uri] = {"error": f"unreadable {a.manifest.file_format} report: {first_line(exc)}"}
        good = []
        for a in accepted:
            s = stats.get(a.manifest.uri, {"rows": 0, "bytes": 0, "bad": 0})
            if "error" in s:
                self._refuse(result, a.manifest.uri, DeliveryError(a.manifest.uri, s["error"]), a.manifest)
            elif s["bad"] and s["sample"] is None:  # what the executor checks can depend on the executor
                problem = (f"{s['bad']} of {s['rows']} row(s) unusable when first read, none when read again: "
                           "the problem depends on the executor that reads them (for ORC, executors whose "
                           "JVM zones differ)")
                self._refuse(result, a.manifest.uri, DeliveryError(a.manifest.uri, problem), a.manifest)
            elif s["bad"]:
                sample = s["sample"]
                problem = (f"{s['bad']} of {s['rows']} row(s) unusable, first: {sample['problem']} "
                           f"(key {sample['key'] if sample['key'] is not None else '?'})")
                self._refuse(result, a.manifest.uri, DeliveryError(sample["file"], problem), a.manifest)
            elif s.get("duplicates"):
                twice = s["duplicate"]
                problem = f"{s['duplicates']} row(s) repeat an object of the delivery, first: key {twice['key']}"
                self._refuse(result, a.manifest.uri, DeliveryError(twice["file"], problem), a.manifest)
            else:
                good.append(a)
                empty = "the manifest lists no data files: ingested as an empty delivery" if not a.manifest.files else None
                result.deliveries.append(self._outcome(a.manifest, DeliveryStatus.INGESTED, rows=s["rows"], bytes=s["bytes"],
                                                       reason=empty))
        return good

    def _row_stats(self, accepted: list[_Accepted]) -> dict[str, dict[str, Any]]:
        """Rows, bytes, unusable rows and objects listed twice, per delivery, in one pass.

        Rows are grouped by (delivery number, 64-bit hash of key and version): one shuffle
        of fixed-width values that yields every count. Only a delivery with unusable rows or
        a repeated hash is read again, alone, to name its first bad row or repeated key
        (which also drops a repeat raised by a hash collision alone)."""
        per_object = _per_object(accepted)
        totals = per_object.groupBy("delivery").agg(
            F.sum("rows").alias("rows"), F.coalesce(F.sum("bytes"), F.lit(0)).alias("bytes"),
            F.sum("bad").alias("bad"), F.sum(F.col("rows") - 1).alias("repeats")).collect()
        stats = {}
        for row in totals:
            a = accepted[row["delivery"]]
            found = {"rows": row["rows"], "bytes": row["bytes"], "bad": row["bad"]}
            if found["bad"]:
                found["sample"] = self._first_unusable(a.rows)
            elif row["repeats"]:
                found.update(self._listed_twice(a.rows))
            stats[a.manifest.uri] = found
        return stats

    @staticmethod
    def _first_unusable(rows: DataFrame) -> Row | None:
        """A delivery's first unusable row (problem, key, file), read again; None where this read finds
        none, which a check that depends on the executor (ORC's zone) allows."""
        return (rows.where(F.col(PROBLEM).isNotNull())
                .select(F.col(PROBLEM).alias("problem"), "key", F.col(SOURCE_FILE).alias("file")).first())

    @staticmethod
    def _listed_twice(rows: DataFrame) -> dict[str, Any]:
        """How many rows repeat an object of one delivery, and the first such key with its file."""
        repeated = (rows.where(F.col("key").isNotNull()).groupBy("key", "version_id")
                    .agg(F.count(F.lit(1)).alias("n"), F.first(SOURCE_FILE).alias("file")).where(F.col("n") > 1))
        found = repeated.agg(F.sum(F.col("n") - 1).alias("duplicates"),
                             F.first(F.struct("key", "file")).alias("duplicate")).first()
        assert found is not None  # a global aggregate has one row
        return {"duplicates": found["duplicates"] or 0, "duplicate": found["duplicate"]}

    def _write(self, accepted: list[_Accepted], result: IngestResult) -> None:
        if not accepted:
            return
        partitions = sorted({_partition_key(a.manifest) for a in accepted})
        self.progress.begin(Step.WRITING, f"writing {len(partitions)} partition(s) to {self.inventory_table}")
        rows = _union([a.rows for a in accepted]).drop(PROBLEM, SOURCE_FILE)
        try:
            expired = [p for p in self._expired(partitions) if p not in partitions]
            written = write_delta(rows, self.inventory_table, PARTITION_COLUMNS,
                                  [dict(zip(PARTITION_COLUMNS, p)) for p in partitions], mode="replace_partitions",
                                  drop=[dict(zip(PARTITION_COLUMNS, p)) for p in expired],
                                  claims={_partition_key(a.manifest): _claim(a.manifest) for a in accepted},
                                  outranked_allowed=self.allow_older, before_commit=self.before_commit)
        except IncompatibleTable as exc:
            self._refuse_written(accepted, result, str(exc))
            return
        except Exception as exc:
            self._refuse_written(accepted, result, f"{self.inventory_table}: write failed: {first_line(exc)}")
            return
        if written.outranked:
            holds = self._held_deliveries({(day, bucket, config) for day, bucket, config in written.outranked})
            for a in accepted:
                key = _partition_key(a.manifest)
                if key in written.outranked:
                    self._refuse_written([a], result, f"{a.manifest.uri}: another run committed delivery "
                                                      f"{holds.get(key, '(unknown)')} of this partition first, "
                                                      "and it is newer; this one was not written")
        if written.columns_added:
            result.notes.append(f"added column(s) {', '.join(written.columns_added)} to {self.inventory_table} "
                                "(older rows read them as null)")
        result.table_version = self._table_version()
        if expired:
            result.partitions_dropped = len(expired)
            result.notes.append(f"dropped {len(expired)} partition(s) of {min(p[0] for p in expired)} to "
                                f"{max(p[0] for p in expired)} (--keep-days {self.keep_days}: the newest dates of "
                                "each bucket and configuration)")

    def _expired(self, writing: list[tuple[str, str, str]]) -> list[tuple[str, ...]]:
        """Partitions (held, or in ``writing``) whose date is not among the ``keep_days`` newest
        dates of their own (bucket, config): a weekly or lagging configuration keeps its own."""
        if self.keep_days is None:
            return []
        held = self._partitions()
        dates: dict[tuple[str, ...], set[str]] = {}
        for day, bucket, config in held | set(writing):
            dates.setdefault((bucket, config), set()).add(str(day))
        kept = {pair: set(sorted(days)[-self.keep_days:]) for pair, days in dates.items()}
        return sorted(p for p in held | set(writing) if str(p[0]) not in kept[(p[1], p[2])])

    def _refuse_written(self, accepted: list[_Accepted], result: IngestResult, error: str) -> None:
        log.warning("refused: %s", error)
        for a in accepted:
            outcome = next(d for d in result.deliveries if d.manifest_uri == a.manifest.uri)
            outcome.status, outcome.rows, outcome.bytes, outcome.error = DeliveryStatus.REFUSED, 0, 0, error

    def _skip(self, result: IngestResult, manifest: Manifest, reason: str) -> None:
        self.progress(f"skipped {manifest.uri}: {reason}")
        result.deliveries.append(self._outcome(manifest, DeliveryStatus.SKIPPED, reason=reason))

    def _table_version(self) -> int | None:
        from deltalake import DeltaTable

        try:
            return DeltaTable(deltalake_uri(self.inventory_table)).version()
        except Exception:
            return None

    def _refuse(self, result: IngestResult, uri: str, exc: DeliveryError | IncompatibleTable | PutIfAbsentUnproven,
                manifest: Manifest | None = None) -> None:
        log.warning("refused %s", exc)
        result.deliveries.append(self._outcome(manifest, DeliveryStatus.REFUSED, uri=uri, error=str(exc)))

    @staticmethod
    def _outcome(manifest: Manifest | None, status: DeliveryStatus, uri: str | None = None,
                 **extra: Any) -> DeliveryOutcome:
        if manifest is None:
            return DeliveryOutcome(manifest_uri=uri or "", status=status, **extra)
        return DeliveryOutcome(
            manifest_uri=manifest.uri, status=status, source_bucket=manifest.source_bucket,
            config_id=manifest.config_id, inventory_date=manifest.inventory_date.isoformat(),
            file_format=manifest.file_format, **extra,
        )


def _claim(manifest: Manifest) -> Claim:
    """The delivery's claim on its partition: newer by delivery time, itself by URI and content."""
    return Claim(manifest.delivered_minute, Claim.identity_of(f"{manifest.uri}\n{manifest.body_md5}"))


def _partition(manifest: Manifest) -> dict[str, str]:
    return dict(zip(PARTITION_COLUMNS, _partition_key(manifest)))


def _partition_key(manifest: Manifest) -> tuple[str, str, str]:
    return manifest.inventory_date.isoformat(), manifest.source_bucket, manifest.config_id


def _delivery_folder(manifest_uri: str) -> str:
    return uris.name(uris.parent(manifest_uri))


def _delivery_order(manifest: Manifest) -> tuple[Any, ...]:
    """Delivery folders sort by time; the creation time and the URI break ties."""
    return manifest.delivery_folder, manifest.creation_timestamp or 0, manifest.uri


def _per_object(accepted: list[_Accepted]) -> DataFrame:
    """Rows, bytes and unusable rows per (delivery number, 64-bit hash of key and version).

    Nearly every key is distinct, so Spark's map-side partial aggregation would only build (and
    spill) a hash table as large as its input. The rows are shuffled by the hash first (which
    clusters the pair too), into tasks sized by the rows the reports' bytes allow
    (lakeio.spark.tasks.by_key); in Spark's few tasks by bytes the aggregation spilled (benchmarks/RESULTS.md,
    "Ingestion at 10M rows: the validation spilled")."""
    numbered = _union([a.rows.select(F.lit(i).alias("delivery"), F.xxhash64("key", "version_id").alias("object"),
                                     "length", PROBLEM) for i, a in enumerate(accepted)])
    report_bytes = sum(f.size for a in accepted for f in a.manifest.files)
    return by_key(numbered, ["object"], report_bytes // REPORT_BYTES_PER_ROW).groupBy("delivery", "object").agg(
        F.count(F.lit(1)).alias("rows"), F.sum("length").alias("bytes"), F.count(F.col(PROBLEM)).alias("bad"))


def _union(frames: list[DataFrame]) -> DataFrame:
    return reduce(DataFrame.unionByName, frames)
