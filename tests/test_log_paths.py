"""Log paths resolve as Hadoop ``Path`` resolves them, in Python and in Spark alike."""

from __future__ import annotations

from urllib.parse import unquote

import pytest
from pyspark.sql import functions as F

from lakeio.deltalog.paths import UnresolvablePath, is_plain, resolve, with_resolved
from lakeio.deltalog.segments import log_segments
from lakeio.store import uris
from lakeio.store.filesystem import Storage

CASES = [
    # (table root, path as the log spells it, the file it names or None when the table must be refused)
    ("file:///tmp/t", "a%20b/x.parquet", "file:///tmp/t/a b/x.parquet"),
    ("file:///tmp/t", "x+y.parquet", "file:///tmp/t/x+y.parquet"),
    ("file:///tmp/t", "./x", "file:///tmp/t/x"),
    ("file:///tmp/t", "p/../x", "file:///tmp/t/x"),
    ("file:///tmp/t", "a//b/", "file:///tmp/t/a/b"),
    ("file:///tmp/t", "/tmp/t/y", "file:///tmp/t/y"),  # scheme-less absolute: the table's scheme
    ("file:///tmp/t", "/elsewhere/z", "file:///elsewhere/z"),  # resolvable, outside the table
    ("file:///tmp/t", "../u/v", "file:///tmp/u/v"),
    ("file:///tmp/t", "file:/tmp/t/q", "file:///tmp/t/q"),
    ("file:///tmp/t", "file:///tmp/t/q%25", "file:///tmp/t/q%"),
    ("file:///tmp/t", "100%.parquet", None),  # malformed escape
    ("file:///tmp/t", "../../../../x", None),  # above the root
    ("file:///tmp/t", "s3://b/t/x", None),  # another store
    ("file:///tmp/t", "a#b.parquet", None),  # Hadoop: file "a", fragment "b.parquet"
    ("file:///tmp/t", "a?b.parquet", None),  # Hadoop: file "a", query "b.parquet"
    ("s3://bkt/w/t", "s3://bkt/w/t/x#y", None),
    ("s3://bkt/w/t", "a%2Fb.parquet", None),  # an escaped separator
    ("s3://bkt/w/t", "%2E%2E/x.parquet", None),  # escaped dots: '..' or a folder named so?
    ("s3://bkt/w/t", "x%2e.parquet", None),
    ("s3://bkt/w/t", "a%23b%3F.parquet", "s3://bkt/w/t/a#b?.parquet"),  # escaped, they are just characters
    ("s3://bkt/w/t", "a", "s3://bkt/w/t/a"),
    ("s3://bkt/w/t", "/w/t/b", "s3://bkt/w/t/b"),
    ("s3://bkt/w/t", "s3a://bkt/w/t/c", "s3://bkt/w/t/c"),
    ("s3://bkt/w/t", "./../t/./d", "s3://bkt/w/t/d"),
    ("s3://bkt/w/t", "s3://other/w/t/c", None),  # another bucket could be an access-point alias
    ("s3://bkt/w/t", "dbfs:/mnt/x", None),  # a mount could be this very bucket
    # Plain relative paths take the short way; these sit at its edge.
    ("s3://bkt/w/t", "p=1/part-0.snappy.parquet", "s3://bkt/w/t/p=1/part-0.snappy.parquet"),
    ("s3://bkt/w/t", "a./b", "s3://bkt/w/t/a./b"),
    ("s3://bkt/w/t", "p/..", "s3://bkt/w/t"),
    ("s3://bkt/w/t", "x/", "s3://bkt/w/t/x"),
    ("s3://bkt", "y", "s3://bkt/y"),  # a table at the bucket root
    # A key may end in whitespace (S3 allows it): it is part of the name, however the log spells it.
    ("s3://bkt/w/t", "s3://bkt/w/t/x%20", "s3://bkt/w/t/x "),
    ("s3://bkt/w/t", "s3a://bkt/w/t/%09x%C2%A0", "s3://bkt/w/t/\tx\u00a0"),
    ("s3://bkt/w/t", "y%20", "s3://bkt/w/t/y "),
    ("file:///", "z", "file:///z"),
]


@pytest.mark.parametrize("root, log_path, expected", CASES)
def test_python_resolution(root, log_path, expected):
    if expected is None:
        with pytest.raises(UnresolvablePath):
            resolve(root, log_path)
    else:
        assert resolve(root, log_path) == expected


def test_spark_twin_agrees_and_names_the_problem(spark):
    frame = spark.createDataFrame([(r, p) for r, p, _ in CASES] + [("s3://b/t", None)], "root string, p string")
    rows = with_resolved(frame, "root", "p", "path").collect()
    assert rows[-1]["path"] is None
    for row, (_, log_path, expected) in zip(rows, CASES):
        assert (row["path_problem"] is None) == (expected is not None)
        if expected is not None:
            assert row["path"] == expected
            continue
        assert row["path_problem"].startswith(f"'{log_path}': ")
        if "differs from the table's" in row["path_problem"]:
            assert row["path"] == uris.canonical(unquote(log_path))  # another store's file, named literally
        else:
            assert row["path"] is None, log_path
    assert rows[-1]["path_problem"] is None  # no path (an inline deletion vector): nothing to resolve


def test_a_plain_path_is_the_root_and_the_path_as_written(spark):
    frame = spark.createDataFrame([(r, p) for r, p, _ in CASES], "root string, p string")
    plain = [(r["root"], r["p"]) for r in frame.where(is_plain(F.col("p"), F.col("root"))).collect()]
    assert ("s3://bkt/w/t", "p=1/part-0.snappy.parquet") in plain
    assert ("file:///", "z") not in plain and ("file:///tmp/t", "./x") not in plain
    for root, log_path in plain:
        assert resolve(root, log_path) == f"{root}/{log_path}"


def test_many_log_folders_are_listed_in_one_go_as_named(spark, tmp_path):
    """Every ``_delta_log/`` in one listing gives what listing each folder gives: decoded names,
    direct children only, no hidden names (no log file has one). A folder that does not exist
    fails the whole listing; the tables are then listed one by one, each with its own reason."""
    storage = Storage(spark)
    folders = [tmp_path / "a b%20[c]" / "_delta_log", tmp_path / "t" / "_delta_log"]
    for folder in folders:
        (folder / "_sidecars").mkdir(parents=True)
        for name in ("00000000000000000000.json", "x+y %.json", ".0.json.crc", "_last_checkpoint", "_sidecars/s.parquet"):
            (folder / name).write_text("{}\n")
    given = [str(folders[0]), f"file://{folders[1]}"]
    listed = storage.files_in(given)
    for folder in given:
        one_by_one = [s.uri for s in storage.list(folder) if not s.is_dir and not uris.name(s.uri).startswith(("_", "."))]
        assert sorted(listed[folder]) == sorted(one_by_one) and len(one_by_one) == 2
    missing = str(tmp_path / "missing")
    with pytest.raises(Exception, match="does not exist"):
        storage.files_in([given[1], uris.join(missing, "_delta_log")])
    segments, failures = log_segments(storage, [str(folders[1].parent), missing])
    assert [s.version for s in segments] == [0]
    assert failures == {missing: f"{uris.join(missing, '_delta_log')}: no commits or checkpoints (not a Delta table?)"}
