"""The seams between steps fail with both sides named when a column goes missing."""

from __future__ import annotations

import pytest

from lakeio.shapes import CANDIDATES, OUTCOMES, ShapeError, of_tables, without_tables


def test_a_frame_missing_a_column_is_refused_at_the_seam(spark):
    candidates = spark.createDataFrame([("file:/t", "file:/t/a", 1, 0)], CANDIDATES.schema)
    assert CANDIDATES.check(candidates) is candidates
    with pytest.raises(ShapeError, match=r"outcomes: missing column\(s\) "
                                         r"\['action', 'error', 'at_ms', 'version_id', 'delete_marker_id', 'trash_path'\]"):
        OUTCOMES.check(candidates)


def test_rows_are_kept_to_tables_by_their_root_alone(spark):
    roots = ["file:/lake/a", "file:/lake/a_b", "file:/lake/b"]
    candidates = spark.createDataFrame([(root, f"{root}/part-0", 1, 0) for root in roots], CANDIDATES.schema)

    def kept(frame):
        return sorted(row["table_root"] for row in frame.collect())

    assert kept(of_tables(candidates, ["file:/lake/a", "file:/lake/c"])) == ["file:/lake/a"]
    assert kept(without_tables(candidates, ["file:/lake/a", "file:/lake/c"])) == ["file:/lake/a_b", "file:/lake/b"]
    assert kept(of_tables(candidates, [])) == []
    assert kept(without_tables(candidates, [])) == roots
