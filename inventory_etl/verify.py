"""Checking that every data file a manifest lists is there, whole and unchanged.

Existence is a metadata call on the driver; sizes and MD5 sums are computed by Spark
tasks (``binaryFile`` + ``md5``), in one job for all deliveries of the run.
"""

from __future__ import annotations

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from inventory_etl.manifest import DeliveryError, Manifest
from lakeio import uris
from lakeio.storage import Storage


def verify_data_files(
    spark: SparkSession, storage: Storage, manifests: list[Manifest], check_md5: bool = True
) -> dict[str, DeliveryError]:
    """The first problem found per manifest URI; manifests absent from the result are fine."""
    problems: dict[str, DeliveryError] = {}
    present: list[str] = []
    for manifest in manifests:
        for data_file in manifest.files:
            if not storage.exists(data_file.uri):
                problems.setdefault(manifest.uri, DeliveryError(data_file.uri, "data file listed in the manifest is missing"))
            else:
                present.append(data_file.uri)
    if not present:
        return problems
    columns = [F.col("path"), F.col("length")]
    if check_md5:
        columns.append(F.md5(F.col("content")).alias("md5"))
    measured = {
        uris.canonical(row["path"]): row
        for row in spark.read.format("binaryFile").load(present).select(*columns).collect()
    }
    for manifest in manifests:
        if manifest.uri in problems:
            continue
        for data_file in manifest.files:
            row = measured.get(uris.canonical(data_file.uri))
            if row is None:
                problem = "data file could not be read"
            elif row["length"] != data_file.size:
                problem = f"size {row['length']} does not match the manifest's {data_file.size}"
            elif check_md5 and row["md5"] != data_file.md5:
                problem = f"MD5 {row['md5']} does not match the manifest's {data_file.md5}"
            else:
                continue
            problems[manifest.uri] = DeliveryError(data_file.uri, problem)
            break
    return problems
