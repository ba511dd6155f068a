"""How a vacuum run vacuums: :class:`VacuumOptions`, checked wherever they are built."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date

from lakeio.deprecation import Renamed, opposite, renamed_keywords
from lakeio.errors import InvalidOption
from lakeio.pins import Pin
from lakeio.prices import DEFAULT_USD_PER_GB_MONTH, PriceError, with_defaults
from lakeio.store import uris
from vacuum_jobs.deletes import DeleteSettings

# The options' old names, taken for one release (lakeio.deprecation).
OLD_NAMES: dict[str, Renamed] = {"retain_hours": "retention_hours",
                                 "force_retention": ("enforce_retention_duration", opposite)}


@renamed_keywords(**OLD_NAMES)
@dataclass
class VacuumOptions:
    """How a run vacuums; invalid values raise InvalidOption (a ValueError) here, whoever builds them."""

    inventory_table: str
    inventory_date: date | None = None  # default: the newest the table holds
    max_inventory_age_hours: float = 72.0
    retention_hours: float | None = None  # default: each table's delta.deletedFileRetentionDuration
    enforce_retention_duration: bool = True  # False: a retention shorter than a table's own is allowed
    dry_run: bool = True  # deleting is said out loud: dry_run=False
    audit_table: str | None = None
    min_coverage: float = 0.5  # below this share of old live files listed, the inventory "does not cover" a table
    delete: DeleteSettings = field(default_factory=DeleteSettings)
    keep_versions: tuple[Pin, ...] = ()  # pinned versions (lakeio.pins): their files are kept, whatever the retention
    pins_table: str | None = None  # the pins table (lakeio.tables.pins): its pins are kept too
    max_deletes: int | None = None  # the most files the run deletes, the costliest tables first (vacuum_jobs.budget)
    min_reclaimable_bytes: int = 0  # a table whose candidates hold fewer bytes is skipped
    # USD per GB-month by storage class, what a budget orders the tables by (vacuum_jobs.budget): the defaults
    # (lakeio.prices), each class given here at its price here
    prices: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_USD_PER_GB_MONTH))
    max_minutes: float | None = None  # from the run's start: no delete starts after it, the rest deferred (vacuum_jobs.budget)
    full: bool = False  # plan every table, none carried forward, no state recorded (vacuum_jobs.carry_forward)
    history: bool | None = None  # VACUUM START / END commits in the tables deleted in; None: Delta's rule (vacuum_jobs.history)
    now_ms: int | None = None  # for tests; default: the clock at the start of the run

    @property
    def budgeted(self) -> bool:
        """The run weighs its tables (vacuum_jobs.budget): a budget, a time, or a least worth is given."""
        return self.max_deletes is not None or self.max_minutes is not None or self.min_reclaimable_bytes > 0

    def __post_init__(self) -> None:
        if not self.max_inventory_age_hours > 0:
            raise InvalidOption("max_inventory_age_hours must be > 0")
        if self.retention_hours is not None and self.retention_hours < 0:
            raise InvalidOption("retention_hours must be >= 0")
        if self.max_deletes is not None and (isinstance(self.max_deletes, bool) or not isinstance(self.max_deletes, int)
                                             or self.max_deletes < 1):
            raise InvalidOption(f"max_deletes must be a whole number >= 1, not {self.max_deletes!r}")
        if self.max_minutes is not None and (isinstance(self.max_minutes, bool) or not isinstance(self.max_minutes, (int, float))
                                             or not 0 < self.max_minutes < math.inf):
            raise InvalidOption(f"max_minutes must be a number of minutes > 0, not {self.max_minutes!r}")
        if isinstance(self.min_reclaimable_bytes, bool) or not isinstance(self.min_reclaimable_bytes, int) \
                or self.min_reclaimable_bytes < 0:
            raise InvalidOption(f"min_reclaimable_bytes must be a whole number >= 0, not {self.min_reclaimable_bytes!r}")
        if not isinstance(self.prices, Mapping):
            raise InvalidOption(f"prices must be a mapping of storage class to USD per GB-month, not {self.prices!r}")
        try:
            self.prices = with_defaults(self.prices, "prices")
        except PriceError as exc:
            raise InvalidOption(str(exc)) from None
        if not 0 <= self.min_coverage <= 1:
            raise InvalidOption("min_coverage must be between 0 and 1")
        if self.delete.trash is not None and uris.scheme_of(uris.to_uri(self.delete.trash)) == "s3":
            raise InvalidOption("trash cannot be on S3, where a move is a copy: turn on bucket versioning instead "
                                "(deletes then add delete markers, which restore removes)")
