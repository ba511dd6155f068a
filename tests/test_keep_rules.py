"""The keep rules' building blocks: deletion-vector file names and the hidden-path rule."""

from __future__ import annotations

import json
import random

import pytest
from pyspark.sql import functions as F

from lakeio.deltalog.gates import parse_interval_hours
from lakeio.deltalog.keep import _Z85, dv_relative_path, dv_relative_path_col, hidden, hidden_pattern, z85_decode
from tests.feature_lake import copy_table


def test_z85_names_the_deletion_vector_files_delta_wrote(tmp_path):
    table = tmp_path / "dv"
    copy_table("partitioned_deletion_vectors", table)  # Delta's writer (tests.feature_lake)
    vectors = [action["add"]["deletionVector"] for commit in sorted((table / "_delta_log").glob("*.json"))
               for action in map(json.loads, commit.read_text().splitlines())
               if "add" in action and action["add"].get("deletionVector")]
    assert vectors and {v["storageType"] for v in vectors} == {"u"}
    names = {dv_relative_path(v["pathOrInlineDv"]) for v in vectors}
    assert names == {p.name for p in table.glob("deletion_vector_*.bin")}
    first = vectors[0]["pathOrInlineDv"]
    assert dv_relative_path("ab" + first) == "ab/" + dv_relative_path(first)  # a random prefix is a folder
    with pytest.raises(ValueError):
        z85_decode("1234")


def test_spark_twin_of_the_dv_name_agrees_with_python(spark):
    rng = random.Random(7)
    ids = ["Zcq?bs*HKQWCB[Sjf[.o", "zz9Zcq?bs*HKQWCB[Sjf[.o", "#" * 20, "short", "000000000000000$0000"]
    ids += ["".join(rng.choice(_Z85) for _ in range(20 + rng.choice((0, 2)))) for _ in range(300)]

    def python(text):
        try:
            return dv_relative_path(text)
        except ValueError:
            return None

    rows = spark.createDataFrame([(i,) for i in ids], "id string").select(
        "id", dv_relative_path_col(F.col("id")).alias("name")).collect()
    assert {r["id"]: r["name"] for r in rows} == {i: python(i) for i in ids}


@pytest.mark.parametrize("path, partitions, names, expected", [
    ("part=1/_SUCCESS", ["part"], [], True),
    ("part=1/.part-0.crc", ["part"], [], True),
    ("_delta_log/00000.json", [], [], True),
    ("a/_tmp/b.parquet", [], [], True),
    ("_change_data/cdc-0.parquet", [], [], False),
    ("_delta_index/x", [], [], False),
    ("_change_data2/x", [], [], True),
    ("_p=1/a.parquet", ["_p"], [], False),
    ("_p=1/a.parquet", ["p"], [], True),
    ("_p=1/_SUCCESS", ["_p"], [], True),
    ("x_y/z.parquet", [], [], False),
    ("part-0.parquet", [], [], False),
    # UniForm Iceberg: "metadata" is hidden at any depth, file or folder; nothing else is.
    ("metadata/v1.metadata.json", [], ["metadata"], True),
    ("p=1/metadata/snap-1.avro", ["p"], ["metadata"], True),
    ("p=1/metadata", ["p"], ["metadata"], True),
    ("metadata/v1.metadata.json", [], [], False),
    ("metadata2/x.parquet", [], ["metadata"], False),
    ("p=metadata/x.parquet", ["p"], ["metadata"], False),
])
def test_hidden_rule_applies_to_every_segment(spark, path, partitions, names, expected):
    row = spark.createDataFrame([(path,)], "rel string").select(
        hidden(F.col("rel"), F.lit(0), [hidden_pattern(partitions, names)]).alias("h")).first()
    assert row["h"] is expected


def test_retention_intervals():
    assert parse_interval_hours("interval 7 days") == 168
    assert parse_interval_hours("interval 1 week") == 168
    assert parse_interval_hours("interval 2 days 12 hours") == 60
    assert parse_interval_hours("30 minutes") == 0.5
    for bad in ("seven days", "interval 3 fortnights", "interval"):
        with pytest.raises(ValueError):
            parse_interval_hours(bad)
