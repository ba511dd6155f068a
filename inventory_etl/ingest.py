"""Job 1 as one action: S3 Inventory deliveries in, one partition per (date, bucket) out.

Steps, each a method: load manifests, verify data files, read reports, validate rows,
write. A delivery that fails any step is refused with the file and the problem; the
others still go in. Deliveries that share an (inventory_date, bucket) partition go in
together or not at all, because writing replaces the whole partition.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from functools import reduce
from typing import Callable, Mapping

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from inventory_etl.contract import PARTITION_COLUMNS
from inventory_etl.manifest import DeliveryError, Manifest, parse_manifest
from inventory_etl.reports import PROBLEM, read_report, to_contract
from inventory_etl.verify import verify_data_files
from lakeio import uris
from lakeio.delta_write import deltalake_uri, write_delta
from lakeio.text import first_line
from lakeio.storage import Storage


@dataclass
class DeliveryOutcome:
    manifest_uri: str
    status: str  # "ingested" or "refused"
    source_bucket: str | None = None
    config_id: str | None = None
    inventory_date: str | None = None
    file_format: str | None = None
    rows: int = 0
    bytes: int = 0
    error: str | None = None


@dataclass
class IngestResult:
    inventory_table: str
    deliveries: list[DeliveryOutcome]
    elapsed_seconds: float = 0.0
    table_version: int | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def ingested(self) -> list[DeliveryOutcome]:
        return [d for d in self.deliveries if d.status == "ingested"]

    @property
    def refused(self) -> list[DeliveryOutcome]:
        return [d for d in self.deliveries if d.status == "refused"]

    def to_dict(self) -> dict:
        return {
            "inventory_table": self.inventory_table,
            "deliveries_ingested": len(self.ingested),
            "deliveries_refused": len(self.refused),
            "rows": sum(d.rows for d in self.ingested),
            "bytes": sum(d.bytes for d in self.ingested),
            "elapsed_seconds": round(self.elapsed_seconds, 3),
            "table_version": self.table_version,
            "notes": self.notes,
            "deliveries": [asdict(d) for d in self.deliveries],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)


@dataclass
class _Accepted:
    manifest: Manifest
    rows: DataFrame  # contract columns + _problem


class IngestInventory:
    """Ingest a set of manifests into the inventory table."""

    def __init__(
        self,
        spark: SparkSession,
        inventory_table: str,
        path_roots: Mapping[str, str] | None = None,
        verify_checksums: bool = True,
        progress: Callable[[str], None] = lambda message: None,
    ):
        self.spark = spark
        self.storage = Storage(spark)
        self.inventory_table = uris.to_uri(inventory_table)
        self.path_roots = {bucket: uris.to_uri(root) for bucket, root in (path_roots or {}).items()}
        self.verify_checksums = verify_checksums
        self.progress = progress

    def execute(self, manifest_uris: list[str]) -> IngestResult:
        started = time.monotonic()
        result = IngestResult(self.inventory_table, [])
        manifests = self._load_manifests([uris.to_uri(u) for u in manifest_uris], result)
        manifests = self._verify_data_files(manifests, result)
        accepted = self._read_reports(manifests, result)
        accepted = self._validate_rows(accepted, result)
        accepted = self._refuse_partition_siblings(accepted, result)
        self._write(accepted, result)
        result.elapsed_seconds = time.monotonic() - started
        return result

    def _load_manifests(self, manifest_uris: list[str], result: IngestResult) -> list[Manifest]:
        self.progress(f"reading {len(manifest_uris)} manifest(s)")
        loaded = []
        for uri in manifest_uris:
            try:
                body = self._read(uri)
                checksum = self._read(uris.join(uris.parent(uri), "manifest.checksum")) if self.verify_checksums else None
                loaded.append(parse_manifest(uri, body, checksum))
            except DeliveryError as exc:
                self._refuse(result, uri, exc)
        return loaded

    def _read(self, uri: str) -> bytes:
        if not self.storage.exists(uri):
            raise DeliveryError(uri, "file not found")
        try:
            return self.storage.read_bytes(uri)
        except Exception as exc:  # py4j error from the store
            raise DeliveryError(uri, f"cannot read: {first_line(exc)}") from None

    def _verify_data_files(self, manifests: list[Manifest], result: IngestResult) -> list[Manifest]:
        what = "sizes and MD5 sums" if self.verify_checksums else "sizes"
        self.progress(f"verifying {what} of {sum(len(m.files) for m in manifests)} data file(s)")
        problems = verify_data_files(self.spark, self.storage, manifests, check_md5=self.verify_checksums)
        for manifest in manifests:
            if manifest.uri in problems:
                self._refuse(result, manifest.uri, problems[manifest.uri], manifest)
        return [m for m in manifests if m.uri not in problems]

    def _read_reports(self, manifests: list[Manifest], result: IngestResult) -> list[_Accepted]:
        accepted = []
        for manifest in manifests:
            try:
                rows = to_contract(read_report(self.spark, manifest), manifest, self.path_roots)
                accepted.append(_Accepted(manifest, rows))
            except DeliveryError as exc:
                self._refuse(result, manifest.uri, exc, manifest)
        return accepted

    def _validate_rows(self, accepted: list[_Accepted], result: IngestResult) -> list[_Accepted]:
        """One aggregate over all deliveries; per delivery only if that one fails, to find the culprit."""
        if not accepted:
            return []
        self.progress(f"validating rows of {len(accepted)} deliver{'y' if len(accepted) == 1 else 'ies'}")
        try:
            stats = self._row_stats(_union([a.rows for a in accepted]))
        except Exception:
            stats = {}
            for a in accepted:
                try:
                    stats.update(self._row_stats(a.rows))
                except Exception as exc:
                    stats[a.manifest.uri] = {"error": f"unreadable {a.manifest.file_format} report: {first_line(exc)}"}
        good = []
        for a in accepted:
            s = stats.get(a.manifest.uri, {"rows": 0, "bytes": 0, "bad": 0})
            if "error" in s:
                self._refuse(result, a.manifest.uri, DeliveryError(a.manifest.uri, s["error"]), a.manifest)
            elif s["bad"]:
                problem = f"{s['bad']} of {s['rows']} row(s) unusable, first: {s['sample']}"
                self._refuse(result, a.manifest.uri, DeliveryError(a.manifest.uri, problem), a.manifest)
            else:
                good.append(a)
                result.deliveries.append(self._outcome(a.manifest, "ingested", rows=s["rows"], bytes=s["bytes"]))
        return good

    def _row_stats(self, rows: DataFrame) -> dict[str, dict]:
        sample = F.when(F.col(PROBLEM).isNotNull(), F.concat(F.col(PROBLEM), F.lit(" (key "),
                                                             F.coalesce(F.col("key"), F.lit("?")), F.lit(")")))
        aggregated = rows.groupBy("manifest_uri").agg(
            F.count(F.lit(1)).alias("rows"),
            F.coalesce(F.sum("length"), F.lit(0)).alias("bytes"),
            F.count(F.col(PROBLEM)).alias("bad"),
            F.first(sample, ignorenulls=True).alias("sample"),
        )
        return {r["manifest_uri"]: r.asDict() for r in aggregated.collect()}

    def _refuse_partition_siblings(self, accepted: list[_Accepted], result: IngestResult) -> list[_Accepted]:
        """A partition is replaced whole, so it is written only when all its deliveries are good."""
        refused = {(d.inventory_date, d.source_bucket) for d in result.refused if d.source_bucket}
        good = []
        for a in accepted:
            key = (a.manifest.inventory_date.isoformat(), a.manifest.source_bucket)
            if key in refused:
                outcome = next(d for d in result.deliveries if d.manifest_uri == a.manifest.uri)
                outcome.status, outcome.rows, outcome.bytes = "refused", 0, 0
                outcome.error = (f"{a.manifest.uri}: another delivery for bucket {key[1]} on {key[0]} was refused; "
                                 "the partition is left as it was")
            else:
                good.append(a)
        return good

    def _write(self, accepted: list[_Accepted], result: IngestResult) -> None:
        if not accepted:
            return
        partitions = sorted({(a.manifest.inventory_date.isoformat(), a.manifest.source_bucket) for a in accepted})
        self.progress(f"writing {len(partitions)} partition(s) to {self.inventory_table}")
        rows = _union([a.rows for a in accepted]).drop(PROBLEM)
        try:
            write_delta(rows, self.inventory_table, PARTITION_COLUMNS,
                        [dict(zip(PARTITION_COLUMNS, p)) for p in partitions], mode="replace_partitions")
        except Exception as exc:
            for a in accepted:
                outcome = next(d for d in result.deliveries if d.manifest_uri == a.manifest.uri)
                outcome.status, outcome.error = "refused", f"{self.inventory_table}: write failed: {first_line(exc)}"
            return
        result.table_version = self._table_version()

    def _table_version(self) -> int | None:
        from deltalake import DeltaTable

        try:
            return DeltaTable(deltalake_uri(self.inventory_table)).version()
        except Exception:
            return None

    def _refuse(self, result: IngestResult, uri: str, exc: DeliveryError, manifest: Manifest | None = None) -> None:
        self.progress(f"refused {exc}")
        result.deliveries.append(self._outcome(manifest, "refused", uri=uri, error=str(exc)))

    @staticmethod
    def _outcome(manifest: Manifest | None, status: str, uri: str | None = None, **extra) -> DeliveryOutcome:
        if manifest is None:
            return DeliveryOutcome(manifest_uri=uri or "", status=status, **extra)
        return DeliveryOutcome(
            manifest_uri=manifest.uri, status=status, source_bucket=manifest.source_bucket,
            config_id=manifest.config_id, inventory_date=manifest.inventory_date.isoformat(),
            file_format=manifest.file_format, **extra,
        )


def _union(frames: list[DataFrame]) -> DataFrame:
    return reduce(DataFrame.unionByName, frames)
