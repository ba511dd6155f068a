"""README's "A daily cycle on S3", run as written: its moto block, then its cycle, in a copy of the tree.

The blocks are copied out of README.md and run by bash in a user's shell: none of the suite's settings
(no PYSPARK_SUBMIT_ARGS, no AWS_* of the tests), the copy's ``.venv`` the environment this test runs in,
built as the README builds it (``make`` installs the project editable into it). Every command must exit 0;
the files the commands write and print say what the README says they do.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import README

pytestmark = [pytest.mark.s3a, pytest.mark.slow]

PORT = 5000  # the README's
# The environment of the tests, not of a user's shell.
_OURS = ("PYSPARK_SUBMIT_ARGS", "PYSPARK_PYTHON", "SPARK_SUBMIT_OPTS", "PYTHONPATH", "VIRTUAL_ENV")


def section_blocks(heading: str) -> list[str]:
    """The code blocks of README's section ``heading`` (up to the next heading of its level), in order."""
    text = README.read_text()
    section = text.split(f"\n{heading}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^```[a-z]*\n(.*?)^```", section, re.S | re.M)


def _copy_of_the_tree(to: Path) -> Path:
    """The repository's files (tracked or not, never the ignored), and ``.venv``: the running environment."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=README.parent,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = README.parent / name
        if source.is_file():
            (to / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, to / name)
    (to / ".venv").symlink_to(Path(sys.prefix))
    return to


def _port_free(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) != 0


def test_the_readme_daily_cycle_runs_as_written_on_moto(tmp_path):
    cycle, moto = section_blocks("## A daily cycle on S3")
    assert _port_free(PORT), f"port {PORT}, which the README's moto block uses, is taken"
    repo = _copy_of_the_tree(tmp_path / "repo")
    script = tmp_path / "readme.sh"
    # bash stops at the first command that fails (-e) and names it (-x); the server the block starts in the
    # background is stopped when the script ends, however it ends.
    script.write_text("set -eo pipefail\ntrap 'kill $(jobs -p) 2>/dev/null' EXIT\nset -x\n" + moto + cycle)
    env = {k: v for k, v in os.environ.items() if k not in _OURS and not k.startswith(("AWS_", "LAKE_TEST_"))}

    done = subprocess.run(["bash", str(script)], cwd=repo, env=env, capture_output=True, text=True, timeout=1800)

    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-6000:]
    # What the README says the cycle does, read out of its prose, is what it did.
    said = " ".join(README.read_text().split("## A daily cycle on S3", 1)[1].split("\n## ", 1)[0].split())
    planned = int(re.search(r"the dry run names (\d+) candidates in `candidates.txt`", said).group(1))
    assert f"restore brings the {planned} back" in said and "erasure says the file is back (`restored`)" in said
    candidates = (repo / "candidates.txt").read_text().split()
    assert len(candidates) == planned and all(c.startswith("s3://lake/warehouse/") for c in candidates), candidates
    report = json.loads((repo / "vacuum.json").read_text())
    totals = report["totals"]
    # moto's own server ignores the conditional delete: the run says so, and claims none as its own delete
    assert (totals["deleted_files"], totals["deleted_or_absent_files"], totals["failed_files"]) == (0, planned, 0), totals
    assert "ignores the condition" in report["deletes_unconfirmed"], report["deletes_unconfirmed"]
    assert f"{planned} deleted or already absent" in done.stdout and "the store cannot tell which" in done.stdout
    budget = re.search(r"its summary says `(budget: [^`]+)`", said).group(1)
    assert re.search(rf"^{re.escape(budget)}$", done.stdout, re.M), done.stdout[-3000:]  # the apply's, as said
    assert report["max_deletes"] == 500_000 and report["max_minutes"] == 240, report
    restored = [int(n) for n in re.findall(r"^  s3://lake/warehouse/\S+: (\d+) restored$", done.stdout, re.M)]
    assert sum(restored) == planned, done.stdout[-3000:]
    assert re.search(r"^purge run .*\n  nothing to do$", done.stdout, re.M), done.stdout[-3000:]
    assert (repo / "chargeback" / "chargeback.html").is_file()
    [answer] = [line for line in done.stdout.splitlines() if "events/tmp_export/2026/dump-0001.json" in line]
    assert answer.startswith("restored "), answer
    # Our words, not a library's; the JVM's lines that reach the terminal are the ones docs/running.md names.
    assert "Generic S3 error" not in done.stderr and "Kernel error" not in done.stderr, done.stderr[-3000:]
    jvm = {ln for ln in done.stderr.splitlines() if not re.match(r"(\+|\d{4}-\d\d-\d\d |[a-z_.]+: |error: |note: |hint: )", ln)}
    documented = " ".join(README.with_name("docs").joinpath("running.md").read_text().split())
    assert all(" ".join(ln.split()) in documented for ln in jvm), jvm
