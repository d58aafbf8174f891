"""Errors of the store layer: each message names the input and what would be right."""


class StoreError(ValueError):
    """A store operation that cannot be done as asked; the message says why and what to do."""


class PipelineMismatchError(StoreError):
    """Vectors from one pipeline offered to a collection made by another."""
