"""Write an S3 Inventory delivery exactly as S3 lays it out, from a list of objects.

Used by the tests, the demo and the benchmarks, and by teams whose storage has no
S3 Inventory: list your store, hand the objects to :func:`write_delivery`, and job 1
ingests the result like any S3 delivery. Layout written under ``destination``::

    <source-bucket>/<config-id>/data/<uuid>.{parquet,orc,csv.gz}
    <source-bucket>/<config-id>/<YYYY-MM-DDTHH-MMZ>/manifest.json
    <source-bucket>/<config-id>/<YYYY-MM-DDTHH-MMZ>/manifest.checksum

``destination`` is a local folder (sync it to a bucket if you like).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any
from urllib.parse import quote_plus

import pyarrow as pa
import pyarrow.orc as orc
import pyarrow.parquet as pq

from lakeio.errors import InvalidOption

# (CSV header name, snake_case name, arrow type) in the order S3 writes them.
# (the header S3 gives a field, our column name, its Arrow type)
Field = tuple[str, str, pa.DataType]
FIELDS: list[Field] = [
    ("Bucket", "bucket", pa.string()),
    ("Key", "key", pa.string()),
    ("VersionId", "version_id", pa.string()),
    ("IsLatest", "is_latest", pa.bool_()),
    ("IsDeleteMarker", "is_delete_marker", pa.bool_()),
    ("Size", "size", pa.int64()),
    ("LastModifiedDate", "last_modified_date", pa.timestamp("ms", tz="UTC")),
    ("ETag", "e_tag", pa.string()),
    ("StorageClass", "storage_class", pa.string()),
    ("IsMultipartUploaded", "is_multipart_uploaded", pa.bool_()),
    ("EncryptionStatus", "encryption_status", pa.string()),
]
VERSION_FIELDS = {"VersionId", "IsLatest", "IsDeleteMarker"}
# What a configuration with the Object Lock fields adds (write_delivery(object_lock=True)).
OBJECT_LOCK_FIELDS: list[Field] = [
    ("ObjectLockRetainUntilDate", "object_lock_retain_until_date", pa.timestamp("ms", tz="UTC")),
    ("ObjectLockMode", "object_lock_mode", pa.string()),
    ("ObjectLockLegalHoldStatus", "object_lock_legal_hold_status", pa.string()),
]
_PARQUET_TYPES = {pa.string(): "binary {} (UTF8)", pa.bool_(): "boolean {}", pa.int64(): "int64 {}"}
_ORC_TYPES = {pa.string(): "string", pa.bool_(): "boolean", pa.int64(): "bigint"}


@dataclass(frozen=True)
class InventoryObject:
    """One row of a report: an object, an object version or a delete marker."""

    key: str
    size: int | None
    last_modified_ms: int
    e_tag: str | None = None
    storage_class: str | None = "STANDARD"
    version_id: str | None = None
    is_latest: bool = True
    is_delete_marker: bool = False
    is_multipart_uploaded: bool = False
    encryption_status: str = "SSE-S3"
    object_lock_retain_until_date: int | None = None  # epoch ms
    object_lock_mode: str | None = None  # GOVERNANCE, COMPLIANCE
    object_lock_legal_hold_status: str | None = None  # ON, OFF


def write_delivery(
    destination: str,
    source_bucket: str,
    config_id: str,
    objects: Iterable[InventoryObject],
    delivered_at: datetime,
    file_format: str = "Parquet",
    versioned: bool = False,
    rows_per_file: int = 1_000_000,
    destination_bucket: str = "inventory-destination",
    destination_prefix: str = "inventory",
    object_lock: bool = False,
) -> str:
    """Write one delivery and return the path of its ``manifest.json``; ``object_lock`` adds the
    Object Lock fields."""
    if file_format not in ("Parquet", "ORC", "CSV"):
        raise InvalidOption(f"unknown file format {file_format!r}")
    fields = [f for f in FIELDS if versioned or f[0] not in VERSION_FIELDS] + (OBJECT_LOCK_FIELDS if object_lock else [])
    config_dir = os.path.join(destination, source_bucket, config_id)
    key_prefix = "/".join(p for p in (destination_prefix.strip("/"), source_bucket, config_id) if p)
    files = []
    for chunk in _chunks(list(objects), rows_per_file):
        table = _table(source_bucket, chunk, fields)
        name = f"{uuid.uuid4()}.{ {'Parquet': 'parquet', 'ORC': 'orc', 'CSV': 'csv.gz'}[file_format] }"
        data = _encode(table, fields, file_format)
        os.makedirs(os.path.join(config_dir, "data"), exist_ok=True)
        with open(os.path.join(config_dir, "data", name), "wb") as out:
            out.write(data)
        files.append({"key": f"{key_prefix}/data/{name}", "size": len(data),
                      "MD5checksum": hashlib.md5(data).hexdigest()})
    manifest = {
        "sourceBucket": source_bucket,
        "destinationBucket": f"arn:aws:s3:::{destination_bucket}",
        "version": "2016-11-30",
        "creationTimestamp": str(int(delivered_at.timestamp() * 1000)),
        "fileFormat": file_format,
        "fileSchema": _file_schema(fields, file_format),
        "files": files,
    }
    folder = os.path.join(config_dir, delivered_at.astimezone(timezone.utc).strftime("%Y-%m-%dT%H-%MZ"))
    os.makedirs(folder, exist_ok=True)
    body = json.dumps(manifest, indent=2).encode()
    with open(os.path.join(folder, "manifest.json"), "wb") as out:
        out.write(body)
    with open(os.path.join(folder, "manifest.checksum"), "w") as out:
        out.write(hashlib.md5(body).hexdigest() + "\n")
    return os.path.join(folder, "manifest.json")


def objects_in_folder(bucket_dir: str) -> list[InventoryObject]:
    """Every file under a local folder, as S3 Inventory would list it were the folder a bucket."""
    found = []
    for parent, _dirs, names in os.walk(bucket_dir):
        for file_name in names:
            full = os.path.join(parent, file_name)
            st = os.stat(full)
            key = os.path.relpath(full, bucket_dir).replace(os.sep, "/")
            found.append(InventoryObject(key=key, size=st.st_size, last_modified_ms=int(st.st_mtime * 1000),
                                         e_tag=f"{st.st_ino:x}{st.st_size:x}"))
    return found


def _chunks(items: list[Any], size: int) -> Iterable[list[Any]]:
    for start in range(0, max(len(items), 1), size):
        yield items[start:start + size]


def _table(bucket: str, objects: Sequence[InventoryObject], fields: Sequence[Field]) -> pa.Table:
    columns = {
        "bucket": [bucket] * len(objects),
        "last_modified_date": [o.last_modified_ms for o in objects],
    }
    for _, name, _type in fields:
        if name not in columns:
            columns[name] = [getattr(o, name) for o in objects]
    return pa.table({name: pa.array(columns[name], type=dtype) for _, name, dtype in fields})


def _encode(table: pa.Table, fields: Sequence[Field], file_format: str) -> bytes:
    buffer = io.BytesIO()
    if file_format == "Parquet":
        pq.write_table(table, buffer, compression="snappy")
    elif file_format == "ORC":
        naive = table
        for _, name, dtype in fields:
            if pa.types.is_timestamp(dtype):
                naive = naive.set_column(naive.schema.get_field_index(name), name, naive[name].cast(pa.timestamp("ms")))
        orc.write_table(naive, buffer, compression="zlib")  # the ORC library's own default codec
    else:
        buffer.write(gzip.compress(_csv_lines(table, fields).encode("utf-8")))
    return buffer.getvalue()


def _csv_lines(table: pa.Table, fields: Sequence[Field]) -> str:
    """No header; every field quoted; keys URL-encoded with ``+`` for a space, as S3 does."""
    lines = []
    for row in table.to_pylist():
        cells = []
        for _, name, _type in fields:
            value = row[name]
            if value is None:
                cells.append("")
            elif name == "key":
                cells.append(quote_plus(value, safe="/"))
            elif isinstance(value, bool):
                cells.append("true" if value else "false")
            elif isinstance(value, datetime):
                cells.append(value.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}Z")
            else:
                cells.append(str(value))
        lines.append(",".join('"' + c.replace('"', '""') + '"' for c in cells))
    return "\n".join(lines) + "\n"


def _file_schema(fields: Sequence[Field], file_format: str) -> str:
    if file_format == "CSV":
        return ", ".join(header for header, _, _ in fields)
    if file_format == "ORC":
        return "struct<" + ",".join(
            f"{name}:{'timestamp' if pa.types.is_timestamp(t) else _ORC_TYPES[t]}" for _, name, t in fields
        ) + ">"
    parts = []
    for _, name, dtype in fields:
        required = "required" if name in ("bucket", "key") else "optional"
        spelled = "int64 {} (TIMESTAMP_MILLIS)" if pa.types.is_timestamp(dtype) else _PARQUET_TYPES[dtype]
        parts.append(f"{required} {spelled.format(name)};")
    return "message s3.inventory { " + " ".join(parts) + " }"
