"""The seams between steps fail with both sides named when a column goes missing."""

from __future__ import annotations

import pytest

from lakeio.spark.shapes import CANDIDATES, FILE_ACTIONS, OUTCOMES, ShapeError, local_frame, of_tables, without_tables


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


def test_a_local_frame_holds_its_rows_exactly_and_runs_in_the_jvm_alone(spark):
    """No Python worker behind it (a cold run paid 2-3 s to start one), and nothing rounded or nulled
    on the way: quotes, backslashes, non-ASCII, whitespace, nulls, the long range's ends."""
    rows = [(0, 's3://b/w/"t"\\x \u00e9\u00a0', 2 ** 63 - 1, True), (1, None, -(2 ** 63), None), (2, "", 0, False)]
    frame = local_frame(spark, rows, "table_id int, table_root string, cutoff_ms long, ok boolean")
    assert [tuple(r) for r in frame.collect()] == rows
    assert frame.columns == ["table_id", "table_root", "cutoff_ms", "ok"]
    plan = frame._jdf.queryExecution().executedPlan().toString()
    assert "LocalTableScan" in plan and "ExistingRDD" not in plan, plan
    assert local_frame(spark, [], FILE_ACTIONS.schema).schema == FILE_ACTIONS.schema
    assert local_frame(spark, [], FILE_ACTIONS.schema).count() == 0


def test_a_value_that_does_not_fit_its_column_fails_the_job_instead_of_turning_null(spark):
    with pytest.raises(Exception, match="MALFORMED_RECORD|Malformed"):
        local_frame(spark, [(1, "not a number")], "table_id int, cutoff_ms long").collect()
