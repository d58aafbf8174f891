"""Warnings at the user's line: the first frame outside probembed (and the packages named).

A fixed `stacklevel` counts the frames of one way in; reached another way (`load_dataset`
instead of `load_retrieval`, a LangChain retriever instead of the store's own method) it
pointed inside the library. Python 3.12's `skip_file_prefixes` does this; the project
supports 3.11, so the frames are walked here.
"""

from __future__ import annotations

import contextlib
import os
import sys
import warnings
from collections.abc import Iterator
from contextvars import ContextVar

#: The files of the probembed package start with this.
PACKAGE_PREFIX = os.path.dirname(__file__) + os.sep

#: The directories of the frameworks whose calls into probembed are running (`called_through`).
_THROUGH: ContextVar[tuple[str, ...]] = ContextVar("probembed_called_through", default=())


@contextlib.contextmanager
def called_through(directories: tuple[str, ...]) -> Iterator[None]:
    """Warnings given inside point past these framework directories too: an adapter's search,
    called by a LangChain retriever, warns from `Collection.search`, which names no framework."""
    token = _THROUGH.set((*_THROUGH.get(), *directories))
    try:
        yield
    finally:
        _THROUGH.reset(token)


def warn_caller(
    message: str | Warning, category: type[Warning] = UserWarning, outside: tuple[str, ...] = ()
) -> None:
    """Warn at the first frame outside probembed and the `outside` directories (a framework
    that calls probembed for the user, named here or by `called_through`), so the warning
    names the line the user can change; a Warning given is its own category."""
    skipped = (*outside, *_THROUGH.get())
    prefixes = (PACKAGE_PREFIX, *(os.path.join(d, "") for d in skipped))
    frame, level = sys._getframe(1), 2  # stacklevel 2: warn_caller's caller
    while frame.f_back is not None and frame.f_code.co_filename.startswith(prefixes):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level)
