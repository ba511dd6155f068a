"""A command killed at a named system call: strace fails the first call of ``calls`` on one path and
sends its process SIGKILL there (fault injection), so that the call does nothing however soon the
signal lands.

Only Python processes are traced, never Spark's JVM: under ptrace every system call of a traced
process stops it, and a traced JVM ran a vacuum of three tables in twice the time (24 s to 44 s).
A call the job's own process makes (deltalake's commits) is traced there with ``--detach-on=execve``,
which lets go of the JVM it starts; a call of Spark's Python workers (a file's delete) is traced in
them alone, started through a ``PYSPARK_PYTHON`` of our own. ``--seccomp-bpf`` would stop only at the
named calls, but strace 6.1 injects the error under it and never delivers the signal.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass(frozen=True)
class Killed:
    """How the command ended: its exit status (negative: the signal), its output, and strace's lines."""
    returncode: int
    stdout: str
    stderr: str
    traced: str

    def died_of_the_kill(self) -> bool:
        """Whether a process making the call ended by the signal, in strace's own words."""
        return "+++ killed by SIGKILL +++" in self.traced


def run_killed_at(command: list[str], at: Path, calls: str, work: Path, cwd: Path, *, in_workers: bool = False,
                  timeout: float = 600) -> Killed:
    """Runs ``command`` until the first of ``calls`` (comma-separated names) on path ``at``, made by its own
    process or, ``in_workers``, by one of Spark's Python workers; strace's lines go to ``work``."""
    if shutil.which("strace") is None:
        if os.environ.get("CI"):
            pytest.fail("strace is missing: .ci/run installs it")
        pytest.skip("needs strace (apt-get install strace) to kill a job at a system call")
    log = work / "strace.log"
    log.unlink(missing_ok=True)  # appended to by every traced worker: this run's lines only
    strace = ["strace", "-f", "-q", "-A", "-o", str(log), "-P", str(at), "-e", f"trace={calls}",
              "-e", f"inject={calls}:error=EIO:signal=SIGKILL"]
    env = dict(os.environ)
    if in_workers:
        python = work / "traced-python"
        python.write_text(f'#!/bin/sh\nexec {shlex.join([*strace, sys.executable])} "$@"\n')
        python.chmod(0o755)
        env["PYSPARK_PYTHON"] = str(python)
    else:
        command = [*strace, "--detach-on=execve", *command]
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout,
                          start_new_session=True)
    return Killed(done.returncode, done.stdout, done.stderr, log.read_text() if log.exists() else "")
