"""CI's lines: the file that places slow tests, the check that no test is left on no line, and the balance."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import ci_lines, durations
from tests.ci_lines import Entry

PLAIN, DELTA, TOO = set(), {"delta_jars", "slow"}, {"jars_too", "slow"}
ROOT = Path(__file__).resolve().parents[1]


def test_the_file_parses_and_names_only_lines_ci_runs():
    entries = ci_lines.read()
    assert entries and all(e.lines <= set(ci_lines.LINES) for e in entries)


def test_a_malformed_entry_is_named_by_its_line(tmp_path):
    placed = tmp_path / "lines.txt"
    placed.write_text("# a comment\nnewest tests/test_a.py\nsaturn tests/test_b.py\n")
    with pytest.raises(ValueError, match=r"lines.txt:3: .*'saturn tests/test_b.py'"):
        ci_lines.read(placed)


def test_the_first_entry_that_matches_decides_within_the_lines_able_to_run_the_test():
    entries = [Entry("tests/t.py::a[x]", frozenset({"lowest"})), Entry("tests/t.py", frozenset({"newest", "spark42"}))]
    assert ci_lines.lines_of("tests/t.py::a[x]", PLAIN, entries) == {"lowest"}
    assert ci_lines.lines_of("tests/t.py::b", PLAIN, entries) == {"newest"}  # spark42 runs no jars-free test
    assert ci_lines.lines_of("tests/t.py::b", DELTA, entries) == {"spark42"}
    assert ci_lines.lines_of("tests/u.py::c", TOO, entries) == set(ci_lines.LINES)
    assert ci_lines.lines_of("tests/u.py::c", DELTA, entries) == {"lowest", "spark42"}


def test_an_entry_that_drops_a_test_or_names_none_is_found():
    tests = {"tests/t.py::plain": PLAIN, "tests/t.py::delta": DELTA, "tests/t.py::both": TOO}
    entries = [Entry("tests/t.py::delta", frozenset({"newest"})), Entry("tests/t.py::plain", frozenset({"spark42"})),
               Entry("tests/t.py::gone", frozenset({"lowest"})), Entry("tests/t.py::both", frozenset({"spark42"}))]
    found = ci_lines.problems(tests, entries)
    assert any(p.startswith("tests/t.py::delta runs on no line") for p in found), found
    assert any(p.startswith("tests/t.py::plain runs on no line") for p in found), found
    assert any("'tests/t.py::gone' (lowest) names no test" in p for p in found), found
    assert len(found) == 3, found  # a jars_too test on spark42 still runs, with Delta's jars
    assert len(ci_lines.problems(tests, entries, whole=False)) == 2  # a run of some tests: entries may name others


def _row(test: str, line: str, seconds: float, markers=("slow",), jars=False, **causes) -> dict:
    return {"test": test, "line": line, "jars": jars, "outcome": "passed", "markers": list(markers), "setup": 0.0,
            "call": seconds, "teardown": 0.0, **{c: causes.get(c, 0.0) for c in durations.CAUSES}}


def test_the_balance_puts_each_movable_test_on_one_line_and_evens_the_chains():
    rows = [_row("t::fixed_lowest", "lowest", 100), _row("t::big", "newest", 60), _row("t::big", "lowest", 70),
            _row("t::mid", "newest", 40), _row("t::mid", "lowest", 40), _row("t::quick", "newest", 1, markers=()),
            _row("t::zone", "newest", 30, markers=("slow", "every_line")), _row("t::zone", "lowest", 30,
                                                                                   markers=("slow", "every_line")),
            _row("t::delta", "lowest", 20, markers=("slow", "delta_jars")),
            _row("t::delta", "spark42", 20, markers=("slow", "delta_jars")),
            _row("t::too", "newest", 5, markers=("slow", "jars_too")), _row("t::too", "spark42", 5, markers=("slow", "jars_too")),
            _row("t::too", "lowest", 6, markers=("slow", "jars_too"))]
    entries, chains = durations.balance(rows, [Entry("t::fixed_lowest", frozenset({"lowest"}))])
    placed = {e.prefix: e.lines for e in entries}
    assert set(placed) == {"t::big", "t::mid", "t::delta", "t::too"}  # fixed, quick and every_line ones stay put
    assert all(len(lines) == 1 for t, lines in placed.items() if t != "t::too")
    assert placed["t::too"] in ({"lowest"}, {"newest", "spark42"})  # both ways: jars-free, then with Delta
    assert placed["t::big"] == {"newest"}  # the lowest chain holds the fixed 100 s
    assert placed["t::delta"] <= {"lowest", "spark42"}
    assert sum(chains.values()) == pytest.approx(100 + 60 + 40 + 1 + 60 + 20 + sum(
        {"lowest": 6, "newest": 5, "spark42": 5}[line] for line in placed["t::too"]))


def test_the_report_ranks_the_causes_it_measured(tmp_path):
    profile = tmp_path / "profile.jsonl"
    profile.write_text("\n".join(json.dumps(r) for r in (
        _row("tests/a.py::t", "newest", 50, processes=40), _row("tests/b.py::u", "lowest", 10, jars=True))) + "\n")
    text = durations.report(list(durations.records([str(profile)])))
    assert "| newest | 1 | 50 | 40 |" in text and "| lowest jars | 1 | 10 |" in text
    assert "| 50 | newest | `tests/a.py::t` | processes 40 |" in text


def test_make_tests_shards_run_a_slow_test_apart_from_its_module_and_end_together(tmp_path):
    rows = [_row("tests/a.py::slow", "newest", 40), _row("tests/a.py::slow", "lowest", 60),
            _row("tests/a.py::quick", "newest", 5), _row("tests/b.py::t", "newest", 45),
            _row("tests/b.py::t", "spark42", 15, jars=True)]
    profile = tmp_path / "DURATIONS.md"
    profile.write_text(durations.report(rows))
    alone = durations.unit_seconds(False, {"tests/a.py::slow", "tests/b.py::t"}, profile)
    assert alone == {"tests/a.py": 5, "tests/a.py::slow": 50, "tests/b.py": 0, "tests/b.py::t": 45}
    assert durations.unit_seconds(False, set(), profile) == {"tests/a.py": 55, "tests/b.py": 45}  # a.py's slow test
    assert durations.unit_seconds(True, {"tests/b.py::t"}, profile) == {"tests/a.py": 0, "tests/b.py": 15}  # under 20 s
    totals = [0.0, 0.0]
    share = durations.shares({"tests/a.py": 1, "tests/a.py::slow": 1, "tests/b.py::t": 1, "tests/new.py": 12}, alone, totals)
    assert share["tests/a.py::slow"] != share["tests/b.py::t"] and totals == [50 + 5, 45 + 12]  # the unknown module guessed


_RUN_VARIABLES = ("LAKE_TEST_LINE", "LAKE_TEST_SHARD", "LAKE_TEST_JARS")  # each collection's own, none inherited
# Collections of the whole suite in one process, each with its own environment: conftest is imported
# afresh for each (it reads the environment once), the test modules once for all.
_COLLECTIONS = """
import json, os, sys
import pytest

class Ids:
    def pytest_collection_finish(self, session):
        self.found = [item.nodeid for item in session.items]

found = []
for args, env in json.loads(sys.argv[1]):
    for name in sys.argv[4].split(","):
        os.environ.pop(name, None)
    os.environ.update(env)
    for name in [n for n, m in sys.modules.items() if getattr(m, "__file__", None) == sys.argv[3]]:
        del sys.modules[name]
    ids = Ids()
    if pytest.main(["--collect-only", "-qq", "-p", "no:cacheprovider", *args], plugins=[ids]) != 0:
        sys.exit(f"collection {args} {env} failed")
    found.append(ids.found)
with open(sys.argv[2], "w") as out:
    json.dump(found, out)
"""


def _collections(tmp_path: Path, *runs: tuple[list[str], dict[str, str]]) -> list[list[str]]:
    """The test ids each of ``runs`` (pytest's arguments, its own variables) selects."""
    found = tmp_path / "collected.json"
    done = subprocess.run([sys.executable, "-c", _COLLECTIONS, json.dumps(runs), str(found), str(ROOT / "tests" / "conftest.py"),
                           ",".join(_RUN_VARIABLES)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={k: v for k, v in os.environ.items() if k not in _RUN_VARIABLES})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return json.loads(found.read_text())


@pytest.mark.slow  # two collections of the whole suite, each in a process of its own
def test_every_test_id_is_the_same_in_every_collection(tmp_path):
    """The file, --deselect and the balance name tests by id: a parameter drawn at random (a fresh uuid in
    an id) would leave its test on every line whatever the file says, and a balanced entry naming it stale."""
    (first,), (second,) = _collections(tmp_path, ([], {})), _collections(tmp_path, ([], {}))
    assert first and first == second, sorted(set(first) ^ set(second))[:10]


@pytest.mark.slow  # six collections of the whole suite
def test_make_tests_shards_run_each_test_of_each_run_exactly_once(tmp_path):
    for markers, env in (("not delta_jars and not s3a", {}), ("delta_jars or s3a or jars_too", {"LAKE_TEST_JARS": "x"})):
        whole, *shards = _collections(tmp_path, *[(["-m", markers], {**env, **shard}) for shard in
                                                  ({}, {"LAKE_TEST_SHARD": "1/2"}, {"LAKE_TEST_SHARD": "2/2"})])
        assert sorted(shards[0] + shards[1]) == sorted(whole) and all(shards), (markers, len(whole), *map(len, shards))
