"""Shared fixtures: one real local Spark session for the whole run, and golden Delta tables."""

from __future__ import annotations

import os
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
README = Path(__file__).resolve().parents[1] / "README.md"

# CI replays the same generated examples every run; developers get fresh ones.
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


def pytest_collection_modifyitems(items):
    """``s3`` follows from the fixture a test uses, so the marker cannot drift."""
    for item in items:
        if "s3_endpoint" in item.fixturenames:
            item.add_marker(pytest.mark.s3)


@pytest.fixture(scope="session")
def spark():
    from lakeio.spark import get_spark

    session = get_spark("tests", "local[2]")
    yield session
    session.stop()


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
