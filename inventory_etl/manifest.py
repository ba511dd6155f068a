"""An S3 Inventory ``manifest.json``: parsing, checksum and the data files it lists.

Everything wrong with a manifest raises :class:`DeliveryError` naming the file and the
problem, so the caller can refuse that one delivery and carry on with the rest.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from datetime import date, datetime, timezone
from typing import Any

from lakeio.errors import HousekeepingError
from lakeio.inventory import snake_case
from lakeio.store import uris

FORMATS = ("CSV", "ORC", "Parquet")
DELIVERY_FOLDER = re.compile(r"^(\d{4})-(\d{2})-(\d{2})T(\d{2})-(\d{2})Z$")


class DeliveryError(HousekeepingError):
    """A delivery we refuse: ``uri`` is the file at fault, ``problem`` says what is wrong."""

    def __init__(self, uri: str, problem: str):
        super().__init__(f"{uri}: {problem}")
        self.uri = uri
        self.problem = problem


@dataclass(frozen=True)
class DataFile:
    key: str
    size: int
    md5: str
    uri: str  # where this delivery's copy of the file lives


@dataclass(frozen=True)
class Manifest:
    uri: str
    source_bucket: str
    destination_bucket: str
    config_id: str
    file_format: str  # one of FORMATS
    columns: tuple[str, ...]  # fileSchema, snake_case, in order
    files: tuple[DataFile, ...]
    creation_timestamp: int | None  # epoch ms
    inventory_date: date
    delivery_folder: str  # e.g. 2026-11-21T01-00Z
    body_md5: str = ""  # of manifest.json as read: with the URI, which delivery this is
    # ORC fields typed ``timestamp`` (a wall clock, UTC's as S3 writes it), which readers shift into their zone
    wall_clock_fields: tuple[str, ...] = ()

    @property
    def delivered_minute(self) -> int:
        """Minutes since the epoch at which S3 delivered it (its folder; else its creation time):
        a later delivery of a partition has a greater number."""
        m = DELIVERY_FOLDER.match(self.delivery_folder)
        if m:
            year, month, day, hour, minute = (int(g) for g in m.groups())
            return int(datetime(year, month, day, hour, minute, tzinfo=timezone.utc).timestamp()) // 60
        return (self.creation_timestamp or 0) // 60_000


def md5_hex(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


def parse_manifest(uri: str, body: bytes, checksum: bytes | None) -> Manifest:
    """Parse and check one manifest.

    ``checksum`` is the content of ``manifest.checksum`` (None when not verifying).
    The data files are resolved against the delivery's own location: the folder that
    holds the dated manifest folder, so a copied or mounted delivery still ingests.
    """
    actual = md5_hex(body)
    if checksum is not None:
        expected = checksum.decode("ascii", errors="replace").strip().lower()
        if expected != actual:
            raise DeliveryError(uri, f"MD5 {actual} does not match manifest.checksum {expected}")
    try:
        doc = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DeliveryError(uri, f"malformed JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise DeliveryError(uri, "malformed manifest: top level is not an object")
    missing = [f for f in ("sourceBucket", "destinationBucket", "fileFormat", "fileSchema", "files") if f not in doc]
    if missing:
        raise DeliveryError(uri, f"missing field(s): {', '.join(missing)}")
    file_format = _file_format(uri, doc["fileFormat"])
    folder = uris.name(uris.parent(uri))
    config_root = uris.parent(uris.parent(uri))
    config_id = uris.name(config_root)
    source_bucket = _text(uri, doc, "sourceBucket")
    destination_bucket = _text(uri, doc, "destinationBucket").removeprefix("arn:aws:s3:::")
    files = tuple(
        _data_file(uri, i, entry, source_bucket, config_id, config_root, destination_bucket)
        for i, entry in enumerate(_list(uri, doc, "files"))
    )
    _listed_once(uri, files)
    creation = _creation_timestamp(uri, doc)
    file_schema = _text(uri, doc, "fileSchema")
    return Manifest(
        uri=uri,
        source_bucket=source_bucket,
        destination_bucket=destination_bucket,
        config_id=config_id,
        file_format=file_format,
        columns=parse_file_schema(uri, file_format, file_schema),
        files=files,
        creation_timestamp=creation,
        inventory_date=_inventory_date(uri, folder, creation),
        delivery_folder=folder,
        body_md5=actual,
        wall_clock_fields=orc_wall_clock_fields(file_schema) if file_format == "ORC" else (),
    )


def orc_wall_clock_fields(schema: str) -> tuple[str, ...]:
    """The fields of an ORC ``struct<...>`` schema typed plain ``timestamp`` (not ``... with local time zone``)."""
    return tuple(snake_case(n) for n in re.findall(r"(?:^|[<,])\s*([A-Za-z_]\w*)\s*:\s*timestamp\s*(?=[,>])", schema))


def _listed_once(uri: str, files: tuple[DataFile, ...]) -> None:
    """A data file listed twice would ingest its rows twice."""
    first: dict[str, int] = {}
    for i, f in enumerate(files):
        if f.uri in first:
            raise DeliveryError(uri, f"files[{i}] lists the data file of files[{first[f.uri]}] again ({f.key})")
        first[f.uri] = i


def parse_file_schema(uri: str, file_format: str, schema: str) -> tuple[str, ...]:
    """Field names of ``fileSchema`` in snake_case, for all three formats' spellings."""
    if file_format == "CSV":
        names = [n for n in schema.split(",")]
    elif file_format == "Parquet":
        names = re.findall(r"(?:required|optional|repeated)\s+\w+\s+([A-Za-z_][\w]*)", schema)
    else:  # ORC: struct<name:type,...>
        m = re.fullmatch(r"\s*struct<(.*)>\s*", schema, flags=re.S)
        names = re.findall(r"(?:^|,)\s*([A-Za-z_]\w*)\s*:", m.group(1)) if m else []
    names = [snake_case(n) for n in names if n.strip()]
    if not names:
        raise DeliveryError(uri, f"fileSchema has no fields we can read: {schema[:200]!r}")
    if len(set(names)) != len(names):
        raise DeliveryError(uri, f"fileSchema repeats a field: {schema[:200]!r}")
    return tuple(names)


def _file_format(uri: str, value: object) -> str:
    for known in FORMATS:
        if isinstance(value, str) and value.lower() == known.lower():
            return known
    raise DeliveryError(uri, f"unknown fileFormat {value!r} (expected CSV, ORC or Parquet)")


def _text(uri: str, doc: dict[str, Any], field: str) -> str:
    value = doc.get(field)
    if not isinstance(value, str) or not value:
        raise DeliveryError(uri, f"field {field!r} must be a non-empty string, got {value!r}")
    return value


def _list(uri: str, doc: dict[str, Any], field: str) -> list[Any]:
    value = doc.get(field)
    if not isinstance(value, list):
        raise DeliveryError(uri, f"field {field!r} must be a list, got {type(value).__name__}")
    return value


def _data_file(uri: str, index: int, entry: object, source_bucket: str, config_id: str, config_root: str,
               destination_bucket: str) -> DataFile:
    if not isinstance(entry, dict):
        raise DeliveryError(uri, f"files[{index}] is not an object")
    missing = [f for f in ("key", "size", "MD5checksum") if f not in entry]
    if missing:
        raise DeliveryError(uri, f"files[{index}] lacks {', '.join(missing)}")
    key, md5 = entry["key"], entry["MD5checksum"]
    try:
        size = int(entry["size"])
    except (TypeError, ValueError):
        raise DeliveryError(uri, f"files[{index}].size is not a number: {entry['size']!r}") from None
    if not isinstance(key, str) or not key or not isinstance(md5, str):
        raise DeliveryError(uri, f"files[{index}] has an invalid key or MD5checksum")
    return DataFile(key=key, size=size, md5=md5.lower(),
                    uri=resolve_data_file(key, source_bucket, config_id, config_root, destination_bucket))


def resolve_data_file(key: str, source_bucket: str, config_id: str, config_root: str, destination_bucket: str) -> str:
    """Where a listed data file lives, relative to this delivery's own copy when possible.

    S3 writes data files to ``<prefix>/<source-bucket>/<config-id>/data/...``; the part
    after ``<source-bucket>/<config-id>/`` is resolved against ``config_root``. Keys
    without that marker fall back to the destination bucket named in the manifest.
    """
    marker = f"{source_bucket}/{config_id}/"
    at = key.rfind("/" + marker)
    if at >= 0:
        return uris.join(config_root, key[at + 1 + len(marker):])
    if key.startswith(marker):
        return uris.join(config_root, key[len(marker):])
    return f"s3://{destination_bucket}/{key}"


def _creation_timestamp(uri: str, doc: dict[str, Any]) -> int | None:
    value = doc.get("creationTimestamp")
    if value is None:
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        raise DeliveryError(uri, f"creationTimestamp is not epoch milliseconds: {value!r}") from None


def _inventory_date(uri: str, folder: str, creation_ms: int | None) -> date:
    """The delivery folder's date; a manifest outside the S3 layout uses its creation time."""
    m = DELIVERY_FOLDER.match(folder)
    if m:
        try:
            return date(int(m.group(1)), int(m.group(2)), int(m.group(3)))
        except ValueError:
            raise DeliveryError(uri, f"delivery folder {folder!r} is not a valid date") from None
    if creation_ms is None:
        raise DeliveryError(uri, f"folder {folder!r} is not YYYY-MM-DDTHH-MMZ and there is no creationTimestamp")
    return datetime.fromtimestamp(creation_ms / 1000, tz=timezone.utc).date()
