"""How fast deletes go: each table's prefix at a pace of its own that S3's answers adjust, under an
optional cap on the whole run.

S3 takes about 3,500 writes a second per prefix, counting every key of a ``DeleteObjects`` as one,
and grows a busy prefix's capacity under sustained load, answering ``503 SlowDown`` meanwhile. One
fixed pace for the run is too slow across many tables and too fast for one hot prefix. So each
prefix starts at S3's documented rate; a ``SlowDown`` cuts it to :data:`DECREASE` of itself, and
each request answered without one raises it by :data:`GROWTH` (CUBIC's decrease factor, and a
growth slow enough that a settled prefix is seldom throttled again while it grows back; the figures
behind both are in benchmarks/RESULTS.md). A
request never asks more keys than a second of its prefix's pace, so a slowed prefix sends smaller
batches rather than bursts S3 refuses.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from lakeio.errors import InvalidOption

DECREASE = 0.7  # of the pace, on a SlowDown
GROWTH = 0.01  # of the pace, per request answered without one: back from a cut in 36 requests
SLOWEST = 1.0  # keys per second: a pace never goes below it


class Pace:
    """``keys_per_second`` for every thread that waits on it: a request of n keys starts once the keys
    before it have had n / keys_per_second of time each."""

    def __init__(self, keys_per_second: float, sleep: Callable[[float], None] = time.sleep):
        if not keys_per_second > 0:
            raise InvalidOption("keys_per_second must be > 0")
        self.keys_per_second = keys_per_second
        self._sleep = sleep
        self._free_at = 0.0
        self._lock = threading.Lock()

    def wait(self, keys: int) -> None:
        """Until ``keys`` more fit the pace (the time is taken under the lock, waited outside it)."""
        with self._lock:
            now = time.monotonic()
            start = max(now, self._free_at)
            self._free_at = start + keys / self.keys_per_second
        if start > now:
            self._sleep(start - now)

    def give_back(self, keys: int) -> None:
        """``keys`` a request asked and the store refused whole (``SlowDown``: none deleted): their time goes
        to the next request. Kept, it would send the retry at the next step of this pace, in step with
        whatever made the store refuse: two tasks sharing a capped run's prefix would stay in step, one refused
        each time (benchmarks.delete_pacing)."""
        with self._lock:
            self._free_at -= keys / self.keys_per_second


class PrefixPace(Pace):
    """One prefix's pace, adjusted by S3's answers: :meth:`slowed` on a ``SlowDown``, :meth:`answered`
    on a request that got none. One thread deletes in a prefix, so the adjustments need no lock."""

    def slowed(self) -> None:
        self.keys_per_second = max(SLOWEST, self.keys_per_second * DECREASE)

    def answered(self) -> None:
        self.keys_per_second *= 1 + GROWTH

    def batch(self, most: int) -> int:
        """How many keys the next request may ask: ``most``, or one second of the pace where that is fewer."""
        return max(1, min(most, int(self.keys_per_second)))
