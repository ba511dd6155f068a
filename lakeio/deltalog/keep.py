"""The keep set (docs/DESIGN.md "What a vacuum never deletes"): what a vacuum must never delete.

- live ``add`` files, and ``remove`` tombstones not older than the cutoff (or of unknown age);
- the deletion-vector files of both (``u``: ``<prefix>/deletion_vector_<uuid>.bin`` from
  the z85-encoded id, ``p``: an absolute path, ``i``: inline, no file);
- everything with a hidden segment (``_x`` or ``.x``) anywhere in its path relative to
  the table root, ``_delta_log/`` included, except ``_change_data``, ``_delta_index``
  and partition folders ``<partitionColumn>=...``; with UniForm Iceberg, any segment
  named ``metadata`` too (Delta's ``DeltaTableUtils.isHiddenDirectory``).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

NOT_HIDDEN = ("_change_data", "_delta_index")

_Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
_Z85_VALUE = {ch: i for i, ch in enumerate(_Z85)}


def z85_decode(text: str) -> bytes:
    """ZeroMQ Z85 (what Delta uses for deletion vector ids): 5 characters -> 4 bytes."""
    if len(text) % 5:
        raise ValueError(f"z85 text length {len(text)} is not a multiple of 5")
    out = bytearray()
    for start in range(0, len(text), 5):
        value = 0
        for ch in text[start:start + 5]:
            if ch not in _Z85_VALUE:
                raise ValueError(f"{ch!r} is not a z85 character")
            value = value * 85 + _Z85_VALUE[ch]
        if value >= 2 ** 32:
            raise ValueError(f"{text[start:start + 5]!r} is not a z85 group")
        out += value.to_bytes(4, "big")
    return bytes(out)


def dv_relative_path(path_or_inline: str) -> str:
    """Where a storage type ``u`` deletion vector lives, relative to the table root."""
    prefix, encoded = path_or_inline[:-20], path_or_inline[-20:]
    name = f"deletion_vector_{uuid.UUID(bytes=z85_decode(encoded))}.bin"
    return f"{prefix}/{name}" if prefix else name


def dv_relative_path_col(path_or_inline: Column) -> Column:
    """Spark twin of :func:`dv_relative_path`; null when the id is not valid z85.

    Column expressions, not a Python UDF, so that planning needs no Python workers.
    """
    encoded = F.substring(path_or_inline, -20, 20)
    digits = F.transform(F.split(encoded, ""), lambda ch: F.call_function("instr", F.lit(_Z85), ch) - 1)
    groups = F.transform(
        F.sequence(F.lit(0), F.lit(3)),
        lambda g: F.aggregate(F.slice(digits, g * 5 + 1, 5), F.lit(0).cast("long"), lambda acc, d: acc * 85 + d),
    )
    valid = ((F.length(path_or_inline) >= 20) & ~F.exists(digits, lambda d: d < 0)
             & ~F.exists(groups, lambda v: v >= 2 ** 32))
    hexed = F.array_join(F.transform(groups, lambda v: F.lpad(F.lower(F.hex(v)), 8, "0")), "")
    as_uuid = F.concat_ws("-", *[F.substring(hexed, start, length)
                                 for start, length in ((1, 8), (9, 4), (13, 4), (17, 4), (21, 12))])
    name = F.concat(F.lit("deletion_vector_"), as_uuid, F.lit(".bin"))
    prefix = path_or_inline.substr(F.lit(1), F.length(path_or_inline) - 20)
    return F.when(valid, F.when(prefix == "", name).otherwise(F.concat(prefix, F.lit("/"), name)))


def needed() -> Column:
    """An action row (with its table's ``cutoff_ms``) whose files the table still needs: an add,
    or a tombstone not older than the cutoff (one of unknown age is kept)."""
    deleted = F.col("deletion_timestamp")
    return (F.col("kind") == "add") | deleted.isNull() | (deleted >= F.col("cutoff_ms"))


def keep_set(files: DataFrame) -> DataFrame:
    """``(table_root, path, live)`` of every data or deletion-vector file the tables still need;
    ``live`` when the current snapshot needs it, false when only a kept tombstone does.

    ``files`` are reconciled actions (see deltalog.replay) with their table's ``cutoff_ms``.
    """
    # One row per named file, data or vector, in one pass; nulls are dropped after the explode,
    # where the filter cannot be pushed into the path resolution (Spark 3.5 plans that for seconds).
    named = files.where(needed()).select(
        "table_root", (F.col("kind") == "add").alias("live"), F.explode(F.array("path", "dv_path")).alias("path"))
    return named.where(F.col("path").isNotNull()).groupBy("table_root", "path").agg(F.max("live").alias("live"))


def hidden_pattern(partition_names: Sequence[str], hidden_names: Sequence[str]) -> str:
    """The regular expression (Java's dialect) that finds, in a path relative to a table root, a
    segment that is hidden (``_x`` or ``.x``, not exempt, not a partition folder of a column
    whose own name starts so) or named as one of ``hidden_names`` (UniForm's metadata folder).

    One literal pattern per kind of table, so that Spark compiles it once and the check stays
    in its generated code."""
    exempt = "|".join(re.escape(name) for name in NOT_HIDDEN)
    odd = [re.escape(name) for name in partition_names if name.startswith(("_", "."))]
    pattern = f"(^|/)(?!({exempt})(/|$))" + (f"(?!({'|'.join(odd)})=)" if odd else "") + "[_.]"
    if hidden_names:
        pattern += f"|(^|/)({'|'.join(re.escape(name) for name in hidden_names)})(/|$)"
    return pattern


def hidden(relative_path: Column, rule: Column, patterns: Sequence[str]) -> Column:
    """True when ``relative_path`` is hidden under ``patterns[rule]`` (see :func:`hidden_pattern`)."""
    check = F.when(rule == 0, relative_path.rlike(patterns[0])) if patterns else F.lit(None).cast("boolean")
    for i, pattern in enumerate(patterns[1:], 1):
        check = check.when(rule == i, relative_path.rlike(pattern))
    return check
