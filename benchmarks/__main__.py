"""``make bench``: every benchmark at its default size, one table of figures."""

from __future__ import annotations

import os

from benchmarks import ingest_throughput, vacuum_planning


def main() -> None:
    ingest = ingest_throughput.run()
    vacuum = vacuum_planning.run()
    rows = [
        ("job 1: rows ingested", f"{ingest['rows']:,}"),
        ("job 1: bare Spark Parquet read+write", f"{ingest['bare_parquet_copy_s']:.1f} s"),
        ("job 1: contract rows written alone (the floor)",
         f"{ingest['contract_write_s']:.1f} s (ratio {ingest['ratio_contract_write']:.2f})"),
        ("job 1: ingestion, MD5 verified", f"{ingest['ingest_s']:.1f} s ({ingest['ingest_rows_per_s']:,.0f} rows/s)"),
        ("job 1: ratio ingestion / bare copy", f"{ingest['ratio']:.2f}"),
        ("job 1: ratio without checksums", f"{ingest['ratio_no_checksums']:.2f}"),
        ("job 2: tables / files", f"{vacuum['tables']} / {vacuum['files']:,}"),
        ("job 2: batch dry-run plan", f"{vacuum['batch_dry_run_s']:.1f} s ({vacuum['candidates']:,} candidates)"),
        ("job 2: bare Spark baseline, same candidates", f"{vacuum['bare_spark_baseline_s']:.1f} s"),
        ("job 2: ratio plan / baseline", f"{vacuum['plan_over_baseline']:.2f}"),
        ("job 2: deltalake FULL vacuum dry run, looped",
         f"{vacuum['delta_rs_full_vacuum_loop_s']:.1f} s ({vacuum['delta_rs_candidates']:,} candidates)"),
        ("job 2: ratio deltalake loop / batch", f"{vacuum['speedup']:.2f}"),
        ("chargeback of the same lake", f"{vacuum['chargeback_s']:.1f} s"),
        ("job 2: S3 list pages, deltalake loop vs batch",
         f"{vacuum['s3_list_pages_listing_vacuum']:,} vs {vacuum['s3_list_pages_batch']:,}"),
        (f"job 2: S3 model (measured + {vacuum_planning.S3_PAGE_S * 1000:.0f} ms a page), loop vs batch",
         f"{vacuum['s3_model_delta_rs_loop_s']:.1f} s vs {vacuum['s3_model_batch_s']:.1f} s"),
    ]
    print(f"\nmachine: {os.cpu_count()} cores")
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")


if __name__ == "__main__":
    main()
