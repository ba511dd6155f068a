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

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from lakeio.spark.catalog import CatalogError, is_name, location
from lakeio.spark.session import DELTA_CATALOG, DELTA_EXTENSION
from tests.conftest import JARS
from tests.lakes import inventory_of

pytestmark = pytest.mark.slow  # Spark sessions of their own with a Hive metastore

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

lake = build_lake(work / "lake", rows_per_commit=20)
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
    assert result["database"] == 0  # a database's view and its table that is no Delta table are skipped, by name
    assert {roots["orders"], roots["events"]} <= set(by_table)
    assert by_table[roots["orders"]]["status"] == by_table[roots["events"]]["status"] == "dry_run"
    assert by_table[roots["orders"]]["name"] == "bronze.orders"
    assert {(by_table[n]["status"], by_table[n]["reason_code"]) for n in ("bronze.recent_orders", "bronze.plain")
            } == {("skipped", "not_vacuumable")}
    assert by_table["bronze.recent_orders"]["reason"] == "bronze.recent_orders: is a view; name the table whose " \
                                                         "files it shows"
    assert by_table["bronze.plain"]["reason"].startswith(f"bronze.plain: not a Delta table (no _delta_log at "
                                                         f"file://{tmp_path / 'plain'}")
    summary = [ln.split() for ln in done.stdout.splitlines()]
    assert ["dry_run", "bronze.orders"] in [ln[:2] for ln in summary], done.stdout  # by the name it was given
    assert "SQLQueryContextLogger" not in done.stderr, done.stderr[-2000:]

    named = {t["table"]: t for t in json.loads((tmp_path / "names.json").read_text())["tables"]}
    assert result["names"] == 1 and named[roots["orders"]]["status"] == "dry_run"
    assert named["bronze.nothing_here"]["reason"].startswith("bronze.nothing_here: not a table the catalog knows")
    assert named["bronze.nothing_here"]["reason_code"] == "name_unresolved"
    assert result["unknown_database"] == 1
    assert result["api"] == [[roots["events"], "dry_run"]]
    assert result["verify"] == 0 and (tmp_path / "audit" / "_delta_log").is_dir()  # the audit went to its location
    erasure = json.loads((tmp_path / "erasure.json").read_text())
    assert [t["table"] for t in erasure["tables"]] == [roots["orders"]]


def test_a_name_the_in_memory_catalog_does_not_know_says_how_to_reach_a_metastore(spark, capsys):
    with pytest.raises(CatalogError) as unknown:
        location(spark, "bronze.events")
    assert "not a table the catalog knows" in str(unknown.value), unknown.value
    assert "Spark's in-memory one" in str(unknown.value) and "spark.sql.catalogImplementation=hive" in str(unknown.value)
    assert "SQLQueryContextLogger" not in capsys.readouterr().err  # PySpark's JSON dump of the caught error


def test_what_counts_as_a_name():
    for name in ("bronze.events", "main.sales.orders", "`my-cat`.sales.orders", "default.t"):
        assert is_name(name), name
    for path in ("orders", "s3://lake/sales/orders", "/data/sales.orders", "./sales.orders", "a.b.c.d", "sales/x.y"):
        assert not is_name(path), path


REGISTER = """
from pyspark.sql import SparkSession
import sys
spark = SparkSession.builder.getOrCreate()
spark.sql("CREATE DATABASE bronze")
spark.sql("CREATE DATABASE ops")
spark.sql(f"CREATE TABLE bronze.orders USING delta LOCATION '{sys.argv[1]}'")
spark.sql(f"CREATE TABLE ops.inventory USING delta LOCATION '{sys.argv[2]}'")
spark.sql("CREATE VIEW bronze.recent_orders AS SELECT * FROM bronze.orders")
"""


@pytest.mark.delta_jars
def test_tables_registered_with_deltas_jars_resolve_in_a_run_without_them(spark, tmp_path):
    """README's recipe: register once where Delta's jars are (Delta checks the format), and every run
    reaches the tables by name, with or without the jars, through the metastore (here Hive's, in Derby)."""
    orders = tmp_path / "lake" / "orders"
    write_deltalake(str(orders), pa.table({"id": [1, 2]}))
    inventory = inventory_of(spark, tmp_path / "lake", tmp_path)
    metastore = (f"--conf spark.sql.catalogImplementation=hive --conf spark.sql.warehouse.dir={tmp_path / 'warehouse'} "
                 f"--driver-java-options -Dderby.system.home={tmp_path / 'derby'}")
    with_jars = (f"--jars {JARS} --conf spark.sql.extensions={DELTA_EXTENSION} "
                 f"--conf spark.sql.catalog.spark_catalog={DELTA_CATALOG}")
    env = {k: v for k, v in os.environ.items() if k != "PYSPARK_SUBMIT_ARGS"}
    registered = subprocess.run([sys.executable, "-c", REGISTER, orders.as_uri(), Path(inventory).as_uri()], cwd=tmp_path,
                                env={**env, "PYSPARK_SUBMIT_ARGS": f"{with_jars} {metastore} pyspark-shell"},
                                capture_output=True, text=True, timeout=300)
    assert registered.returncode == 0, registered.stderr[-3000:]

    done = subprocess.run([sys.executable, "-m", "vacuum_jobs", "--inventory-table", "ops.inventory", "--database",
                           "bronze", "--dry-run", "--report", str(tmp_path / "report.json")], cwd=tmp_path,
                          env={**env, "PYSPARK_SUBMIT_ARGS": f"{metastore} pyspark-shell"}, capture_output=True, text=True,
                          timeout=300)

    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    tables = {t["name"]: t for t in json.loads((tmp_path / "report.json").read_text())["tables"]}
    assert tables["bronze.orders"]["status"] == "dry_run" and tables["bronze.orders"]["table"] == orders.as_uri()
    assert tables["bronze.recent_orders"]["status"] == "skipped"
