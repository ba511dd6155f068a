"""Both jobs run under the real spark-submit shipped with pyspark, from what ``python -m infra.package`` builds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import pyspark
from deltalake import DeltaTable, write_deltalake

from infra.package import build
from inventory_etl.producer import objects_in_folder, write_delivery

SPARK_SUBMIT = Path(pyspark.__file__).parent / "bin" / "spark-submit"


def submit(built: dict[str, Path], job: str, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    env.pop("PYTHONPATH", None)  # only what --py-files ships
    command = [str(SPARK_SUBMIT), "--master", "local[2]", "--py-files", str(built["archive"]), str(built[job]), *args]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def test_ingest_then_vacuum_through_spark_submit(tmp_path):
    built = build(tmp_path / "dist")
    bucket = tmp_path / "lake"
    table = bucket / "t"
    write_deltalake(str(table), pa.table({"id": [1, 2]}))
    (table / "orphan.parquet").write_bytes(b"x")
    os.utime(table / "orphan.parquet", (1_700_000_000, 1_700_000_000))
    write_delivery(str(tmp_path / "dest"), "lake", "daily", objects_in_folder(str(bucket)), datetime.now(timezone.utc))
    inventory = tmp_path / "inventory"

    ingested = submit(built, "inventory_etl", "--inventory-table", str(inventory),
                      "--inventory-root", str(tmp_path / "dest"), "--path-root", f"lake={bucket}", cwd=tmp_path)
    assert ingested.returncode == 0, ingested.stderr[-3000:]
    assert "1 ingested, 0 refused" in ingested.stdout

    report = tmp_path / "report.json"
    tables = tmp_path / "tables.yaml"
    tables.write_text(f"- table: {table}\n")
    vacuumed = submit(built, "vacuum_jobs", "--inventory-table", str(inventory), "--tables-file", tables.as_uri(),
                      "--report", str(report), cwd=tmp_path)
    assert vacuumed.returncode == 0, vacuumed.stderr[-3000:]
    assert json.loads(report.read_text())["totals"]["deleted_files"] == 1
    assert not (table / "orphan.parquet").exists()
    assert DeltaTable(str(table)).to_pyarrow_table().num_rows == 2
