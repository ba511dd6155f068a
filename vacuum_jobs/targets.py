"""Which tables a run vacuums, with their per-table overrides.

Four sources: ``--table`` URIs or catalog names, a ``--tables-file`` (YAML or JSON),
``--database`` (every Delta table of a catalog database: :class:`Database`), or ``--discover``
(every Delta table root the inventory shows, filtered by globs: :class:`Discover`). Catalog
names (``bronze.events``) are resolved to locations at the start of the run
(:mod:`lakeio.spark.catalog`). A tables file is a list of URIs or names, or of objects::

    - table: s3://lake/sales/orders
      retention_hours: 336     # optional, default: the table's own setting (retain_hours: the old name)
      enabled: false           # optional: reported as skipped
      dry_run: true            # optional: plan only, even in a real run
      history: false           # optional: no VACUUM START / END commits in this table's log
      keep_versions:           # optional: pinned versions, kept readable (docs/pins.md)
        - 12
        - {version: 40, reason: "model v3 training set", expires: 2027-06-30}
        - {timestamp: "2026-01-01T00:00:00Z", reason: "year-end audit"}

or a mapping of that list (``tables:``) and the run's budget beside it (``max_deletes``, ``max_minutes``,
``min_reclaimable_bytes``: each as its flag, which wins where both are given).
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from pyspark.sql import SparkSession

from lakeio.documents import load_document
from lakeio.errors import HousekeepingError, InvalidOption
from lakeio.pins import Pin, PinSource, pin_of
from lakeio.spark import catalog
from lakeio.store import uris
from vacuum_jobs.report import ReasonCode


class TargetsError(HousekeepingError, ValueError):
    """The list of tables cannot be used as given."""


@dataclass(frozen=True)
class TableTarget:
    """One table to vacuum: ``uri`` as the user spelled it (made a full URI; storage is
    listed there), ``root`` the canonical key every step of the run uses."""

    uri: str
    retention_hours: float | None = None
    enabled: bool = True
    dry_run: bool | None = None
    name: str | None = None  # the catalog name ``uri`` was resolved from
    history: bool | None = None  # VACUUM START / END commits in its log; default: the run's setting
    keep_versions: tuple[Pin, ...] = ()  # its pinned versions (lakeio.pins)

    @property
    def root(self) -> uris.TableRoot:
        return uris.table_root(self.uri)


@dataclass(frozen=True)
class Discover:
    """Every Delta table the inventory shows whose root matches an ``include`` glob (default:
    all) and no ``exclude`` glob; globs naming a store match in canonical form (uris.canonical_glob:
    ``s3a://lake/*`` and ``s3://lake/*`` choose the same tables)."""

    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()

    def targets(self, roots: list[uris.TableRoot]) -> list[TableTarget]:
        include = [uris.canonical_glob(g) for g in self.include]
        exclude = [uris.canonical_glob(g) for g in self.exclude]
        chosen = [
            root for root in roots
            if (not include or any(fnmatch.fnmatchcase(root, g) for g in include))
            and not any(fnmatch.fnmatchcase(root, g) for g in exclude)
        ]
        return [TableTarget(root) for root in chosen]


@dataclass(frozen=True)
class Database:
    """Every table of a catalog database whose location holds a Delta log; its views and other
    tables are skipped, by name."""

    name: str


def as_targets(tables: Sequence[str | os.PathLike[str] | TableTarget]) -> list[TableTarget]:
    """Table URIs or catalog names (or targets with their own settings), checked for duplicates."""
    if isinstance(tables, (str, bytes)) or not isinstance(tables, (list, tuple)):
        raise TargetsError(f"tables must be a list of table URIs or names, a Database(...) or a Discover(...), "
                           f"not {tables!r}")
    return _dedupe([t if isinstance(t, TableTarget) else TableTarget(_uri_or_name(os.fspath(t))) for t in tables])


def resolve_names(spark: SparkSession, targets: list[TableTarget] | Database
                  ) -> tuple[list[TableTarget], dict[str, tuple[ReasonCode, str]], dict[str, str]]:
    """The targets with catalog names replaced by their tables' locations, the names that could
    not be (name -> code and why), and a database's views and tables that are not Delta (name -> why:
    a vacuum passes them by). CatalogError when a Database is unknown."""
    whole_database = isinstance(targets, Database)
    if isinstance(targets, Database):
        targets = [TableTarget(name) for name in catalog.database_tables(spark, targets.name)]
    resolved: list[TableTarget] = []
    refused: dict[str, tuple[ReasonCode, str]] = {}
    passed_by: dict[str, str] = {}
    for target in targets:
        if not catalog.is_name(target.uri):
            resolved.append(target)
            continue
        try:
            location = catalog.location(spark, target.uri)
            resolved.append(replace(target, uri=location, name=target.uri,
                                    keep_versions=tuple(replace(p, table=location) for p in target.keep_versions)))
        except catalog.NotVacuumable as exc:
            if whole_database:
                passed_by[target.uri] = str(exc)
            else:
                refused[target.uri] = (ReasonCode.NOT_VACUUMABLE, str(exc))
        except catalog.CatalogError as exc:
            refused[target.uri] = (ReasonCode.NAME_UNRESOLVED, str(exc))
    return _dedupe(resolved), refused, passed_by


def _uri_or_name(text: str) -> str:
    if why := uris.malformed(text):
        raise TargetsError(why)
    return text if catalog.is_name(text) else uris.to_uri(text)


# What a tables file in its mapping form may hold beside ``tables``: the run's budget (vacuum_jobs.budget), which the
# command line's own flags override.
BUDGET_KEYS = ("max_deletes", "max_minutes", "min_reclaimable_bytes")


def from_file(path: str, text: str | None = None) -> list[TableTarget]:
    """The tables of a YAML or JSON file; ``text`` is its content when the caller read it already."""
    doc = _document(path, text)
    if isinstance(doc, dict) and "tables" in doc:
        doc = doc["tables"]
    if not isinstance(doc, list):
        raise TargetsError(f"{path}: expected a list of tables")
    found = []
    for i, entry in enumerate(doc):
        if isinstance(entry, str):
            entry = {"table": entry}
        if not isinstance(entry, dict) or not isinstance(entry.get("table"), str):
            raise TargetsError(f"{path}: entry {i} needs a 'table' URI or name")
        unknown = set(entry) - {"table", "retention_hours", "retain_hours", "enabled", "dry_run", "history", "keep_versions"}
        if unknown:
            raise TargetsError(f"{path}: entry {i} has unknown key(s) {sorted(unknown)}")
        if {"retention_hours", "retain_hours"} <= set(entry):
            raise TargetsError(f"{path}: entry {i} has retention_hours and its old name retain_hours: keep one")
        retain = entry.get("retention_hours", entry.get("retain_hours"))  # retain_hours: deprecated, one release
        if retain is not None and (not isinstance(retain, (int, float)) or isinstance(retain, bool) or retain < 0):
            raise TargetsError(f"{path}: entry {i}: retention_hours must be a number >= 0")
        for flag in ("enabled", "dry_run", "history"):
            if flag in entry and not isinstance(entry[flag], bool):
                raise TargetsError(f"{path}: entry {i}: {flag} must be true or false")
        if why := uris.malformed(entry["table"]):
            raise TargetsError(f"{path}: entry {i}: {why}")
        uri = _uri_or_name(entry["table"])
        found.append(TableTarget(uri, retain, entry.get("enabled", True), entry.get("dry_run"),
                                 history=entry.get("history"), keep_versions=_pins(path, i, uri, entry)))
    return _dedupe(found)


def budget_of_file(path: str, text: str | None = None) -> dict[str, Any]:
    """The run's budget a tables file gives beside its ``tables`` (checked where the options are built); none
    in a plain list."""
    doc = _document(path, text)
    return {key: doc[key] for key in BUDGET_KEYS if key in doc} if isinstance(doc, dict) else {}


def _document(path: str, text: str | None) -> object:
    """The file parsed; a mapping holds ``tables`` and, beside it, only the run's budget."""
    try:
        doc = load_document(path, text)
    except ValueError as exc:
        raise TargetsError(str(exc)) from None
    if isinstance(doc, dict) and "tables" in doc and (unknown := set(doc) - {"tables", *BUDGET_KEYS}):
        raise TargetsError(f"{path}: unknown key(s) {sorted(unknown)} beside tables (it may hold {', '.join(BUDGET_KEYS)})")
    return doc


def _pins(path: str, i: int, uri: str, entry: dict[str, object]) -> tuple[Pin, ...]:
    """An entry's ``keep_versions``: a list of versions or pin mappings (lakeio.pins.pin_of)."""
    given = entry.get("keep_versions", [])
    if not isinstance(given, list):
        raise TargetsError(f"{path}: entry {i}: keep_versions must be a list of versions")
    try:
        return tuple(pin_of(uri, pin, PinSource.TABLES_FILE, f"{path}: entry {i}: keep_versions[{j}]")
                     for j, pin in enumerate(given))
    except InvalidOption as exc:
        raise TargetsError(str(exc)) from None


def _dedupe(targets: list[TableTarget]) -> list[TableTarget]:
    seen, out = set(), []
    for target in targets:
        if target.root in seen:
            raise TargetsError(f"table {target.uri} is listed twice")
        seen.add(target.root)
        out.append(target)
    return out
