"""`where` filters: one SQL condition on a collection's columns (id, text, metadata columns).

`sql_list` quotes strings into one (`id IN (...)`); `filtered` runs a LanceDB call with a
user's filter, refusing more than one condition and comparisons with NULL, and rewording the
engine's error for a bad one.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from probembed.store.errors import StoreError
from probembed.store.rows import MAX_METADATA_COLUMNS

if TYPE_CHECKING:
    from probembed.store.collection import Collection


def sql_list(values: Sequence[str]) -> str:
    """Quote strings as a SQL list: 'a', 'b''s'."""
    return ", ".join("'" + str(v).replace("'", "''") + "'" for v in values)


#: The engine's source location that ends some of its error messages.
_ENGINE_SOURCE = re.compile(r",?\s*/\S+\.rs:\d+:\d+")
#: The engine's parse error quotes the SQL statement it wrapped the filter in.
_UNPARSED = re.compile(r"Error parsing statement: .*?\(sql parser error: (.*)\)$")
#: `= NULL`, `NULL <> x` and the like, which SQL never holds true (outside quotes).
_NULL_COMPARED = re.compile(r"(?:[=<>]\s*NULL\b)|(?:\bNULL\s*(?:[=<>]|!=))", re.IGNORECASE)
#: "No field named x. Valid fields are ..." lists every column, vectors included; the
#: planner's variant ("... Did you mean 'y'?.") comes wrapped in the filter it optimised.
_NO_FIELD = re.compile(r"No field named (.+?)\.\s*(?:Valid fields are|Did you mean) .*$")
#: The planner's "Did you mean 'year'?" after an unknown field.
_CLOSE_FIELD = re.compile(r"Did you mean ('[^']+')\?")
#: Fields a refusal lists by name before it counts the rest.
_FIELDS_LISTED = 20
#: A name outside quotes, not a function's (`lower(`) nor part of a number or a dotted path.
_NAME = re.compile(r"(?<![\w.])([A-Za-z_]\w*)\b(?!\s*\()")
#: Words of SQL a filter holds that name no field, even where a field has their name
#: (`DATE '2024-01-01'` beside a `date` column).
_SQL_WORDS = frozenset(
    {
        "and",
        "or",
        "not",
        "in",
        "is",
        "null",
        "like",
        "ilike",
        "between",
        "true",
        "false",
        "as",
        "cast",
        "case",
        "when",
        "then",
        "else",
        "end",
        "distinct",
        "similar",
        "to",
        "escape",
        "date",
        "time",
        "timestamp",
        "interval",
        "array",
    }
)


def _listed(owner: Collection) -> str:
    """The fields a filter can name, the first `_FIELDS_LISTED` by name and the rest counted
    (a collection at its column cap listed 128)."""
    fields = owner.filter_fields()
    more = len(fields) - _FIELDS_LISTED
    return ", ".join(fields[:_FIELDS_LISTED]) + (f" and {more} more" if more > 0 else "")


def _folded(unquoted: str, owner: Collection) -> str | None:
    """A name with capitals outside quotes that SQL lower-cases into one of the collection's
    fields, or None: `Source = 'a'` filtered on `source` without a word, where the user may
    have meant a field `Source` the items hold in their metadata JSON. The fields are asked
    of `owner` only when such a name is there."""
    capitals = [
        n for n in _NAME.findall(unquoted) if n != n.lower() and n.lower() not in _SQL_WORDS
    ]
    if not capitals:
        return None
    fields = set(owner.filter_fields())
    return next((n for n in capitals if n.lower() in fields), None)


def _compared_as_string(name: str, where: str) -> bool:
    """Whether the filter compares with "name" in double quotes (`source = "b"`), which SQL
    reads as a column, not a string; a quoted column name on its own (`"a b" = 1`) is not."""
    value = rf'(?:[=<>,]|\blike|\bin\s*\()\s*"{re.escape(name)}"'
    return re.search(value, where, re.IGNORECASE) is not None


def filtered(run: Any, where: str | None, owner: Collection) -> Any:
    """Run a LanceDB call with a filter, refusing more than one SQL condition and turning a
    bad filter's engine error into a clear StoreError: no engine source paths, and for an
    unknown field the fields a filter can name (asked of `owner` only then), not every
    column, and whether the items hold it in their metadata JSON only."""
    bare = re.sub(r"'(?:[^']|'')*'", "", where or "")
    if ";" in bare:
        raise StoreError(
            f"invalid filter where={where!r}: a filter is one SQL condition; ';' is not allowed "
            "outside a quoted string"
        )
    unquoted = re.sub(r'"(?:[^"]|"")*"|`[^`]*`', "", bare).replace("<=>", " ")  # null-safe
    if _NULL_COMPARED.search(unquoted):
        raise StoreError(
            f"invalid filter where={where!r}: a comparison with NULL is never true in SQL, so "
            "it keeps no row; write `field IS NULL` or `field IS NOT NULL`"
        )
    folded = _folded(unquoted, owner)
    if folded is not None:
        raise StoreError(
            f"invalid filter where={where!r}: SQL reads {folded} outside double quotes as "
            f"the field {folded.lower()!r}; write {folded.lower()} for that field, or "
            f'"{folded}" for a field named {folded}'
        )
    try:
        return run()
    except (ValueError, RuntimeError, OSError) as exc:
        if not where:
            raise
        message = _ENGINE_SOURCE.sub("", str(exc).splitlines()[0]).removeprefix("Invalid input, ")
        unknown = _NO_FIELD.search(message)
        if unknown:
            close = _CLOSE_FIELD.search(message)  # the planner's guess, often past the list
            guess = f"; did you mean {close.group(1)}?" if close else ""
            message = f"no field {unknown.group(1)}{guess}; filters can name {_listed(owner)}"
        if unknown and _compared_as_string(unknown.group(1), where):
            message += f"; a string takes single quotes in SQL: '{unknown.group(1)}'"
        elif unknown and owner.holds_in_json(unknown.group(1).strip('"`')):
            message += (
                f"; the items hold {unknown.group(1)} in their metadata JSON only (a field gets "
                "a column when its name is lower-case snake_case, its first value a scalar, "
                f"and the collection had fewer than {MAX_METADATA_COLUMNS} metadata columns "
                "then), so it cannot be filtered on as a field; `metadata LIKE '%...%'` "
                "matches the JSON's text"
            )
        message = _UNPARSED.sub(r"cannot parse it (\1)", message)
        raise StoreError(f"invalid filter where={where!r}: {message}") from exc
