"""The checked-in JSON Schemas (``schemas/``) that downstream monitors rely on, applied to real output."""

from __future__ import annotations

import json
from pathlib import Path

from jsonschema import Draft202012Validator
from referencing import Registry, Resource

SCHEMAS = Path(__file__).resolve().parents[1] / "schemas"
# Every schema by its $id, so that one may refer to another's definitions (a chargeback's pins are a vacuum report's).
REGISTRY = Registry().with_resources(
    (schema["$id"], Resource.from_contents(schema))
    for schema in (json.loads(p.read_text()) for p in sorted(SCHEMAS.glob("*.schema.json"))))


def assert_matches_schema(doc: dict, name: str) -> None:
    """``doc`` is valid under ``schemas/<name>.schema.json``; every violation is listed on failure."""
    schema = json.loads((SCHEMAS / f"{name}.schema.json").read_text())
    Draft202012Validator.check_schema(schema)
    validator = Draft202012Validator(schema, format_checker=Draft202012Validator.FORMAT_CHECKER, registry=REGISTRY)
    problems = [f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}" for e in validator.iter_errors(doc)]
    assert not problems, "\n".join(problems[:20])
