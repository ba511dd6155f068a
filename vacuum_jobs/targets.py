"""Which tables a run vacuums, with their per-table overrides.

Three sources: ``--table`` URIs, a ``--tables-file`` (YAML or JSON), or ``--discover``
(every Delta table root the inventory shows, filtered by globs). A tables file is a
list of URIs or of objects::

    - table: s3://lake/sales/orders
      retain_hours: 336        # optional, default: the table's own setting
      enabled: false           # optional: reported as skipped
      dry_run: true            # optional: plan only, even in a real run
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from lakeio import uris
from lakeio.documents import load_document


class TargetsError(ValueError):
    """The list of tables cannot be used as given."""


@dataclass(frozen=True)
class TableTarget:
    table_root: str  # as the user spelled it, made a full URI
    retain_hours: float | None = None
    enabled: bool = True
    dry_run: bool | None = None


def from_uris(table_uris: list[str]) -> list[TableTarget]:
    return _dedupe([TableTarget(uris.to_uri(u)) for u in table_uris])


def from_file(path: str, text: str | None = None) -> list[TableTarget]:
    """The tables of a YAML or JSON file; ``text`` is its content when the caller read it already."""
    try:
        doc = load_document(path, text)
    except ValueError as exc:
        raise TargetsError(str(exc)) from None
    if isinstance(doc, dict) and "tables" in doc:
        doc = doc["tables"]
    if not isinstance(doc, list):
        raise TargetsError(f"{path}: expected a list of tables")
    found = []
    for i, entry in enumerate(doc):
        if isinstance(entry, str):
            entry = {"table": entry}
        if not isinstance(entry, dict) or not isinstance(entry.get("table"), str):
            raise TargetsError(f"{path}: entry {i} needs a 'table' URI")
        unknown = set(entry) - {"table", "retain_hours", "enabled", "dry_run"}
        if unknown:
            raise TargetsError(f"{path}: entry {i} has unknown key(s) {sorted(unknown)}")
        retain = entry.get("retain_hours")
        if retain is not None and (not isinstance(retain, (int, float)) or isinstance(retain, bool) or retain < 0):
            raise TargetsError(f"{path}: entry {i}: retain_hours must be a number >= 0")
        for flag in ("enabled", "dry_run"):
            if flag in entry and not isinstance(entry[flag], bool):
                raise TargetsError(f"{path}: entry {i}: {flag} must be true or false")
        found.append(TableTarget(uris.to_uri(entry["table"]), retain, entry.get("enabled", True), entry.get("dry_run")))
    return _dedupe(found)


def delta_roots(inventory: DataFrame) -> list[str]:
    """Canonical roots of every Delta table the inventory shows (folders holding ``_delta_log/``)."""
    roots = (
        inventory.where(F.col("path").contains("/_delta_log/"))
        .select(F.regexp_extract(uris.canonical_col(F.col("path")), r"^(.*?)/_delta_log/", 1).alias("root"))
        .where(F.col("root") != "")
        .distinct()
        .collect()
    )
    return sorted(r["root"] for r in roots)


def discovered(roots: list[str], include: list[str] | None, exclude: list[str] | None) -> list[TableTarget]:
    """Roots matching any include glob (default: all) and no exclude glob."""
    chosen = [
        root for root in roots
        if (not include or any(fnmatch.fnmatchcase(root, g) for g in include))
        and not any(fnmatch.fnmatchcase(root, g) for g in exclude or [])
    ]
    return [TableTarget(root) for root in chosen]


def _dedupe(targets: list[TableTarget]) -> list[TableTarget]:
    seen, out = set(), []
    for target in targets:
        key = uris.canonical(target.table_root)
        if key in seen:
            raise TargetsError(f"table {target.table_root} is listed twice")
        seen.add(key)
        out.append(target)
    return out
