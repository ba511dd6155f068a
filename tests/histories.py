"""Generated Delta table histories, written as real ``_delta_log`` JSON commits.

A history is a list of steps: add a file, remove it, re-add a removed one, or replace a live file's
deletion vector. Paths are URL-encoded in the log and spelled the ways Hadoop ``Path`` resolves to
the same file (relative, ``./x``, ``a/../x``, scheme-less absolute, full URI), one spelling per file
for its whole life (Delta reconciles actions by spelling). The keep-rule property test checks our
plan against a plain-Python model of these histories; Delta's referee checks it against Delta's
own VACUUM. Each gives the steps' times on its own clock: the strategies take them as a parameter.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

from hypothesis import strategies as st

from lakeio.deltalog.keep import dv_relative_path

_Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
INLINE_DV = {"storageType": "i", "pathOrInlineDv": "wi5b=000010000siXQKl0rr91000f55c8Xg0@@D72lkbi5=-{L", "offset": None,
             "sizeInBytes": 40, "cardinality": 6}

names = st.sampled_from(["part-0.parquet", "a b.parquet", "x%y.parquet", "plus+.parquet", "ü.parquet",
                         "part-1.parquet", "part-2.parquet", "c=d.parquet"])
folders = st.sampled_from(["", "p=1/", "p=2/", "p=a b/", "_p=x/"])
spellings = st.lists(st.sampled_from(["plain", "dot", "dotdot", "absolute", "uri"]), min_size=1, max_size=5)


def _z85(data: bytes) -> str:
    out = ""
    for start in range(0, len(data), 4):
        value = int.from_bytes(data[start:start + 4], "big")
        out += "".join(_Z85[(value // 85 ** k) % 85] for k in (4, 3, 2, 1, 0))
    return out


# A deletion vector: none, or a file's (random prefix folder and z85 id); inline ones where asked.
_dv_files = st.tuples(st.sampled_from(["", "ab", "zz9"]), st.binary(min_size=16, max_size=16).map(_z85))


def steps(times: st.SearchStrategy[int], inline_dvs: bool = True) -> st.SearchStrategy[list[tuple]]:
    """Histories of 1-14 steps ``(op, folder, name, time, deletion vector)``, times drawn from ``times``."""
    dvs = st.one_of(st.none(), _dv_files, *([st.just("inline")] if inline_dvs else []))
    step = st.tuples(st.sampled_from(["add", "remove", "readd", "dv_update"]), folders, names, times, dvs)
    return st.lists(step, min_size=1, max_size=14)


def clones(times: st.SearchStrategy[int]) -> st.SearchStrategy[list[tuple]]:
    """Up to 3 files a shallow clone names: ``(which written file, removed at or None for live)``."""
    return st.lists(st.tuples(st.integers(0, 20), st.one_of(st.none(), times)), max_size=3)


def dv_json(dv) -> dict | None:
    if dv is None:
        return None
    if dv == "inline":
        return INLINE_DV
    prefix, encoded = dv
    return {"storageType": "u", "pathOrInlineDv": prefix + encoded, "offset": 1, "sizeInBytes": 36, "cardinality": 2}


def dv_file(dv) -> str | None:
    if dv is None or dv == "inline":
        return None
    return dv_relative_path(dv[0] + dv[1])


def _spelled(root: Path, path: str, how: str) -> str:
    """One log spelling of ``path`` (relative to ``root``) that Hadoop ``Path`` resolves to the same file."""
    return {
        "plain": quote(path),
        "dot": "./" + quote(path),
        "dotdot": "zz/../" + quote(path),
        "absolute": quote(f"{root}/{path}"),
        "uri": "file:" + quote(f"{root}/{path}"),
    }[how]


def write_commits(log: Path, commits: list[list[dict]]) -> None:
    log.mkdir(parents=True, exist_ok=True)
    for version, actions in enumerate(commits):
        (log / f"{version:020d}.json").write_text("\n".join(json.dumps(a) for a in actions) + "\n")


@dataclass
class History:
    """A table's generated log, written, and what it says about each file."""

    root: Path
    partitioned: bool
    iceberg: bool
    spelling: list[str]
    commits: list[list[dict]] = field(default_factory=list)
    live: dict[str, tuple] = field(default_factory=dict)  # path -> (deletion vector, written at)
    removed: dict[tuple, int] = field(default_factory=dict)  # (path, its deletion vector's file) -> deletionTimestamp
    ever: dict[str, int] = field(default_factory=dict)  # every data file written -> modification time
    spelled: dict[str, str] = field(default_factory=dict)

    def spell(self, path: str) -> str:
        return self.spelled.setdefault(path, _spelled(self.root, path, self.spelling[len(self.spelled) % len(self.spelling)]))

    def needed(self, cutoff: int) -> set[str]:
        """What a vacuum at ``cutoff`` keeps for the table itself: live files, tombstones not older than
        the cutoff, and the deletion-vector files of both."""
        keep = set(self.live) | {p for (p, _), ts in self.removed.items() if ts >= cutoff}
        keep |= {dv_file(dv) for dv, _ in self.live.values() if dv_file(dv)}
        return keep | {d for (_, d), ts in self.removed.items() if d and ts >= cutoff}

    def files(self) -> dict[str, int]:
        """Every file the history wrote, data and deletion vectors, with its modification time."""
        written = dict(self.ever)
        for (_, d), ts in self.removed.items():
            if d:
                written.setdefault(d, ts - 1)
        for dv, at in self.live.values():
            if dv_file(dv):
                written.setdefault(dv_file(dv), at)
        return written

    def hidden(self, path: str) -> bool:
        """Kept by the hidden rule: a ``_x``/``.x`` segment (but change data and partition folders), and
        Iceberg's ``metadata`` folders with UniForm on."""
        segments = path.split("/")
        return (any(s.startswith(("_", ".")) and s != "_change_data" and not (self.partitioned and s.startswith("_p="))
                    for s in segments)
                or (self.iceberg and "metadata" in segments))


def write_history(root: Path, history: list[tuple], *, partitioned: bool, iceberg: bool, spelling: list[str]) -> History:
    """The table's ``_delta_log`` under ``root``: a protocol with deletion vectors and a metadata, then
    one commit per step that changes something (a remove of a file not live, say, is dropped)."""
    h = History(root, partitioned, iceberg, spelling)
    h.commits.append([
        {"protocol": {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["deletionVectors"],
                      "writerFeatures": ["deletionVectors"]}},
        {"metaData": {"id": "t", "format": {"provider": "parquet", "options": {}}, "schemaString": json.dumps({
            "type": "struct", "fields": [{"name": n, "type": "string", "nullable": True, "metadata": {}}
                                         for n in ["id", *(["_p"] if partitioned else [])]]}),
            "partitionColumns": ["_p"] if partitioned else [],
            "configuration": {"delta.universalFormat.enabledFormats": "iceberg"} if iceberg else {}}}])
    for op, folder, name, at, dv in history:
        path = folder + name
        actions = []
        if op in ("add", "readd") and (path not in h.live):
            if op == "readd" and not any(p == path for p, _ in h.removed):
                continue
            actions.append({"add": {"path": h.spell(path), "size": 10, "modificationTime": at, "dataChange": True,
                                    "partitionValues": {}, "deletionVector": dv_json(dv)}})
            h.live[path] = (dv, at)
            h.ever.setdefault(path, at)
        elif op == "remove" and path in h.live:
            old_dv, _ = h.live.pop(path)
            actions.append({"remove": {"path": h.spell(path), "deletionTimestamp": at, "dataChange": True,
                                       "deletionVector": dv_json(old_dv)}})
            h.removed[(path, dv_file(old_dv))] = at
        elif op == "dv_update" and path in h.live and dv not in (None, h.live[path][0]):
            old_dv, written = h.live[path]
            actions.append({"remove": {"path": h.spell(path), "deletionTimestamp": at, "dataChange": True,
                                       "deletionVector": dv_json(old_dv)}})
            actions.append({"add": {"path": h.spell(path), "size": 10, "modificationTime": written, "dataChange": True,
                                    "partitionValues": {}, "deletionVector": dv_json(dv)}})
            h.removed[(path, dv_file(old_dv))] = at
            h.live[path] = (dv, written)
        if actions:
            h.commits.append(actions)
    write_commits(root / "_delta_log", h.commits)
    return h


def write_clone(h: History, clone_root: Path, clone: list[tuple]) -> dict[str, int | None]:
    """A shallow clone at ``clone_root`` naming some of the files ``h`` ever wrote by absolute URI, live
    or removed at a time; which files, with their removal time (None: live)."""
    written = sorted(h.ever)
    cloned = {written[i % len(written)]: removed_at for i, removed_at in clone} if written else {}
    log = [h.commits[0]] + [[{"add": {"path": "file:" + quote(f"{h.root}/{p}"), "size": 10, "modificationTime": 1,
                                      "dataChange": True, "partitionValues": {}}}] for p in cloned]
    log += [[{"remove": {"path": "file:" + quote(f"{h.root}/{p}"), "deletionTimestamp": at, "dataChange": True}}]
            for p, at in cloned.items() if at is not None]
    write_commits(clone_root / "_delta_log", log)
    return cloned


def debris(times: list[int]) -> dict[str, int]:
    """Files no commit names, one set per time: an orphan, hidden files, change data, Iceberg's metadata
    (UniForm's, when it is on; an orphan otherwise)."""
    found: dict[str, int] = {}
    for i, t in enumerate(times):
        found[f"orphan-{i}.parquet"] = t
        found[f"p=1/_SUCCESS{i}"] = t
        found[f"_p=x/.crc{i}"] = t
        found[f"_change_data/cdc-{i}.parquet"] = t
        found[f"metadata/v{i}.metadata.json"] = t
        found[f"p=1/metadata/snap-{i}.avro"] = t
    return found
