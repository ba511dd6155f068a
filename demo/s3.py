"""``python -m demo.s3``: the demo's lake and its S3 Inventory delivery, on the S3 endpoint of the environment.

For the README's daily cycle on one machine (moto's server as S3): creates the three buckets the cycle
names, ``lake`` (versioned, as restore needs), ``ops`` (our own tables) and ``inventory-dest`` (where S3
Inventory delivers); builds the demo's lake and puts it under ``s3://lake/warehouse/``; writes the
all-versions inventory S3 would deliver of it under ``s3://inventory-dest/prefix/``, each object's last
modification the one the lake's back-dated history gave it (objects copied up today would all be too
recent to vacuum). The endpoint and credentials are the environment's (``AWS_ENDPOINT_URL``,
``AWS_ACCESS_KEY_ID``, ...), as for every job.
"""

from __future__ import annotations

import sys
import tempfile
import time
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

from demo.lake import build_lake
from inventory_etl.producer import objects_in_folder, write_delivery

LAKE, OPS, DESTINATION = "lake", "ops", "inventory-dest"
WAREHOUSE, PREFIX = "warehouse", "prefix"
STARTING_SECONDS = 30  # how long the endpoint may take to answer at first


def main() -> int:
    import boto3
    from botocore.exceptions import EndpointConnectionError

    client = boto3.session.Session().client("s3")
    for _ in range(STARTING_SECONDS * 10):  # a server just started in the background may not answer yet
        try:
            client.list_buckets()
            break
        except EndpointConnectionError:
            time.sleep(0.1)
    for bucket in (LAKE, OPS, DESTINATION):
        client.create_bucket(Bucket=bucket)
    client.put_bucket_versioning(Bucket=LAKE, VersioningConfiguration={"Status": "Enabled"})
    with tempfile.TemporaryDirectory(prefix="demo-s3-") as scratch:
        lake = build_lake(Path(scratch) / "lake")
        listed = []
        for found in objects_in_folder(str(lake.bucket_dir)):
            key = f"{WAREHOUSE}/{found.key}"
            put = client.put_object(Bucket=LAKE, Key=key, Body=(lake.bucket_dir / found.key).read_bytes())
            listed.append(replace(found, key=key, e_tag=put["ETag"].strip('"'), version_id=put["VersionId"]))
        manifest = write_delivery(str(Path(scratch) / "delivery"), LAKE, "daily", listed, datetime.now(timezone.utc),
                                  versioned=True, destination_bucket=DESTINATION, destination_prefix=PREFIX)
        delivery = Path(manifest).parents[1]  # <destination>/lake/daily
        for path in delivery.rglob("*"):
            if path.is_file():
                client.upload_file(str(path), DESTINATION, f"{PREFIX}/{LAKE}/daily/{path.relative_to(delivery)}")
    print(f"buckets {LAKE} (versioned), {OPS}, {DESTINATION}; {len(lake.tables)} Delta tables under "
          f"s3://{LAKE}/{WAREHOUSE}/ ({len(listed)} objects); their inventory under s3://{DESTINATION}/{PREFIX}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
