"""Delta's Spark jars and Spark's S3 connector for the installed PySpark, fetched once with Maven.

``python -m infra.jvm_jars`` prints the jars (comma-separated, as ``spark-submit --jars`` takes
them) for the PySpark in this environment, fetching them first if the cache lacks them:

- ``delta-spark``, the release built for this Spark line (see :data:`DELTA_FOR_SPARK`; a line no
  Delta release supports gets the S3 connector alone);
- ``hadoop-aws`` at the version of the Hadoop client PySpark ships, with the AWS SDK it was built
  against.

Maven runs as the machine configures it (``~/.m2/settings.xml``, mirrors, proxies): no repository
is named here. The jars land in the user's cache folder, outside any work tree, one folder per
Spark line and pin; a jar Spark already ships (Scala, ANTLR, Jackson, ...) is left to Spark's copy.
A missing Maven or an unreachable repository ends in one line on stderr and exit status 1: the
jars-free path needs none of this.
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import escape

import pyspark

from lakeio.errors import HousekeepingError
from lakeio.spark import jvm_archive

# The delta-spark artifact made for each Spark line (its PyPI twin names the pyspark it supports).
# Spark 4.3 has no Delta release yet: there the S3 connector is fetched alone.
DELTA_FOR_SPARK = {
    "3.5": "io.delta:delta-spark_2.12:3.3.2",
    "4.0": "io.delta:delta-spark_4.0_2.13:4.4.0",
    "4.1": "io.delta:delta-spark_4.1_2.13:4.4.0",
    "4.2": "io.delta:delta-spark_4.2_2.13:4.4.0",
}
_VERSIONED_JAR = re.compile(r"^(?P<artifact>.+?)-(?P<version>\d[^-]*(?:-[A-Za-z0-9.]+)*)\.jar$")


class JarsUnavailable(HousekeepingError, RuntimeError):
    """The jars could not be fetched (no Maven, no repository, no such artifact)."""


@dataclass(frozen=True)
class JvmSide:
    """What the driver and executors of this PySpark need beyond its own jars."""

    spark_line: str  # "3.5", "4.2", ...
    delta: str | None  # group:artifact:version, or None where no Delta release fits the line
    hadoop_aws: str  # org.apache.hadoop:hadoop-aws:<the Hadoop client PySpark ships>

    @property
    def artifacts(self) -> list[str]:
        return [a for a in (self.delta, self.hadoop_aws) if a]

    @property
    def folder(self) -> Path:
        """One cache folder per line and pin: a changed pin never mixes with an older fetch."""
        digest = hashlib.sha256("|".join(self.artifacts).encode()).hexdigest()[:10]
        return jvm_archive.cache_dir() / "jars" / f"spark-{self.spark_line}-{digest}"


def spark_jars_dir() -> Path:
    return Path(os.environ.get("SPARK_HOME") or os.path.dirname(pyspark.__file__)) / "jars"


def for_installed_pyspark() -> JvmSide:
    """The pins for the PySpark this interpreter imports."""
    line = ".".join(pyspark.__version__.split(".")[:2])
    clients = sorted(spark_jars_dir().glob("hadoop-client-api-*.jar"))
    if not clients:
        raise JarsUnavailable(f"no hadoop-client-api jar in {spark_jars_dir()}: cannot tell which hadoop-aws fits")
    hadoop = clients[-1].name.removeprefix("hadoop-client-api-").removesuffix(".jar")
    return JvmSide(line, DELTA_FOR_SPARK.get(line), f"org.apache.hadoop:hadoop-aws:{hadoop}")


def jars(side: JvmSide | None = None) -> list[Path]:
    """The side's jars, fetched into the cache on first use."""
    side = side or for_installed_pyspark()
    done = side.folder / ".complete"
    if not done.is_file():
        _fetch(side)
        done.touch()
    return sorted(Path(p) for p in glob.glob(str(side.folder / "*.jar")))


def _pom(side: JvmSide) -> str:
    dependencies = "".join(
        "<dependency><groupId>{}</groupId><artifactId>{}</artifactId><version>{}</version></dependency>".format(
            *(escape(part) for part in artifact.split(":")))
        for artifact in side.artifacts)
    return ("<project xmlns='http://maven.apache.org/POM/4.0.0'><modelVersion>4.0.0</modelVersion>"
            "<groupId>local.lake-housekeeping</groupId><artifactId>jvm-side</artifactId><version>0</version>"
            f"<dependencies>{dependencies}</dependencies></project>")


def _fetch(side: JvmSide) -> None:
    """Maven copies the artifacts and their runtime dependencies, less what Spark ships, into the
    side's folder, through a staging folder so that a broken fetch leaves nothing half done."""
    mvn = shutil.which("mvn")
    if mvn is None:
        raise JarsUnavailable("Maven (mvn) is not installed: apt-get install maven, or put the jars on the "
                              f"classpath yourself ({', '.join(side.artifacts)})")
    shipped = sorted({m.group("artifact") for j in spark_jars_dir().glob("*.jar") if (m := _VERSIONED_JAR.match(j.name))})
    side.folder.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".fetch-", dir=side.folder.parent) as staging:
        pom = Path(staging) / "pom.xml"
        pom.write_text(_pom(side))
        out = Path(staging) / "jars"
        command = [mvn, "-B", "-q", "-f", str(pom), "dependency:copy-dependencies", "-DincludeScope=runtime",
                   f"-DoutputDirectory={out}", f"-DexcludeArtifactIds={','.join(shipped)}"]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            errors = [line for line in done.stdout.splitlines() + done.stderr.splitlines() if "[ERROR]" in line]
            reason = errors[0].replace("[ERROR]", "").strip() if errors else f"exit status {done.returncode}"
            raise JarsUnavailable(f"Maven could not fetch {', '.join(side.artifacts)}: {reason[:400]}")
        shutil.rmtree(side.folder, ignore_errors=True)
        os.replace(out, side.folder)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra.jvm_jars", description=__doc__.split("\n\n")[0])
    parser.add_argument("--describe", action="store_true", help="say which artifacts this PySpark takes, fetch nothing")
    args = parser.parse_args(argv)
    try:
        side = for_installed_pyspark()
        if args.describe:
            print(f"spark {side.spark_line}: {', '.join(side.artifacts)} -> {side.folder}")
            return 0
        fetched = jars(side)
        if side.delta is None:  # said, once fetched: a failed fetch is one line of its own
            print(f"infra.jvm_jars: no Delta release is built for Spark {side.spark_line}: the S3 connector alone "
                  f"(Delta's jars exist for Spark {', '.join(sorted(DELTA_FOR_SPARK))})", file=sys.stderr)
        print(",".join(str(j) for j in fetched))
    except (JarsUnavailable, OSError) as exc:
        print(f"infra.jvm_jars: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
