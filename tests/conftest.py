"""Shared fixtures: one real local Spark session for the whole run, and golden Delta tables."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

GOLDEN = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "delta-golden"


@pytest.fixture(scope="session")
def spark():
    from lakeio.spark import get_spark

    session = get_spark("tests", "local[2]")
    yield session
    session.stop()


@pytest.fixture
def golden_copy(tmp_path):
    """Copy a golden table to a temp dir (never delete inside ../shared)."""

    def copy(name: str) -> Path:
        source = GOLDEN / name
        if not source.is_dir():
            pytest.skip(f"golden fixtures not found at {GOLDEN}")
        target = tmp_path / name
        shutil.copytree(source, target)
        return target

    return copy
