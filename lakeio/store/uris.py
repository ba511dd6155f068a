"""Storage URIs as this project spells them.

Every URI here is *decoded* (a space is a space, ``%`` is a literal percent sign), the
form Hadoop ``Path`` strings and the inventory contract use. Delta log paths are
URL-encoded and must go through :func:`decode_log_path` before they meet these.

Comparison happens on :func:`canonical` URIs: ``s3``, ``s3a`` and ``s3n`` name one
store, ``file:/x`` and ``file:///x`` one file, and a trailing slash means nothing.
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, NewType
from urllib.parse import unquote

if TYPE_CHECKING:  # Spark is imported where a column is built
    from pyspark.sql import Column

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*):")
_S3_ALIASES = {"s3a": "s3", "s3n": "s3"}


def scheme_of(uri: str) -> str | None:
    """The URI's scheme in lower case, or None for a plain local path."""
    m = _SCHEME.match(uri)
    # A Windows drive letter ("C:") is not a scheme; neither is a bare name.
    if not m or len(m.group(1)) == 1:
        return None
    return m.group(1).lower()


# Schemes whose URIs name a bucket (or container) after the "//": one without it names no store.
BUCKET_SCHEMES = ("s3", "s3a", "s3n", "gs", "abfs", "abfss", "wasb", "wasbs")


def malformed(uri: str) -> str | None:
    """Why ``uri`` cannot name a place in an object store (one slash, no bucket), in a clause; None where
    it can. Said before anything reaches a store, whose own words (deltalake's "Unable to recognise URL",
    a path read as ``s3a:/_delta_log``) would not."""
    scheme = scheme_of(uri)
    if scheme not in BUCKET_SCHEMES:
        return None
    rest = uri[len(scheme) + 1:]
    if not rest.startswith("//"):
        return f"{uri}: not a {scheme} URI: expected {scheme}://BUCKET/PATH"
    if not rest[2:].partition("/")[0].strip():
        return f"{uri}: names no bucket: expected {scheme}://BUCKET/PATH"
    return None


def to_uri(path_or_uri: str) -> str:
    """A fully qualified URI for a local path, ``file:`` URI or object-store URI.

    Taken literally: an S3 key may begin or end with whitespace, and stripping it here would
    spell such an object two ways (Spark's :func:`canonical_col` keeps it)."""
    if not path_or_uri.strip():
        raise ValueError(f"empty path: {path_or_uri!r}")
    scheme = scheme_of(path_or_uri)
    if scheme is None:
        return "file://" + os.path.abspath(os.path.expanduser(path_or_uri))
    if scheme == "file":
        rest = path_or_uri[len("file:"):]
        return "file://" + "/" + rest.lstrip("/")
    return path_or_uri


def canonical(uri: str) -> str:
    """The comparison form of a URI: scheme aliases folded, no trailing slash."""
    full = to_uri(uri)
    scheme = scheme_of(full)
    assert scheme is not None
    rest = full[len(scheme) + 1:]
    scheme = _S3_ALIASES.get(scheme, scheme)
    if rest != "///" and rest.endswith("/"):
        rest = rest.rstrip("/")
    return f"{scheme}:{rest}"


def canonical_glob(pattern: str) -> str:
    """A glob over table roots, in the form the roots are in: a pattern that names a store (``s3a://lake/*``,
    ``file:/data/*``) or a local path (``/data/*``) gets :func:`canonical`'s spelling, so that it matches
    the same tables whichever alias it uses; one that names neither (``*/db/*``) is taken as written."""
    if pattern.startswith("/") or scheme_of(pattern) is not None:
        return canonical(pattern)
    return pattern


# A table root in :func:`canonical` form: the one key every step of a run compares and
# indexes tables by. Made once, by :func:`table_root`, where a table enters the run.
TableRoot = NewType("TableRoot", str)


def table_root(path_or_uri: str) -> TableRoot:
    return TableRoot(canonical(path_or_uri))


def join(base: str, *parts: str) -> str:
    """``base/part/...`` without doubled slashes."""
    out = base.rstrip("/")
    for part in parts:
        out = out + "/" + part.strip("/")
    return out


def parent(uri: str) -> str:
    """The folder holding ``uri``."""
    return uri.rstrip("/").rsplit("/", 1)[0]


def name(uri: str) -> str:
    """The last segment of ``uri``."""
    return uri.rstrip("/").rsplit("/", 1)[-1]


def is_strictly_under(path: str, root: str) -> bool:
    """True when ``path`` lies inside ``root`` (never ``root`` itself)."""
    return canonical(path).startswith(canonical(root) + "/")


def owner(path: str, roots: list[str]) -> str | None:
    """The innermost of ``roots`` that holds ``path`` (a nested table keeps its own files); None for none."""
    owners = [r for r in roots if is_strictly_under(path, r)]
    return max(owners, key=len) if owners else None


def local_path(uri: str) -> str:
    """The local filesystem path of a ``file:`` URI (or plain path)."""
    full = to_uri(uri)
    if scheme_of(full) != "file":
        raise ValueError(f"not a local file URI: {uri}")
    return full[len("file://"):]


def bucket_and_key(uri: str) -> tuple[str, str]:
    """An ``s3://`` (or ``s3a://``) URI's bucket and key, for the boto3 calls that take them apart."""
    bucket, _, key = uri.split("://", 1)[1].partition("/")
    return bucket, key


def decode_log_path(path: str) -> str:
    """Delta log paths are RFC 2396 URI-encoded; inventory paths are not."""
    return unquote(path)


# Spark column twins of the functions above, for paths that live in DataFrames.

def canonical_col(column: Column) -> Column:
    """Spark expression equal to :func:`canonical` for URIs that carry a scheme.

    It runs on every inventory row, so the spellings S3 Inventory and ``to_uri`` write
    (``s3://`` and ``file:///``, no trailing slash: already canonical) are recognised by
    three prefix and suffix checks and pass as they are; the rest are rebuilt from their
    scheme, with a regular expression only where one is needed (a ``file:`` URI not
    spelled ``file:///``, a trailing slash): rebuilding every row costs several times the scan
    (benchmarks/RESULTS.md, "``canonical_col``: spellings already canonical pass as they are").
    """
    from pyspark.sql import functions as F

    as_is = ((column.startswith("s3://") | (column.startswith("file:///") & ~column.startswith("file:////")))
             & ~column.endswith("/"))
    spelled = F.substring_index(column, ":", 1)
    scheme = F.lower(spelled)
    rest = column.substr(F.length(spelled) + 2, F.lit(1 << 30))
    folded = F.when(scheme.isin(*_S3_ALIASES), F.lit("s3")).otherwise(scheme)
    three_slashes = rest.startswith("///") & ~rest.startswith("////")
    rest = F.when((scheme == "file") & ~three_slashes, F.regexp_replace(rest, r"^/*", "///")).otherwise(rest)
    rest = F.when(rest.endswith("/") & (rest != "///"), F.regexp_replace(rest, r"/+$", "")).otherwise(rest)
    return F.when(as_is, column).otherwise(F.concat(folded, F.lit(":"), rest))


MALFORMED_ESCAPE = r"%(?![0-9A-Fa-f]{2})"


def try_url_decode_col(column: Column) -> Column:
    """Spark's ``try_url_decode`` (``+`` is a space; null for a malformed escape), on 3.5 too:
    the CASE keeps ``url_decode``, which throws, away from malformed escapes."""
    from pyspark.sql import functions as F

    return F.when(~column.rlike(MALFORMED_ESCAPE), F.url_decode(column))


def decode_log_path_col(column: Column) -> Column:
    """Spark twin of :func:`decode_log_path`: percent-decoding where ``+`` stays ``+``."""
    from pyspark.sql import functions as F

    return F.url_decode(F.replace(column, F.lit("+"), F.lit("%2B")))


def common_folder(table_uris: list[str]) -> str:
    """The folder all table URIs share (with its trailing slash), or "" when they share none."""
    if len(table_uris) < 2 or len({u.split("://", 1)[0] for u in table_uris}) > 1:
        return ""
    common = os.path.commonpath([u.split("://", 1)[-1] for u in table_uris])
    if not common.strip("/"):
        return ""
    return table_uris[0][:table_uris[0].find(common) + len(common)] + "/"


def literal(uri: str) -> str:
    """A path Spark and Hadoop read as named: unescaped, ``[``, ``{``, ``*``, ``?`` are a glob."""
    return re.sub(r"([\\\[\]{}*?])", r"\\\1", uri)
