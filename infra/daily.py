"""The daily run as data: ingest the inventory, plan a dry run, then vacuum (once deletes are on),
then purge what vacuum runs hid longer ago than the undo window (when one is set).

The Airflow DAG (``airflow/lake_housekeeping_dag.py``) and the EMR steps
(``python -m infra.daily emr-steps``) are both built from :func:`daily_steps`, so they
run the same commands. Settings come from a YAML file (see ``daily.example.yaml``).

Exit status 1 of the dry run means some table was refused and is named in its report;
the real run refuses the same tables on its own and vacuums the rest, so the schedule
carries on past it. A failed ingestion stops the day.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from dataclasses import MISSING, dataclass, fields
from datetime import date, datetime, timezone
from typing import Any

import yaml

from infra.package import entry_script
from lakeio.errors import HousekeepingError

EMR_COMMAND_RUNNER = "command-runner.jar"


class SettingsError(HousekeepingError, ValueError):
    """The settings file cannot be used."""


@dataclass(frozen=True)
class DailySettings:
    artifacts: str  # folder written by ``python -m infra.package`` (local path or s3://)
    archive: str  # its archive's file name, e.g. lake_housekeeping-0.1.0.zip
    inventory_root: str  # s3://DESTINATION/PREFIX of the S3 Inventory deliveries
    inventory_table: str
    audit_table: str
    reports: str  # folder for the JSON reports (local path or s3://)
    tables_file: str | None = None  # per-table retention_hours / enabled / dry_run; default: --discover
    include: tuple[str, ...] = ()  # with discovery: table roots matching these globs
    deletes_enabled: bool = False  # safe rollout: dry runs only until an operator turns this on
    undo_window_days: float | None = None  # versioned buckets or a trash: purge deletes older than this
    spark_submit: tuple[str, ...] = ("spark-submit",)  # the command and its cluster options


@dataclass(frozen=True)
class Step:
    name: str
    argv: tuple[str, ...]
    refusals_are_reported: bool  # exit status 1 means "some unit refused, see the report", not a failure


def load_settings(path: str) -> DailySettings:
    try:
        with open(path) as source:
            doc = yaml.safe_load(source)
    except (OSError, yaml.YAMLError) as exc:
        raise SettingsError(f"{path}: {exc}") from None
    if not isinstance(doc, dict):
        raise SettingsError(f"{path}: expected a mapping of settings")
    known = {f.name for f in fields(DailySettings)}
    unknown = set(doc) - known
    if unknown:
        raise SettingsError(f"{path}: unknown setting(s) {sorted(unknown)}")
    missing = {f.name for f in fields(DailySettings) if f.default is MISSING} - set(doc)
    if missing:
        raise SettingsError(f"{path}: missing setting(s) {sorted(missing)}")
    if not isinstance(doc.get("deletes_enabled", False), bool):
        raise SettingsError(f"{path}: deletes_enabled must be true or false")
    window = doc.get("undo_window_days")
    if window is not None and (isinstance(window, bool) or not isinstance(window, (int, float)) or window < 0):
        raise SettingsError(f"{path}: undo_window_days must be a number of days >= 0")
    for name in ("include", "spark_submit"):
        if name in doc:
            if not isinstance(doc[name], list) or not all(isinstance(item, str) for item in doc[name]):
                raise SettingsError(f"{path}: {name} must be a list of strings")
            doc[name] = tuple(doc[name])
    return DailySettings(**doc)


def daily_steps(settings: DailySettings, day: str) -> list[Step]:
    """The day's commands, in order; ``day`` (YYYY-MM-DD, or a scheduler template) names the reports."""
    base = settings.artifacts.rstrip("/")
    reports = settings.reports.rstrip("/")

    def submit(job: str, *args: str) -> tuple[str, ...]:
        return (*settings.spark_submit, "--py-files", f"{base}/{settings.archive}",
                f"{base}/jobs/{entry_script(job)}", *args)

    which = (("--tables-file", settings.tables_file) if settings.tables_file
             else ("--discover", *[arg for glob in settings.include for arg in ("--include", glob)]))
    vacuum = ("--inventory-table", settings.inventory_table, *which, "--audit-table", settings.audit_table)
    steps = [
        Step("ingest_inventory", submit("inventory_etl", "--inventory-table", settings.inventory_table,
                                        "--inventory-root", settings.inventory_root,
                                        "--report", f"{reports}/{day}/ingest.json"), False),
        Step("vacuum_dry_run", submit("vacuum_jobs", *vacuum, "--dry-run",
                                      "--report", f"{reports}/{day}/vacuum-dry-run.json"), True),
    ]
    if settings.deletes_enabled:
        steps.append(Step("vacuum", submit("vacuum_jobs", *vacuum, "--apply",
                                           "--report", f"{reports}/{day}/vacuum.json"), True))
        if settings.undo_window_days is not None:
            steps.append(Step("purge", submit("vacuum_jobs", "purge", "--audit-table", settings.audit_table,
                                              "--older-than-days", f"{settings.undo_window_days:g}", "--apply",
                                              "--report", f"{reports}/{day}/purge.json"), True))
    return steps


def emr_steps(settings: DailySettings, day: str) -> list[dict[str, Any]]:
    """EMR ``add-steps`` JSON: a failed ingestion cancels the rest; the vacuum steps never block each other."""
    return [
        {
            "Name": f"lake-housekeeping {step.name} {day}",
            "ActionOnFailure": "CONTINUE" if step.refusals_are_reported else "CANCEL_AND_WAIT",
            "HadoopJarStep": {"Jar": EMR_COMMAND_RUNNER, "Args": list(step.argv)},
        }
        for step in daily_steps(settings, day)
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra.daily", description=__doc__.split("\n\n")[0])
    parser.add_argument("format", choices=("emr-steps", "commands"),
                        help="emr-steps: JSON for `aws emr add-steps --steps file://...`; commands: shell lines")
    parser.add_argument("--settings", required=True, metavar="FILE.yaml")
    parser.add_argument("--date", default=datetime.now(timezone.utc).date().isoformat(), metavar="YYYY-MM-DD",
                        help="the day the reports are named after (default: today, UTC)")
    args = parser.parse_args(argv)
    try:
        date.fromisoformat(args.date)
        settings = load_settings(args.settings)
    except (ValueError, SettingsError) as exc:
        parser.error(str(exc))
    if args.format == "emr-steps":
        print(json.dumps(emr_steps(settings, args.date), indent=2))
    else:
        for step in daily_steps(settings, args.date):
            print(f"# {step.name}\n{shlex.join(step.argv)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
