"""`shared_writes.committed`'s reading of LanceDB's errors: which are a conflict with another
writer's commit (`WriteConflictError`) and which pass through unchanged. The concurrent
writes themselves are tested on moto's S3 (test_s3_store)."""

import pytest

from probembed.store import WriteConflictError
from probembed.store.shared_writes import _CONFLICTS, committed


def _raising(exc: BaseException):
    def run():
        raise exc

    return run


def test_a_write_that_succeeds_returns_its_result():
    assert committed(lambda: 42) == 42


@pytest.mark.parametrize(
    "exc",
    [
        RuntimeError(
            "lance error: Commit conflict for version 7: This Merge transaction was preempted"
            "\nat lance/src/io/commit.rs:1:1"
        ),
        RuntimeError("Retryable commit conflict: Incompatible transaction Update vs Merge"),
        OSError("Too many concurrent writers: 10 attempts failed within 30s"),
    ],
)
def test_a_lance_conflict_is_a_write_conflict_naming_its_first_line(exc):
    with pytest.raises(WriteConflictError, match="nothing of this one was stored") as raised:
        committed(_raising(exc))
    first = str(exc).splitlines()[0]
    assert str(raised.value).endswith(first) and raised.value.__cause__ is exc
    assert "\n" not in str(raised.value)  # the engine's source location is left out


def test_every_conflict_wording_is_recognised():
    for word in _CONFLICTS:
        with pytest.raises(WriteConflictError):
            committed(_raising(RuntimeError(f"lance: {word} 3")))


@pytest.mark.parametrize(
    "exc",
    [
        RuntimeError("lance error: IO error: connection reset"),
        OSError("Generic S3 error: 500"),
        RuntimeError(""),
        RuntimeError("Not found: s3://b/db/c.lance\nCommit conflict for version 2"),  # not 1st
        ValueError("Commit conflict for version 2"),  # not a Lance runtime failure
        KeyError("Incompatible transaction"),
    ],
)
def test_any_other_error_passes_through_unchanged(exc):
    with pytest.raises(type(exc)) as raised:
        committed(_raising(exc))
    assert raised.value is exc
