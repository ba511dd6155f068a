"""``python -m demo.warmup``: write the JVM class-data archive that makes cold processes start sooner.

The workload is the demo in miniature, in a scratch folder: a small lake, its inventory ingested,
a dry-run vacuum with an audit table, a chargeback, an erasure answer; so the archive holds the classes
the jobs load. About a minute, once per Java and PySpark install (see lakeio.spark.jvm_archive).
"""

from __future__ import annotations

import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

from lakeio.spark import jvm_archive

WORKLOAD = ["-m", "demo.warmup", "--workload"]


def workload() -> int:
    """Each job once over a small lake; then the JVM's clean exit (which writes the archive)."""
    from demo.lake import build_lake
    from inventory_etl.ingestion import IngestInventory
    from inventory_etl.producer import objects_in_folder, write_delivery
    from lake_reports.charges import Chargeback, ChargebackOptions
    from lake_reports.erasure_evidence import ErasureEvidence, ErasureOptions
    from lakeio.spark.session import get_spark
    from vacuum_jobs.batch_vacuum import vacuum
    from vacuum_jobs.targets import Discover

    with tempfile.TemporaryDirectory(prefix="warmup-") as scratch:
        folder = Path(scratch)
        lake = build_lake(folder / "lake")
        manifest = write_delivery(str(folder / "dest"), "lake", "daily", objects_in_folder(str(folder / "lake")),
                                  datetime.now(timezone.utc))
        spark = get_spark("demo.warmup")
        inventory, audit = str(folder / "inventory"), str(folder / "audit")
        IngestInventory(spark, inventory, {"lake": str(folder / "lake")}).execute([manifest])
        vacuum(spark, inventory, Discover(), dry_run=True, audit_table=audit)
        Chargeback(spark, ChargebackOptions(inventory)).execute()
        ErasureEvidence(spark, ErasureOptions(audit, inventory)).execute([str(sorted(lake.stale_debris)[0])])
        return jvm_archive.exit_jvm(spark)


def main(argv: list[str]) -> int:
    if argv == ["--workload"]:
        return workload()
    archive = jvm_archive.create(WORKLOAD)
    if archive is None:
        print("no archive written: the workload or its JVM failed (see above)", file=sys.stderr)
        return 1
    print(f"{archive} ({archive.stat().st_size / 2 ** 20:.0f} MiB): driver JVMs launched by the jobs start from it; "
          f"{jvm_archive.SETTING}=off turns it off")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
