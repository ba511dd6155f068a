"""Shared fixtures: one real local Spark session for the whole run, and golden Delta tables."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from hypothesis import settings

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
# The whole suite shares one local JVM (driver and executors): Spark 3.5 outgrows the default 1 GiB heap.
os.environ.setdefault("PYSPARK_SUBMIT_ARGS", "--driver-memory 2g pyspark-shell")
# Set before Spark starts, so that its Python workers see them too: moto accepts any credentials.
for name, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                    "AWS_DEFAULT_REGION": "us-east-1"}.items():
    os.environ[name] = value
os.environ.pop("AWS_PROFILE", None)

GOLDEN = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "delta-golden"

# CI replays the same generated examples every run; developers get fresh ones.
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


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


@pytest.fixture(scope="session")
def s3_endpoint():
    """A real HTTP S3 endpoint (moto's server) on the loopback interface."""
    import logging
    import socket

    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.WARNING)

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    yield f"http://127.0.0.1:{port}"
    server.stop()
