"""Which of CI's three lines runs each test, from ``.ci/lines.txt``; and the proof that none runs on no line.

CI runs the suite on three lines (``.ci/run`` names each in ``LAKE_TEST_LINE``): ``newest`` (the
newest PySpark: jars-free, then with hadoop-aws), ``lowest`` (Spark 3.5 and the lowest pins:
jars-free, then with Delta 3.3) and ``spark42`` (Spark 4.2 with Delta 4.x: its ``delta_jars`` and
``jars_too`` tests). A test runs on every line its markers allow unless ``.ci/lines.txt`` names the
lines it runs on: slow tests whose question is not which line runs them, chosen by measurement
(``python -m tests.durations``) so that CI's two chains take about as long.

Every run checks the whole collection against the file before it selects: an entry that names no
test, or a test that the file leaves on no line able to run it (a ``delta_jars`` test on ``newest``
alone, say) stops the run.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

LINES = ("newest", "lowest", "spark42")
FILE = Path(__file__).resolve().parents[1] / ".ci" / "lines.txt"
JARS_FREE = frozenset({"newest", "lowest"})  # lines whose jars-free run takes the test
WITH_DELTA = frozenset({"lowest", "spark42"})  # lines with Delta's jars


@dataclass(frozen=True)
class Entry:
    """Tests whose node id starts with ``prefix`` run on ``lines`` only."""

    prefix: str
    lines: frozenset[str]


def read(path: Path = FILE) -> list[Entry]:
    """The file's entries: ``<line>[,<line>...] <node id or its start>`` a line; ``#`` starts a comment."""
    entries = []
    for number, text in enumerate(path.read_text().splitlines(), 1):
        text = text.split(" #", 1)[0].strip()
        if not text or text.startswith("#"):
            continue
        lines, _, prefix = text.partition(" ")
        named = frozenset(lines.split(","))
        if not prefix.strip() or not named <= set(LINES):
            raise ValueError(f"{path}:{number}: expected '<line>[,<line>...] <test id>' with lines among {LINES}: {text!r}")
        entries.append(Entry(prefix.strip(), named))
    return entries


def able(markers: Iterable[str]) -> frozenset[str]:
    """The lines whose runs take a test with these markers."""
    names = set(markers)
    if "delta_jars" in names:
        return WITH_DELTA
    if "jars_too" in names:
        return frozenset(LINES)
    return JARS_FREE


def lines_of(node_id: str, markers: Iterable[str], entries: list[Entry]) -> frozenset[str]:
    """The lines that run the test: its entry's (the first that matches), of those able to."""
    can = able(markers)
    named = next((e.lines for e in entries if node_id.startswith(e.prefix)), None)
    return can if named is None else can & named


def problems(tests: dict[str, set[str]], entries: list[Entry], whole: bool = True) -> list[str]:
    """What makes the assignment drop a test (``tests``: node id → markers), one line each; and, when
    ``tests`` is the whole collection, the entries that name none of them."""
    found = [f"{e.prefix!r} ({','.join(sorted(e.lines))}) names no test" for e in entries
             if whole and not any(node.startswith(e.prefix) for node in tests)]
    for node, markers in tests.items():
        lines = lines_of(node, markers, entries)
        if not lines:
            found.append(f"{node} runs on no line: it needs one of {sorted(able(markers))}")
    return found
