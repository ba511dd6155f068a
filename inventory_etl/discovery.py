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
    manifests: list[str]  # the deliveries to ingest, oldest date first
    # (bucket, config) pairs with deliveries but none to ingest: their newest date
    stale: dict[tuple[str, str], date] = field(default_factory=dict)


def discover(
    storage: Storage,
    root: str,
    on_date: date | None = None,
    source_buckets: list[str] | None = None,
    config_ids: list[str] | None = None,
    held: dict[tuple[str, str], date] | None = None,
) -> Discovery:
    """The newest delivery of each day, per (bucket, config): for ``on_date`` only when given;
    otherwise every day from the newest the table holds for that pair (``held``) on, so late
    deliveries are not skipped (that day again, for a later re-delivery of it), or the pair's
    newest day when the table holds none."""
    held = held or {}
    found: dict[tuple[str, str], dict[date, str]] = {}
    for status in storage.glob(uris.join(uris.literal(uris.to_uri(root)), "*", "*", "*", "manifest.json")):
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
    chosen: list[tuple[date, str]] = []
    stale = {}
    for pair, per_day in found.items():
        if on_date:
            days = [on_date] if on_date in per_day else []
        elif pair in held:
            days = [d for d in per_day if d >= held[pair]]
        else:
            days = [max(per_day)]
        chosen += [(d, per_day[d]) for d in days]
        if not days:
            stale[pair] = max(per_day)
    return Discovery([uri for _, uri in sorted(chosen)], stale)
