"""Errors of the store layer: each message names the input and what would be right."""


class StoreError(ValueError):
    """A store operation that cannot be done as asked; the message says why and what to do."""


class PipelineMismatchError(StoreError):
    """Vectors from one pipeline offered to a collection made by another."""


class CollectionNotFoundError(StoreError):
    """A collection asked for by name that the database does not hold."""


class CollectionExistsError(StoreError):
    """A collection created under a name that is already taken."""


class StoreStateError(StoreError):
    """The database's own files or storage fail, or hold what cannot be served: not the
    caller's input (a service answers it 500 and logs it, never 4xx)."""


class ReadOnlyError(StoreStateError):
    """A write asked of a database that cannot be written."""
