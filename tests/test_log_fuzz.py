"""Fuzz: logs that parse but are not what the protocol says never stop a run.

Every field of every action a replay reads (protocol, metaData, add, remove, sidecar) takes
kinds of JSON value it must not hold (null, another type, empty, nested junk, numbers out of
range, a list holding a null), one table each, all in one lake beside good tables: every
fourth of the 483 cases by default, every one with ``FUZZ_STRIDE=1`` (about 4 minutes).
One vacuum run over the whole lake must finish and write its report: the good tables are
planned, and each damaged table is planned or refused alone, with a reason.
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from lakeio.audit.contract import TableStatus
from tests.lakes import by_table, inventory_of, vacuum
from vacuum_jobs.report import ReasonCode

pytestmark = pytest.mark.slow  # hundreds of small tables in one vacuum run

FIELDS = {
    "protocol": ["minReaderVersion", "minWriterVersion", "readerFeatures", "writerFeatures"],
    "metaData": ["schemaString", "partitionColumns", "configuration", "format", "id"],
    "add": ["path", "size", "modificationTime", "partitionValues", "dataChange", "deletionVector", "stats"],
    "remove": ["path", "deletionTimestamp", "size", "deletionVector"],
    "sidecar": ["path", "sizeInBytes", "modificationTime"],
}
CONFUSIONS = [
    None, True, "", "x y%", [], {}, [None], ["p", None], [1, "a"], {"fields": None}, {"fields": ["p"]}, "[]",
    '{"fields": null}', {"a": [1, {"b": None}]}, 2 ** 70, -(2 ** 63) - 1, -1, 1e308, 0.5,
    {"storageType": "u", "pathOrInlineDv": None}, {"storageType": 7, "pathOrInlineDv": []},
]


def _write_table(path: Path, partitioned: bool) -> None:
    data = pa.table({"id": [1, 2], "p": ["a", "b"]})
    write_deltalake(str(path), data, partition_by=["p"] if partitioned else None)
    write_deltalake(str(path), data, mode="overwrite", partition_by=["p"] if partitioned else None)  # a remove or two


def _damage(table: Path, kind: str, field: str, value) -> None:
    """Put ``value`` in ``field`` of the first ``kind`` action of the table's log (a new line for a sidecar)."""
    for commit in sorted((table / "_delta_log").glob("*.json")):
        actions = [json.loads(line) for line in commit.read_text().splitlines() if line.strip()]
        if kind == "sidecar":
            actions.append({"sidecar": {"path": "x.parquet", "sizeInBytes": 1, "modificationTime": 1, field: value}})
        else:
            found = next((a for a in actions if kind in a), None)
            if found is None:
                continue
            found[kind][field] = value
        commit.write_text("".join(json.dumps(a) + "\n" for a in actions))
        return


def test_no_log_that_parses_stops_the_run(spark, tmp_path):
    lake = tmp_path / "lake"
    good = [lake / "good-0", lake / "good-1"]
    for i, table in enumerate(good):
        _write_table(table, partitioned=bool(i))
    damaged = {}
    cases = [(kind, field, value) for kind, names in FIELDS.items() for field in names for value in CONFUSIONS]
    # Every FUZZ_STRIDE-th case (each field still meets several kinds of value); FUZZ_STRIDE=1: all 483.
    for i, (kind, field, value) in enumerate(cases[::int(os.environ.get("FUZZ_STRIDE", "4"))]):
        table = lake / f"bad-{i}"
        _write_table(table, partitioned=bool(i % 2))
        _damage(table, kind, field, value)
        damaged[table.name] = f"{kind}.{field} = {json.dumps(value)}"
    old = datetime.now(timezone.utc) - timedelta(days=30)
    for table in [*good, *(lake / name for name in damaged)]:
        orphan = table / "orphan.parquet"
        orphan.write_bytes(b"never committed")
        os.utime(orphan, (old.timestamp(), old.timestamp()))
    inventory = inventory_of(spark, lake, tmp_path)

    report = vacuum(spark, inventory, [str(t) for t in [*good, *(lake / n for n in damaged)]])

    tables = by_table(report)
    for table in good:
        assert tables[table.name].status == TableStatus.DRY_RUN, tables[table.name].reason
        assert tables[table.name].counts.candidate_files == 1
    outcomes = {}
    for name, what in damaged.items():
        outcome = tables[name]
        assert outcome.status in (TableStatus.DRY_RUN, TableStatus.REFUSED), (what, outcome.status, outcome.reason)
        assert outcome.status == TableStatus.DRY_RUN or outcome.reason, what
        outcomes[outcome.status] = outcomes.get(outcome.status, 0) + 1
    print(f"fuzz: {len(damaged)} damaged tables, {outcomes}")


NAMED = {  # what the issue found stopping whole runs
    "null-reader-feature": ("protocol", "readerFeatures", ["deletionVectors", None], "not a name"),
    "null-writer-feature": ("protocol", "writerFeatures", [None], "not a name"),
    "null-partition-column": ("metaData", "partitionColumns", ["p", None], "partitionColumns"),
    "schema-a-list": ("metaData", "schemaString", "[]", "not a struct"),
    "schema-null-fields": ("metaData", "schemaString", '{"fields": null}', "not a struct"),
    "schema-fields-not-objects": ("metaData", "schemaString", '{"fields": ["p"]}', "not a struct"),
}


def test_the_named_protocol_violations_refuse_their_table_alone(spark, tmp_path):
    lake = tmp_path / "lake"
    _write_table(lake / "good", partitioned=True)
    for name, (kind, field, value, _) in NAMED.items():
        _write_table(lake / name, partitioned=True)
        _damage(lake / name, kind, field, value)
    inventory = inventory_of(spark, lake, tmp_path)

    report = vacuum(spark, inventory, [str(lake / name) for name in ["good", *NAMED]])

    tables = by_table(report)
    assert tables["good"].status == TableStatus.DRY_RUN
    for name, (kind, _, _, reason) in NAMED.items():
        assert tables[name].status == TableStatus.REFUSED and reason in tables[name].reason, (name, tables[name].reason)
        assert tables[name].reason_code == (ReasonCode.UNSUPPORTED_PROTOCOL if kind == "protocol"
                                            else ReasonCode.LOG_NOT_UNDERSTOOD), name
