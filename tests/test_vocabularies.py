"""The words the jobs write into reports are one vocabulary each: a StrEnum in the code, the same
set in the checked-in JSON Schemas, and every word produced by some test."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from inventory_etl.ingestion import DeliveryStatus
from lake_reports.charges import ChargeCategory
from lake_reports.copies import COPY_STATUSES, ETAG_KINDS, CopyStatus, EtagKind
from lake_reports.erasure_decision import BOUNDED_BY_VACUUMS, GONE, NEEDS_ACTION, ErasureStatus
from lake_reports.erasure_document import COLOURS, VerdictStatus
from lakeio.audit.contract import FINAL_STATUSES
from lakeio.deltalog.pinned import PinState
from lakeio.pins import PinSource
from tests.report_schemas import SCHEMAS
from vacuum_jobs.report import ReasonCode
from vacuum_jobs.restore_purge import UndoCommand

TESTS = Path(__file__).resolve().parent
# (schema, the enum's place in it) -> the vocabulary it must equal, in its order
IN_SCHEMAS = {
    ("chargeback", "$defs/cell/properties/category"): ChargeCategory,
    ("chargeback", "$defs/table/properties/bytes_by_category/propertyNames"): ChargeCategory,
    ("chargeback", "$defs/table/properties/objects_by_category/propertyNames"): ChargeCategory,
    ("chargeback", "$defs/table/properties/usd_by_category/propertyNames"): ChargeCategory,
    ("erasure-evidence", "properties/removed_files/items/properties/status"): ErasureStatus,
    ("erasure-evidence", "properties/deletion_vectors/items/properties/status"): ErasureStatus,
    ("erasure-evidence", "properties/copies/items/properties/status"): CopyStatus,
    ("erasure-evidence", "properties/copies/items/properties/etag_kind"): EtagKind,
    ("erasure-evidence", "properties/verdict/properties/status"): VerdictStatus,
    ("vacuum-report", "$defs/table/properties/status"): FINAL_STATUSES,  # a report never says pending
    ("vacuum-report", "$defs/table/properties/reason_code/anyOf/1"): ReasonCode,
    ("vacuum-report", "$defs/pin/properties/state"): PinState,
    ("vacuum-report", "$defs/pin/properties/source"): PinSource,
}
PRODUCED_BY_TESTS = (ErasureStatus, CopyStatus, EtagKind, VerdictStatus, ChargeCategory, DeliveryStatus, UndoCommand,
                     ReasonCode)


def _enums(node, path: str = "") -> dict[str, list]:
    """Every ``enum`` of a JSON Schema, by its place ("a/b/c")."""
    found: dict[str, list] = {}
    if isinstance(node, dict):
        if "enum" in node:
            found[path] = node["enum"]
        for key, value in node.items():
            found |= _enums(value, f"{path}/{key}".lstrip("/"))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found |= _enums(value, f"{path}/{i}")
    return found


def test_every_enum_of_the_schemas_is_one_of_our_vocabularies():
    schemas = {path.name.removesuffix(".schema.json"): _enums(json.loads(path.read_text()))
               for path in sorted(SCHEMAS.glob("*.schema.json"))}
    placed = {(name, where) for name, enums in schemas.items() for where in enums}
    assert placed == set(IN_SCHEMAS), "a schema enum without its vocabulary here, or one gone from the schema"
    for (name, where), vocabulary in IN_SCHEMAS.items():
        assert schemas[name][where] == [m.value for m in vocabulary], f"{name}.schema.json {where}"


def test_erasure_statuses_fall_in_exactly_one_course():
    """A new status must be placed: gone, bounded by the table's vacuums, or needing action."""
    courses = (GONE, BOUNDED_BY_VACUUMS, NEEDS_ACTION)
    assert sum(len(c) for c in courses) == len(ErasureStatus) == len(set().union(*courses))


def test_every_word_has_its_explanation():
    assert set(COPY_STATUSES) == set(CopyStatus) and set(ETAG_KINDS) == set(EtagKind)
    assert set(COLOURS) == set(VerdictStatus)


@pytest.mark.parametrize("vocabulary", PRODUCED_BY_TESTS, ids=lambda v: v.__name__)
def test_every_word_is_produced_by_some_test(vocabulary):
    """Each member's value (or its name) appears in a test beside this one, where a run produced it."""
    sources = [p.read_text() for p in TESTS.glob("test_*.py") if p.name != Path(__file__).name]
    missing = [m for m in vocabulary
               if not any(re.search(rf"""["']{m.value}["']|\b{vocabulary.__name__}\.{m.name}\b""", s) for s in sources)]
    assert not missing, f"no test produces {missing}"
