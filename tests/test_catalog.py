"""Tables by catalog name, against a real local metastore: Spark's Hive support with its embedded
Derby, external tables registered at the lake's paths, in a process of its own (the suite's
session has Spark's in-memory catalog, and the catalog is fixed when a session starts).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lakeio.catalog import is_name

pytestmark = pytest.mark.slow  # a Spark session of its own with a Hive metastore

SCRIPT = r"""
import json, os, sys
from pathlib import Path
from pyspark.sql import SparkSession

work = Path(sys.argv[1])
spark = (SparkSession.builder.master("local[2]").appName("catalog-test")
         .config("spark.sql.catalogImplementation", "hive")
         .config("spark.sql.warehouse.dir", str(work / "warehouse"))
         .config("spark.driver.extraJavaOptions", f"-Dderby.system.home={work / 'derby'}")
         .config("spark.sql.shuffle.partitions", "4").getOrCreate())

import vacuum_jobs
from demo.lake import build_lake
from lake_reports.cli import main as reports
from tests.lakes import inventory_of
from vacuum_jobs.cli import main as vacuum

lake = build_lake(work / "lake", rows_per_commit=20, golden_dv_table=None)
inventory = inventory_of(spark, lake.bucket_dir, work)
spark.range(3).write.parquet(str(work / "plain"))
spark.sql("CREATE DATABASE bronze")
spark.sql("CREATE DATABASE ops")
for name, where in (("bronze.orders", lake.tables["orders"]), ("bronze.events", lake.tables["events"]),
                    ("bronze.plain", work / "plain"), ("ops.inventory", Path(inventory)),
                    ("ops.vacuum_audit", work / "audit")):
    spark.sql(f"CREATE EXTERNAL TABLE {name} (id BIGINT) STORED AS PARQUET LOCATION 'file://{where}'")
spark.sql("CREATE VIEW bronze.recent_orders AS SELECT 1 AS id")

result = {}
result["database"] = vacuum(["--inventory-table", "ops.inventory", "--database", "bronze", "--dry-run",
                             "--report", str(work / "database.json")])
result["names"] = vacuum(["--inventory-table", "ops.inventory", "--table", "bronze.orders", "--table",
                          "bronze.nothing_here", "--dry-run", "--audit-table", "ops.vacuum_audit",
                          "--report", str(work / "names.json")])
result["unknown_database"] = vacuum(["--inventory-table", "ops.inventory", "--database", "silver", "--dry-run"])
api = vacuum_jobs.vacuum(spark, "ops.inventory", ["bronze.events"], audit_table="ops.vacuum_audit")
result["api"] = [(t.table, t.status) for t in api.tables]
result["verify"] = reports(["erasure", "--audit-table", "ops.vacuum_audit", "--verify"])
reports(["erasure", "--audit-table", "ops.vacuum_audit", "--inventory-table", "ops.inventory", "--table", "bronze.orders",
         "--report", str(work / "erasure.json")])
result["roots"] = {n: str(p) for n, p in lake.tables.items()}
print("RESULT " + json.dumps(result))
"""


def test_names_and_databases_resolve_through_a_hive_metastore(tmp_path):
    script = tmp_path / "catalog_run.py"
    script.write_text(SCRIPT)
    repo = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(repo), "PYSPARK_PYTHON": sys.executable}
    env.pop("PYSPARK_SUBMIT_ARGS", None)
    done = subprocess.run([sys.executable, str(script), str(tmp_path)], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=600)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
    assert lines, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(lines[0][len("RESULT "):])
    roots = {name: "file://" + path for name, path in result["roots"].items()}

    by_table = {t["table"]: t for t in json.loads((tmp_path / "database.json").read_text())["tables"]}
    assert result["database"] == 1  # a view and a table that is no Delta table are refused, by name
    assert {roots["orders"], roots["events"]} <= set(by_table)
    assert by_table[roots["orders"]]["status"] == by_table[roots["events"]]["status"] == "dry_run"
    assert by_table["bronze.recent_orders"]["reason"] == "bronze.recent_orders: is a view; name the table whose " \
                                                         "files it shows"
    assert by_table["bronze.plain"]["reason"].startswith(f"bronze.plain: not a Delta table (no _delta_log at "
                                                         f"file://{tmp_path / 'plain'}")

    named = {t["table"]: t for t in json.loads((tmp_path / "names.json").read_text())["tables"]}
    assert result["names"] == 1 and named[roots["orders"]]["status"] == "dry_run"
    assert named["bronze.nothing_here"]["reason"].startswith("bronze.nothing_here: not a table the catalog knows")
    assert result["unknown_database"] == 1
    assert result["api"] == [[roots["events"], "dry_run"]]
    assert result["verify"] == 0 and (tmp_path / "audit" / "_delta_log").is_dir()  # the audit went to its location
    erasure = json.loads((tmp_path / "erasure.json").read_text())
    assert [t["table"] for t in erasure["tables"]] == [roots["orders"]]


def test_what_counts_as_a_name():
    for name in ("bronze.events", "main.sales.orders", "`my-cat`.sales.orders", "default.t"):
        assert is_name(name), name
    for path in ("orders", "s3://lake/sales/orders", "/data/sales.orders", "./sales.orders", "a.b.c.d", "sales/x.y"):
        assert not is_name(path), path
