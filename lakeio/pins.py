"""Pins: a table's version kept readable through every vacuum (docs/pins.md).

A pin names a table and a version (or an instant, resolved to the version current then), why it is
kept and, optionally, until when. Pins are data, from three places: a tables file's ``keep_versions``,
the Python API's ``keep_versions=`` (deltalake's name for the same idea) and the pins table
(lakeio.tables.pins). Each is checked here, before any Spark starts; each message names the pin.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timezone

from lakeio.errors import InvalidOption
from lakeio.store import uris
from lakeio.text import StrEnum


class PinSource(StrEnum):
    TABLES_FILE = "tables file"
    API = "keep_versions"
    PINS_TABLE = "pins table"


@dataclass(frozen=True)
class Pin:
    """One pinned version of one table. ``at_ms`` (an instant) stands in for ``version`` until the
    table's log resolves it (lakeio.deltalog.pinned)."""

    table: str  # a table URI, as given
    version: int | None = None
    at_ms: int | None = None
    reason: str = ""
    expires_ms: int | None = None  # after this, the pin no longer holds
    set_by: str | None = None
    source: PinSource = PinSource.API

    def __post_init__(self) -> None:
        if (self.version is None) == (self.at_ms is None):
            raise InvalidOption(f"pin of {self.table}: give a version or a timestamp, one of them")
        if self.version is not None and (isinstance(self.version, bool) or not isinstance(self.version, int)
                                         or self.version < 0):
            raise InvalidOption(f"pin of {self.table}: version must be a whole number >= 0, not {self.version!r}")

    @property
    def root(self) -> uris.TableRoot:
        return uris.table_root(self.table)

    @property
    def label(self) -> str:
        """How reports name it: the table and its version (or the instant, before it is resolved)."""
        at = f"v{self.version}" if self.version is not None else f"as of {_iso(self.at_ms)}"
        return f"{self.root}@{at}"

    def expired(self, now_ms: int) -> bool:
        return self.expires_ms is not None and self.expires_ms <= now_ms


def _iso(ms: int | None) -> str:
    return "" if ms is None else datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat(timespec="seconds")


def instant_ms(value: object, what: str) -> int:
    """An ISO-8601 date or date-time (UTC unless it says otherwise), or a datetime, as epoch milliseconds."""
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, date):
        moment = datetime(value.year, value.month, value.day)
    elif isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            raise InvalidOption(f"{what}: {value!r} is not an ISO-8601 date or date-time") from None
    else:
        raise InvalidOption(f"{what}: {value!r} is not an ISO-8601 date or date-time")
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return int(moment.timestamp() * 1000)


_ENTRY_KEYS = {"version", "timestamp", "reason", "expires", "set_by"}


def pin_of(table: str, entry: object, source: PinSource, where: str) -> Pin:
    """One ``keep_versions`` entry of ``table``: a version number, a :class:`Pin`, or a mapping with
    ``version`` or ``timestamp`` and optionally ``reason``, ``expires``, ``set_by``. ``where`` names the
    entry in messages."""
    if isinstance(entry, Pin):
        if entry.root != uris.table_root(table):
            raise InvalidOption(f"{where}: the pin names {entry.table}, not {table}")
        return entry
    if isinstance(entry, int) and not isinstance(entry, bool):
        return Pin(table, version=entry, source=source)
    if not isinstance(entry, Mapping):
        raise InvalidOption(f"{where}: a pin is a version number or a mapping with 'version' or 'timestamp', "
                            f"not {entry!r}")
    unknown = set(entry) - _ENTRY_KEYS
    if unknown:
        raise InvalidOption(f"{where}: unknown key(s) {sorted(unknown)} (a pin takes {sorted(_ENTRY_KEYS)})")
    for key in ("reason", "set_by"):
        if key in entry and not isinstance(entry[key], str):
            raise InvalidOption(f"{where}: {key} must be text")
    try:
        return Pin(table, version=entry.get("version"),
                   at_ms=None if entry.get("timestamp") is None else instant_ms(entry["timestamp"], f"{where}: timestamp"),
                   reason=entry.get("reason", ""),
                   expires_ms=None if entry.get("expires") is None else instant_ms(entry["expires"], f"{where}: expires"),
                   set_by=entry.get("set_by"), source=source)
    except InvalidOption as exc:
        raise InvalidOption(f"{where}: {exc}" if not str(exc).startswith(where) else str(exc)) from None


KeepVersions = Mapping[str, Sequence[object]] | Iterable[Pin]


def keep_versions(given: KeepVersions | None) -> tuple[Pin, ...]:
    """The API's ``keep_versions=``: ``{table: [version or pin mapping, ...]}`` or a list of :class:`Pin`."""
    if given is None:
        return ()
    if isinstance(given, Mapping):
        pins = []
        for table, entries in given.items():
            if not isinstance(table, str):
                raise InvalidOption(f"keep_versions: keys are table URIs, not {table!r}")
            if isinstance(entries, (str, bytes)) or not isinstance(entries, Sequence):
                raise InvalidOption(f"keep_versions[{table!r}]: expected a list of versions, not {entries!r}")
            pins += [pin_of(uris.to_uri(table), e, PinSource.API, f"keep_versions[{table!r}][{i}]")
                     for i, e in enumerate(entries)]
        return tuple(pins)
    if isinstance(given, (str, bytes)) or not isinstance(given, Iterable):
        raise InvalidOption(f"keep_versions: expected {{table: [versions]}} or a list of Pin, not {given!r}")
    pins = list(given)
    for pin in pins:
        if not isinstance(pin, Pin):
            raise InvalidOption(f"keep_versions: expected {{table: [versions]}} or a list of Pin, not {pin!r}")
    return tuple(pins)
