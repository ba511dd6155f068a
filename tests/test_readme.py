"""The commands and Python API example README and docs/ show, run or parsed as written."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest

import vacuum_jobs
from demo.lake import build_lake
from inventory_etl.producer import objects_in_folder, write_delivery
from tests.conftest import README, documentation
from tests.lakes import now_ms


def python_block(heading: str) -> str:
    section = documentation().split(heading, 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


# Runs the README's Python API block as written, in a fresh process, and prints what the tests check.
_RUN_EXAMPLE = """
import json, sys
names = json.loads(sys.argv[2])
exec(compile(open(sys.argv[1]).read(), "README.md", "exec"), names)
plan, done = names["plan"], names["done"]
print(json.dumps({
    "planned": [[t.status, t.counts.candidate_files, t.counts.deleted_files] for t in plan.tables],
    "would_delete": plan.outcomes.where("action = 'would_delete'").count(),
    "done": sorted([t.table, t.status, t.counts.deleted_files] for t in done.tables),
    "balanced": names["charges"].balanced, "evidence_tables": len(names["evidence"].tables),
    "ui_label": names["spark"].sparkContext.getLocalProperty("spark.job.description")}))
"""


def _plain_env() -> dict[str, str]:
    """The environment of a user's own script: no Python named for Spark's workers, no test settings."""
    return {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "PYSPARK_SUBMIT_ARGS")}


@pytest.mark.slow
def test_the_readme_python_example_runs_as_written_in_a_fresh_process(tmp_path):
    lake = build_lake(tmp_path / "demo-lake")
    rows_before = lake.row_counts()
    manifest = write_delivery(str(tmp_path / "deliveries"), "demo-lake", "daily",
                              objects_in_folder(str(lake.bucket_dir)), datetime.now(timezone.utc))
    names = {"inventory": str(tmp_path / "inventory"), "manifest": manifest, "lake": f"file://{lake.bucket_dir}",
             "roots": {"demo-lake": str(lake.bucket_dir)}, "audit": str(tmp_path / "audit")}
    block = tmp_path / "example.py"
    block.write_text(python_block("# Python API"))

    done = subprocess.run([sys.executable, "-c", _RUN_EXAMPLE, str(block), json.dumps(names)], cwd=tmp_path,
                          env=_plain_env(), capture_output=True, text=True, timeout=600)

    assert done.returncode == 0, done.stderr[-3000:]
    # Quiet: no progress bars, no warning about the _delta_log/ folders read on purpose.
    assert "[Stage " not in done.stderr and "All paths were ignored" not in done.stderr, done.stderr[-3000:]
    # Nor Spark's own start-up lines (log4j's default profile, the log level, Hadoop's native code).
    assert not re.search(r"log4j profile|Setting default log level|NativeCodeLoader| WARN |SLF4J", done.stderr), \
        done.stderr[-3000:]
    facts = json.loads(done.stdout.strip().splitlines()[-1])
    [(status, candidates, deleted)] = facts["planned"]
    assert status == "dry_run" and candidates > 0 and deleted == 0 and facts["would_delete"] == candidates
    assert [Path(t).name for t, _, _ in facts["done"]] == ["orders", "orders_backup"]
    assert {s for _, s, _ in facts["done"]} == {"vacuumed"} and sum(n for _, _, n in facts["done"]) > 0
    assert lake.row_counts() == rows_before
    assert facts["balanced"] and facts["evidence_tables"]
    assert facts["ui_label"] is None  # the script's own next query is not labelled with a job's last step


@pytest.mark.slow
def test_workers_without_the_package_are_named_before_any_job(tmp_path):
    """A session whose workers start a Python without the libraries: a clear error, nothing done."""
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True, timeout=120)
    script = ("from pyspark.sql import SparkSession\nimport vacuum_jobs\nspark = SparkSession.builder.getOrCreate()\n"
              f"vacuum_jobs.vacuum(spark, {str(tmp_path / 'inventory')!r}, [{str(tmp_path / 't')!r}])\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**_plain_env(), "PYSPARK_PYTHON": str(bare / "bin" / "python")})
    assert done.returncode != 0
    error = done.stderr.strip().splitlines()[-1]
    assert error.startswith("lakeio.spark.session.WorkerPythonError: Spark's Python workers run "), error
    assert f"{bare}/bin/python (Python " in error and "No module named 'pyarrow'" in error, error  # ours were shipped
    assert f"PYSPARK_PYTHON={sys.executable}" in error


@pytest.mark.slow
def test_the_readme_quick_test_command_collects_every_test():
    """README's `.venv/bin/pytest -m "not slow"`, as written (the venv's own pytest script, no
    PYTHONPATH): every test module imports. Collected only: running them is the suite's job."""
    command = re.search(r'`\.venv/bin/(pytest -m "not slow")`', README.read_text()).group(1)
    pytest_script = Path(sys.executable).with_name("pytest")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([str(pytest_script), *shlex.split(command)[1:], "--collect-only", "-q"],
                          cwd=README.parent, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "ERROR collecting" not in done.stdout, done.stdout[-3000:] + done.stderr[-2000:]
    assert re.search(r"\d+(/\d+)? tests? collected", done.stdout), done.stdout[-500:]


def test_the_python_api_never_vacuums_the_whole_lake_by_omission(spark, tmp_path):
    for tables in (None, "s3://lake/t", 42):
        with pytest.raises(vacuum_jobs.TargetsError, match="Discover"):
            vacuum_jobs.vacuum(spark, str(tmp_path / "inventory"), tables)
    with pytest.raises(TypeError):
        vacuum_jobs.vacuum(spark, str(tmp_path / "inventory"))  # type: ignore[call-arg]
    assert vacuum_jobs.VacuumOptions("inventory").dry_run  # deleting is said out loud
    with pytest.raises(ValueError, match="min_coverage"):
        vacuum_jobs.VacuumOptions("inventory", min_coverage=2)


def readme_commands(module: str) -> list[list[str]]:
    """Every ``python -m <module> ...`` line of the documentation's code blocks, continuation lines
    joined and ``[optional ...]`` parts left out, as argument lists."""
    commands = []
    for block in re.findall(r"^```[a-z]*\n(.*?)^```", documentation(), re.S | re.M):
        for command in re.findall(rf"^python -m {module}\b(.*?)(?<!\\)$", block.replace("\\\n", " "), re.M):
            commands.append(shlex.split(re.sub(r"\[[^\]]*\]", " ", command)))
    return commands


def test_every_readme_vacuum_command_parses():
    """The flags README shows for job 2, restore and purge are the ones the parsers take."""
    from vacuum_jobs import pin_commands
    from vacuum_jobs.cli import build_parser, build_undo_parser
    from vacuum_jobs.restore_purge import UndoCommand

    commands = readme_commands("vacuum_jobs")
    assert {c[0] for c in commands if c and c[0] in tuple(UndoCommand)} == set(UndoCommand)
    assert {c[0] for c in commands if c and c[0] in tuple(pin_commands.PinCommand)} == set(pin_commands.PinCommand)
    for argv in commands:
        if argv and argv[0] in tuple(UndoCommand):
            build_undo_parser(argv[0]).parse_args(argv[1:])
        elif argv and argv[0] in tuple(pin_commands.PinCommand):
            command = pin_commands.PinCommand(argv[0])
            parser = pin_commands.build_parser(command)
            pin_commands.wanted_pin(parser, parser.parse_args(argv[1:]), command, now_ms())  # checked before Spark
        else:
            build_parser().parse_args(argv)


def test_every_readme_reports_command_parses():
    """The flags README shows for chargeback, erasure, the request document and --verify are the ones the parser
    takes, in the combinations the command accepts."""
    from lake_reports.cli import build_parser

    commands = readme_commands("lake_reports")
    shown = {(argv[0], flag) for argv in commands for flag in ("--verify", "--request-id", "--commit") if flag in argv}
    assert {("erasure", "--verify"), ("erasure", "--request-id")} <= shown
    for argv in commands:
        args = build_parser().parse_args(argv)
        if args.command == "erasure":  # what erasure() itself checks before it starts Spark
            assert args.verify or args.inventory_table, argv
            assert not args.request_id or (len(args.commit) == len(args.request_id) and not args.path), argv


def test_every_readme_spark_submit_command_parses():
    """After the packaged entry script (jobs/run_<job>.py), a spark-submit line in README passes the job's own
    flags: they are the ones its parser takes."""
    from inventory_etl.cli import build_parser as inventory_parser
    from lake_reports.cli import build_parser as reports_parser
    from vacuum_jobs.cli import build_parser as vacuum_parser

    parsers = {"inventory_etl": inventory_parser, "vacuum_jobs": vacuum_parser, "lake_reports": reports_parser}
    seen = set()
    for block in re.findall(r"^```[a-z]*\n(.*?)^```", documentation(), re.S | re.M):
        for command in re.findall(r"^spark-submit\b(.*?)(?<!\\)$", block.replace("\\\n", " "), re.M):
            argv = shlex.split(re.sub(r"\[[^\]]*\]", " ", command))
            script = next(i for i, a in enumerate(argv) if re.search(r"jobs/run_\w+\.py$", a))
            job = re.search(r"run_(\w+)\.py$", argv[script]).group(1)
            parsers[job]().parse_args(argv[script + 1:])
            seen.add(job)
    assert {"inventory_etl", "vacuum_jobs"} <= seen


@pytest.mark.slow
def test_make_demo_runs_and_the_readme_shows_its_steps_as_numbered(tmp_path):
    """`make demo`'s program, run as a newcomer runs it (a fresh process, local Spark, local files),
    succeeds; every step heading of README's abridged transcript is the demo's heading of that number."""
    env = {**os.environ, "PYTHONPATH": str(README.parent)}
    env.pop("PYSPARK_SUBMIT_ARGS", None)
    done = subprocess.run([sys.executable, "-m", "demo"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    printed = dict(re.findall(r"^=== (\d+)\. (.*)$", done.stdout, re.M))
    shown = re.findall(r"^=== (\d+)\. (.*)$", README.read_text(), re.M)
    assert shown and all(printed.get(number) == text for number, text in shown), (shown, printed)
