"""Timing on a shared, noisy machine: the steps compared run in turn, round after round.

Each keeps its fastest round. Running them in turn puts every step through the same moments
of the machine's load and the same warming of the JVM and the Python workers; the first
round warms them all alike.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any


def best_in_turn(rounds: int, actions: Mapping[str, Callable[[], Any]]) -> dict[str, tuple[float, Any]]:
    """Per action: (seconds, result) of its fastest run."""
    best: dict[str, tuple[float, Any]] = {}
    for _ in range(rounds):
        for name, action in actions.items():
            started = time.monotonic()
            result = action()
            seconds = time.monotonic() - started
            if name not in best or seconds < best[name][0]:
                best[name] = (seconds, result)
    return best
