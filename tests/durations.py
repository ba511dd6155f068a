"""Where the suite's time goes, measured as it runs and kept (tests/DURATIONS.md); and the lines balanced by it.

Recording: with ``LAKE_TEST_PROFILE=<file>`` (``.ci/run`` sets it for each run) every test appends one
JSON line to the file: its node id, the run's line and jars, its markers, its setup, call and teardown
seconds, and the seconds it spent in each cause, measured where the time goes:

- ``processes``: waiting for processes it started (fresh JVMs, whole jobs, clusters, spark-submit);
- ``delta_vacuum``: Delta's own VACUUM (``SparkSession.sql`` statements that begin with it);
- ``s3_server``: CPU time of moto's S3 server (every S3 request, from boto3, deltalake or Spark);
- ``sleeps``: ``time.sleep`` on the test's own thread;
- ``setup``: its fixtures' setup (lakes built, sessions and servers started);
- the rest: Spark and Python in the test's own process.

Reporting: ``python -m tests.durations PROFILE...`` prints the profile as Markdown (``make durations``
writes it to tests/DURATIONS.md); ``--balance`` rewrites the balanced part of .ci/lines.txt: each
slow test that need not run on every line (no ``every_line`` marker) and that no entry above that
part places by hand goes to one line, the biggest first, wherever CI's two chains (``newest`` then
``spark42``, beside ``lowest``) end sooner.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import ci_lines

CAUSES = ("processes", "delta_vacuum", "s3_server", "sleeps", "setup")
CHAINS = {"newest": "newest", "spark42": "newest", "lowest": "lowest"}  # .ci/run runs spark42 after newest
PHASES = ("setup", "call", "teardown")


class Recorder:
    """The pytest plugin that writes the profile (registered by conftest when LAKE_TEST_PROFILE is set)."""

    def __init__(self, path: str, line: str | None, jars: bool) -> None:
        self.path, self.line, self.jars = path, line, jars
        self.spent: dict[str, float] = defaultdict(float)
        self.phases: dict[str, float] = {}
        self.markers: dict[str, list[str]] = {}
        self.outcome = "passed"
        self._server_cpu = 0.0
        self._depth = 0
        self._patch()

    def _timed(self, cause: str, call):
        """``call`` timed into ``cause`` when made from the main thread, outside another timed call."""
        recorder = self

        def timed(*args, **kwargs):
            if threading.current_thread() is not threading.main_thread() or recorder._depth:
                return call(*args, **kwargs)
            recorder._depth += 1
            started = time.perf_counter()
            try:
                return call(*args, **kwargs)
            finally:
                recorder._depth -= 1
                recorder.spent[cause] += time.perf_counter() - started
        return timed

    def _patch(self) -> None:
        for name in ("wait", "communicate"):
            setattr(subprocess.Popen, name, self._timed("processes", getattr(subprocess.Popen, name)))
        time.sleep = self._timed("sleeps", time.sleep)
        from pyspark.sql import SparkSession

        sql, vacuum = SparkSession.sql, self._timed("delta_vacuum", SparkSession.sql)
        SparkSession.sql = lambda session, query, *a, **k: (  # type: ignore[method-assign]
            vacuum if query.lstrip().upper().startswith("VACUUM") else sql)(session, query, *a, **k)

    @staticmethod
    def _moto_cpu() -> float:
        from tests.s3_faults import SERVERS

        total = 0.0
        for pid in list(SERVERS):
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime
        return total

    @pytest.hookimpl
    def pytest_runtest_logstart(self, nodeid, location) -> None:
        self.spent.clear()
        self.phases = {}
        self.outcome = "passed"
        self._server_cpu = self._moto_cpu()

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report) -> None:
        self.phases[report.when] = report.duration
        if report.outcome != "passed" or report.when == "call":  # a phase that failed or skipped says how it went
            self.outcome = self.outcome if self.outcome == "failed" else report.outcome
        if report.when != "teardown":
            return
        self.spent["s3_server"] = max(0.0, self._moto_cpu() - self._server_cpu)
        self.spent["setup"] = self.phases.get("setup", 0.0)
        record = {"test": report.nodeid, "line": self.line, "jars": self.jars, "outcome": self.outcome,
                  "markers": self.markers.pop(report.nodeid, []), **{p: self.phases.get(p, 0.0) for p in PHASES},
                  **{c: round(self.spent.get(c, 0.0), 3) for c in CAUSES}}
        with open(self.path, "a") as out:
            out.write(json.dumps(record) + "\n")

    @pytest.hookimpl
    def pytest_runtest_setup(self, item) -> None:
        self.markers[item.nodeid] = sorted({m.name for m in item.iter_markers()})


def records(paths: list[str]) -> Iterator[dict]:
    for path in paths:
        with open(path) as lines:
            yield from (json.loads(line) for line in lines if line.strip())


def _total(record: dict) -> float:
    return sum(record[p] for p in PHASES)


def _run_name(record: dict) -> str:
    return f"{record['line'] or 'local'}{' jars' if record['jars'] else ''}"


def report(rows: list[dict]) -> str:
    """The profile as Markdown: per run, per cause, per module, and the slowest tests."""
    out = ["# Where the suite's time goes", "",
           "Written by `make durations` (python -m tests.durations) from the profile each CI run records",
           "(LAKE_TEST_PROFILE); seconds of wall time. Causes are measured, not guessed: see tests/durations.py.", ""]
    runs: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        runs[_run_name(row)].append(row)
    out += ["## By run and cause", "", "| run | tests | total | " + " | ".join(CAUSES) + " | rest |",
            "|---|---:|---:|" + "---:|" * (len(CAUSES) + 1)]
    for name, group in sorted(runs.items()):
        total = sum(map(_total, group))
        causes = [sum(r[c] for r in group) for c in CAUSES]
        # The server's CPU runs beside the test's wall time, and a fixture's setup may itself wait on a process
        # or sleep: the causes can overlap, and "rest" is what none of them explains.
        rest = max(0.0, total - sum(causes) + sum(r["s3_server"] for r in group))
        out.append(f"| {name} | {len(group)} | {total:.0f} | " + " | ".join(f"{c:.0f}" for c in causes) + f" | {rest:.0f} |")
    modules: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for row in rows:
        modules[row["test"].split("::")[0]][_run_name(row)] += _total(row)
    names = sorted(runs)
    out += ["", "## By module", "", "| module | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
    for module, by_run in sorted(modules.items(), key=lambda kv: -sum(kv[1].values())):
        out.append(f"| {module} | " + " | ".join(f"{by_run.get(n, 0):.0f}" for n in names) + " |")
    out += ["", "## The 40 slowest tests", "", "| seconds | run | test | biggest cause |", "|---:|---|---|---|"]
    for row in sorted(rows, key=_total, reverse=True)[:40]:
        cause = max(CAUSES, key=lambda c: row[c])
        why = f"{cause} {row[cause]:.0f}" if row[cause] >= 0.2 * _total(row) else "in-process Spark and Python"
        out.append(f"| {_total(row):.0f} | {_run_name(row)} | `{row['test']}` | {why} |")
    return "\n".join(out) + "\n"


PROFILE = Path(__file__).with_name("DURATIONS.md")


def module_seconds(jars: bool, path: Path = PROFILE) -> dict[str, float]:
    """Each module's seconds in the committed profile's table by module, over its jars runs or its
    jars-free ones: what ``make test``'s shards are balanced by (:func:`shares`)."""
    text = path.read_text() if path.exists() else ""
    table = [line.strip().strip("|").split("|") for line in text.split("## By module", 1)[-1].split("\n## ", 1)[0]
             .splitlines() if line.startswith("| ")]
    if not table:
        return {}
    runs = [name.strip() for name in table[0][1:]]
    return {cells[0].strip(): sum(float(v) for run, v in zip(runs, cells[1:]) if run.endswith(" jars") == jars)
            for cells in table[1:] if cells[0].strip().startswith("tests/")}


def shares(tests: dict[str, float], seconds: dict[str, float], totals: list[float]) -> dict[str, int]:
    """Each module in one of ``len(totals)`` shares, the costliest first, each into the share that has cost
    least so far (``totals``, updated: what each share runs before these); a module the profile lacks
    costs ``tests[module]``, its guess."""
    share = {}
    for module in sorted(tests, key=lambda m: (-seconds.get(m, tests[m]), m)):
        share[module] = totals.index(min(totals))
        totals[share[module]] += seconds.get(module, tests[module])
    return share


def balance(rows: list[dict], by_hand: list[ci_lines.Entry]) -> tuple[list[ci_lines.Entry], dict[str, float]]:
    """Each slow test neither marked ``every_line`` nor placed by hand on one line: the biggest first, on
    the line (a jars-free one and a Delta one for ``jars_too``) where CI's two chains end soonest. Its
    cost on a line it did not run on is its mean over those it ran on. Returns the entries, and the seconds
    each chain then takes by the profile."""
    cost: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    markers: dict[str, set[str]] = {}
    for row in rows:
        if row["line"] in ci_lines.LINES:
            cost[row["test"]][row["line"]] += _total(row)
            markers[row["test"]] = set(row["markers"])
    chains: dict[str, float] = defaultdict(float)
    movable = []
    for test, by_line in cost.items():
        if "slow" in markers[test] and "every_line" not in markers[test] and not any(
                test.startswith(e.prefix) for e in by_hand):
            movable.append(test)
        else:
            for line, seconds in by_line.items():
                chains[CHAINS[line]] += seconds
    entries = []
    for test in sorted(movable, key=lambda t: -max(cost[t].values())):
        mean = sum(cost[test].values()) / len(cost[test])
        seconds = {line: cost[test].get(line, mean) for line in ci_lines.LINES}
        options = [frozenset({line}) for line in sorted(ci_lines.able(markers[test]))]
        if "jars_too" in markers[test]:
            options = [frozenset({"lowest"}), frozenset({"newest", "spark42"})]
        best = min(options, key=lambda lines: _ends(chains, {line: seconds[line] for line in lines}))
        for line in best:
            chains[CHAINS[line]] += seconds[line]
        entries.append(ci_lines.Entry(test, best))
    return entries, dict(chains)


def _ends(chains: dict[str, float], added: dict[str, float]) -> tuple[float, float]:
    """When the later chain ends with ``added`` (seconds by line), then the seconds added."""
    after = [chains[c] + sum(v for line, v in added.items() if CHAINS[line] == c) for c in ("newest", "lowest")]
    return max(after), sum(added.values())


def write_lines(entries: list[ci_lines.Entry], path: Path = ci_lines.FILE) -> None:
    """Rewrite ``path``'s balanced entries (those after its ``# balanced`` line) as ``entries``."""
    head = path.read_text().split("# balanced", 1)[0].rstrip() + "\n\n"
    body = [f"{','.join(sorted(e.lines))} {e.prefix}" for e in sorted(entries, key=lambda e: e.prefix)]
    path.write_text(head + "# balanced by python -m tests.durations --balance (rewritten whole, from a profile)\n"
                    + "\n".join(body) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.durations", description=__doc__.split("\n\n")[0])
    parser.add_argument("profiles", nargs="+", help="the JSON lines files LAKE_TEST_PROFILE named")
    parser.add_argument("--balance", action="store_true", help=f"rewrite {ci_lines.FILE.name}'s balanced entries")
    args = parser.parse_args(argv)
    rows = list(records(args.profiles))
    if not rows:
        print(f"no test recorded in {args.profiles}", file=sys.stderr)
        return 1
    if args.balance:
        hand = ci_lines.FILE.read_text().split("# balanced", 1)[0]
        by_hand = [e for e in ci_lines.read() if f" {e.prefix}" in hand]
        entries, chains = balance(rows, by_hand)
        write_lines(entries)
        print(f"{len(entries)} tests placed; the chains then take " + ", ".join(f"{c} {s:.0f} s" for c, s in chains.items()))
    else:
        sys.stdout.write(report(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
