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
    """The profile as Markdown: per run, per cause, per module, the tests shards may run apart, and the
    slowest tests."""
    out = ["# Where the suite's time goes", "",
           "Written by `make durations` (python -m tests.durations) from the profiles CI's runs record, and a",
           "`make test`'s (runs `local`), with LAKE_TEST_PROFILE; seconds of wall time. Causes are measured, not",
           "guessed: see tests/durations.py.", ""]
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
        modules[module_of(row["test"])][_run_name(row)] += _total(row)
    single = once(rows)
    for (test, jars), seconds in single.items():
        modules[module_of(test)][ONCE[jars]] += seconds
    names = sorted(runs)
    out += ["", "## By module", "", f"`{ONCE[False]}` and `{ONCE[True]}`: one run of each test (its mean over the runs it "
            "ran in), as `make test` runs it; its shards are balanced by these.", "",
            "| module | " + " | ".join(names + list(ONCE.values())) + " |", "|---|" + "---:|" * (len(names) + 2)]
    for module, by_run in sorted(modules.items(), key=lambda kv: -sum(kv[1].get(n, 0) for n in names)):
        out.append(f"| {module} | " + " | ".join(f"{by_run.get(n, 0):.0f}" for n in names + list(ONCE.values())) + " |")
    alone = sorted(((s, t, j) for (t, j), s in single.items() if s >= ALONE), reverse=True)
    out += ["", "## Tests a shard may run apart from their module", "",
            f"Each test of {ALONE:.0f} s or more in one run (`{ONCE[False]}` or `{ONCE[True]}`): `make test` runs it "
            "in whichever shard has least to do, unless it shares a fixture with the rest of its module.", "",
            "| seconds | run | test |", "|---:|---|---|"]
    out += [f"| {seconds:.0f} | {ONCE[jars]} | `{test}` |" for seconds, test, jars in alone]
    out += ["", "## The 40 slowest tests", "", "| seconds | run | test | biggest cause |", "|---:|---|---|---|"]
    for row in sorted(rows, key=_total, reverse=True)[:40]:
        cause = max(CAUSES, key=lambda c: row[c])
        why = f"{cause} {row[cause]:.0f}" if row[cause] >= 0.2 * _total(row) else "in-process Spark and Python"
        out.append(f"| {_total(row):.0f} | {_run_name(row)} | `{row['test']}` | {why} |")
    return "\n".join(out) + "\n"


PROFILE = Path(__file__).with_name("DURATIONS.md")
ONCE = {False: "once", True: "once jars"}  # the columns of one run of each test, jars-free and with the jars
ALONE = 20.0  # seconds from which a test is listed as a unit of its own for make test's shards


def module_of(test: str) -> str:
    """The module a test id names (its file)."""
    return test.split("::")[0]


def once(rows: list[dict]) -> dict[tuple[str, bool], float]:
    """Each test's seconds in one run, jars-free and with the jars: its mean over the runs it ran in."""
    spent: dict[tuple[str, bool], list[float]] = defaultdict(list)
    for row in rows:
        spent[row["test"], row["jars"]].append(_total(row))
    return {key: sum(seconds) / len(seconds) for key, seconds in spent.items()}


def _table(text: str, section: str) -> list[list[str]]:
    body = text.split(f"## {section}", 1)[-1].split("\n## ", 1)[0] if f"## {section}" in text else ""
    return [[cell.strip().strip("`") for cell in line.strip().strip("|").split("|")]
            for line in body.splitlines() if line.startswith("| ") and not line.startswith("|---")]


def unit_seconds(jars: bool, apart: set[str], path: Path = PROFILE) -> dict[str, float]:
    """What ``make test``'s shards are balanced by (:func:`shares`), from the committed profile: the seconds
    of one run of each test of ``apart`` the profile lists by itself, and of each module's other tests."""
    text = path.read_text() if path.exists() else ""
    table = _table(text, "By module")
    if not table:
        return {}
    column = table[0].index(ONCE[jars])
    seconds = {cells[0]: float(cells[column]) for cells in table[1:]}
    for cells in _table(text, "Tests a shard may run apart")[1:]:
        if cells[1] == ONCE[jars] and cells[2] in apart:
            seconds[cells[2]] = float(cells[0])
            seconds[module_of(cells[2])] = max(0.0, seconds.get(module_of(cells[2]), 0.0) - float(cells[0]))
    return seconds


def shares(units: dict[str, float], seconds: dict[str, float], totals: list[float]) -> dict[str, int]:
    """Each unit (a module, or a test run apart from it) in one of ``len(totals)`` shares, the costliest
    first, each into the share that has cost least so far (``totals``, updated: what each share runs before
    these); a unit the profile lacks costs ``units[unit]``, its guess."""
    share = {}
    for unit in sorted(units, key=lambda u: (-seconds.get(u, units[u]), u)):
        share[unit] = totals.index(min(totals))
        totals[share[unit]] += seconds.get(unit, units[unit])
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
