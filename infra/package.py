"""``python -m infra.package``: what spark-submit needs, in one folder.

    dist/lake_housekeeping-<version>.zip   the project's packages, for --py-files
    dist/jobs/run_inventory_etl.py         entry scripts: the file spark-submit runs
    dist/jobs/run_vacuum_jobs.py           (not named like the packages: a script's folder
    dist/jobs/run_lake_reports.py           comes first on sys.path and would shadow them)
    dist/requirements.txt                  third-party libraries the driver and executors need
    dist/log4j2.properties                 the driver's logging: the run's own lines and Spark's errors

Copy the folder to S3 (or the cluster) and run, for example,
``spark-submit --driver-java-options -Dlog4j2.configurationFile=log4j2.properties --py-files
lake_housekeeping-0.1.0.zip jobs/run_vacuum_jobs.py --help`` (without that option, the cluster's
own log settings apply).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import zipfile
from importlib import metadata
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ENTRY = '''"""spark-submit entry point for {package} (ship lake_housekeeping-*.zip with --py-files)."""
import sys

from {package}.cli import main

sys.exit(main())
'''
JOBS = ("inventory_etl", "vacuum_jobs", "lake_reports")
# Spark itself is the cluster's; the rest must be installed beside it.
CLUSTER_PROVIDES = ("pyspark",)
DISTRIBUTION = "lake-housekeeping"


def runtime_requirements() -> list[str]:
    """The installed project's own dependencies (no extras), less what the cluster provides.

    Read from the installed metadata rather than pyproject.toml: ``tomllib`` is Python 3.11+."""
    return [dep for dep in metadata.requires(DISTRIBUTION) or []
            if "extra ==" not in dep and not dep.startswith(CLUSTER_PROVIDES)]


def entry_script(job: str) -> str:
    return f"run_{job}.py"


def build(out: Path) -> dict[str, Path]:
    """Write the archive, the entry scripts and the requirements under ``out``; return their paths."""
    from lakeio import __version__
    from lakeio.spark.session import PROJECT_PACKAGES  # here, so that schedulers importing infra.daily need no Spark

    out.mkdir(parents=True, exist_ok=True)
    archive = out / f"lake_housekeeping-{__version__}.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zipped:
        for package in PROJECT_PACKAGES:
            for source in sorted((REPO / package).rglob("*.py")):
                zipped.write(source, source.relative_to(REPO).as_posix())
    built = {"archive": archive}
    (out / "jobs").mkdir(exist_ok=True)
    for job in JOBS:
        script = out / "jobs" / entry_script(job)
        script.write_text(ENTRY.format(package=job))
        built[job] = script
    logging = out / "log4j2.properties"
    shutil.copyfile(REPO / "lakeio" / "spark" / "log4j2.properties", logging)
    built["logging"] = logging
    requirements = out / "requirements.txt"
    requirements.write_text("".join(f"{dep}\n" for dep in runtime_requirements()))
    built["requirements"] = requirements
    return built


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra.package", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="dist", metavar="DIR", help="output folder (default: dist)")
    args = parser.parse_args(argv)
    for name, path in build(Path(args.out)).items():
        print(f"{name:<14} {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
