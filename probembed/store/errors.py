"""Errors of the store layer: each message names the input and what would be right."""


class StoreError(ValueError):
    """A store operation that cannot be done as asked; the message says why and what to do."""


class PipelineMismatchError(StoreError):
    """Vectors from one pipeline offered to a collection made by another."""


class CollectionNotFoundError(StoreError):
    """A collection asked for by name that the database does not hold."""


class CollectionExistsError(StoreError):
    """A collection created under a name that is already taken."""
