"""``make bench``: every benchmark in one session, one table of figures.

Job 1's ingestion at its default size; job 2's dry-run plan on each log shape at 1M objects
(50 tables), on the same 1M objects in 500 tables, and on 3M objects (150 tables), each next
to its bare Spark baseline and the ``deltalake`` loop, warm in this process and cold (a fresh
``python -m vacuum_jobs`` process per round, its session start apart, next to the bare program
in a fresh process of its own: benchmarks.cold); then
job 2 cold on plan-only lakes of 1M objects (benchmarks.scale), and of 10M with ``--large``; the
ORC delivery against Parquet (2M rows, 10M with ``--large``), the audit chain at 500,000 rows and
the erasure request documents (benchmarks.erasure_request), each target of #52 printed last with
its ratio; and 100,000 S3 deletes paced per prefix against a run-wide cap, on a store that throttles
each prefix (benchmarks.delete_pacing, #67's targets). About an hour and a quarter on 2 cores, most of it building the lakes; ``--skip-3m``
leaves out the 3M-object lake.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from benchmarks import audit_chain, delete_pacing, erasure_request, ingest_throughput, scale, vacuum_planning

# The lakes the planning targets are measured on: label -> vacuum_planning.run() arguments.
FIFTY_TABLES, FIVE_HUNDRED_TABLES = "1M, checkpointed", "1M in 500 tables, checkpointed"
LAKES: dict[str, dict[str, Any]] = {
    FIFTY_TABLES: {"shape": "checkpoint"},
    "1M, three large commits": {"shape": "commits"},
    "1M, 40 small commits a table": {"shape": "small-commits"},
    FIVE_HUNDRED_TABLES: {"shape": "checkpoint", "tables": 500, "files_per_table": 2_000},
}
LARGE_LAKES: dict[str, dict[str, Any]] = {"3M, checkpointed": {"shape": "checkpoint", "tables": 150}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-3m", action="store_true", help="leave out the 3M-object lake")
    parser.add_argument("--large", action="store_true",
                        help="add the plan-only 10M-object lakes of benchmarks.scale (about half an hour more)")
    args = parser.parse_args()
    ingest = ingest_throughput.run()
    orc = ingest_throughput.run_orc(10_000_000 if args.large else 2_000_000, rounds=2)
    chain = audit_chain.run(500_000)
    erasure = erasure_request.run()
    chosen = LAKES if args.skip_3m else {**LAKES, **LARGE_LAKES}
    lakes = {label: vacuum_planning.run(**kwargs) for label, kwargs in chosen.items()}
    scaled = scale.run_all(args.large, rounds=2)
    deletes = delete_pacing.run()

    print(f"\nmachine: {os.cpu_count()} cores; same session; what is compared runs in turn, best of three rounds each")
    rows = [
        ("job 1: rows ingested", f"{ingest['rows']:,}"),
        ("job 1: bare Spark Parquet read+write", f"{ingest['bare_parquet_copy_s']:.1f} s"),
        ("job 1: contract rows written alone (the floor)",
         f"{ingest['contract_write_s']:.1f} s (ratio {ingest['ratio_contract_write']:.2f})"),
        ("job 1: ingestion, MD5 verified", f"{ingest['ingest_s']:.1f} s ({ingest['ingest_rows_per_s']:,.0f} rows/s)"),
        ("job 1: ratio ingestion / bare copy", f"{ingest['ratio']:.2f}"),
        ("job 1: ratio without checksums", f"{ingest['ratio_no_checksums']:.2f}"),
        ("job 1: ratio ingestion / floor", f"{ingest['ratio_over_floor']:.2f}"),
        ("job 1: steps of that ingestion", ingest_throughput.step_times(ingest["ingest_steps_s"])),
    ]
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")

    print(f"\njob 2: batch dry-run plan; S3 model = measured + {vacuum_planning.S3_PAGE_S * 1000:.0f} ms a ListObjectsV2 page")
    header = ("lake", "objects", "plan", "baseline", "plan/base", "deltalake loop", "loop/plan", "S3 model loop/plan",
              "cold job", "cold/loop", "S3 model loop/cold", "cold baseline", "cold/cold base", "chargeback")
    table = [header] + [(
        label, f"{f['files']:,}", f"{f['batch_dry_run_s']:.1f} s", f"{f['bare_spark_baseline_s']:.1f} s",
        f"{f['plan_over_baseline']:.2f}", f"{f['delta_rs_full_vacuum_loop_s']:.1f} s", f"{f['speedup']:.2f}",
        f"{f['s3_model_delta_rs_loop_s']:.1f} / {f['s3_model_batch_s']:.1f} s", f"{f['cold'].job_s:.1f} s",
        f"{f['cold'].job_s / f['delta_rs_full_vacuum_loop_s']:.2f}",
        f"{f['s3_model_delta_rs_loop_s'] / f['s3_model_cold_s']:.2f}", f"{f['cold_baseline'].job_s:.1f} s",
        f"{f['cold'].job_s / f['cold_baseline'].job_s:.2f}", f"{f['chargeback_s']:.1f} s",
    ) for label, f in lakes.items()]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for row in table:
        print("  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths))))
    for label, f in lakes.items():
        print(f"\n{label}: " + vacuum_planning.cold_lines(f))
    fifty, five_hundred = lakes[FIFTY_TABLES], lakes[FIVE_HUNDRED_TABLES]
    print(f"50 -> 500 tables at 1M objects: plan {fifty['batch_dry_run_s']:.1f} s -> "
          f"{five_hundred['batch_dry_run_s']:.1f} s ({five_hundred['batch_dry_run_s'] / fifty['batch_dry_run_s']:.2f}x)")
    print("\njob 2, cold, on plan-only lakes (benchmarks.scale):\n" + scale.report(scaled))

    print("\n#52's targets, each next to its baseline in this session:")
    for name, value, target in [
        ("audit chain: chained / plain append, 500,000 rows", f"{chain['ratio_append']:.2f}x "
         f"({chain['chained_s']:.1f} s / {chain['plain_s']:.1f} s)", "1.5x"),
        ("audit chain: --verify / one aggregating read", f"{chain['ratio_verify']:.2f}x "
         f"({chain['verify_s']:.1f} s / {chain['read_s']:.1f} s)", "3x"),
        ("chargeback / dry-run plan, 1M objects", f"{fifty['chargeback_s'] / fifty['batch_dry_run_s']:.2f}x "
         f"({fifty['chargeback_s']:.1f} s / {fifty['batch_dry_run_s']:.1f} s)", "1.5x"),
        ("erasure request document, demo lake, warm", f"{erasure['demo_s']:.2f} s", "5 s"),
        (f"{erasure['commits']} requests in one run / one", f"{erasure['ratio_all']:.2f}x "
         f"({erasure['all_s']:.1f} s / {erasure['one_s']:.1f} s)", "3x"),
        ("cold job / cold bare Spark, 50 tables", f"{fifty['cold'].job_s / fifty['cold_baseline'].job_s:.2f}x", "1.2x"),
        ("cold job / cold bare Spark, 500 tables",
         f"{five_hundred['cold'].job_s / five_hundred['cold_baseline'].job_s:.2f}x", "1.2x"),
        (f"ORC / Parquet ingestion, {orc['rows']:,} rows, JVM zone {orc['jvm_zone']}", f"{orc['ratio_orc']:.2f}x "
         f"({orc['orc_s']:.1f} s / {orc['parquet_s']:.1f} s)", "1.3x"),
    ]:
        print(f"  {name:<58} {value:<28} target: at most {target}")
    print("\n#67's deletes, 100,000 keys, each next to the run-wide cap of before in this session "
          "(spread: within 1.5x the floor and 10x faster than the cap; concentrated: within 1.5x the floor, "
          "fewer than 5 % of requests throttled once settled):")
    print("\n".join("  " + line for line in delete_pacing.report(deletes, 100_000)))


if __name__ == "__main__":
    main()
