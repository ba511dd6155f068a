"""How a path written in a Delta log becomes the canonical storage URI of a file.

Delta resolves log paths with Hadoop ``Path`` (``DeltaFileOperations.absolutePath``):
the path is URL-encoded; a relative one is resolved against the table root; a
scheme-less absolute one (``/warehouse/t/part-1.parquet``) is qualified with the
table's scheme and authority; ``.``/``..`` segments and doubled slashes are folded.
We resolve the same way, then compare on :func:`lakeio.store.uris.canonical` URIs.

What we cannot resolve with certainty makes the table unreadable instead of being
guessed: a malformed percent escape, a raw ``#`` or ``?`` (Hadoop's URI parsing makes a
fragment or query of what follows, so Delta names another file than the log spells), an
escaped ``/`` or ``.`` (``%2F``, ``%2E``: whether they separate or fold depends on which
side of decoding a reader folds on), a scheme or authority other than the table's
(another bucket could be an access-point alias of this one, ``dbfs:`` a mount of it),
or ``..`` climbing above the filesystem root. A resolved path may still lie outside
the table (a shallow clone's source files); such files are never this table's to
delete, and never counted as missing.
"""

from __future__ import annotations

import re
from urllib.parse import unquote

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from lakeio.errors import HousekeepingError
from lakeio.store import uris

_HAS_SCHEME = r"^[A-Za-z][A-Za-z0-9+.\-]+:"
_PREFIX = r"^([A-Za-z][A-Za-z0-9+.\-]*:(//[^/]*)?)"  # scheme and authority of a canonical URI
_NEEDS_FOLDING = r"//|/\.\.?(/|$)"
_ABOVE_ROOT = "\u0000"  # marks a ``..`` that climbed above "/"
_AMBIGUOUS = r"[#?]|%2[FfEe]"
_AMBIGUOUS_PROBLEM = "a raw '#' or '?' (Hadoop reads a fragment or query there) or an escaped '/' or '.'"


class UnresolvablePath(HousekeepingError, ValueError):
    """A log path whose file cannot be named with certainty."""


def resolve(table_root: str, log_path: str) -> str:
    """The canonical URI of the file ``log_path`` names in the table at canonical ``table_root``."""
    if re.search(uris.MALFORMED_ESCAPE, log_path):
        raise UnresolvablePath(f"{log_path!r}: malformed percent escape")
    if re.search(_AMBIGUOUS, log_path):
        raise UnresolvablePath(f"{log_path!r}: {_AMBIGUOUS_PROBLEM}")
    decoded = unquote(log_path)
    root_prefix, root_path = _split(table_root)
    if re.match(_HAS_SCHEME, log_path):
        prefix, path = _split(uris.canonical(decoded))
        if prefix.split(":")[0] != root_prefix.split(":")[0]:
            raise UnresolvablePath(f"{log_path!r}: scheme differs from the table's {table_root}")
        if prefix != root_prefix:
            raise UnresolvablePath(f"{log_path!r}: authority differs from the table's {table_root}")
    elif decoded.startswith("/"):
        path = decoded
    else:
        path = f"{root_path}/{decoded}"
    return root_prefix + _fold(path, log_path)


def _split(canonical_uri: str) -> tuple[str, str]:
    match = re.match(_PREFIX, canonical_uri)
    assert match is not None, canonical_uri  # every canonical URI has a scheme
    prefix = match.group(1)
    return prefix, canonical_uri[len(prefix):]


def _fold(path: str, log_path: str) -> str:
    if not re.search(_NEEDS_FOLDING, path):
        return path.rstrip("/") or "/"
    stack: list[str] = []
    for segment in path.split("/"):
        if segment == "..":
            if not stack:
                raise UnresolvablePath(f"{log_path!r}: '..' climbs above the filesystem root")
            stack.pop()
        elif segment not in ("", "."):
            stack.append(segment)
    return "/" + "/".join(stack)


def is_plain(log_path: Column, table_root: Column | None = None) -> Column:
    """True for the log paths almost every table writes: relative, with no escape, scheme, dot
    segment, doubled or trailing slash, ``#`` or ``?``. Such a path names ``<table_root>/<log_path>`` (unless
    the root itself ends with a slash: the filesystem root); it is told apart with substring
    checks only (the full resolution needs regular expressions and a fold that Spark cannot
    compile into its generated code)."""
    plain = ((F.length(log_path) > 0) & ~log_path.startswith("/") & ~log_path.endswith("/") & ~log_path.endswith(".")
             & ~log_path.contains("%") & ~log_path.contains(":") & ~log_path.contains("//") & ~log_path.contains("./")
             & ~log_path.contains("#") & ~log_path.contains("?"))
    if table_root is not None:
        plain = plain & ~table_root.endswith("/")
    return F.coalesce(plain, F.lit(False))


def with_resolved(frame: DataFrame, table_root: str, log_path: str, out: str) -> DataFrame:
    """Spark twin of :func:`resolve`: ``frame`` plus ``out_problem`` (why the path cannot be
    trusted, or null) and ``out``: the canonical URI it names, null when ``log_path`` is null or
    names no file with certainty (a path in another scheme or authority names one, with a problem).

    Built in steps, each reading the columns of the one before, so that no expression is
    spelled out more than once in the plan; column expressions only, no Python on the row path.
    """
    root, raw = F.col(table_root), F.col(log_path)
    t = {name: f"_{out}_{name}" for name in ("decoded", "root_prefix", "own_prefix", "own", "path", "folded")}
    c = {name: F.col(column) for name, column in t.items()}
    malformed = raw.rlike(uris.MALFORMED_ESCAPE)
    has_scheme = raw.rlike(_HAS_SCHEME)
    # CASE WHEN evaluates url_decode only for well-formed escapes (it throws on the others).
    frame = frame.withColumns({
        t["decoded"]: F.when(~malformed, F.url_decode(F.replace(raw, F.lit("+"), F.lit("%2B")))),
        t["root_prefix"]: F.regexp_extract(root, _PREFIX, 1),
    })
    frame = frame.withColumn(t["own"], F.when(has_scheme, uris.canonical_col(c["decoded"])))
    frame = frame.withColumn(t["own_prefix"], F.regexp_extract(c["own"], _PREFIX, 1))
    frame = frame.withColumn(t["path"], (
        F.when(has_scheme, c["own"].substr(F.length(c["own_prefix"]) + 1, F.lit(1 << 30)))
        .when(c["decoded"].startswith("/"), c["decoded"])
        .otherwise(F.concat(root.substr(F.length(c["root_prefix"]) + 1, F.lit(1 << 30)), F.lit("/"), c["decoded"]))
    ))
    frame = frame.withColumn(t["folded"], _fold_col(c["path"]))
    problem = (
        F.when(malformed, F.lit("malformed percent escape"))
        .when(raw.rlike(_AMBIGUOUS), F.lit(_AMBIGUOUS_PROBLEM))
        .when(has_scheme & (F.substring_index(c["own_prefix"], ":", 1) != F.substring_index(c["root_prefix"], ":", 1)),
              F.concat(F.lit("scheme differs from the table's "), root))
        .when(has_scheme & (c["own_prefix"] != c["root_prefix"]),
              F.concat(F.lit("authority differs from the table's "), root))
        .when(c["folded"].contains(_ABOVE_ROOT), F.lit("'..' climbs above the filesystem root"))
    )
    frame = frame.withColumn(f"{out}_problem", F.when(problem.isNotNull(), F.concat(F.lit("'"), raw, F.lit("': "), problem)))
    # Another scheme or authority still names a file, literally: the table is refused, but the file
    # it names stays protected from the table that owns it (deltalog.references).
    certain = ~malformed & ~raw.rlike(_AMBIGUOUS) & ~c["folded"].contains(_ABOVE_ROOT)
    frame = frame.withColumn(out, F.when(certain, F.concat(
        F.when(has_scheme, c["own_prefix"]).otherwise(c["root_prefix"]), c["folded"])))
    return frame.drop(*t.values())


def _fold_col(path: Column) -> Column:
    """Doubled slashes, ``.`` and ``..`` folded, no trailing slash; a segment-by-segment pass
    only for the rare paths that need it."""
    segments = F.aggregate(
        F.split(path, "/"),
        F.array().cast("array<string>"),
        lambda acc, seg: (
            F.when(seg.isin("", ".") | F.array_contains(acc, _ABOVE_ROOT), acc)
            .when((seg == "..") & (F.size(acc) == 0), F.array(F.lit(_ABOVE_ROOT)))
            .when(seg == "..", F.slice(acc, 1, F.size(acc) - 1))
            .otherwise(F.concat(acc, F.array(seg)))
        ),
    )
    folded = F.concat(F.lit("/"), F.array_join(segments, "/"))
    return F.when(path.rlike(_NEEDS_FOLDING), folded).otherwise(F.regexp_replace(path, "(?<=.)/+$", ""))
