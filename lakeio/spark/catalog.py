"""Tables by the name the catalog knows them by (``bronze.events``, ``main.sales.orders``).

Wherever a table URI is accepted, a catalog name is too: it is resolved through the running
session's catalog (a Hive metastore, Glue on EMR, Unity Catalog where the access mode lets
Spark read locations) to the table's location. A string is a name when it is a dotted
identifier of two or three parts and no path (no ``/``, no scheme); ``orders`` alone stays a
local folder, as before: say ``default.orders``. A view, a table without a location, or a
location without a Delta log is refused by name; a database's views and tables that are not
Delta are not a vacuum's business and are skipped (:class:`NotVacuumable`).

The session's catalog is fixed when it starts: Spark's in-memory one (the default of a plain
``python`` or ``spark-submit`` run) knows only tables created in that application, so an
unknown name says so and how to reach a metastore.
"""

from __future__ import annotations

import logging
import re

from pyspark.sql import SparkSession

from lakeio.errors import HousekeepingError
from lakeio.spark.session import quiet_query_errors
from lakeio.store import uris
from lakeio.store.filesystem import Storage
from lakeio.text import first_line

_PART = r"(?:`[^`]+`|[A-Za-z_][A-Za-z0-9_]*)"
_NAME = re.compile(rf"^{_PART}(?:\.{_PART}){{1,2}}$")
log = logging.getLogger(__name__)


class CatalogError(HousekeepingError, ValueError):
    """A name the catalog cannot turn into a Delta table's location."""


class NotVacuumable(CatalogError):
    """A view, or a table that is not Delta: named on its own it is refused, as one of a database's
    tables it is skipped."""


IN_MEMORY_HINT = ("; this session's catalog is Spark's in-memory one, which knows only the tables this application "
                  "created: for a Hive metastore start the job with --conf spark.sql.catalogImplementation=hive "
                  "(hive-site.xml, or Glue on EMR, says where the metastore is)")


def _unknown(spark: SparkSession, what: str, exc: BaseException) -> CatalogError:
    in_memory = spark.conf.get("spark.sql.catalogImplementation", "in-memory") == "in-memory"
    return CatalogError(f"{what} ({first_line(exc, 200)}){IN_MEMORY_HINT if in_memory else ''}")


def is_name(text: str) -> bool:
    return "/" not in text and "://" not in text and _NAME.match(text) is not None


def resolve(spark: SparkSession, name_or_uri: str, *, must_be_delta: bool = True) -> str:
    """A catalog name as its table's location (a Delta table's, unless ``must_be_delta`` is false: a
    table registered before its first write); anything else, a URI or a path, as it is."""
    return location(spark, name_or_uri, must_be_delta=must_be_delta) if is_name(name_or_uri) else name_or_uri


def location(spark: SparkSession, name: str, *, must_be_delta: bool = True) -> str:
    """The location of the catalog table ``name``; CatalogError naming it when it is a view, has no
    location, is unknown, or (``must_be_delta``) holds no Delta log."""
    facts = _registered(spark, name)
    if facts is None:
        try:
            with quiet_query_errors():
                rows = spark.sql(f"DESCRIBE TABLE EXTENDED {name}").collect()
        except Exception as exc:
            raise _unknown(spark, f"{name}: not a table the catalog knows", exc) from None
        facts = {r[0]: r[1] for r in rows if r[0] in ("Type", "Location", "Provider")}
    if (facts.get("Type") or "").upper() == "VIEW":
        raise NotVacuumable(f"{name}: is a view; name the table whose files it shows")
    where = facts.get("Location")
    if not where:
        raise CatalogError(f"{name}: the catalog gives no location for it")
    found = uris.canonical(where)
    if must_be_delta and not Storage(spark).exists(uris.join(found, "_delta_log")):
        raise NotVacuumable(f"{name}: not a Delta table (no _delta_log at {found}; provider "
                            f"{facts.get('Provider') or 'unknown'})")
    return found


def _registered(spark: SparkSession, name: str) -> dict[str, str | None] | None:
    """Type, Location and Provider of ``name`` as the session catalog (Hive metastore, Glue) holds it,
    or None where that catalog is not the one the name is in, or does not hold it. The entry is
    read as registered, without loading its format: DESCRIBE would load Delta to describe a table
    registered ``USING delta``, and fail on a Spark without Delta's jars."""
    try:
        if spark.catalog.currentCatalog() != "spark_catalog":  # Unity Catalog's main, say: its names are its own
            return None
        state = spark._jsparkSession.sessionState()
        ident = state.sqlParser().parseTableIdentifier(name)
        if not state.catalog().tableExists(ident):
            return None
        table = state.catalog().getTableMetadata(ident)
    except Exception:  # three parts, a global view, a catalog of another kind: DESCRIBE answers for those
        log.debug("%s: not read from the session catalog", name, exc_info=True)
        return None
    where, provider = table.storage().locationUri(), table.provider()
    return {"Type": table.tableType().name(), "Location": where.get().toString() if where.isDefined() else None,
            "Provider": provider.get() if provider.isDefined() else None}


def database_tables(spark: SparkSession, database: str) -> list[str]:
    """The qualified names of the tables and views of ``database``; CatalogError when it is unknown."""
    try:
        with quiet_query_errors():
            found = spark.catalog.listTables(database)
    except Exception as exc:
        raise _unknown(spark, f"database {database}: not in the catalog", exc) from None
    return sorted(f"{database}.{t.name}" for t in found if not t.isTemporary)
