"""Finding deliveries under a destination prefix laid out as S3 writes them:
``<root>/<source-bucket>/<config-id>/<YYYY-MM-DDTHH-MMZ>/manifest.json``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date

from inventory_etl.manifest import DELIVERY_FOLDER
from lakeio import uris
from lakeio.storage import Storage


@dataclass(frozen=True)
class Discovery:
    inventory_date: date | None
    manifests: list[str]  # newest delivery per (bucket, config) on that date
    # (bucket, config) pairs with deliveries, but none on that date: their newest date
    stale: dict[tuple[str, str], date] = field(default_factory=dict)


def discover(
    storage: Storage,
    root: str,
    on_date: date | None = None,
    source_buckets: list[str] | None = None,
    config_ids: list[str] | None = None,
) -> Discovery:
    """Pick the newest delivery per (bucket, config) for ``on_date`` (default: newest date present)."""
    found: dict[tuple[str, str], dict[date, str]] = {}
    for status in storage.glob(uris.join(uris.to_uri(root), "*", "*", "*", "manifest.json")):
        folder_uri = uris.parent(status.uri)
        folder = uris.name(folder_uri)
        config_id = uris.name(uris.parent(folder_uri))
        bucket = uris.name(uris.parent(uris.parent(folder_uri)))
        m = DELIVERY_FOLDER.match(folder)
        if not m or (source_buckets and bucket not in source_buckets) or (config_ids and config_id not in config_ids):
            continue
        try:
            day = date(int(m.group(1)), int(m.group(2)), int(m.group(3)))
        except ValueError:
            continue
        per_day = found.setdefault((bucket, config_id), {})
        # Folder names sort by time, so the greatest is the newest delivery of that day.
        if day not in per_day or folder > uris.name(uris.parent(per_day[day])):
            per_day[day] = status.uri
    if not found:
        return Discovery(on_date, [])
    target = on_date or max(day for per_day in found.values() for day in per_day)
    manifests = sorted(per_day[target] for per_day in found.values() if target in per_day)
    stale = {pair: max(per_day) for pair, per_day in found.items() if target not in per_day}
    return Discovery(target, manifests, stale)
