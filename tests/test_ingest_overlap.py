"""Unattended daily ingestion: runs that overlap on one partition, crashed first commits, odd
manifests. Interleavings are forced: one run is held at its commit (its ``before_commit``)
while the other commits, then let go."""

from __future__ import annotations

import threading
from datetime import datetime, timezone

import pytest
from deltalake import DeltaTable

from inventory_etl.ingestion import IngestInventory
from tests.deliveries import AWKWARD_OBJECTS, deliver, rewrite_manifest

EARLY = datetime(2026, 11, 21, 1, 0, tzinfo=timezone.utc)
LATE = datetime(2026, 11, 21, 13, 0, tzinfo=timezone.utc)

pytestmark = pytest.mark.slow  # several whole ingestions each


def ingest(spark, table, manifests, **options):
    return IngestInventory(spark, str(table), **options).execute([str(m) for m in manifests])


def keys_of(table, bucket: str = "src") -> list[str]:
    return sorted(r["key"] for r in DeltaTable(str(table)).to_pyarrow_table().to_pylist() if r["bucket"] == bucket)


def run_held_while(spark, table, held_manifest, other_manifest):
    """Run A (``held_manifest``) is held at its first commit attempt (its ``before_commit``) while run B
    (``other_manifest``) runs to the end; then A goes on. Returns both results."""
    results, reached, release = {}, threading.Event(), threading.Event()

    def hold(_table_uri: str) -> None:
        if not release.is_set():
            reached.set()
            assert release.wait(timeout=300), "never released"

    a = threading.Thread(name="A", target=lambda: results.update(
        A=ingest(spark, table, [held_manifest], before_commit=hold)))
    a.start()
    try:
        assert reached.wait(timeout=300), "run A never reached its commit"
        results["B"] = ingest(spark, table, [other_manifest])
    finally:
        release.set()
        a.join(timeout=300)
    return results["A"], results["B"]


@pytest.mark.jars_too  # with Delta's own transaction too: its conflicts, our claims in its commits
def test_an_older_delivery_committing_after_a_newer_one_is_refused_by_name(spark, tmp_path):
    early = deliver(tmp_path / "dest", "src", objects=AWKWARD_OBJECTS, when=EARLY)
    late = deliver(tmp_path / "dest", "src", objects=AWKWARD_OBJECTS[:2], when=LATE)
    ingest(spark, tmp_path / "inv", [deliver(tmp_path / "dest0", "other", objects=AWKWARD_OBJECTS[:1])])

    older, newer = run_held_while(spark, tmp_path / "inv", early, late)

    assert newer.deliveries[0].status == "ingested"
    [lost] = older.deliveries
    assert lost.status == "refused" and lost.rows == 0
    assert f"another run committed delivery file://{late}" in lost.error and "newer" in lost.error
    assert keys_of(tmp_path / "inv") == sorted(o.key for o in AWKWARD_OBJECTS[:2])  # the newer delivery, alone


@pytest.mark.jars_too  # with Delta's own transaction too: its conflicts, our claims in its commits
@pytest.mark.parametrize("table_exists", [True, False], ids=["new-partition", "new-table"])
def test_a_newer_delivery_committing_after_an_older_one_replaces_it_whole(spark, tmp_path, table_exists):
    early = deliver(tmp_path / "dest", "src", objects=AWKWARD_OBJECTS, when=EARLY)
    late = deliver(tmp_path / "dest", "src", objects=AWKWARD_OBJECTS[:2], when=LATE)
    if table_exists:  # the partition is new to both runs: no file of it for either commit to remove
        ingest(spark, tmp_path / "inv", [deliver(tmp_path / "dest0", "other", objects=AWKWARD_OBJECTS[:1])])

    newer, older = run_held_while(spark, tmp_path / "inv", late, early)

    assert [older.deliveries[0].status, newer.deliveries[0].status] == ["ingested", "ingested"]
    # never the rows of both deliveries: the newer one's commit took the older one's files out
    assert keys_of(tmp_path / "inv") == sorted(o.key for o in AWKWARD_OBJECTS[:2])
    again = ingest(spark, tmp_path / "inv", [early])
    assert again.deliveries[0].status == "refused" and "older than the delivery the table holds" in again.deliveries[0].error


@pytest.mark.jars_too  # with Delta's own transaction too: its conflicts, our claims in its commits
def test_the_same_delivery_ingested_twice_at_once_lands_once(spark, tmp_path):
    manifest = deliver(tmp_path / "dest", "src")
    ingest(spark, tmp_path / "inv", [deliver(tmp_path / "dest0", "other", objects=AWKWARD_OBJECTS[:1])])

    first, second = run_held_while(spark, tmp_path / "inv", manifest, manifest)

    assert {first.deliveries[0].status, second.deliveries[0].status} == {"ingested"}
    assert keys_of(tmp_path / "inv") == sorted(o.key for o in AWKWARD_OBJECTS)


# A writer's random part, fixed: a test's id is the same in every collection (.ci/lines.txt, --deselect).
STAGED = "5f0c2a9e-8d41-4b7a-9c3e-2b6d8e1f7a04"


@pytest.mark.jars_too
@pytest.mark.parametrize("left_behind", [
    f"_commit_{STAGED}.json.tmp",  # delta-rs on S3 stages a commit so before the rename
    f"{0:020d}.json#1",  # delta-rs on a local disk, before the link
    f".{0:020d}.json.{STAGED}.tmp",  # Delta's JVM writer on Hadoop file systems, before the rename
    f"..{0:020d}.json.{STAGED}.tmp.crc",  # ... and the checksum Hadoop's local file system writes beside it
    "_staged_commits/",  # a folder Delta 4 makes first
    "_last_checkpoint",  # a hint with nothing it points to
    "notes.txt",
])
def test_a_delta_log_holding_no_commit_and_no_checkpoint_is_no_table_yet(spark, tmp_path, left_behind):
    log = tmp_path / "inv" / "_delta_log"
    log.mkdir(parents=True)
    if left_behind.endswith("/"):
        (log / left_behind).mkdir()
    else:
        (log / left_behind).write_text('{"commitInfo":{}}\n')

    result = ingest(spark, tmp_path / "inv", [deliver(tmp_path / "dest", "src")])

    assert result.deliveries[0].status == "ingested", result.deliveries[0].error
    assert keys_of(tmp_path / "inv") == sorted(o.key for o in AWKWARD_OBJECTS)


def test_a_folder_holding_data_beside_a_commit_less_log_is_not_ours_to_write_into(spark, tmp_path):
    (tmp_path / "other" / "_delta_log").mkdir(parents=True)
    (tmp_path / "other" / "part-0.parquet").write_text("somebody's data")

    refused = ingest(spark, tmp_path / "other", [deliver(tmp_path / "dest2", "src")])

    assert refused.deliveries[0].status == "refused" and "not empty and not a Delta table" in refused.deliveries[0].error


def test_a_manifest_listing_a_data_file_twice_names_the_entries(spark, tmp_path):
    manifest = deliver(tmp_path / "dest", "src")
    rewrite_manifest(manifest, lambda doc: doc["files"].append(dict(doc["files"][0])))

    [refused] = ingest(spark, tmp_path / "inv", [manifest]).deliveries

    assert refused.status == "refused"
    assert "files[1] lists the data file of files[0] again" in refused.error and str(manifest) in refused.error


def test_an_empty_delivery_empties_its_partition_and_says_so(spark, tmp_path):
    ingest(spark, tmp_path / "inv", [deliver(tmp_path / "dest", "src", when=EARLY)])
    empty = deliver(tmp_path / "dest", "src", when=LATE)
    rewrite_manifest(empty, lambda doc: doc.update(files=[]))

    [outcome] = ingest(spark, tmp_path / "inv", [empty]).deliveries

    assert (outcome.status, outcome.rows) == ("ingested", 0)
    assert "no data files" in outcome.reason and "empty delivery" in outcome.reason
    assert keys_of(tmp_path / "inv") == []
    assert ingest(spark, tmp_path / "inv", [empty]).deliveries[0].status == "skipped"  # and it is held
    fresh = deliver(tmp_path / "dest2", "new", when=LATE)
    rewrite_manifest(fresh, lambda doc: doc.update(files=[]))
    assert ingest(spark, tmp_path / "inv2", [fresh]).deliveries[0].status == "ingested"  # a new table, too
    assert DeltaTable(str(tmp_path / "inv2")).to_pyarrow_table().num_rows == 0
