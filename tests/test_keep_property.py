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
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F

from lakeio.deltalog.keep import dv_relative_path
from lakeio.deltalog.policy import TablePolicy
from lakeio.deltalog.references import needed_elsewhere
from lakeio.deltalog.replay import replay_logs
from lakeio.deltalog.segments import log_segment
from lakeio.storage import Storage
from vacuum_jobs.batch_vacuum import _table_of_vanished_log_file
from vacuum_jobs.plan import plan_tables
from vacuum_jobs.recheck import recheck_logs

pytestmark = pytest.mark.slow  # generated histories, each planned on Spark

NOW = 1_800_000_000_000
CUTOFF = NOW - 7 * 86_400_000
_Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"

names = st.sampled_from(["part-0.parquet", "a b.parquet", "x%y.parquet", "plus+.parquet", "ü.parquet",
                         "part-1.parquet", "part-2.parquet", "c=d.parquet"])
folders = st.sampled_from(["", "p=1/", "p=2/", "p=a b/", "_p=x/"])
times = st.sampled_from([CUTOFF - 86_400_000, CUTOFF - 1, CUTOFF, CUTOFF + 1, NOW - 1000])


def _z85(data: bytes) -> str:
    out = ""
    for start in range(0, len(data), 4):
        value = int.from_bytes(data[start:start + 4], "big")
        out += "".join(_Z85[(value // 85 ** k) % 85] for k in (4, 3, 2, 1, 0))
    return out


dvs = st.one_of(st.none(), st.tuples(st.sampled_from(["", "ab", "zz9"]), st.binary(min_size=16, max_size=16).map(_z85)),
                st.just("inline"))
step = st.tuples(st.sampled_from(["add", "remove", "readd", "dv_update"]), folders, names, times, dvs)
spellings = st.lists(st.sampled_from(["plain", "dot", "dotdot", "absolute", "uri"]), min_size=1, max_size=5)


def _spelled(root, path: str, how: str) -> str:
    """One log spelling of ``path`` (relative to ``root``) that Hadoop ``Path`` resolves to the same file."""
    return {
        "plain": quote(path),
        "dot": "./" + quote(path),
        "dotdot": "zz/../" + quote(path),
        "absolute": quote(f"{root}/{path}"),
        "uri": "file:" + quote(f"{root}/{path}"),
    }[how]


def _dv_json(dv):
    if dv is None:
        return None
    if dv == "inline":
        return {"storageType": "i", "pathOrInlineDv": "wi5b=000010000siXQKl0rr91000f55c8Xg0@@D72lkbi5=-{L", "offset": None,
                "sizeInBytes": 40, "cardinality": 6}
    prefix, encoded = dv
    return {"storageType": "u", "pathOrInlineDv": prefix + encoded, "offset": 1, "sizeInBytes": 36, "cardinality": 2}


def _dv_file(dv):
    if dv is None or dv == "inline":
        return None
    return dv_relative_path(dv[0] + dv[1])


@settings(max_examples=int(os.environ.get("KEEP_EXAMPLES", "10")), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(history=st.lists(step, min_size=1, max_size=14), orphan_times=st.lists(times, min_size=1, max_size=4),
       partitioned=st.booleans(), spelling=spellings, iceberg=st.booleans(),
       duplicates=st.lists(times, max_size=4), late_readd=st.booleans(), keep_commits=st.booleans(),
       clone=st.lists(st.tuples(st.integers(0, 20), st.one_of(st.none(), times)), max_size=3), vanish=st.booleans())
def test_nothing_the_table_needs_is_ever_a_candidate(spark, tmp_path_factory, history, orphan_times, partitioned,
                                                      spelling, iceberg, duplicates, late_readd, keep_commits, clone,
                                                      vanish):
    base = tmp_path_factory.mktemp("prop")
    root = base / "t"
    log = root / "_delta_log"
    log.mkdir(parents=True)
    live: dict[str, tuple] = {}  # path -> (dv, written)
    removed: dict[tuple, int] = {}  # (path, dv file) -> deletionTimestamp
    ever: dict[str, int] = {}  # every data file written -> mtime
    commits = [[{"protocol": {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["deletionVectors"],
                              "writerFeatures": ["deletionVectors"]}},
                {"metaData": {"id": "t", "format": {"provider": "parquet", "options": {}}, "schemaString": json.dumps({
                    "type": "struct", "fields": [{"name": n, "type": "string", "nullable": True, "metadata": {}}
                                                 for n in ["id", *(["_p"] if partitioned else [])]]}),
                              "partitionColumns": ["_p"] if partitioned else [],
                              "configuration": {"delta.universalFormat.enabledFormats": "iceberg"} if iceberg else {}}}]]
    spelled: dict[str, str] = {}  # one spelling per file, kept for its whole life (Delta reconciles by spelling)

    def spell(path: str) -> str:
        return spelled.setdefault(path, _spelled(root, path, spelling[len(spelled) % len(spelling)]))

    for op, folder, name, at, dv in history:
        path = folder + name
        actions = []
        if op in ("add", "readd") and (path not in live):
            if op == "readd" and not any(p == path for p, _ in removed):
                continue
            actions.append({"add": {"path": spell(path), "size": 10, "modificationTime": at, "dataChange": True,
                                    "partitionValues": {}, "deletionVector": _dv_json(dv)}})
            live[path] = (dv, at)
            ever.setdefault(path, at)
        elif op == "remove" and path in live:
            old_dv, _ = live.pop(path)
            actions.append({"remove": {"path": spell(path), "deletionTimestamp": at, "dataChange": True,
                                       "deletionVector": _dv_json(old_dv)}})
            removed[(path, _dv_file(old_dv))] = at
        elif op == "dv_update" and path in live and dv not in (None, live[path][0]):
            old_dv, written = live[path]
            actions.append({"remove": {"path": spell(path), "deletionTimestamp": at, "dataChange": True,
                                       "deletionVector": _dv_json(old_dv)}})
            actions.append({"add": {"path": spell(path), "size": 10, "modificationTime": written, "dataChange": True,
                                    "partitionValues": {}, "deletionVector": _dv_json(dv)}})
            removed[(path, _dv_file(old_dv))] = at
            live[path] = (dv, written)
        if actions:
            commits.append(actions)
    for version, actions in enumerate(commits):
        (log / f"{version:020d}.json").write_text("\n".join(json.dumps(a) for a in actions) + "\n")

    keep = {p for p in live} | {p for (p, _), ts in removed.items() if ts >= CUTOFF}
    keep |= {_dv_file(dv) for dv, _ in live.values() if _dv_file(dv)}
    keep |= {d for (p, d), ts in removed.items() if d and ts >= CUTOFF}
    inventory = {p: t for p, t in ever.items()}
    for (_, d), ts in removed.items():
        if d:
            inventory.setdefault(d, ts - 1)
    for dv, written in live.values():
        if _dv_file(dv):
            inventory.setdefault(_dv_file(dv), written)
    for i, t in enumerate(orphan_times):
        inventory[f"orphan-{i}.parquet"] = t
        inventory[f"p=1/_SUCCESS{i}"] = t
        inventory[f"_p=x/.crc{i}"] = t
        inventory[f"_change_data/cdc-{i}.parquet"] = t
        inventory[f"metadata/v{i}.metadata.json"] = t  # Iceberg's, when UniForm writes it; an orphan otherwise
        inventory[f"p=1/metadata/snap-{i}.avro"] = t
    for file_name in os.listdir(log):
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

    def hidden(p):
        segments = p.split("/")
        return (any(s.startswith(("_", ".")) and s not in ("_change_data",) and not (partitioned and s.startswith("_p="))
                    for s in segments)
                or (iceberg and "metadata" in segments))

    # A shallow clone names some of the files ever written: live (None), or removed at a time.
    written = sorted(ever)
    cloned = {written[i % len(written)]: removed_at for i, removed_at in clone} if written else {}
    clone_root = base / "clone"
    (clone_root / "_delta_log").mkdir(parents=True)
    clone_log = [commits[0]] + [[{"add": {"path": "file:" + quote(f"{root}/{p}"), "size": 10, "modificationTime": 1,
                                          "dataChange": True, "partitionValues": {}}}] for p in cloned]
    clone_log += [[{"remove": {"path": "file:" + quote(f"{root}/{p}"), "deletionTimestamp": at, "dataChange": True}}]
                  for p, at in cloned.items() if at is not None]
    for version, actions in enumerate(clone_log):
        (clone_root / "_delta_log" / f"{version:020d}.json").write_text("\n".join(json.dumps(a) for a in actions) + "\n")
    keep |= {p for p, at in cloned.items() if at is None or at >= CUTOFF}

    expected = {f"file://{root}/{p}" for p, t in inventory.items() if p not in keep and not hidden(p) and t < CUTOFF}

    root_uri, clone_uri = f"file://{root}", f"file://{clone_root}"
    replay = replay_logs(spark, [log_segment(Storage(spark), str(root))], check_paths=False, keep_commits=keep_commits)
    assert not replay.failures
    outside = replay_logs(spark, [log_segment(Storage(spark), str(clone_root))], check_paths=False)
    references = needed_elsewhere(outside, {clone_uri: CUTOFF}, [root_uri, clone_uri], check_paths=True)
    assert not outside.failures and not references.unknown
    df = spark.createDataFrame(  # every configuration's row: the plan picks one per object
        inventory_rows, "path string, length long, isDir boolean, modificationTime long, bucket string, key string, "
                        "version_id string, inventory_date string, manifest_uri string").select(
        "*", F.lit(None).cast("boolean").alias("is_latest"), F.lit(None).cast("boolean").alias("is_delete_marker"))
    # A writer's log cleanup removes the commits the summary read: kept ones are never read again,
    # and otherwise their loss names this table alone.
    hidden_away = base / "cleaned-up"
    if vanish:
        hidden_away.mkdir()
        for commit in log.glob("*.json"):
            commit.rename(hidden_away / commit.name)
    try:
        plan = plan_tables(spark, df, replay.files, [TablePolicy.for_state(replay.states[root_uri], CUTOFF)],
                           inventory_as_of_ms=NOW, other_roots=[clone_uri], references=references.frame)
        planned = [r["path"] for r in plan.candidates.collect()]
    except Exception as exc:
        if not vanish or keep_commits:
            raise
        assert _table_of_vanished_log_file(exc, [clone_uri, root_uri]) == root_uri
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
            {"add": {"path": spell(relative), "size": 10, "modificationTime": NOW, "dataChange": True,
                     "partitionValues": {}}}) + "\n")
    recheck = recheck_logs(spark, Storage(spark), {str(root): len(commits) - 1})
    assert not recheck.refused
    deletable = {r["path"] for r in recheck.without_referenced(plan.candidates).collect()}
    replay.release()
    assert deletable == expected - set(readded)
