"""Finding deliveries under a destination prefix laid out as S3 writes them:
``<root>/<source-bucket>/<config-id>/<YYYY-MM-DDTHH-MMZ>/manifest.json``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date, timedelta

from inventory_etl.manifest import DELIVERY_FOLDER
from lakeio.errors import InvalidOption
from lakeio.store import uris
from lakeio.store.filesystem import Storage

# How many days back from each configuration's newest delivery a run looks for days the table lacks.
LOOKBACK_DAYS = 7


@dataclass(frozen=True)
class Discovery:
    manifests: list[str]  # the deliveries to ingest, oldest date first
    # with on_date: the (bucket, config) pairs with deliveries but none of that date, and their newest date
    stale: dict[tuple[str, str], date] = field(default_factory=dict)
    # without on_date: per (bucket, config), the days older than the look-back window the table lacks
    too_old: dict[tuple[str, str], list[date]] = field(default_factory=dict)


def discover(
    storage: Storage,
    root: str,
    on_date: date | None = None,
    source_buckets: list[str] | None = None,
    config_ids: list[str] | None = None,
    held: set[tuple[date, str, str]] | None = None,
    lookback_days: int = LOOKBACK_DAYS,
) -> Discovery:
    """The newest delivery of each day, per (bucket, config): for ``on_date`` only when given;
    otherwise of every day within ``lookback_days`` of that pair's newest delivery, oldest first,
    so late and re-delivered days are found (the ingestion skips what the table holds already).
    Days older than the window that the table does not hold (``held``: its (date, bucket,
    config) partitions) are reported, not ingested."""
    if lookback_days < 1:
        raise InvalidOption("lookback_days must be at least 1")
    held = held or set()
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
    stale, too_old = {}, {}
    for (bucket, config), per_day in found.items():
        if on_date:
            days = [on_date] if on_date in per_day else []
            if not days:
                stale[(bucket, config)] = max(per_day)
        else:
            first = max(per_day) - timedelta(days=lookback_days - 1)
            days = [d for d in per_day if d >= first]
            lacking = sorted(d for d in per_day if d < first and (d, bucket, config) not in held)
            if lacking:
                too_old[(bucket, config)] = lacking
        chosen += [(d, per_day[d]) for d in days]
    return Discovery([uri for _, uri in sorted(chosen)], stale, too_old)
