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

Each example is a whole replay, plan and re-check (15-20 s): ``KEEP_EXAMPLES`` sets how many
run, 10 by default; ``KEEP_EXAMPLES=200`` for a deeper search.
"""

from __future__ import annotations

import json
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
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


@settings(max_examples=int(os.environ.get("KEEP_EXAMPLES", "10")), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(history=steps(times), orphan_times=st.lists(times, min_size=1, max_size=4),
       partitioned=st.booleans(), spelling=spellings, iceberg=st.booleans(),
       duplicates=st.lists(times, max_size=4), late_readd=st.booleans(), keep_commits=st.booleans(),
       clone=clones(times), vanish=st.booleans())
def test_nothing_the_table_needs_is_ever_a_candidate(spark, tmp_path_factory, history, orphan_times, partitioned,
                                                      spelling, iceberg, duplicates, late_readd, keep_commits, clone,
                                                      vanish):
    base = tmp_path_factory.mktemp("prop")
    root = base / "t"
    log = root / "_delta_log"
    h = write_history(root, history, partitioned=partitioned, iceberg=iceberg, spelling=spelling)
    commits = h.commits
    keep = h.needed(CUTOFF)
    df, inventory = _inventory(spark, base, h, orphan_times, duplicates)

    # A shallow clone names some of the files ever written: live (None), or removed at a time.
    clone_root = base / "clone"
    cloned = write_clone(h, clone_root, clone)
    keep |= {p for p, at in cloned.items() if at is None or at >= CUTOFF}

    expected = {f"file://{root}/{p}" for p, t in inventory.items() if p not in keep and not h.hidden(p) and t < CUTOFF}

    root_uri, clone_uri = f"file://{root}", f"file://{clone_root}"
    replay = replay_logs(spark, [log_segment(Storage(spark), str(root))], check_paths=False, keep_commits=keep_commits)
    assert not replay.failures
    outside = replay_logs(spark, [log_segment(Storage(spark), str(clone_root))], check_paths=False)
    references = needed_elsewhere(outside, {clone_uri: CUTOFF}, [root_uri, clone_uri], check_paths=True)
    assert not outside.failures and not references.unknown
    # A writer's log cleanup removes the commits the summary read: kept ones are never read again,
    # and otherwise their loss names this table alone.
    hidden_away = base / "cleaned-up"
    if vanish:
        hidden_away.mkdir()
        for commit in log.glob("*.json"):
            commit.rename(hidden_away / commit.name)
    try:
        with naming_vanished_logs([clone_uri, root_uri]):
            plan = plan_tables(spark, df, replay.files, [TablePolicy.for_state(replay.states[root_uri], CUTOFF)],
                               inventory_as_of_ms=NOW, other_roots=[clone_uri], references=references.frame)
            planned = [r["path"] for r in plan.candidates.collect()]
    except LogFileVanished as lost:
        if not vanish or keep_commits:
            raise
        assert lost.table_root == root_uri
        return
    finally:
        for commit in hidden_away.glob("*.json"):
            commit.rename(log / commit.name)
    assert len(planned) == len(set(planned))  # one row per object, however many configurations listed it
    assert set(planned) == expected
    assert not set(planned) & {f"file://{root}/{p}" for p in keep}

    # Another writer commits between planning and deleting: it re-adds (RESTOREs) a planned candidate.
    readded = sorted(p for p in expected if "/_" not in p and "/." not in p)[:1] if late_readd else []
    for uri in readded:
        relative = uri.removeprefix(root_uri + "/")
        (log / f"{len(commits):020d}.json").write_text(json.dumps(
            {"add": {"path": h.spell(relative), "size": 10, "modificationTime": NOW, "dataChange": True,
                     "partitionValues": {}}}) + "\n")
    recheck = recheck_logs(spark, Storage(spark), {str(root): len(commits) - 1})
    assert not recheck.refused
    rechecked = VacuumPlan.of({root_uri: Decision.VACUUM}, plan.candidates).without(files=recheck.referenced)
    deletable = {path for path, _ in rechecked.files()[root_uri]}
    replay.release()
    assert deletable == expected - set(readded)


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


@settings(max_examples=int(os.environ.get("KEEP_EXAMPLES", "10")), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(history=steps(times), orphan_times=st.lists(times, min_size=1, max_size=4), partitioned=st.booleans(),
       spelling=spellings, iceberg=st.booleans(), duplicates=st.lists(times, max_size=4))
def test_the_clock_releases_no_kept_file_before_the_plan_says_and_one_just_after(spark, tmp_path_factory, history,
                                                                                 orphan_times, partitioned, spelling,
                                                                                 iceberg, duplicates):
    """A table's plan says when the clock alone first releases a file it keeps (``released_ms``, the report's
    ``quiet_until``): a plain-Python model of the same history finds the candidates growing at no earlier cutoff,
    and the plan at the cutoff just past it has the new ones, exactly as the model."""
    base = tmp_path_factory.mktemp("quiet")
    h = write_history(base / "t", history, partitioned=partitioned, iceberg=iceberg, spelling=spelling)
    df, inventory = _inventory(spark, base, h, orphan_times, duplicates)

    def model(cutoff: int) -> set[str]:
        keep = h.needed(cutoff)
        return {f"file://{h.root}/{p}" for p, t in inventory.items() if p not in keep and not h.hidden(p) and t < cutoff}

    now = model(CUTOFF)
    moments = sorted({t + 1 for t in inventory.values()} | {ts + 1 for ts in h.removed.values()})
    first = next((c for c in moments if c > CUTOFF and model(c) != now), None)  # the candidates only grow
    replay = replay_logs(spark, [log_segment(Storage(spark), str(h.root))], check_paths=False)
    assert not replay.failures
    root_uri = f"file://{h.root}"

    def plan(cutoff: int):
        return plan_tables(spark, df, replay.files, [TablePolicy.for_state(replay.states[root_uri], cutoff)],
                           inventory_as_of_ms=NOW)

    planned = plan(CUTOFF)
    assert {r["path"] for r in planned.candidates.collect()} == now
    released = planned.tables[root_uri].released_ms
    assert released == (None if first is None else first - 1), (released, first)
    if released is not None:
        later = {r["path"] for r in plan(released + 1).candidates.collect()}
        assert later == model(released + 1) and later > now
    replay.release()
