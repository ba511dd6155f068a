"""What a user's code and editor see of the project: one error root for everything it raises on purpose."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import infra
import inventory_etl
import lake_reports
import lakeio
import vacuum_jobs
from lakeio.errors import HousekeepingError

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
