"""The README's Python API example, run as written on the demo lake."""

from __future__ import annotations

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
from tests.conftest import README


def python_block(heading: str) -> str:
    section = README.read_text().split(heading, 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


@pytest.mark.slow
def test_the_readme_python_example_runs(spark, tmp_path):
    lake = build_lake(tmp_path / "demo-lake")
    rows_before = lake.row_counts()
    manifest = write_delivery(str(tmp_path / "deliveries"), "demo-lake", "daily",
                              objects_in_folder(str(lake.bucket_dir)), datetime.now(timezone.utc))
    names = {"spark": spark, "inventory": str(tmp_path / "inventory"), "manifest": manifest,
             "lake": f"file://{lake.bucket_dir}", "roots": {"demo-lake": str(lake.bucket_dir)},
             "audit": str(tmp_path / "audit")}

    exec(compile(python_block("## Python API"), str(README), "exec"), names)

    plan, done = names["plan"], names["done"]
    assert [t.status for t in plan.tables] == ["dry_run"]
    assert plan.tables[0].counts.candidate_files > 0 and plan.tables[0].counts.deleted_files == 0
    assert plan.outcomes.where("action = 'would_delete'").count() == plan.tables[0].counts.candidate_files
    assert sorted(Path(t.table).name for t in done.tables) == ["orders", "orders_backup"]
    assert {t.status for t in done.tables} == {"vacuumed"} and sum(t.counts.deleted_files for t in done.tables) > 0
    assert lake.row_counts() == rows_before
    assert names["charges"].balanced and names["evidence"].tables


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
    """Every ``python -m <module> ...`` line of the README's code blocks, continuation lines
    joined and ``[optional ...]`` parts left out, as argument lists."""
    commands = []
    for block in re.findall(r"^```[a-z]*\n(.*?)^```", README.read_text(), re.S | re.M):
        for command in re.findall(rf"^python -m {module}\b(.*?)(?<!\\)$", block.replace("\\\n", " "), re.M):
            commands.append(shlex.split(re.sub(r"\[[^\]]*\]", " ", command)))
    return commands


def test_every_readme_vacuum_command_parses():
    """The flags README shows for job 2, restore and purge are the ones the parsers take."""
    from vacuum_jobs.cli import UNDO_COMMANDS, build_parser, build_undo_parser

    commands = readme_commands("vacuum_jobs")
    assert {c[0] for c in commands if c and c[0] in UNDO_COMMANDS} == set(UNDO_COMMANDS)
    for argv in commands:
        if argv and argv[0] in UNDO_COMMANDS:
            build_undo_parser(argv[0]).parse_args(argv[1:])
        else:
            build_parser().parse_args(argv)
