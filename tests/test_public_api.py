"""What a user's code and editor see of the project: one error root for everything it raises on purpose,
and a Layout page (docs/layout.md) that names every module."""

from __future__ import annotations

import ast
import builtins
import importlib
import inspect
import pkgutil
from pathlib import Path

import pytest

import infra
import inventory_etl
import lake_reports
import lakeio
import vacuum_jobs
from lakeio.errors import HousekeepingError
from vacuum_jobs.targets import TargetsError, from_file

PACKAGES = (lakeio, inventory_etl, vacuum_jobs, lake_reports, infra)


def _modules():
    for package in PACKAGES:
        yield package
        for info in pkgutil.walk_packages(package.__path__, f"{package.__name__}."):
            if not info.name.endswith("__main__"):
                yield importlib.import_module(info.name)


def test_every_error_the_project_defines_has_one_root():
    errors = {obj for module in _modules() for _, obj in inspect.getmembers(module, inspect.isclass)
              if issubclass(obj, BaseException) and obj.__module__ == module.__name__
              and not obj.__name__.startswith("_")}  # a module's own retry signal never reaches a caller
    assert len(errors) >= 20
    assert not [e.__qualname__ for e in errors if not issubclass(e, HousekeepingError)]


@pytest.mark.parametrize("package", (inventory_etl, vacuum_jobs, lake_reports), ids=lambda p: p.__name__)
def test_each_job_package_exports_the_root(package):
    assert package.HousekeepingError is HousekeepingError and "HousekeepingError" in package.__all__


PUBLIC_FUNCTIONS = (inventory_etl.ingest, vacuum_jobs.vacuum, vacuum_jobs.restore, vacuum_jobs.purge,
                    lake_reports.chargeback, lake_reports.erasure, lake_reports.erasure_request)


@pytest.mark.parametrize("function", PUBLIC_FUNCTIONS, ids=lambda f: f.__name__)
def test_every_option_is_a_named_documented_keyword(function):
    """What ``help()`` and an editor show: no ``**settings``; every parameter typed and in Args."""
    parameters = inspect.signature(function).parameters
    assert not [p for p in parameters.values() if p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL)]
    assert list(parameters)[0] == "spark"
    assert all(p.annotation is not p.empty for p in parameters.values())
    doc = inspect.getdoc(function) or ""
    args = doc.split("Args:", 1)[-1].split("Returns:", 1)[0]
    assert "Returns:" in doc and not [name for name in parameters if f"\n    {name}:" not in f"\n{args}"]


# Table arguments, in the one order every job takes them (after spark, before what it acts on or asks).
TABLE_ORDER = ("audit_table", "inventory_table")


@pytest.mark.parametrize("function", (*PUBLIC_FUNCTIONS, lake_reports.erasure_requests, inventory_etl.inventory_snapshot),
                         ids=lambda f: f.__name__)
def test_the_jobs_speak_one_vocabulary_of_tables_and_durations(function):
    """The tables come first, audit before inventory; a duration says its unit, hours where Delta counts
    in hours (a retention, the inventory's age) and days for windows of days; minutes only for a run's own time
    (``max_minutes``, as the CLI's ``--max-minutes``: a maintenance window); milliseconds only for clocks."""
    parameters = inspect.signature(function).parameters
    positional = [n for n, p in parameters.items() if p.kind is p.POSITIONAL_OR_KEYWORD][1:]
    tables = [n for n in positional if n in TABLE_ORDER]
    assert positional[:len(tables)] == tables == [n for n in TABLE_ORDER if n in tables]
    numbers = [n for n, p in parameters.items() if {"int", "float"} & set(str(p.annotation).replace("|", " ").split())]
    for name in numbers:
        if any(word in name for word in ("retention", "age_", "older", "keep", "trend", "deadline", "window")):
            assert name.endswith("_hours" if "retention" in name or "age_" in name else "_days"), name
        assert not name.endswith("_seconds") and (not name.endswith("_minutes") or name == "max_minutes"), name
        assert not name.endswith("_ms") or name == "now_ms", name


def test_the_inventory_snapshot_takes_its_old_names_for_one_release(tmp_path):
    with pytest.warns(DeprecationWarning, match=r"inventory_snapshot\(table=\.\.\.\) is deprecated .* use inventory_table="), \
            pytest.raises(inventory_etl.InventoryUnavailable, match="no Delta table there"):
        inventory_etl.inventory_snapshot(None, table=str(tmp_path / "none"))  # type: ignore[arg-type]


def test_old_option_names_still_work_for_one_release_and_say_so():
    with pytest.warns(DeprecationWarning, match=r"force_retention=\.\.\.\) is deprecated .* use enforce_retention_duration="), \
            pytest.warns(DeprecationWarning, match=r"retain_hours=\.\.\.\) is deprecated .* use retention_hours="):
        options = vacuum_jobs.VacuumOptions("s3://b/inventory", retain_hours=0, force_retention=True)
    assert (options.retention_hours, options.enforce_retention_duration) == (0, False)
    with pytest.warns(DeprecationWarning):  # unset as before: the retention check stays on
        assert vacuum_jobs.VacuumOptions("s3://b/inventory", force_retention=None).enforce_retention_duration is True
    with pytest.raises(TypeError, match="retain_hours= and retention_hours="):
        vacuum_jobs.VacuumOptions("s3://b/inventory", retain_hours=0, retention_hours=1)
    assert "retain_hours" not in inspect.signature(vacuum_jobs.vacuum).parameters
    spec = "- table: s3://b/t\n  retain_hours: 12\n"
    assert [t.retention_hours for t in from_file("tables.yaml", spec)] == [12]
    with pytest.raises(TargetsError, match="retention_hours and its old name retain_hours"):
        from_file("tables.yaml", spec + "  retention_hours: 12\n")


def test_the_layout_page_names_every_module_under_its_folder():
    """One line per module in docs/layout.md: a module added without its line fails here."""
    root = Path(__file__).resolve().parents[1]
    text = (root / "docs" / "layout.md").read_text()
    block = text[text.index("# Layout"):].split("```")[1]
    named, folder = set(), None
    for line in block.splitlines():
        if line and not line.startswith(" "):
            folder = line.split()[0]
        elif line.strip() and line.split()[0].endswith(".py"):
            named.add(f"{folder}{line.split()[0]}")
    on_disk = {str(path.relative_to(root)) for package in ("lakeio", "inventory_etl", "vacuum_jobs", "lake_reports",
                                                           "infra", "demo", "benchmarks")
               for path in (root / package).rglob("*.py") if path.name not in ("__init__.py", "__main__.py")}
    assert on_disk - named == set(), "modules the Layout does not name"
    assert named - on_disk == set(), "the Layout names modules that do not exist"


# Where a builtin error is raised on purpose and never reaches a caller as it is: the log parsers'
# ValueErrors become a table's refusal with their words (lakeio.deltalog, uris), the checks of our own
# writes guard invariants of our code, a keyword given twice is Python's own TypeError, a local delete
# signals a file already gone to its own handler, and human_bytes marks a line it cannot reach.
INTERNAL_RAISES = {"lakeio/deltalog/gates.py": {"ValueError"}, "lakeio/deltalog/keep.py": {"ValueError"},
                   "lakeio/deltalog/policy.py": {"ValueError"}, "lakeio/store/uris.py": {"ValueError"},
                   "lakeio/tables/write.py": {"ValueError", "TypeError"}, "lakeio/deprecation.py": {"TypeError"},
                   "vacuum_jobs/local_deletes.py": {"FileNotFoundError"}, "lakeio/text.py": {"AssertionError"}}


def test_no_shipped_module_raises_a_bare_builtin_error_at_its_caller():
    """An option out of range, a file that does not parse, a move the store refused: each a
    HousekeepingError (InvalidOption, BadInputFile, ...), keeping its builtin base."""
    root = Path(__file__).resolve().parents[1]
    builtin = {name for name, obj in vars(builtins).items() if isinstance(obj, type) and issubclass(obj, Exception)}
    found = []
    for package in PACKAGES:
        for path in sorted(Path(package.__path__[0]).rglob("*.py")):
            relative = path.relative_to(root).as_posix()
            allowed = INTERNAL_RAISES.get(relative, set())
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and \
                        isinstance(node.exc.func, ast.Name) and node.exc.func.id in builtin - allowed:
                    found.append(f"{relative}:{node.lineno} raises {node.exc.func.id}")
    assert not found, found


@pytest.mark.parametrize("bad", [
    lambda: vacuum_jobs.VacuumOptions("s3://b/inventory", min_coverage=2),
    lambda: vacuum_jobs.VacuumOptions("s3://b/inventory", max_inventory_age_hours=0),
    lambda: vacuum_jobs.DeleteSettings(batch_size=0),
    lambda: vacuum_jobs.DeleteSettings(keys_per_second=0),
], ids=["min_coverage", "max_inventory_age_hours", "batch_size", "keys_per_second"])
def test_an_option_out_of_range_is_a_housekeeping_error_naming_it(bad):
    from lakeio.errors import InvalidOption

    with pytest.raises(InvalidOption) as raised:
        bad()
    assert isinstance(raised.value, (HousekeepingError, ValueError)) and raised.value.args[0].split()[0].isidentifier()
