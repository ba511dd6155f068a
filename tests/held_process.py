"""One of our jobs in an OS process of its own, held at a named point.

``python -m tests.held_process DIR POINT MODULE ARGS...`` runs ``python -m MODULE ARGS`` with one change:
at POINT the job first writes ``DIR/reached``, then waits until ``DIR/release`` exists. POINT is
``commit``, the first commit attempt into our own tables (lakeio.tables.write's, after the write has
read the table it commits against), or ``end``, the first put of a VACUUM END into a table's log
(vacuum_jobs.history). What follows is the real call. A test starts this process, waits for
``reached``, lets a second process commit to the same table, then writes ``release``: the
interleaving in which another process commits first is forced, not hoped for. A test may also kill
the process at ``reached`` (a run killed right before it records, or before it closes its START).
"""

from __future__ import annotations

import runpy
import sys
import time
from pathlib import Path

import lakeio.tables.write as delta_write
from vacuum_jobs.history import END, LogWriter

HOLD_SECONDS = 300


def hold_at(folder: Path, point: str) -> None:
    """Wrap the call at ``point``: its first call waits at ``folder`` as the module's docstring says."""
    owner, name = (delta_write, "_commit") if point == "commit" else (LogWriter, "_put_if_absent")
    call = getattr(owner, name)
    held = []

    def holding(*args, **kwargs):
        if not held and (point == "commit" or f'"operation":"{END}"' in args[2]):
            held.append(True)
            (folder / "reached").write_text("at the commit\n")
            deadline = time.monotonic() + HOLD_SECONDS
            while not (folder / "release").exists():  # a condition the test sets, not a guess at timing
                if time.monotonic() > deadline:
                    raise SystemExit(f"held at the commit for {HOLD_SECONDS} s: never released")
                time.sleep(0.05)
        return call(*args, **kwargs)

    setattr(owner, name, holding)


def main(argv: list[str]) -> None:
    folder, point, module, *args = argv
    hold_at(Path(folder), point)
    sys.argv = [module, *args]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
