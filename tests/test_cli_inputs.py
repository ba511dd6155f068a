"""No value of any command line's place options ends in a traceback, and none deletes a thing.

The class closed here is "a bad place given to a command": every option of every command that names a
table, a folder or a file (found from the parsers by what their metavar says they take, so that a new
option is covered the day it is added) is given each kind of bad value: empty, blank, a file where a
folder or table is meant, a folder where a file is meant, a scheme no file system serves, a place the
process may not write (but for the options that only name a place: a file asked about, the
root a bucket's paths are written under), an object-store URI that names no store (one slash, no bucket). Each
gives exit status 1 (2 for usage), at most one ``error:`` line, which names the value or its option in our words
(never a library's), and no traceback; the lake's files are all still there afterwards. Where the value alone
shows the problem, Spark is never started. A tables file's content is tried the same way.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from deltalake import DeltaTable

import inventory_etl.cli
import lake_reports.cli
import lakeio.cli
import vacuum_jobs.cli
from demo.lake import build_lake
from lakeio.cli import PLACE_METAVARS
from tests.lakes import inventory_of, vacuum
from vacuum_jobs.deletes import DeleteSettings

pytestmark = pytest.mark.slow  # a few commands reach Spark before they refuse


def _subparser(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return commands.choices[name]


# Each command: its entry point, its parser, and a valid command line the bad value goes into ({names} filled
# from the lake); an option the bad value replaces is dropped from it first, with its value.
COMMANDS: dict[str, tuple[Callable, Callable[[], argparse.ArgumentParser], list[str]]] = {
    "inventory_etl": (inventory_etl.cli.main, inventory_etl.cli.build_parser,
                      ["--inventory-table", "{work}/inventory-2", "--manifest", "{manifest}"]),
    "vacuum_jobs": (vacuum_jobs.cli.main, vacuum_jobs.cli.build_parser,
                    ["--inventory-table", "{inventory}", "--table", "{table}", "--dry-run", "--no-history"]),
    "vacuum_jobs restore": (vacuum_jobs.cli.main,
                            lambda: vacuum_jobs.cli.build_undo_parser(vacuum_jobs.cli.UndoCommand.RESTORE),
                            ["restore", "--audit-table", "{work}/audit", "--run-id", "{run}"]),
    "vacuum_jobs purge": (vacuum_jobs.cli.main,
                          lambda: vacuum_jobs.cli.build_undo_parser(vacuum_jobs.cli.UndoCommand.PURGE),
                          ["purge", "--audit-table", "{work}/audit", "--older-than-days", "7"]),
    "vacuum_jobs record": (vacuum_jobs.cli.main, vacuum_jobs.cli.build_record_parser,
                           ["record", "--audit-table", "{work}/audit"]),
    "lake_reports chargeback": (lake_reports.cli.main,
                                lambda: _subparser(lake_reports.cli.build_parser(), "chargeback"),
                                ["chargeback", "--inventory-table", "{inventory}", "--out", "{work}/charges"]),
    "lake_reports erasure": (lake_reports.cli.main, lambda: _subparser(lake_reports.cli.build_parser(), "erasure"),
                             ["erasure", "--audit-table", "{work}/audit", "--inventory-table", "{inventory}",
                              "--path", "{deleted}"]),
    "lake_reports erasure request": (lake_reports.cli.main,
                                     lambda: _subparser(lake_reports.cli.build_parser(), "erasure"),
                                     ["erasure", "--audit-table", "{work}/audit", "--inventory-table", "{inventory}",
                                      "--request-id", "req-1", "--commit", "{table}@3", "--out", "{work}/documents"]),
}


# The erasure report's exit status is 1 on this lake (its tables are over the deadline: never purged): the
# bad values below must still be what each refusal names.
GOOD_STATUS = {"lake_reports erasure": 1, "lake_reports erasure request": 1}


def _place_options() -> list[tuple[str, str, str]]:
    """(command, option, metavar) for every option whose metavar says it names a place."""
    found = []
    for command, (_, parser, _) in COMMANDS.items():
        for action in parser()._actions:
            if action.option_strings and action.metavar in PLACE_METAVARS:
                found.append((command, action.option_strings[0], action.metavar))
    return found


def _denied_place(tmp: Path) -> str | None:
    """A folder this process may not write in: a mode-0 folder, or for root a file system that refuses
    everyone (/sys); None where there is none."""
    if os.geteuid() != 0:
        locked = tmp / "locked"
        locked.mkdir(exist_ok=True)
        locked.chmod(0)
        return str(locked / "x")
    try:
        os.mkdir(probe := f"/sys/lake-housekeeping-{uuid.uuid4().hex[:8]}")
    except PermissionError:
        return f"{probe}/x"
    os.rmdir(probe)
    return None


BAD_KINDS = ("empty", "blank", "wrong kind", "unknown scheme", "denied", "no bucket", "one slash", "no bucket name")
# The kinds the value alone shows: refused before any Spark starts.
SEEN_IN_THE_VALUE = ("empty", "blank", "wrong kind", "one slash", "no bucket name")
# Words of the libraries underneath, which a user cannot act on: never what a refusal says.
LIBRARY_WORDS = ("Generic error", "Generic S3 error", "Kernel error", "Unable to recognise URL", "Py4JJavaError")


def _bad_value(kind: str, metavar: str, work: Path) -> str | None:
    if kind == "empty":
        return ""
    if kind == "blank":
        return "  "
    if kind == "wrong kind":  # a folder where a file is meant, a file where a folder or table is
        return str(work / "a-folder") if PLACE_METAVARS[metavar] == "file" else str(work / "a-file.txt")
    if kind == "unknown scheme":
        return "nope://bucket/place"
    if kind == "no bucket":  # without hadoop-aws on the classpath: a store this Spark cannot reach
        return f"s3a://no-such-bucket-{uuid.uuid4().hex[:8]}/place"
    if kind == "one slash":
        return "s3:/bucket/place"
    if kind == "no bucket name":
        return "s3a://"
    return _denied_place(work)


@pytest.fixture(scope="module")
def lake(spark, tmp_path_factory):
    work = tmp_path_factory.mktemp("cli-inputs")
    built = build_lake(work / "bucket")
    inventory = inventory_of(spark, work / "bucket", work)
    (work / "a-folder").mkdir()
    (work / "a-file.txt").write_text("not a table\n")
    manifest = next(str(p) for p in (work / "inventory-dest").rglob("manifest.json"))
    table = str(built.tables["orders"])
    run = vacuum(spark, inventory, [table], dry_run=False, audit_table=str(work / "audit"), history=False,
                 delete=DeleteSettings(trash=str(work / "trash")))
    assert run.ok, run.summary()
    deleted = DeltaTable(str(work / "audit")).to_pyarrow_table(filters=[("action", "=", "deleted")])["path"][0].as_py()
    names = {"work": str(work), "inventory": inventory, "manifest": manifest, "table": table, "run": run.run_id,
             "deleted": deleted}
    return work, names


def _files(root: Path) -> dict[str, int]:
    return {str(p): p.stat().st_size for p in root.rglob("*") if p.is_file()}


def _argv(command: str, option: str, value: str, names: dict) -> list[str]:
    base = [arg.format(**names) for arg in COMMANDS[command][2]]
    parser = COMMANDS[command][1]()
    exclusive = {a.option_strings[0] for group in parser._mutually_exclusive_groups for a in group._group_actions
                 if option in (b.option_strings[0] for b in group._group_actions) and a.option_strings}
    kept, skip = [], False
    for i, arg in enumerate(base):
        if skip:
            skip = False
            continue
        if arg == option or arg in exclusive:
            skip = i + 1 < len(base) and not base[i + 1].startswith("--")
            continue
        kept.append(arg)
    if option == "--path-root":
        value = f"lake={value}"
    if option == "--commit":
        value = f"{value}@1"
    return [*kept, option, value]


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_each_command_line_the_bad_values_go_into_is_good(lake, command, capsys):
    """So that each refusal below is the bad value's, not the command line's."""
    work, names = lake
    status = COMMANDS[command][0]([arg.format(**names) for arg in COMMANDS[command][2]])
    out, err = capsys.readouterr()
    assert status == GOOD_STATUS.get(command, 0) and "error:" not in err, (out, err)


@pytest.fixture
def sessions(monkeypatch) -> list[str]:
    """The Spark sessions the commands open (each command line's module's own ``open_session``, called through)."""
    opened: list[str] = []
    for module in (inventory_etl.cli, vacuum_jobs.cli, lake_reports.cli):
        def recorded(app, *args, _open=module.open_session, **kwargs):
            opened.append(app)
            return _open(app, *args, **kwargs)
        monkeypatch.setattr(module, "open_session", recorded)
    return opened


def _said(out: str, err: str) -> tuple[list[str], str]:
    errors = [line for line in err.splitlines() if line.startswith("error:") or ": error: " in line]
    return errors, "\n".join(errors) or out


@pytest.mark.parametrize("kind", BAD_KINDS)
@pytest.mark.parametrize(("command", "option", "metavar"), _place_options())
def test_a_bad_place_is_one_error_line_and_deletes_nothing(lake, command, option, metavar, kind, capsys, monkeypatch,
                                                           sessions):
    work, names = lake
    monkeypatch.chdir(work)  # a value taken for a relative path lands here, not in the work tree
    value = _bad_value(kind, metavar, work)
    if value is None:
        pytest.skip("no place on this machine refuses this process")
    if kind in ("denied", "no bucket") and option in ("--path", "--path-root"):
        pytest.skip(f"{option} names a place it never reads or writes: any name is a good one")
    before = _files(work / "bucket")
    argv = _argv(command, option, value, names)
    try:
        status = COMMANDS[command][0](argv)
    except SystemExit as exit_:
        status = exit_.code
    out, err = capsys.readouterr()
    errors, said = _said(out, err)
    assert "Traceback" not in out + err, (argv, err)
    assert status in (1, 2), (argv, status, out, err)
    assert len(errors) <= 1, (argv, errors)
    spelt = {value.strip(), value.strip().replace("s3a://", "s3://")} - {""}  # reports spell s3a:// as s3://
    assert option in said or any(v in said for v in spelt), (argv, out, err)
    assert not any(words in said for words in LIBRARY_WORDS), (argv, said)
    seen = kind in SEEN_IN_THE_VALUE and not (kind == "wrong kind" and PLACE_METAVARS[metavar] == "any")
    assert not (seen and sessions), (argv, sessions)
    assert _files(work / "bucket") == before, argv


TABLES_FILES = {  # a tables file's content, and what its refusal names
    "not YAML": ("tables: [s3://lake/t\n  - oops: [\n", "not valid YAML"),
    "not a list": ("tables: 3\n", "expected a list of tables"),
    "a URI with one slash": ("- s3:/lake/t\n", "s3:/lake/t"),
    "a URI without a bucket": ("- table: s3a://\n", "s3a://"),
    "an unknown key": ("- table: s3://lake/t\n  retain: 3\n", "unknown key"),
    "not JSON": ("[{", "not valid JSON"),
}


@pytest.mark.parametrize("case", sorted(TABLES_FILES))
def test_a_bad_tables_file_is_one_usage_line_before_any_spark(lake, case, capsys, sessions, tmp_path):
    work, names = lake
    content, named = TABLES_FILES[case]
    tables = tmp_path / ("tables.json" if case == "not JSON" else "tables.yaml")
    tables.write_text(content)
    with pytest.raises(SystemExit) as exit_:
        vacuum_jobs.cli.main(["--inventory-table", names["inventory"], "--tables-file", str(tables), "--dry-run"])
    out, err = capsys.readouterr()
    errors, said = _said(out, err)
    assert exit_.value.code == 2 and len(errors) == 1 and "Traceback" not in err, err
    assert str(tables) in said and named in said, said
    assert not sessions


@pytest.fixture(scope="module")
def silent_endpoint():
    """An S3 endpoint that takes connections and never answers: a listening socket nobody reads."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(64)
        yield f"http://127.0.0.1:{server.getsockname()[1]}"


ON_S3 = {  # each command line, its tables on S3 behind the silent endpoint
    "inventory_etl": ["--inventory-table", "s3://ops/inventory", "--inventory-root", "s3://dest/prefix"],
    "vacuum_jobs": ["--inventory-table", "s3://ops/inventory", "--discover", "--audit-table", "s3://ops/audit", "--apply"],
    "vacuum_jobs restore": ["restore", "--audit-table", "s3://ops/audit", "--run-id", "r", "--apply"],
    "vacuum_jobs purge": ["purge", "--audit-table", "s3://ops/audit", "--older-than-days", "7", "--apply"],
    "vacuum_jobs record": ["record", "--audit-table", "s3://ops/audit"],
    "lake_reports chargeback": ["chargeback", "--inventory-table", "s3://ops/inventory", "--out", "{work}/charges-s3"],
    "lake_reports erasure": ["erasure", "--audit-table", "s3://ops/audit", "--inventory-table", "s3://ops/inventory",
                             "--path", "s3://lake/t/part-0.parquet"],
}


@pytest.mark.parametrize("command", sorted(ON_S3))
def test_an_endpoint_that_does_not_answer_is_named_within_a_minute(lake, command, silent_endpoint, capsys, monkeypatch):
    """Every command line asks its endpoint first; the main job waits the default time for it, the others a second
    (the question for them is that they ask, not how long the shared check waits)."""
    work, names = lake
    monkeypatch.setenv("AWS_ENDPOINT_URL", silent_endpoint)
    if command != "vacuum_jobs":
        monkeypatch.setattr(lakeio.cli, "ENDPOINT_SECONDS", 1)
    started = time.monotonic()
    status = COMMANDS[command][0]([arg.format(**names) for arg in ON_S3[command]])
    elapsed = time.monotonic() - started
    out, err = capsys.readouterr()
    errors, said = _said(out, err)
    assert status == 1 and len(errors) == 1 and "Traceback" not in err, (out, err)
    assert f"the endpoint at {silent_endpoint.removeprefix('http://')} does not answer" in said, said
    assert elapsed < 60, f"{command} took {elapsed:.0f} s to say so"


@pytest.mark.parametrize(("launched", "shown"), [
    ("jobs/run_vacuum_jobs.py", "spark-submit ... run_vacuum_jobs.py"),  # infra.package's entry script
    ("bin/vacuum-jobs", "vacuum-jobs"),  # the console script
    ("vacuum_jobs/__main__.py", "python -m vacuum_jobs"),  # python -m runs the package's __main__
])
def test_usage_lines_name_the_command_as_it_was_started(launched, shown, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", [launched])
    with pytest.raises(SystemExit):
        vacuum_jobs.cli.main(["--no-such-flag"])
    assert capsys.readouterr().err.startswith(f"usage: {shown} "), shown
