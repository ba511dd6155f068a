"""Tables by the name the catalog knows them by (``bronze.events``, ``main.sales.orders``).

Wherever a table URI is accepted, a catalog name is too: it is resolved through the running
session's catalog (a Hive metastore, Glue on EMR, Unity Catalog where the access mode lets
Spark read locations) to the table's location. A string is a name when it is a dotted
identifier of two or three parts and no path (no ``/``, no scheme); ``orders`` alone stays a
local folder, as before: say ``default.orders``. A view, a table without a location, or a
location without a Delta log is refused by name.
"""

from __future__ import annotations

import re

from pyspark.sql import SparkSession

from lakeio import uris
from lakeio.storage import Storage
from lakeio.text import first_line

_PART = r"(?:`[^`]+`|[A-Za-z_][A-Za-z0-9_]*)"
_NAME = re.compile(rf"^{_PART}(?:\.{_PART}){{1,2}}$")


class CatalogError(ValueError):
    """A name the catalog cannot turn into a Delta table's location."""


def is_name(text: str) -> bool:
    return "/" not in text and "://" not in text and _NAME.match(text) is not None


def resolve(spark: SparkSession, name_or_uri: str, *, must_be_delta: bool = True) -> str:
    """A catalog name as its table's location (a Delta table's, unless ``must_be_delta`` is false: a
    table registered before its first write); anything else, a URI or a path, as it is."""
    return location(spark, name_or_uri, must_be_delta=must_be_delta) if is_name(name_or_uri) else name_or_uri


def location(spark: SparkSession, name: str, *, must_be_delta: bool = True) -> str:
    """The location of the catalog table ``name``; CatalogError naming it when it is a view, has no
    location, is unknown, or (``must_be_delta``) holds no Delta log."""
    try:
        rows = spark.sql(f"DESCRIBE TABLE EXTENDED {name}").collect()
    except Exception as exc:
        raise CatalogError(f"{name}: not a table the catalog knows ({first_line(exc, 200)})") from None
    facts = {r[0]: r[1] for r in rows if r[0] in ("Type", "Location", "Provider")}
    if (facts.get("Type") or "").upper() == "VIEW":
        raise CatalogError(f"{name}: is a view; name the table whose files it shows")
    where = facts.get("Location")
    if not where:
        raise CatalogError(f"{name}: the catalog gives no location for it")
    found = uris.canonical(uris.to_uri(where))
    if must_be_delta and not Storage(spark).exists(uris.join(found, "_delta_log")):
        raise CatalogError(f"{name}: not a Delta table (no _delta_log at {found}; provider "
                           f"{facts.get('Provider') or 'unknown'})")
    return found


def database_tables(spark: SparkSession, database: str) -> list[str]:
    """The qualified names of the tables and views of ``database``; CatalogError when it is unknown."""
    try:
        found = spark.catalog.listTables(database)
    except Exception as exc:
        raise CatalogError(f"database {database}: not in the catalog ({first_line(exc, 200)})") from None
    return sorted(f"{database}.{t.name}" for t in found if not t.isTemporary)
