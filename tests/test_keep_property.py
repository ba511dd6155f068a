"""Property: over generated histories and inventories, no file the table needs is ever a candidate.

Histories are written as real ``_delta_log`` JSON commits (adds, removes, re-adds of a
removed file, deletion-vector updates, URL-encoded paths spelled the ways Hadoop ``Path``
accepts: relative, ``./x``, ``a/../x``, scheme-less absolute, full URI), in tables with
or without UniForm Iceberg; inventories list every file ever written, deletion-vector
files, hidden files, Iceberg metadata, orphans, and a neighbour table's files, with
modification times on both sides of the cutoff, some of them twice (two inventory
configurations). A shallow clone outside the planned tables names some of the table's files
by absolute URI, live or tombstoned on either side of its own cutoff. The replay reads the
actions afresh or from the JSON commits its summary kept; a writer's log cleanup may remove
the commits between the summary and the plan. After planning, another writer may re-add a
candidate. A plain-Python model says what must be kept; the Spark plan, after its re-check,
must agree exactly.

Each example is a lake of two to four such tables, replayed, planned and re-checked at once as a
run plans them (10-20 s): ``KEEP_EXAMPLES`` sets how many run, 5 by default; ``KEEP_EXAMPLES=100``
for a deeper search.
"""

from __future__ import annotations

import json
import os
from functools import reduce

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from lakeio.deltalog.policy import TablePolicy
from lakeio.deltalog.references import needed_elsewhere
from lakeio.deltalog.replay import LogFileVanished, naming_vanished_logs, replay_logs
from lakeio.deltalog.segments import log_segment
from lakeio.store.filesystem import Storage
from tests.histories import clones, debris, spellings, steps, write_clone, write_history
from vacuum_jobs.plan import plan_tables
from vacuum_jobs.recheck import recheck_logs
from vacuum_jobs.vacuum_plan import Decision, VacuumPlan

pytestmark = pytest.mark.slow  # generated histories, each planned on Spark

NOW = 1_800_000_000_000
CUTOFF = NOW - 7 * 86_400_000
times = st.sampled_from([CUTOFF - 86_400_000, CUTOFF - 1, CUTOFF, CUTOFF + 1, NOW - 1000])
EXAMPLES = int(os.environ.get("KEEP_EXAMPLES", "5"))


# One table of a generated lake: its history and its inventory's debris, duplicates and times.
_tables = st.fixed_dictionaries({"history": steps(times), "orphan_times": st.lists(times, min_size=1, max_size=4),
                                 "partitioned": st.booleans(), "spelling": spellings, "iceberg": st.booleans(),
                                 "duplicates": st.lists(times, max_size=4)})
_lakes = st.lists(_tables, min_size=2, max_size=4)  # planned at once, as a run plans its tables
_PER_LAKE = settings(max_examples=EXAMPLES, deadline=None,
                     suppress_health_check=[HealthCheck.function_scoped_fixture])


def _write(spark, base, tables):
    """Each table of ``tables`` in a folder of its own below ``base``: the histories, the lake's inventory as
    one frame, and each table's {path below its root: the newest modification time}, in ``tables``' order."""
    written, frames, inventories = [], [], []
    for i, spec in enumerate(tables):
        h = write_history(base / f"s{i}" / "t", spec["history"], partitioned=spec["partitioned"],
                          iceberg=spec["iceberg"], spelling=spec["spelling"])
        df, inventory = _inventory(spark, base / f"s{i}", h, spec["orphan_times"], spec["duplicates"])
        written.append(h)
        frames.append(df)
        inventories.append(inventory)
    return written, reduce(DataFrame.unionByName, frames), inventories


def _by_table(paths, written):
    """``paths`` split by the table whose root they lie under, in ``written``'s order."""
    return [{p for p in paths if p.startswith(f"file://{h.root}/")} for h in written]


@_PER_LAKE
@given(tables=_lakes, late_readd=st.booleans(), keep_commits=st.booleans(), clone=clones(times), vanish=st.booleans())
def test_nothing_the_table_needs_is_ever_a_candidate(spark, tmp_path_factory, tables, late_readd, keep_commits, clone,
                                                      vanish):
    base = tmp_path_factory.mktemp("prop")
    written, df, inventories = _write(spark, base, tables)
    keeps = [h.needed(CUTOFF) for h in written]

    # A shallow clone names some of the files the first table ever wrote: live (None), or removed at a time.
    clone_root = base / "clone"
    cloned = write_clone(written[0], clone_root, clone)
    keeps[0] |= {p for p, at in cloned.items() if at is None or at >= CUTOFF}

    expected = [{f"file://{h.root}/{p}" for p, t in inventory.items() if p not in keep and not h.hidden(p) and t < CUTOFF}
                for h, inventory, keep in zip(written, inventories, keeps)]

    roots, clone_uri = [f"file://{h.root}" for h in written], f"file://{clone_root}"
    replay = replay_logs(spark, [log_segment(Storage(spark), str(h.root)) for h in written], check_paths=False,
                         keep_commits=keep_commits)
    assert not replay.failures
    outside = replay_logs(spark, [log_segment(Storage(spark), str(clone_root))], check_paths=False)
    references = needed_elsewhere(outside, {clone_uri: CUTOFF}, [*roots, clone_uri], check_paths=True)
    assert not outside.failures and not references.unknown
    # A writer's log cleanup removes the commits the summary read of the first table: kept ones are never read
    # again, and otherwise their loss names that table alone.
    log = written[0].root / "_delta_log"
    hidden_away = base / "cleaned-up"
    if vanish:
        hidden_away.mkdir()
        for commit in log.glob("*.json"):
            commit.rename(hidden_away / commit.name)
    try:
        with naming_vanished_logs([clone_uri, *roots]):
            plan = plan_tables(spark, df, replay.files,
                               [TablePolicy.for_state(replay.states[root], CUTOFF) for root in roots],
                               inventory_as_of_ms=NOW, other_roots=[clone_uri], references=references.frame)
            planned = [r["path"] for r in plan.candidates.collect()]
    except LogFileVanished as lost:
        if not vanish or keep_commits:
            raise
        assert lost.table_root == roots[0]
        return
    finally:
        for commit in hidden_away.glob("*.json"):
            commit.rename(log / commit.name)
    assert len(planned) == len(set(planned))  # one row per object, however many configurations listed it
    assert _by_table(planned, written) == expected and set(planned) == set().union(*expected)
    assert not set(planned) & {f"file://{h.root}/{p}" for h, keep in zip(written, keeps) for p in keep}

    # Another writer commits between planning and deleting: it re-adds (RESTOREs) a planned candidate of each table.
    readded = []
    for h, root, candidates in zip(written, roots, expected):
        for uri in (sorted(p for p in candidates if "/_" not in p and "/." not in p)[:1] if late_readd else []):
            readded.append(uri)
            (h.root / "_delta_log" / f"{len(h.commits):020d}.json").write_text(json.dumps(
                {"add": {"path": h.spell(uri.removeprefix(root + "/")), "size": 10, "modificationTime": NOW,
                         "dataChange": True, "partitionValues": {}}}) + "\n")
    recheck = recheck_logs(spark, Storage(spark), {str(h.root): len(h.commits) - 1 for h in written})
    assert not recheck.refused
    rechecked = VacuumPlan.of(dict.fromkeys(roots, Decision.VACUUM), plan.candidates).without(files=recheck.referenced)
    deletable = rechecked.files()
    replay.release()
    assert [{path for path, _ in deletable.get(root, [])} for root in roots] == [
        candidates - set(readded) for candidates in expected]


def _inventory(spark, base, h, orphan_times, duplicates):
    """The inventory of the table's folder (every file the history wrote, its log, ``debris`` at ``orphan_times``,
    a folder marker, a neighbour's files), some objects listed again by a second configuration at ``duplicates``;
    as a frame of job 2's inventory rows, and as {path below the root: the newest modification time}."""
    root = h.root
    inventory = {**h.files(), **debris(orphan_times)}
    for file_name in os.listdir(root / "_delta_log"):
        inventory[f"_delta_log/{file_name}"] = CUTOFF - 10
    rows = [(f"file://{root}/{p}", p, t) for p, t in inventory.items()]
    # A second inventory configuration lists some objects again, seen at another time: the newest row wins.
    for p, t in zip(sorted(inventory), duplicates):
        rows.append((f"file://{root}/{p}", p, t))
        inventory[p] = max(inventory[p], t)
    rows += [(f"file://{base}/t_backup/{p}", f"t_backup/{p}", CUTOFF - 10) for p in ("x.parquet", "p=1/y.parquet")]
    inventory_rows = [(path, 10, False, t, "lake", key, None, "2027-01-15", f"manifest-{i}")
                      for i, (path, key, t) in enumerate(rows)]
    inventory_rows.append((f"file://{root}/p=1/", 0, True, CUTOFF - 10, "lake", "t/p=1/", None, "2027-01-15", "m"))
    df = spark.createDataFrame(  # every configuration's row: the plan picks one per object
        inventory_rows, "path string, length long, isDir boolean, modificationTime long, bucket string, key string, "
                        "version_id string, inventory_date string, manifest_uri string").select(
        "*", F.lit(None).cast("boolean").alias("is_latest"), F.lit(None).cast("boolean").alias("is_delete_marker"))
    return df, inventory


@_PER_LAKE
@given(tables=_lakes)
def test_the_clock_releases_no_kept_file_before_the_plan_says_and_one_just_after(spark, tmp_path_factory, tables):
    """A table's plan says when the clock alone first releases a file it keeps (``released_ms``, the report's
    ``quiet_until``): a plain-Python model of the same history finds the candidates growing at no earlier cutoff,
    and the plan at the cutoff just past it has the new ones, exactly as the model; each table of the lake at
    its own moment."""
    written, df, models = _write(spark, tmp_path_factory.mktemp("quiet"), tables)

    def model(i: int, cutoff: int) -> set[str]:
        h, inventory = written[i], models[i]
        keep = h.needed(cutoff)
        return {f"file://{h.root}/{p}" for p, t in inventory.items() if p not in keep and not h.hidden(p) and t < cutoff}

    def first_release(i: int) -> int | None:
        """The first cutoff past CUTOFF at which the model's candidates grow (they only grow)."""
        h, now = written[i], model(i, CUTOFF)
        moments = sorted({t + 1 for t in models[i].values()} | {ts + 1 for ts in h.removed.values()})
        return next((c for c in moments if c > CUTOFF and model(i, c) != now), None)

    replay = replay_logs(spark, [log_segment(Storage(spark), str(h.root)) for h in written], check_paths=False)
    assert not replay.failures
    roots = [f"file://{h.root}" for h in written]

    def plan(cutoffs: list[int]):
        policies = [TablePolicy.for_state(replay.states[root], cutoff) for root, cutoff in zip(roots, cutoffs)]
        planned = plan_tables(spark, df, replay.files, policies, inventory_as_of_ms=NOW)
        return planned, _by_table([r["path"] for r in planned.candidates.collect()], written)

    planned, candidates = plan([CUTOFF] * len(roots))
    assert candidates == [model(i, CUTOFF) for i in range(len(roots))]
    released = [planned.tables[root].released_ms for root in roots]
    assert released == [None if (first := first_release(i)) is None else first - 1 for i in range(len(roots))], released
    later = [CUTOFF if r is None else r + 1 for r in released]
    _, after = plan(later)
    for i, r in enumerate(released):
        assert after[i] == model(i, later[i]) and (r is None or after[i] > candidates[i]), (i, r)
    replay.release()
