"""Property: over generated histories and inventories, no file the table needs is ever a candidate.

Histories are written as real ``_delta_log`` JSON commits (adds, removes, re-adds of a
removed file, deletion-vector updates, URL-encoded paths); inventories list every file
ever written, deletion-vector files, hidden files, orphans, and a neighbour table's files,
with modification times on both sides of the cutoff. A plain-Python model says what
must be kept; the Spark plan must agree exactly.
"""

from __future__ import annotations

import json
import os
from urllib.parse import quote

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lakeio.storage import Storage
from vacuum_jobs.keep import dv_relative_path
from vacuum_jobs.log_replay import replay_logs
from vacuum_jobs.log_segment import log_segment
from vacuum_jobs.plan import TablePolicy, plan_tables

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


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(history=st.lists(step, min_size=1, max_size=14), orphan_times=st.lists(times, min_size=1, max_size=4),
       partitioned=st.booleans())
def test_nothing_the_table_needs_is_ever_a_candidate(spark, tmp_path_factory, history, orphan_times, partitioned):
    base = tmp_path_factory.mktemp("prop")
    root = base / "t"
    log = root / "_delta_log"
    log.mkdir(parents=True)
    live: dict[str, tuple] = {}  # path -> (dv, written)
    removed: dict[tuple, int] = {}  # (path, dv file) -> deletionTimestamp
    ever: dict[str, int] = {}  # every data file written -> mtime
    commits = [[{"protocol": {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["deletionVectors"],
                              "writerFeatures": ["deletionVectors"]}},
                {"metaData": {"id": "t", "format": {"provider": "parquet", "options": {}}, "schemaString": "{}",
                              "partitionColumns": ["_p"] if partitioned else [], "configuration": {}}}]]
    for op, folder, name, at, dv in history:
        path = folder + name
        actions = []
        if op in ("add", "readd") and (path not in live):
            if op == "readd" and not any(p == path for p, _ in removed):
                continue
            actions.append({"add": {"path": quote(path), "size": 10, "modificationTime": at, "dataChange": True,
                                    "partitionValues": {}, "deletionVector": _dv_json(dv)}})
            live[path] = (dv, at)
            ever.setdefault(path, at)
        elif op == "remove" and path in live:
            old_dv, _ = live.pop(path)
            actions.append({"remove": {"path": quote(path), "deletionTimestamp": at, "dataChange": True,
                                       "deletionVector": _dv_json(old_dv)}})
            removed[(path, _dv_file(old_dv))] = at
        elif op == "dv_update" and path in live and dv not in (None, live[path][0]):
            old_dv, written = live[path]
            actions.append({"remove": {"path": quote(path), "deletionTimestamp": at, "dataChange": True,
                                       "deletionVector": _dv_json(old_dv)}})
            actions.append({"add": {"path": quote(path), "size": 10, "modificationTime": written, "dataChange": True,
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
    for (p, d), ts in removed.items():
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
    for file_name in os.listdir(log):
        inventory[f"_delta_log/{file_name}"] = CUTOFF - 10
    rows = [(f"file://{root}/{p}", 10, False, t) for p, t in inventory.items()]
    rows += [(f"file://{base}/t_backup/{p}", 10, False, CUTOFF - 10) for p in ("x.parquet", "p=1/y.parquet")]
    rows += [(f"file://{root}/p=1/", 0, True, CUTOFF - 10)]

    def hidden(p):
        return any(s.startswith(("_", ".")) and s not in ("_change_data",) and not (partitioned and s.startswith("_p="))
                   for s in p.split("/"))

    expected = {f"file://{root}/{p}" for p, t in inventory.items() if p not in keep and not hidden(p) and t < CUTOFF}

    replay = replay_logs(spark, [log_segment(Storage(spark), str(root))])
    assert not replay.failures
    df = spark.createDataFrame(rows, "path string, length long, isDir boolean, modificationTime long")
    plan = plan_tables(spark, df, replay.files, [TablePolicy(f"file://{root}", CUTOFF, ("_p",) if partitioned else ())],
                       inventory_as_of_ms=NOW)
    candidates = {r["path"] for r in plan.candidates.collect()}
    plan.release()
    replay.release()

    kept_uris = {f"file://{root}/{p}" for p in keep}
    assert not candidates & kept_uris
    assert candidates == expected
