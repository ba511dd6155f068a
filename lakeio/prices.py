"""Monthly storage prices per S3 storage class, in USD per GB-month (GB = 2^30 bytes).

The defaults are AWS list prices for us-east-1, first pricing tier, as published in 2025.
Your region, volume tier and discounts differ: pass a file with your own (JSON or YAML,
``{"STANDARD": 0.021, ...}``); classes it names replace the defaults, others stay.
Minimum billable object sizes (128 KiB for the IA classes) and per-object overheads of
the archive classes are not modelled.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from lakeio.documents import load_document
from lakeio.errors import HousekeepingError

BYTES_PER_GB = 2 ** 30

DEFAULT_USD_PER_GB_MONTH: dict[str, float] = {
    "STANDARD": 0.023,
    "INTELLIGENT_TIERING": 0.023,  # frequent access tier; colder tiers cost less
    "STANDARD_IA": 0.0125,
    "ONEZONE_IA": 0.01,
    "GLACIER_IR": 0.004,
    "GLACIER": 0.0036,  # Glacier Flexible Retrieval
    "DEEP_ARCHIVE": 0.00099,
    "REDUCED_REDUNDANCY": 0.024,
    "EXPRESS_ONEZONE": 0.11,
}


class PriceError(HousekeepingError, ValueError):
    """The price file cannot be used."""


def load_prices(path: str | None) -> dict[str, float]:
    """The default prices, overridden by the file at ``path`` when given."""
    if path is None:
        return dict(DEFAULT_USD_PER_GB_MONTH)
    try:
        doc = load_document(path)
    except ValueError as exc:
        raise PriceError(str(exc)) from None
    if not isinstance(doc, dict):
        raise PriceError(f"{path}: expected a mapping of storage class to USD per GB-month")
    return with_defaults(doc, path)


def with_defaults(prices: Mapping[Any, Any], source: str) -> dict[str, float]:
    """The default prices, each class ``prices`` names (any case) at its price there; PriceError, naming ``source``
    and the class, for a price that is not a number >= 0."""
    merged = dict(DEFAULT_USD_PER_GB_MONTH)
    for storage_class, price in prices.items():
        if not isinstance(price, (int, float)) or isinstance(price, bool) or not 0 <= price < math.inf:
            raise PriceError(f"{source}: {storage_class}: price must be a number >= 0, not {price!r}")
        merged[str(storage_class).upper()] = float(price)
    return merged


def monthly_usd(length: int, usd_per_gb_month: float) -> float:
    return length / BYTES_PER_GB * usd_per_gb_month
