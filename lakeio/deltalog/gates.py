"""Per-table safety gates decided from the log before any planning.

A gate returns a reason string (the table is refused or skipped) or None (go on).
"""

from __future__ import annotations

import json
import re
from typing import Any

from lakeio.deltalog.replay import TableState

DEFAULT_RETENTION_HOURS = 7 * 24.0  # Delta's default delta.deletedFileRetentionDuration

# Table features whose effect on which files a table needs we understand.
KNOWN_READER_FEATURES = frozenset({
    "columnMapping", "deletionVectors", "timestampNtz", "v2Checkpoint", "vacuumProtocolCheck",
    "typeWidening", "typeWidening-preview", "variantType", "variantType-preview",
})
KNOWN_WRITER_FEATURES = KNOWN_READER_FEATURES | frozenset({
    "appendOnly", "invariants", "checkConstraints", "changeDataFeed", "generatedColumns", "identityColumns",
    "rowTracking", "domainMetadata", "icebergCompatV1", "icebergCompatV2", "clustering", "inCommitTimestamp",
    "allowColumnDefaults",
})
CATALOG_MANAGED_FEATURES = frozenset({"catalogManaged", "catalogOwned-preview"})
MAX_READER_VERSION, MAX_WRITER_VERSION = 3, 7

_UNIT_HOURS = {
    "nanosecond": 1 / 3.6e12, "microsecond": 1 / 3.6e9, "millisecond": 1 / 3.6e6, "second": 1 / 3600,
    "minute": 1 / 60, "hour": 1.0, "day": 24.0, "week": 168.0,
}


def catalog_managed(state: TableState) -> str | None:
    features = set(state.reader_features) | set(state.writer_features)
    if features & CATALOG_MANAGED_FEATURES:
        return "catalog-managed table: its catalog owns commits and cleanup"
    return None


def unknown_protocol(state: TableState) -> str | None:
    """Refuse what we do not understand (PROTOCOL.md "Vacuum Protocol Check").

    Delta checks reader features only when ``vacuumProtocolCheck`` is present; we check
    both always, which refuses more but never less.
    """
    if state.min_reader_version is None or state.min_writer_version is None:
        return "log has no protocol action"
    if state.min_reader_version > MAX_READER_VERSION or state.min_writer_version > MAX_WRITER_VERSION:
        return (f"protocol ({state.min_reader_version}, {state.min_writer_version}) is newer than this job "
                f"understands ({MAX_READER_VERSION}, {MAX_WRITER_VERSION})")
    if not all(isinstance(f, str) and f for f in (*state.reader_features, *state.writer_features)):
        return "protocol lists a table feature that is not a name (null or empty)"
    unknown = sorted((set(state.reader_features) - KNOWN_READER_FEATURES)
                     | (set(state.writer_features) - KNOWN_WRITER_FEATURES))
    if unknown:
        return f"unknown table feature(s): {', '.join(unknown)}"
    return None


def malformed_metadata(state: TableState) -> str | None:
    """A metaData action the protocol does not allow: partition columns that are not names, or
    a ``schemaString`` that is not a struct type's JSON (its fields name the partition folders)."""
    if not all(isinstance(c, str) and c for c in state.partition_columns):
        return "metaData.partitionColumns holds a null or empty name"
    if state.schema_string is not None and schema_fields(state.schema_string) is None:
        return f"metaData.schemaString is not a struct type: {state.schema_string[:80]!r}"
    return None


def schema_fields(schema_string: str) -> list[dict[str, Any]] | None:
    """The top-level fields of a ``schemaString``; None unless it is a struct whose fields are named objects."""
    try:
        schema = json.loads(schema_string)
    except ValueError:
        return None
    fields = schema.get("fields") if isinstance(schema, dict) else None
    if not isinstance(fields, list) or not all(isinstance(f, dict) and isinstance(f.get("name"), str) for f in fields):
        return None
    return fields


def table_retention_hours(state: TableState) -> float:
    """``delta.deletedFileRetentionDuration`` in hours (Delta's default: 7 days)."""
    text = state.configuration.get("delta.deletedFileRetentionDuration")
    return DEFAULT_RETENTION_HOURS if text is None else parse_interval_hours(text)


def parse_interval_hours(text: str) -> float:
    """``interval 7 days``, ``1 week``, ``interval 2 days 12 hours`` -> hours."""
    body = text.strip().lower()
    body = body[len("interval"):].strip() if body.startswith("interval") else body
    pairs = re.findall(r"(\d+(?:\.\d+)?)\s*([a-z]+?)s?\b", body)
    if not pairs or re.sub(r"(\d+(?:\.\d+)?)\s*[a-z]+", "", body).strip():
        raise ValueError(f"cannot read the interval {text!r}")
    hours = 0.0
    for amount, unit in pairs:
        if unit not in _UNIT_HOURS:
            raise ValueError(f"unknown unit {unit!r} in interval {text!r}")
        hours += float(amount) * _UNIT_HOURS[unit]
    return hours


# UniForm formats and the folder each keeps its metadata in, hidden from vacuum at any depth
# (DeltaTableUtils.isHiddenDirectory). Hudi's ``.hoodie`` is hidden by its leading dot already.
UNIFORM_METADATA_FOLDERS = {"iceberg": ("metadata",), "hudi": ()}


def uniform_hidden_names(state: TableState) -> tuple[str, ...]:
    """Folder names the table's UniForm formats keep their metadata in; ValueError for a format
    we do not know (its metadata would look like orphans)."""
    text = state.configuration.get("delta.universalFormat.enabledFormats") or ""
    formats = [f.strip().lower() for f in text.split(",") if f.strip()]
    unknown = sorted(set(formats) - set(UNIFORM_METADATA_FOLDERS))
    if unknown:
        raise ValueError(f"unknown UniForm format(s) {', '.join(unknown)} in delta.universalFormat.enabledFormats")
    return tuple(name for f in formats for name in UNIFORM_METADATA_FOLDERS[f])


def partition_folder_names(state: TableState) -> tuple[str, ...]:
    """Logical partition column names plus their column-mapping physical names."""
    names = list(state.partition_columns)
    if state.schema_string and names:
        for f in schema_fields(state.schema_string) or []:
            metadata = f.get("metadata")
            physical = metadata.get("delta.columnMapping.physicalName") if isinstance(metadata, dict) else None
            if f["name"] in state.partition_columns and isinstance(physical, str) and physical:
                names.append(physical)
    return tuple(names)
