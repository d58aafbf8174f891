"""One thread at a time through an object's shared state (a snapshot, a table handle)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

M = TypeVar("M", bound=Callable[..., Any])


def one_at_a_time(method: M) -> M:
    """A method that holds its object's `_lock` (an RLock, so such methods may call each
    other): state read in several steps must not move under one of them."""

    @functools.wraps(method)
    def locked(self: Any, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            return method(self, *args, **kwargs)

    return locked  # type: ignore[return-value]
