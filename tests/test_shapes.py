"""The seams between steps fail with both sides named when a column goes missing."""

from __future__ import annotations

import pytest

from lakeio.shapes import CANDIDATES, OUTCOMES, ShapeError


def test_a_frame_missing_a_column_is_refused_at_the_seam(spark):
    candidates = spark.createDataFrame([("file:/t", "file:/t/a", 1, 0)], CANDIDATES.schema)
    assert CANDIDATES.check(candidates) is candidates
    with pytest.raises(ShapeError, match=r"outcomes: missing column\(s\) \['action', 'error', 'at_ms'\]"):
        OUTCOMES.check(candidates)
