"""infra.jvm_jars: the pins for the installed PySpark, and a fetch that fails in one line, leaving nothing behind."""

from __future__ import annotations

import pyspark
import pytest

from infra import jvm_jars
from infra.jvm_jars import JarsUnavailable, JvmSide


@pytest.fixture
def empty_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_the_pins_follow_the_installed_pyspark():
    side = jvm_jars.for_installed_pyspark()
    line = ".".join(pyspark.__version__.split(".")[:2])
    assert side.spark_line == line and side.delta == jvm_jars.DELTA_FOR_SPARK.get(line)
    hadoop = side.hadoop_aws.rsplit(":", 1)[1]
    assert (jvm_jars.spark_jars_dir() / f"hadoop-client-api-{hadoop}.jar").is_file()  # the client PySpark ships
    scala = "2.12" if line == "3.5" else "2.13"
    assert all(a.split(":")[1].endswith(f"_{scala}") for a in side.artifacts if a.startswith("io.delta:"))


def test_without_maven_the_fetch_says_so_in_one_line(empty_cache, tmp_path, monkeypatch, capsys):
    (tmp_path / "bin").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    assert jvm_jars.main([]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("infra.jvm_jars: Maven (mvn) is not installed"), err
    assert not (empty_cache / "lake-housekeeping" / "jars").exists()


@pytest.mark.slow
def test_an_artifact_maven_cannot_fetch_is_named_and_leaves_no_folder(empty_cache):
    side = JvmSide("9.9", "io.delta:delta-spark_no-such-line_2.13:0.0.1", "org.apache.hadoop:hadoop-aws:0.0.1")
    with pytest.raises(JarsUnavailable, match="Maven could not fetch io.delta:delta-spark_no-such-line_2.13:0.0.1"):
        jvm_jars.jars(side)
    assert not side.folder.exists()
    assert [p.name for p in side.folder.parent.iterdir()] == []  # no staging folder left either


def test_the_default_environment_is_a_line_delta_is_built_for_and_the_demo_runs_on_its_jars():
    """`make` builds .venv on the Spark line of constraints/default.txt: one line, for which a Delta release
    exists; `make demo` fetches its jars and starts the demo with them (or says it could not)."""
    import re
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    pins = (root / "constraints" / "default.txt").read_text()
    major, minor, upper_major, upper_minor = re.search(r"^pyspark>=(\d+)\.(\d+),<(\d+)\.(\d+)$", pins, re.M).groups()
    assert (upper_major, int(upper_minor)) == (major, int(minor) + 1), "the default environment spans one Spark line"
    assert f"{major}.{minor}" in jvm_jars.DELTA_FOR_SPARK, f"no Delta release for the default Spark {major}.{minor}"
    recipe = subprocess.run(["make", "-n", "demo"], cwd=root, capture_output=True, text=True, timeout=60).stdout
    assert "-m infra.jvm_jars" in recipe and "--jars" in recipe and "-m demo" in recipe, recipe


def test_the_command_that_prints_the_jars_runs_from_any_folder(tmp_path):
    """README's `$(python -m infra.jvm_jars)`, from a folder that is not the repository's: the installed project."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-m", "infra.jvm_jars", "--describe"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120, env=env)
    assert done.returncode == 0 and done.stdout.startswith("spark "), done.stderr
