"""Test helpers: objects with awkward keys, and ways to damage a delivery like the real world does."""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timezone
from pathlib import Path

from inventory_etl.producer import InventoryObject, write_delivery

DELIVERED = datetime(2026, 11, 21, 1, 0, tzinfo=timezone.utc)
T0 = 1_763_000_000_000  # epoch ms, November 2025

AWKWARD_OBJECTS = [
    InventoryObject("plain/part-0.parquet", 100, T0, e_tag="e1"),
    InventoryObject("with space/a b.txt", 7, T0 + 1, e_tag="e2", storage_class="STANDARD_IA"),
    InventoryObject("plus+sign.txt", 8, T0 + 2, e_tag="e3"),
    InventoryObject("percent%2Bliteral.txt", 9, T0 + 3, e_tag="e4", storage_class="GLACIER"),
    InventoryObject("ünïcødé/ключ.json", 10, T0 + 4, e_tag="e5"),
    InventoryObject("folder/", 0, T0 + 5, e_tag="e6"),
]

VERSIONED_OBJECTS = AWKWARD_OBJECTS[:2] + [
    InventoryObject("v.txt", 11, T0 + 10, e_tag="new", version_id="v2", is_latest=True),
    InventoryObject("v.txt", 12, T0 + 9, e_tag="old", version_id="v1", is_latest=False),
    InventoryObject("gone.txt", None, T0 + 20, e_tag=None, storage_class=None, version_id="dm1",
                    is_latest=True, is_delete_marker=True),
    InventoryObject("gone.txt", 13, T0 + 19, e_tag="g", version_id="g1", is_latest=False),
]


def deliver(root: Path, bucket: str = "src", objects=AWKWARD_OBJECTS, fmt: str = "Parquet",
            config: str = "daily", when: datetime = DELIVERED, versioned: bool = False, rows_per_file: int = 1_000_000,
            object_lock: bool = False) -> Path:
    return Path(write_delivery(str(root), bucket, config, objects, when, file_format=fmt,
                               versioned=versioned, rows_per_file=rows_per_file, object_lock=object_lock))


def rewrite_manifest(manifest: Path, change=None, raw: str | None = None) -> None:
    """Apply ``change`` to the manifest document (or write ``raw``); keep manifest.checksum honest."""
    if raw is None:
        doc = json.loads(manifest.read_text())
        change(doc)
        raw = json.dumps(doc)
    manifest.write_bytes(raw.encode())
    (manifest.parent / "manifest.checksum").write_text(hashlib.md5(raw.encode()).hexdigest())


def data_files(manifest: Path) -> list[Path]:
    """The data files this manifest lists, in its order."""
    keys = [f["key"] for f in json.loads(manifest.read_text())["files"]]
    return [manifest.parent.parent / "data" / key.rsplit("/", 1)[1] for key in keys]


def replace_data_file(manifest: Path, content: bytes) -> Path:
    """Overwrite the first data file and make the manifest agree with it (size and MD5)."""
    target = data_files(manifest)[0]
    target.write_bytes(content)

    def agree(doc):
        doc["files"][0]["size"] = len(content)
        doc["files"][0]["MD5checksum"] = hashlib.md5(content).hexdigest()

    rewrite_manifest(manifest, agree)
    return target
