"""``python -m vacuum_jobs``: vacuum many Delta tables in one run from the inventory table;
``python -m vacuum_jobs restore`` / ``purge``: undo a run's deletes, or erase them for good;
``python -m vacuum_jobs record``: append runs the audit table could not take when they ran;
``python -m vacuum_jobs pin`` / ``unpin`` / ``pins``: the pins table (vacuum_jobs.pin_commands).

Exit status: 0 when every table was vacuumed, dry-run or skipped (every key restored or
purged, or kept by a purge only because a table needs it again: a warning); 1 when any table
was refused or failed, or a pin is broken, or the store refused a VACUUM START or END the run meant to write into a
table's log (any key left alone for another reason, or failed; a log a purge could not read); 2
for usage errors.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from lakeio.audit.contract import AuditAction, check_audit_table, record_kept
from lakeio.audit.journal import FOLDER, journal_of
from lakeio.cli import (
    add_common_arguments,
    as_flag,
    check_folder_writable,
    check_report_destination,
    iso_date,
    one_line_errors,
    open_session,
    place,
    program,
    read_text,
    report_out,
    write_lines,
)
from lakeio.deprecation import warn_old_flags
from lakeio.prices import PriceError, load_prices
from lakeio.spark.catalog import CatalogError, resolve
from lakeio.store import uris
from lakeio.store.filesystem import Storage
from lakeio.text import first_line
from vacuum_jobs import targets as table_targets
from vacuum_jobs.batch_vacuum import BatchVacuum, RunRefused, Tables
from vacuum_jobs.deletes import DeleteSettings
from vacuum_jobs.history import LOGGING_SETTING
from vacuum_jobs.options import VacuumOptions
from vacuum_jobs.pin_commands import PinCommand
from vacuum_jobs.pin_commands import main as pin_main
from vacuum_jobs.report import ReasonCode, RunReport
from vacuum_jobs.restore_purge import Undo, UndoCommand, UndoError, UndoOptions

RECORD_COMMAND = "record"
# The flag that acts on a table's refusal, said on the console after the summary (the report's words name
# no flag: a Python caller sets the option instead).
FLAG_HINTS = {
    ReasonCode.RETENTION_BELOW_TABLE: "--force-retention allows a retention shorter than a table's own",
    ReasonCode.INVENTORY_COVERAGE: "--min-coverage sets the share of a table's live files the inventory must list",
    ReasonCode.TRASH_UNUSABLE: "--trash must be on the tables' file system and outside every table",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=program("vacuum_jobs"),
        description="Vacuum many Delta tables in one Spark run by diffing the inventory table against each "
                    "table's transaction log, without listing data folders. Undo a run with "
                    "'python -m vacuum_jobs restore', erase what runs hid with 'python -m vacuum_jobs purge' "
                    "(each with --help).",
    )
    parser.add_argument("--inventory-table", required=True, metavar="TABLE", type=place("TABLE"),
                        help="the inventory Delta table (job 1): a URI or a catalog name")
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--table", action="append", metavar="TABLE", type=place("TABLE"),
                       help="a table root, or a catalog name (bronze.events); repeat for several")
    which.add_argument("--database", metavar="NAME",
                       help="every Delta table of this catalog database (its views and other tables are skipped, by name)")
    which.add_argument("--tables-file", metavar="FILE", type=place("FILE"),
                       help="YAML or JSON list of tables with optional retention_hours, enabled, dry_run, history per table "
                            "(a local path or a URI)")
    which.add_argument("--discover", action="store_true",
                       help="every Delta table root found in the inventory (keys with a _delta_log/ segment)")
    parser.add_argument("--include", action="append", metavar="GLOB", help="with --discover: keep roots matching (s3://, s3a:// and s3n:// "
                        "name one store, as do file:/x and /x)")
    parser.add_argument("--exclude", action="append", metavar="GLOB", help="with --discover: drop roots matching")
    parser.add_argument("--inventory-date", type=iso_date, metavar="YYYY-MM-DD",
                        help="inventory date to use (default: the newest)")
    parser.add_argument("--max-inventory-age-hours", type=float, default=VacuumOptions.max_inventory_age_hours,
                        metavar="H", help="refuse an inventory older than this (default: %(default)g)")
    parser.add_argument("--retention-hours", "--retain-hours", type=float, metavar="H",
                        help="retention (default: each table's delta.deletedFileRetentionDuration, 7 days if unset); "
                             "--retain-hours is its old name, kept for one release")
    parser.add_argument("--force-retention", action="store_true",
                        help="allow a retention shorter than the table's own setting")
    acting = parser.add_mutually_exclusive_group()
    acting.add_argument("--apply", action="store_true",
                        help="delete the candidates (default: a dry run, as restore, purge and the Python API's "
                             "vacuum() plan unless told to act)")
    acting.add_argument("--dry-run", action="store_true", help="plan and report; delete nothing (the default)")
    parser.add_argument("--report", metavar="FILE.json", type=place("FILE.json"),
                        help="write the JSON report here (a local path or a URI)")
    parser.add_argument("--list-candidates", metavar="FILE", type=place("FILE"),
                        help="write every file the dry-run tables would delete here, one path per line (a local path "
                             "or a URI); the summary names the first few per table, the report the first 100")
    parser.add_argument("--audit-table", metavar="TABLE", type=place("TABLE"),
                        help="append one row per planned file to this Delta table")
    parser.add_argument("--pins-table", metavar="TABLE", type=place("TABLE"),
                        help="keep every version the pins in this table pin ('python -m vacuum_jobs pin' writes it); "
                             "a tables file's keep_versions are kept too")
    parser.add_argument("--max-deletes", type=int, metavar="N",
                        help="delete at most N files this run: first the tables an earlier run with this --audit-table "
                             "left work in, then the tables whose candidates cost the most a month; the rest are "
                             "reported deferred, with what they hold and cost (exit 0)")
    parser.add_argument("--max-minutes", type=float, metavar="M",
                        help="start no delete once M minutes have passed since the run began: the files left are "
                             "deferred, their tables taken first by the next run with this --audit-table (exit 0)")
    parser.add_argument("--prices", metavar="FILE", type=place("FILE"),
                        help="JSON or YAML {storage class: USD per GB-month}, the chargeback's --prices file: what "
                             "--max-deletes orders the tables by; classes it names replace the built-in list prices")
    parser.add_argument("--full", action="store_true",
                        help="plan every table: without it, a run with --audit-table carries forward unread each table "
                             "its last plan found nothing to delete in and that has not changed since (vacuumed or "
                             "dry_run, reason_code unchanged)")
    parser.add_argument("--min-reclaimable-bytes", type=int, metavar="BYTES",
                        help="skip a table whose candidates hold fewer bytes than this, as not worth its vacuum "
                             "(default: 0, none skipped)")
    parser.add_argument("--min-coverage", type=float, default=VacuumOptions.min_coverage, metavar="F",
                        help="refuse a table when the inventory lists less than this share of its live files "
                             "older than the inventory (default: %(default)g)")
    parser.add_argument("--purge-versions", action="store_true",
                        help="versioned buckets: delete every listed version of each orphan key, "
                             "not just add a delete marker")
    parser.add_argument("--trash", metavar="DIR", type=place("DIR"),
                        help="local disks, HDFS, ABFS: move deleted files into <URI>/<run id>/ instead, on the "
                             "tables' own file system, so that 'restore' can bring them back and 'purge' erase them "
                             "(S3: turn on bucket versioning instead)")
    parser.add_argument("--delete-batch-size", type=int, default=DeleteSettings.batch_size, metavar="N",
                        help="keys per S3 DeleteObjects request (1-1000, default: %(default)d)")
    parser.add_argument("--delete-prefix-keys-per-second", type=float, default=DeleteSettings.prefix_keys_per_second,
                        metavar="K", help="S3 keys deleted per second in each table's prefix to start with; a SlowDown "
                                          "answer lowers that table's pace, answers without one raise it again "
                                          "(default: %(default)g, what S3 takes per prefix)")
    parser.add_argument("--delete-keys-per-second", type=float, metavar="K",
                        help="a cap on the S3 keys the whole run deletes per second, however many executors and "
                             "tables delete, where an account's limits demand one (default: none)")
    parser.add_argument("--s3-endpoint-url", metavar="URL", help="an S3-compatible endpoint (default: AWS)")
    history = parser.add_mutually_exclusive_group()
    history.add_argument("--history", action="store_const", const=True, dest="history",
                         help="write VACUUM START / END commits into the log of every table deleted in, as Delta's "
                              "own VACUUM does (DESCRIBE HISTORY shows them). By default Delta's rule decides: "
                              f"{LOGGING_SETTING} where the session sets it, else on for local disk, off on S3. On S3 "
                              "this flag attests that every writer of those tables commits with S3 conditional writes "
                              "(If-None-Match), never through a log store that overwrites or copies a commit file")
    history.add_argument("--no-history", action="store_const", const=False, dest="history",
                         help="write no VACUUM START / END commits into the tables' logs")
    add_common_arguments(parser)
    return parser


def build_undo_parser(command: UndoCommand) -> argparse.ArgumentParser:
    restoring = command == UndoCommand.RESTORE
    parser = argparse.ArgumentParser(
        prog=f"{program('vacuum_jobs')} {command}",
        description=("Bring back every file a vacuum run deleted, by removing the delete markers it added "
                     "(versioned S3 buckets) or moving files back from its --trash; a file written or deleted "
                     "again since is left alone and reported."
                     if restoring else
                     "Erase for good what vacuum runs kept more than N days ago (the versions their delete markers "
                     "hide, the files in their --trash) and nothing restored. Before erasing, the tables' logs are "
                     "read again: a file a table needs again (live again, removed again since the vacuum run, its "
                     "retention raised since the run beyond the retention the run used) is kept with a warning "
                     "naming the rule (exit 0); a log that cannot be read, a version current again or a failed "
                     "delete is left alone and exits 1."),
    )
    parser.add_argument("--audit-table", required=True, metavar="TABLE", type=place("TABLE"),
                        help="the vacuum runs' --audit-table")
    if restoring:
        parser.add_argument("--run-id", required=True, metavar="RUN", help="the vacuum run to undo (its report's run_id)")
    else:
        parser.add_argument("--older-than-days", required=True, type=float, metavar="N",
                            help="the undo window: purge deletes made more than N days ago")
        parser.add_argument("--inventory-table", metavar="TABLE", type=place("TABLE"),
                            help="before erasing, re-check what every Delta table this inventory shows needs "
                                 "(default: every table the audit names)")
        parser.add_argument("--pins-table", metavar="TABLE", type=place("TABLE"),
                            help="the pins table (python -m vacuum_jobs pin writes it): a hidden file a pinned version "
                                 "reads is not erased, and named with the restore that brings it back (exit 1)")
        parser.add_argument("--bypass-governance-retention", action="store_true",
                            help="also erase versions S3 Object Lock keeps in governance mode (the role needs "
                                 "s3:BypassGovernanceRetention); without it such versions are left, each reported "
                                 "with the date its lock ends (exit 1). Compliance mode and legal holds are never "
                                 "bypassed")
    parser.add_argument("--table", action="append", metavar="TABLE", type=place("TABLE"),
                        help="only this table; repeat for several")
    acting = parser.add_mutually_exclusive_group()
    acting.add_argument("--apply", action="store_true", help="act (default: a dry run saying what would change)")
    acting.add_argument("--dry-run", action="store_true", help="check and report only (the default)")
    parser.add_argument("--report", metavar="FILE.json", type=place("FILE.json"),
                        help="write the JSON report here (a local path or a URI)")
    parser.add_argument("--s3-endpoint-url", metavar="URL", help="an S3-compatible endpoint (default: AWS)")
    add_common_arguments(parser)
    return parser


def build_record_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=f"{program('vacuum_jobs')} {RECORD_COMMAND}",
        description="Append to the audit table the runs whose own append failed and whose rows were kept "
                    "(each vacuum, restore and purge does this first by itself, from the audit table's own "
                    f"{FOLDER}/ folder); the error of such a run names the folder and this command.",
    )
    parser.add_argument("--audit-table", required=True, metavar="TABLE", type=place("TABLE"),
                        help="the runs' --audit-table")
    parser.add_argument("--journal", metavar="DIR", type=place("DIR"),
                        help=f"where the runs are kept (default: the audit table's {FOLDER}/ folder)")
    add_common_arguments(parser)
    return parser


def record_main(argv: list[str]) -> int:
    parser = build_record_parser()
    args = parser.parse_args(argv)
    spark = open_session(f"vacuum_jobs.{RECORD_COMMAND}", parser, args)
    audit = resolve(spark, args.audit_table, must_be_delta=False)
    check_audit_table(spark, audit)
    storage = Storage(spark)
    try:
        kept_any = storage.exists(args.journal or journal_of(audit))
    except Exception as exc:  # noqa: BLE001 - the store's reason, naming the folder
        print(f"error: {args.journal or journal_of(audit)} cannot be read: {first_line(exc)}", file=sys.stderr)
        return 1
    if not kept_any:
        if args.journal:
            print(f"error: --journal {args.journal}: no such folder (no run was kept there)", file=sys.stderr)
            return 1
        if not storage.exists(uris.join(uris.to_uri(audit), "_delta_log")):
            print(f"error: {audit}: no audit table there, and no run kept beside it: check --audit-table",
                  file=sys.stderr)
            return 1
    recorded = record_kept(spark, audit, args.journal)
    print(f"appended {len(recorded.runs)} kept run(s) to {audit}" + "".join(f"\n  {r}" for r in recorded.runs))
    for problem in recorded.problems:
        print(f"error: {problem}", file=sys.stderr)
    return 1 if recorded.problems else 0


def undo_main(command: UndoCommand, argv: list[str]) -> int:
    parser = build_undo_parser(command)
    args = parser.parse_args(argv)
    if command == UndoCommand.PURGE and not args.older_than_days >= 0:
        parser.error("--older-than-days must be >= 0")
    options = UndoOptions(args.audit_table, args.table, dry_run=not args.apply,
                          delete=DeleteSettings(endpoint_url=args.s3_endpoint_url, bypass_governance_retention=getattr(
                              args, "bypass_governance_retention", False)),
                          inventory_table=getattr(args, "inventory_table", None),
                          pins_table=getattr(args, "pins_table", None))
    spark = open_session(f"vacuum_jobs.{command}", parser, args)
    if why := check_report_destination(spark, args.report):
        print(f"error: {why}; nothing was changed", file=sys.stderr)
        return 1
    try:
        undo = Undo(spark, options)
        report = undo.restore(args.run_id) if command == UndoCommand.RESTORE else undo.purge(args.older_than_days)
    except (UndoError, CatalogError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return report_out(spark, report, args.report)


@one_line_errors
def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in tuple(UndoCommand):
        return undo_main(UndoCommand(argv[0]), argv[1:])
    if argv and argv[0] == RECORD_COMMAND:
        return record_main(argv[1:])
    if argv and argv[0] in tuple(PinCommand):
        return pin_main(PinCommand(argv[0]), argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    if (args.include or args.exclude) and not args.discover:
        parser.error("--include and --exclude go with --discover")
    warn_old_flags(argv, {"--retain-hours": "--retention-hours"})
    try:
        delete = DeleteSettings(batch_size=args.delete_batch_size, keys_per_second=args.delete_keys_per_second,
                                prefix_keys_per_second=args.delete_prefix_keys_per_second,
                                endpoint_url=args.s3_endpoint_url, purge_versions=args.purge_versions,
                                trash=args.trash)
    except ValueError as exc:
        parser.error(as_flag(exc, "--delete-"))
    try:
        prices = load_prices(args.prices)
    except PriceError as exc:
        parser.error(f"--prices {exc}")
    try:
        options = VacuumOptions(
            inventory_table=args.inventory_table,
            inventory_date=args.inventory_date,
            max_inventory_age_hours=args.max_inventory_age_hours,
            retention_hours=args.retention_hours,
            enforce_retention_duration=not args.force_retention,
            dry_run=not args.apply,
            audit_table=args.audit_table,
            min_coverage=args.min_coverage,
            delete=delete,
            history=args.history,
            pins_table=args.pins_table,
            max_deletes=args.max_deletes,
            min_reclaimable_bytes=args.min_reclaimable_bytes or 0,
            max_minutes=args.max_minutes,
            prices=prices,
            full=args.full,
        )
    except ValueError as exc:
        parser.error(as_flag(exc, "--"))
    # What the command line alone shows is refused before Spark starts: a local tables file is read here.
    local_file = args.tables_file and uris.scheme_of(args.tables_file) in (None, "file")
    read = None if args.tables_file and not local_file else _targets(parser, args, None)
    if read:
        options = _with_file_budget(parser, args, options, read[1])
    spark = open_session("vacuum_jobs", parser, args)
    if not read:
        read = _targets(parser, args, spark)
        options = _with_file_budget(parser, args, options, read[1])
    tables = read[0]
    if why := (check_report_destination(spark, args.report)
               or check_report_destination(spark, args.list_candidates, "--list-candidates")
               or check_folder_writable(spark, args.trash, "--trash")):
        print(f"error: {why}; nothing was deleted", file=sys.stderr)
        return 1
    try:
        report = BatchVacuum(spark, options).execute(tables)
    except RunRefused as refusal:  # its summary is the error: why, once
        report = refusal.report
    status = report_out(spark, report, args.report, refused=report.refused is not None)
    for hint in sorted({FLAG_HINTS[t.reason_code] for t in report.tables if t.reason_code in FLAG_HINTS}):
        print(f"hint: {hint}", file=sys.stderr)
    if args.list_candidates and report.refused is None:
        try:
            write_lines(spark, args.list_candidates, _would_delete(report))
        except Exception as exc:  # noqa: BLE001 - whatever the store says, in one line
            print(f"error: --list-candidates {args.list_candidates} cannot be written: {first_line(exc)}",
                  file=sys.stderr)
            return 1
    return status


def _targets(parser: argparse.ArgumentParser, args: argparse.Namespace,
             spark: SparkSession | None) -> tuple[Tables, dict[str, Any]]:
    """The tables the command line names, and the budget a tables file gives; a tables file read from the local
    disk, or through ``spark`` (a remote one). Its problems are usage errors, naming the file."""
    try:
        if args.tables_file:
            text = read_text(spark, args.tables_file)
            return (table_targets.from_file(args.tables_file, text),
                    table_targets.budget_of_file(args.tables_file, text))
        return (table_targets.as_targets(args.table) if args.table
                else table_targets.Database(args.database) if args.database
                else table_targets.Discover(tuple(args.include or ()), tuple(args.exclude or ()))), {}
    except table_targets.TargetsError as exc:
        parser.error(str(exc))
    except Exception as exc:  # an unreadable --tables-file, local or remote
        parser.error(f"{args.tables_file}: {first_line(exc)}")


def _with_file_budget(parser: argparse.ArgumentParser, args: argparse.Namespace, options: VacuumOptions,
                      budget: dict[str, Any]) -> VacuumOptions:
    """``options`` with the tables file's budget where the command line gave none; a value out of range is a usage
    error naming the file and the key."""
    taken = {key: value for key, value in budget.items() if getattr(args, key) is None}
    try:
        return replace(options, **taken) if taken else options  # VacuumOptions checks each value
    except ValueError as exc:
        parser.error(f"{args.tables_file}: {exc}")


def _would_delete(report: RunReport) -> Iterator[str]:
    """Every path the run's dry-run tables would delete, by table and path, from the run's outcomes
    (read again: a dry run keeps none of them in memory)."""
    if report.outcomes is None:
        return iter(())
    rows = report.outcomes.where(F.col("action") == AuditAction.WOULD_DELETE.value).select("table_root", "path")
    return (row["path"] for row in rows.orderBy("table_root", "path").toLocalIterator())

