"""Old spellings of options, accepted for one release with a DeprecationWarning naming the new one.

Renamed keywords are taken by a decorator, so a function's signature (what ``help()`` and an
editor show) holds the new names only; an old command-line flag is an alias of its new one, and
the commands say on stderr that it goes.
"""

from __future__ import annotations

import functools
import sys
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any] | type)
Renamed = str | tuple[str, Callable[[Any], Any]]  # the new keyword, or it and how an old value converts


def opposite(value: Any) -> bool:
    """An old flag whose new spelling says the opposite (``force_retention`` is ``not enforce_...``);
    an old flag left unset (None) was off, so the new one is on."""
    return not value


def renamed_keywords(**old_to_new: Renamed) -> Callable[[F], F]:
    """Accept each old keyword as its new one (converted where a tuple says how), with a warning: of a
    function, or of a class's constructor (decorating the class, above ``@dataclass``)."""

    def wrap(func: F) -> F:
        if isinstance(func, type):
            func.__init__ = wrap(func.__init__)  # type: ignore[misc]
            return func

        @functools.wraps(func)
        def call(*args: Any, **kwargs: Any) -> Any:
            called = func.__qualname__.removesuffix(".__init__")
            for old, new in old_to_new.items():
                if old not in kwargs:
                    continue
                name, convert = (new, None) if isinstance(new, str) else new
                if name in kwargs:
                    raise TypeError(f"{called}() got {old}= and {name}=: {old} is the old name of {name}")
                warnings.warn(f"{called}({old}=...) is deprecated and goes in the next release: use {name}=",
                              DeprecationWarning, stacklevel=2)
                value = kwargs.pop(old)
                kwargs[name] = convert(value) if convert else value
            return func(*args, **kwargs)

        return call  # type: ignore[return-value]

    return wrap


def warn_old_flags(argv: Sequence[str], old_to_new: Mapping[str, str]) -> None:
    """Say on stderr which old command-line spellings ``argv`` uses (each still works for one release)."""
    for old, new in old_to_new.items():
        if any(arg == old or arg.startswith(old + "=") for arg in argv):
            print(f"warning: {old} is deprecated and goes in the next release: use {new}", file=sys.stderr)
