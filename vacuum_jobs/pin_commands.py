"""``python -m vacuum_jobs pin | unpin | pins``: a platform team's pins, kept in the pins table (docs/pins.md).

``pin`` refuses a version Delta can no longer read, or whose files are gone (the reason named), and
looks for its files again once its commit landed (a vacuum that read the pins before it may have been
deleting); ``unpin`` refuses one that is not pinned; ``pins`` lists the pins in force, each with its
state now (held, at risk with the date Delta's log cleanup may take it and what to set, broken,
expired). Exit status: 0, or 1 when refused or when a pin is broken; 2 for usage errors.
"""

from __future__ import annotations

import argparse
import getpass
import sys

from pyspark.sql import SparkSession

from lakeio.cli import add_common_arguments, open_session, place, program
from lakeio.deltalog.pinned import PinState, PinStatus, check_present, forecast, read_pinned
from lakeio.deltalog.replay import read_logs
from lakeio.errors import InvalidOption
from lakeio.pins import Pin, PinSource, instant_ms
from lakeio.store import uris
from lakeio.store.filesystem import Storage
from lakeio.tables.pins import PIN, UNPIN, append_pin_rows, pins_in_force
from lakeio.tables.read import TableNotFound
from lakeio.text import StrEnum
from lakeio.times import epoch_ms


class PinCommand(StrEnum):
    PIN = "pin"
    UNPIN = "unpin"
    PINS = "pins"


def build_parser(command: PinCommand) -> argparse.ArgumentParser:
    described = {
        PinCommand.PIN: "Pin a version of a Delta table (or the version current at an instant): every vacuum keeps "
                        "its files, and every run says whether Delta can still read it.",
        PinCommand.UNPIN: "Unpin a version: the next vacuum treats its files as any other's.",
        PinCommand.PINS: "List the pins in force, each with its state as a run would find it now.",
    }
    parser = argparse.ArgumentParser(prog=f"{program('vacuum_jobs')} {command}", description=described[command])
    parser.add_argument("--pins-table", required=True, metavar="TABLE", type=place("TABLE"),
                        help="the pins Delta table (created by the first pin); vacuum reads it with --pins-table")
    if command is PinCommand.PINS:
        parser.add_argument("table", nargs="?", metavar="TABLE", type=place("TABLE"), help="only this table's pins")
    else:
        parser.add_argument("table", metavar="TABLE@VERSION", type=place("TABLE@VERSION"),
                            help="the Delta table's root URI and the version, as s3://lake/sales@12"
                                 + (" (or the root alone, with --as-of)" if command is PinCommand.PIN else ""))
    if command is PinCommand.PIN:
        parser.add_argument("--as-of", metavar="ISO-8601",
                            help="pin the version current at this instant (UTC unless it says otherwise)")
        parser.add_argument("--reason", required=True, help="why it is kept (reports show it)")
        parser.add_argument("--expires", metavar="ISO-8601", help="after this, the pin no longer holds")
        parser.add_argument("--set-by", default=None, help="who pins it (default: the login name)")
    add_common_arguments(parser)
    return parser


def main(command: PinCommand, argv: list[str]) -> int:
    parser = build_parser(command)
    args = parser.parse_args(argv)
    now_ms = epoch_ms()
    wanted = wanted_pin(parser, args, command, now_ms)  # what the command line alone shows, before Spark starts
    spark = open_session(f"vacuum_jobs.{command}", parser, args)
    storage = Storage(spark)
    if command is PinCommand.PIN:
        assert wanted is not None
        read = read_pinned(spark, storage, [wanted], now_ms)
        check_present(storage, read)
        [status] = read.versions.statuses.values()
        if status.state is PinState.BROKEN:
            print(f"error: not pinned: {status.pin.label}: {status.why}", file=sys.stderr)
            return 1
        append_pin_rows(spark, args.pins_table, [status.pin], PIN, asked_as_of_ms=wanted.at_ms, now_ms=now_ms)
        check_present(storage, read)  # a vacuum that read the pins before this commit may have deleted meanwhile
        status = read.versions.statuses[status.pin.label]
        if status.state is PinState.BROKEN:
            print(f"error: pinned {status.pin.label}, but it is broken: {status.why}", file=sys.stderr)
            return 1
        print(f"pinned {status.pin.label} ({status.pin.reason}) in {uris.to_uri(args.pins_table)}")
        return 0
    try:
        pins = pins_in_force(spark, args.pins_table)
    except TableNotFound:
        print(f"error: no pins table at {args.pins_table} (the first 'pin' creates it)", file=sys.stderr)
        return 1
    if command is PinCommand.UNPIN:
        assert wanted is not None
        held = [p for p in pins if p.root == wanted.root and p.version == wanted.version]
        if not held:
            print(f"error: {wanted.label} is not pinned in {args.pins_table}", file=sys.stderr)
            return 1
        append_pin_rows(spark, args.pins_table, held, UNPIN, now_ms=now_ms)
        print(f"unpinned {wanted.label}")
        return 0
    shown = [p for p in pins if args.table is None or p.root == uris.table_root(args.table)]
    statuses = _statuses(spark, storage, shown, now_ms)
    for status in statuses:
        print(status.line())
    if not statuses:
        print("no pins in force" + (f" on {args.table}" if args.table else ""))
    return 1 if any(s.state is PinState.BROKEN for s in statuses) else 0


def wanted_pin(parser: argparse.ArgumentParser, args: argparse.Namespace, command: PinCommand, now_ms: int) -> Pin | None:
    """The pin a ``pin`` or ``unpin`` names; its problems are usage errors, said before Spark starts."""
    if command is PinCommand.PINS:
        return None
    try:
        table, at_sign, version_text = args.table.rpartition("@")
        if not at_sign or not version_text.isdigit():
            table, version_text = args.table, ""
        as_of = getattr(args, "as_of", None)
        if bool(version_text) == (as_of is not None):
            raise InvalidOption(f"{args.table}: name the version as TABLE@VERSION"
                                + (", or the table alone with --as-of" if command is PinCommand.PIN else ""))
        table, version = uris.to_uri(table), int(version_text) if version_text else None
        if command is PinCommand.UNPIN:
            return Pin(table, version=version, source=PinSource.PINS_TABLE)
        expires = None if args.expires is None else instant_ms(args.expires, "--expires")
        if expires is not None and expires <= now_ms:
            raise InvalidOption(f"--expires {args.expires}: that is past")
        at = None if as_of is None else instant_ms(as_of, "--as-of")
        if at is not None and at > now_ms:
            raise InvalidOption(f"--as-of {as_of}: that is in the future")
        if not args.reason.strip():
            raise InvalidOption("--reason: say why the version is kept")
        return Pin(table, version=version, at_ms=at, reason=args.reason, expires_ms=expires,
                   set_by=args.set_by or getpass.getuser(), source=PinSource.PINS_TABLE)
    except InvalidOption as exc:
        parser.error(str(exc))


def _statuses(spark: SparkSession, storage: Storage, pins: list[Pin], now_ms: int) -> list[PinStatus]:
    """Each pin's state now: its log read, its files looked for, its table's settings read for the cleanup's date."""
    read = read_pinned(spark, storage, pins, now_ms)
    check_present(storage, read)
    statuses = list(read.versions.statuses.values())
    if statuses:
        newest = read_logs(spark, storage, sorted({str(s.pin.root) for s in statuses}), check_paths=False)
        for status in statuses:
            state = newest.states.get(status.pin.root)
            forecast(status, state.configuration if state is not None else None, now_ms)
    return statuses
