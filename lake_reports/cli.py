"""``python -m lake_reports``: storage chargeback and erasure evidence.

``chargeback`` writes CSV, JSON and a self-contained HTML report for one inventory date;
``erasure`` answers when files were physically deleted and which tables can take longer
than the deadline. Exit status: 0 when all is well; 1 when something could not be
answered or priced, the split did not add up, or a table is over the erasure deadline;
2 for usage errors.
"""

from __future__ import annotations

import argparse
import os
import sys

from lake_reports import html_report
from lake_reports.charges import Chargeback, ChargebackError, ChargebackOptions
from lake_reports.erasure_document import ErasureRequest
from lake_reports.erasure_evidence import CommitQuestion, ErasureError, ErasureEvidence, ErasureOptions
from lakeio.audit.contract import verify_chain
from lakeio.cli import (
    add_common_arguments,
    add_version_argument,
    as_flag,
    check_report_destination,
    iso_date,
    make_folder,
    one_line_errors,
    open_session,
    place,
    program,
    report_out,
)
from lakeio.prices import PriceError, load_prices
from lakeio.spark.catalog import CatalogError, resolve
from lakeio.tables.read import TableNotFound

OUTPUT_FILES = ("chargeback.json", "chargeback_cells.csv", "chargeback_tables.csv", "chargeback_trend.csv",
                "chargeback.html")


def add_pins_argument(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--pins-table", metavar="TABLE", type=place("TABLE"),
                        help=f"the pins table (python -m vacuum_jobs pin writes it): {what}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=program("lake_reports"),
                                     description="Storage chargeback and erasure evidence from the inventory "
                                                 "table, the Delta logs and the vacuum audit table.")
    add_version_argument(parser)
    commands = parser.add_subparsers(dest="command", required=True)

    charge = commands.add_parser("chargeback", help="who stores what, where, at what cost",
                                 description="Attribute every object of one inventory date to the Delta table "
                                             "that contains it, split by live / time travel / pinned / reclaimable / "
                                             "log / other / noncurrent / delete markers and storage class, "
                                             "with monthly cost and growth.")
    charge.add_argument("--inventory-table", required=True, metavar="TABLE", type=place("TABLE"),
                        help="the inventory Delta table (job 1)")
    charge.add_argument("--inventory-date", type=iso_date, metavar="YYYY-MM-DD", help="default: the newest")
    charge.add_argument("--prices", metavar="FILE", type=place("FILE"),
                        help="JSON or YAML {storage class: USD per GB-month}; overrides the built-in list prices")
    charge.add_argument("--trend-days", type=int, default=ChargebackOptions.trend_days, metavar="N",
                        help="trend over the inventory dates of the last N days (default: %(default)d)")
    charge.add_argument("--out", required=True, metavar="DIR", type=place("DIR", local=True),
                        help="a local folder to write " + ", ".join(OUTPUT_FILES) + " to")
    add_pins_argument(charge, "what only their versions read is charged as pinned")
    add_common_arguments(charge)

    erasure = commands.add_parser("erasure", help="when was a file physically erased; worst case per table",
                                  description="Per table: worst-case time from a delete to physical erasure, "
                                              "and live files carrying deletion vectors. Per file asked: when "
                                              "a vacuum deleted it, by which run, or why not yet.")
    erasure.add_argument("--audit-table", required=True, metavar="TABLE", type=place("TABLE"),
                         help="vacuum_jobs' --audit-table")
    erasure.add_argument("--inventory-table", metavar="TABLE", type=place("TABLE"),
                         help="the inventory Delta table (not with --verify)")
    erasure.add_argument("--verify", action="store_true",
                         help="only check the audit table's hash chain: name the first row that does not match")
    erasure.add_argument("--head", metavar="SHA256",
                         help="with --verify: a chain head an evidence document quoted, which must still be there")
    erasure.add_argument("--path", action="append", default=[], metavar="URI", type=place("URI"),
                         help="a file to answer for; repeat")
    erasure.add_argument("--commit", action="append", default=[], metavar="TABLE@VERSION", type=place("TABLE@VERSION"),
                         help="every file the commit VERSION of TABLE removed (e.g. a DELETE of a person's rows)")
    erasure.add_argument("--table", action="append", metavar="TABLE", type=place("TABLE"),
                         help="tables to report on (default: every table in the newest inventory or the audit)")
    erasure.add_argument("--deadline-days", type=float, default=ErasureOptions.deadline_days, metavar="D",
                         help="flag tables whose worst-case time to erasure exceeds this (default: %(default)g)")
    erasure.add_argument("--report", metavar="FILE.json", type=place("FILE.json"),
                         help="write the JSON report here (a local path or a URI)")
    erasure.add_argument("--request-id", action="append", default=[], metavar="REQ",
                         help="write the request's evidence document (JSON and HTML) to --out; repeat, one per "
                              "--commit, paired in order: the requests of one run share one read of the lake")
    erasure.add_argument("--out", metavar="DIR", type=place("DIR", local=True),
                         help="with --request-id: a local folder for erasure-REQ.json and .html (default: the current one)")
    add_pins_argument(erasure, "a file a pinned version reads is named with the pin that blocks its erasure")
    add_common_arguments(erasure)
    return parser


@one_line_errors
def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    return chargeback(parser, args) if args.command == "chargeback" else erasure(parser, args)


def chargeback(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    try:
        prices = load_prices(args.prices)
    except PriceError as exc:
        parser.error(str(exc))
    try:
        options = ChargebackOptions(args.inventory_table, args.inventory_date, prices, args.trend_days,
                                    pins_table=args.pins_table)
    except ValueError as exc:
        parser.error(as_flag(exc))
    spark = open_session("lake_reports.chargeback", parser, args)
    try:
        result = Chargeback(spark, options).execute()
    except (ChargebackError, CatalogError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if why := make_folder(args.out):
        print(f"error: {why}", file=sys.stderr)
        return 1
    paths = [os.path.join(args.out, name) for name in OUTPUT_FILES]
    result.write_json(paths[0])
    result.write_csv(*paths[1:4])
    with open(paths[4], "w") as out:
        out.write(html_report.render(result))
    print(result.summary())
    print("wrote " + ", ".join(paths))
    return 0 if result.ok else 1


def erasure(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    if args.verify:
        return verify(parser, args)
    if args.head:
        parser.error("--head goes with --verify")
    if not args.inventory_table:
        parser.error("--inventory-table is required (unless --verify)")
    try:
        options = ErasureOptions(args.audit_table, args.inventory_table, args.deadline_days, args.table,
                                 pins_table=args.pins_table)
    except ValueError as exc:
        parser.error(as_flag(exc))
    commits = []
    for item in args.commit:
        table, sep, version = item.rpartition("@")
        if not sep or not table or not version.isdigit():
            parser.error(f"--commit takes TABLE@VERSION, got {item!r}")
        commits.append(CommitQuestion(table, int(version)))
    if args.request_id:
        if len(commits) != len(args.request_id) or args.path or args.report or args.table:
            parser.error("each --request-id documents the --commit in its place (as many of each; no --path, "
                         "--table or --report: the documents go to --out)")
        return request_documents(parser, args, options, list(zip(args.request_id, commits)))
    if args.out:
        parser.error("--out goes with --request-id (the folder its documents go to)")
    spark = open_session("lake_reports.erasure", parser, args)
    if why := check_report_destination(spark, args.report):  # before the tables are read
        print(f"error: {why}", file=sys.stderr)
        return 1
    try:
        report = ErasureEvidence(spark, options).execute(args.path, commits)
    except (ErasureError, CatalogError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return report_out(spark, report, args.report)


def verify(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    if args.path or args.commit or args.table or args.report:
        parser.error("--verify checks the audit table only: it takes no --path, --commit, --table or --report")
    spark = open_session("lake_reports.erasure_verify", parser, args)
    try:
        check = verify_chain(spark, resolve(spark, args.audit_table), args.head)
    except (TableNotFound, CatalogError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(check.summary())
    return 0 if check.ok else 1


def request_documents(parser: argparse.ArgumentParser, args: argparse.Namespace, options: ErasureOptions,
                      requests: list[tuple[str, CommitQuestion]]) -> int:
    spark = open_session("lake_reports.erasure_request", parser, args)
    try:
        batch = ErasureRequest(spark, options).documents(requests)
    except (ErasureError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    folder = args.out or "."
    if why := make_folder(folder):
        print(f"error: {why}; no document was written", file=sys.stderr)
        return 1
    for document in batch.documents:
        base = os.path.join(folder, document.file_name())
        with open(base + ".json", "w") as out:
            out.write(document.to_json() + "\n")
        with open(base + ".html", "w") as out:
            out.write(document.to_html())
        print(document.summary())
        print(f"wrote {base}.json, {base}.html")
    for request_id, reason in batch.refused.items():
        print(f"error: request {request_id}: {reason}", file=sys.stderr)
    return 0 if batch.ok else 1
