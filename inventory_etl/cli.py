"""``python -m inventory_etl``: ingest S3 Inventory deliveries into the inventory Delta table.

Exit status: 0 when every delivery went in (or was superseded by a newer one of its
partition), 1 when any was refused (or none was found), 2 for usage errors.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time

from pyspark.sql import SparkSession

from inventory_etl.discovery import LOOKBACK_DAYS, discover
from inventory_etl.ingestion import IngestInventory
from inventory_etl.migrate import migrate
from lakeio.cli import (
    add_common_arguments,
    check_report_destination,
    iso_date,
    one_line_errors,
    open_session,
    place,
    program,
    report_out,
)
from lakeio.deprecation import warn_old_flags
from lakeio.inventory import PARTITION_COLUMNS, held_partitions
from lakeio.spark.catalog import CatalogError
from lakeio.store import uris
from lakeio.store.filesystem import Storage
from lakeio.text import first_line

_BUCKET_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=program("inventory_etl"),
        description="Ingest S3 Inventory deliveries (manifest.json + Parquet, ORC or CSV reports) into one "
                    f"Delta table partitioned by {', '.join(PARTITION_COLUMNS)}. Every URI may be a local path, "
                    "a file:// URI or any scheme the cluster can read (s3://, s3a://, ...).",
    )
    parser.add_argument("--inventory-table", required=True, metavar="TABLE", type=place("TABLE"),
                        help="the inventory Delta table to write (created on first run)")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--manifest", action="append", metavar="FILE", type=place("FILE"),
                        help="a delivery's manifest.json; repeat for several")
    source.add_argument("--inventory-root", metavar="DIR", type=place("DIR"),
                        help="destination prefix laid out as S3 delivers: <root>/<bucket>/<config>/<date>/manifest.json")
    source.add_argument("--migrate-from", metavar="TABLE", type=place("TABLE"),
                        help="instead of ingesting: copy an inventory table written by an earlier release "
                             "(partitioned by inventory_date, bucket) into --inventory-table in today's layout")
    parser.add_argument("--date", type=iso_date, metavar="YYYY-MM-DD",
                        help="with --inventory-root: the inventory date to ingest (default, per bucket and configuration: "
                             "every date of the look-back window the table does not hold yet, oldest first)")
    parser.add_argument("--lookback-days", type=int, default=LOOKBACK_DAYS, metavar="N",
                        help="with --inventory-root and no --date: look for late and re-delivered days within N days of "
                             f"each configuration's newest delivery (default {LOOKBACK_DAYS}); older days the table lacks "
                             "are reported, not ingested")
    parser.add_argument("--source-bucket", action="append", metavar="B",
                        help="with --inventory-root: only this source bucket; repeat for several")
    parser.add_argument("--config-id", action="append", metavar="C",
                        help="with --inventory-root: only this inventory configuration; repeat for several")
    parser.add_argument("--path-root", action="append", default=[], metavar="BUCKET=URI", type=place("BUCKET=URI"),
                        help="write path as URI/<key> instead of s3://BUCKET/<key> (mounts, s3a://, local copies)")
    parser.add_argument("--allow-older-delivery", action="store_true",
                        help="replace a partition even with an older delivery than the one it holds")
    parser.add_argument("--no-verify-checksums", action="store_true",
                        help="skip manifest.checksum and the data files' MD5 sums (sizes are still checked)")
    parser.add_argument("--keep-days", type=int, metavar="N",
                        help="keep the N newest inventory dates of each bucket and configuration (this run's included) "
                             "and drop their older partitions in the same commit (default: keep every date)")
    parser.add_argument("--report", "--summary-json", metavar="FILE.json", type=place("FILE.json"),
                        help="also write the run's JSON report here, a local path or a URI (--summary-json is its "
                             "old name, kept for one release)")
    add_common_arguments(parser)
    return parser


@one_line_errors
def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    warn_old_flags(sys.argv[1:] if argv is None else argv, {"--summary-json": "--report"})
    if args.keep_days is not None and args.keep_days < 1:
        parser.error("--keep-days must be at least 1")
    if not args.inventory_root and (args.date or args.source_bucket or args.config_id):
        parser.error("--date, --source-bucket and --config-id go with --inventory-root")
    if args.lookback_days < 1:
        parser.error("--lookback-days must be at least 1")
    path_roots = {}
    for item in args.path_root:
        bucket, sep, root = item.partition("=")
        if not sep or not _BUCKET_NAME.match(bucket) or not root.strip() or root != root.strip():
            parser.error(f"--path-root takes BUCKET=URI (a bucket name, no spaces), got {item!r}")
        path_roots[bucket] = root

    root_on_disk = args.inventory_root and uris.scheme_of(args.inventory_root) in (None, "file")
    if root_on_disk and not os.path.isdir(uris.local_path(uris.to_uri(args.inventory_root))):
        parser.error(f"--inventory-root {args.inventory_root}: no such folder")

    started = time.monotonic()
    spark = open_session("inventory_etl", parser, args)
    if args.migrate_from:
        return _migrate(spark, args.migrate_from, args.inventory_table)
    if why := check_report_destination(spark, args.report):
        print(f"error: {why}; nothing was ingested", file=sys.stderr)
        return 1
    notes = []
    if args.inventory_root:
        held = held_partitions(uris.to_uri(args.inventory_table))
        try:
            if not root_on_disk and not Storage(spark).exists(args.inventory_root):  # not an empty one: none at all
                print(f"error: --inventory-root {args.inventory_root}: nothing there (no such folder or prefix)",
                      file=sys.stderr)
                return 1
            found = discover(Storage(spark), args.inventory_root, args.date, args.source_bucket, args.config_id,
                             held, args.lookback_days)
        except Exception as exc:  # noqa: BLE001 - the store's reason, naming the root
            print(f"error: --inventory-root {args.inventory_root} cannot be listed: {first_line(exc)}", file=sys.stderr)
            return 1
        manifests = found.manifests
        for (bucket, config), newest in sorted(found.stale.items()):
            notes.append(f"no delivery of {bucket}/{config} on {args.date}; its newest is {newest}")
        for (bucket, config), days in sorted(found.too_old.items()):
            notes.append(f"{len(days)} day(s) of {bucket}/{config} from {days[0]} to {days[-1]} are not in the table and "
                         f"older than the look-back window (--lookback-days {args.lookback_days}): not ingested; "
                         "ingest one with --date, or widen the window")
        if not manifests:
            print(f"error: no deliveries found under {args.inventory_root}"
                  + (f" for {args.date}" if args.date else ""), file=sys.stderr)
            return 1
    else:
        manifests = args.manifest
    try:
        job = IngestInventory(spark, args.inventory_table, path_roots,
                              verify_checksums=not args.no_verify_checksums,
                              allow_older=args.allow_older_delivery, keep_days=args.keep_days)
    except CatalogError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    result = job.execute(manifests)
    result.notes.extend(notes)
    result.elapsed_seconds = time.monotonic() - started
    return report_out(spark, result, args.report)


def _migrate(spark: SparkSession, source: str, target: str) -> int:
    try:
        written = migrate(spark, source, target)
    except Exception as exc:  # an unreadable source, a target that is not ours: said, not raised
        print(f"error: cannot copy {source} into {target}: {first_line(exc)}", file=sys.stderr)
        return 1
    print(f"copied {written.rows:,} rows of {source} into {written.table_uri} ({written.files_added} files); "
          f"{source} is left as it was")
    return 0

