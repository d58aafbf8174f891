"""`where` filters: one SQL condition on a collection's columns (id, text, metadata columns).

`sql_list` quotes strings into one (`id IN (...)`), `id_conditions` many ids into several;
`filtered` runs a LanceDB call with a
user's filter, refusing more than one condition and comparisons with NULL, and rewording the
engine's error for a bad one.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from probembed.store.errors import StoreError
from probembed.store.rows import CORE_COLUMNS, MAX_METADATA_COLUMNS

if TYPE_CHECKING:
    from probembed.store.reads import CollectionReads


def sql_list(values: Sequence[str]) -> str:
    """Quote strings as a SQL list: 'a', 'b''s'."""
    return ", ".join("'" + str(v).replace("'", "''") + "'" for v in values)


#: The most ids one `id IN (...)` of a removal or an undo names: LanceDB's engine holds some
#: 2.7 KB a listed value while it plans and runs one (`Collection.delete` of 100k ids from
#: 200k rows in one: +277 MB; in lists of 5,000, +66 MB but 1.79 s against 1.32 s, each list
#: scanning the id column again: `benchmarks/sync_removal.py`).
IDS_PER_CONDITION = 5_000


def id_conditions(ids: Sequence[str]) -> list[str]:
    """`id IN (...)` over these ids, `IDS_PER_CONDITION` at a time: the memory of each is
    bounded, however many ids there are."""
    return [
        f"id IN ({sql_list(ids[start : start + IDS_PER_CONDITION])})"
        for start in range(0, len(ids), IDS_PER_CONDITION)
    ]


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

#: The engine's refusal of a literal that a column's type cannot hold: the literal's type and
#: value, and the column's type; it names no column.
_UNCONVERTED = re.compile(
    r"Received literal (\w+)\((.*)\) and could not convert to literal of type '(.+)'$"
)
#: The engine's names of the types a filterable field holds, as the store names them.
_FIELD_TYPES = {
    "Utf8": "string",
    "LargeUtf8": "string",
    "Int64": "int64",
    "Float64": "double",
    "Boolean": "bool",
}
#: What a literal of the engine's type is, in words.
_LITERAL_KINDS = {
    "Utf8": "a string",
    "Int64": "an integer",
    "Float64": "a number",
    "Boolean": "a boolean",
}
#: How to write a value a field of this type compares with.
_FIELD_VALUES = {
    "string": "a string in single quotes",
    "int64": "a number, unquoted",
    "double": "a number, unquoted",
    "bool": "true or false",
}
#: probembed's own columns (the vectors, the write tag): a filter naming one is refused up
#: front, since the engine would filter on it, silently where its type fits (`written = 1`).
_OWN_COLUMNS = frozenset(CORE_COLUMNS) - {"id", "text", "metadata"}
#: A quoted name: SQL's "double quotes" or the engine's `backticks`.
_QUOTED_NAME = re.compile(r'"((?:[^"]|"")*)"|`([^`]*)`')
#: A name compared in a filter: before a comparison, IN or BETWEEN, or after a comparison.
_COMPARED = re.compile(
    r"[`\"]?([A-Za-z_]\w*)[`\"]?\s*(?:[=<>!]|(?:not\s+)?(?:in|between)\b)"
    r"|(?:[=<>]|!=)\s*[`\"]?([A-Za-z_]\w*)\b",
    re.IGNORECASE,
)


def _listed(owner: CollectionReads) -> str:
    """The fields a filter can name, the first `_FIELDS_LISTED` by name and the rest counted
    (a collection at its column cap listed 128)."""
    fields = owner.filter_fields()
    more = len(fields) - _FIELDS_LISTED
    return ", ".join(fields[:_FIELDS_LISTED]) + (f" and {more} more" if more > 0 else "")


def _folded(unquoted: str, owner: CollectionReads) -> str | None:
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


def _mistyped(message: str, where: str, owner: CollectionReads) -> str | None:
    """The engine's refusal of a literal a column's type cannot hold, said with the field, its
    type and the literal (the engine named neither field nor filter); a column that holds no
    field (`metadata = 1`: the items' JSON) is refused as an unknown field is. None for any
    other error."""
    found = _UNCONVERTED.search(message)
    if found is None:
        return None
    literal_type, value, column_type = found.groups()
    kind = _FIELD_TYPES.get(column_type)  # None: a type no field holds (the vectors')
    types = {"id": "string", "text": "string"}
    types.update((name, str(t)) for name, t in owner.metadata_columns().items())
    compared = [name.lower() for name in _compared_names(where)]  # as SQL reads them unquoted
    blamed = [name for name in compared if kind is not None and types.get(name) == kind]
    if "metadata" in compared and not blamed:
        return _not_a_field("metadata", owner)
    shown = value.strip('"').replace('\\"', '"').replace("'", "''")
    literal = f"'{shown}'" if literal_type in ("Utf8", "LargeUtf8") else value
    what = _LITERAL_KINDS.get(literal_type, literal_type)
    fields = " or ".join(blamed) or "the field it is compared with"
    how = f": compare it with {_FIELD_VALUES[kind]}" if kind else ""
    return f"{fields} holds {kind or column_type}, and {literal} is {what}{how}"


def _not_a_field(name: str, owner: CollectionReads) -> str:
    """Why a column every row has is not a field to filter on, and what is."""
    if name == "metadata":
        return (
            f"no field metadata: it is each item's metadata as JSON text; filters can name "
            f"{_listed(owner)}; `metadata LIKE '%...%'` matches the JSON's text"
        )
    said = (
        f"no field {name}: it is one of probembed's own columns (vectors and bookkeeping); "
        f"filters can name {_listed(owner)}"
    )
    if owner.holds_in_json(name):
        said += (
            f"; the items hold {name} in their metadata JSON only (a field named as one of "
            "probembed's own columns gets no column), so it cannot be filtered on as a "
            "field; `metadata LIKE '%...%'` matches the JSON's text"
        )
    return said


def _own_column(bare: str, unquoted: str) -> str | None:
    """The first of probembed's own columns a filter names (outside its strings), or None:
    a name outside quotes as SQL lower-cases it, a quoted one as written."""
    quoted = [a or b for a, b in _QUOTED_NAME.findall(bare)]
    names = [n.lower() for n in _NAME.findall(unquoted)] + quoted
    return next((n for n in names if n in _OWN_COLUMNS), None)


def _compared_names(where: str) -> list[str]:
    """The names a filter compares with something, each once, in order, outside its strings."""
    bare = re.sub(r"'(?:[^']|'')*'", "''", where)
    found = (a or b for a, b in _COMPARED.findall(bare))
    return list(dict.fromkeys(n for n in found if n.lower() not in _SQL_WORDS))


def filtered(run: Any, where: str | None, owner: CollectionReads) -> Any:
    """Run a LanceDB call with a filter, refusing more than one SQL condition or a name of
    probembed's own columns (the engine would filter on them), and turning a bad filter's
    engine error into a clear StoreError: no engine source paths, and for an
    unknown field the fields a filter can name (asked of `owner` only then), not every
    column, and whether the items hold it in their metadata JSON only."""
    bare = re.sub(r"'(?:[^']|'')*'", "", where or "")
    if ";" in bare:
        raise StoreError(
            f"invalid filter where={where!r}: a filter is one SQL condition; ';' is not allowed "
            "outside a quoted string"
        )
    unquoted = _QUOTED_NAME.sub("", bare).replace("<=>", " ")  # null-safe
    if _NULL_COMPARED.search(unquoted):
        raise StoreError(
            f"invalid filter where={where!r}: a comparison with NULL is never true in SQL, so "
            "it keeps no row; write `field IS NULL` or `field IS NOT NULL`"
        )
    own = _own_column(bare, unquoted)
    if own is not None:
        raise StoreError(f"invalid filter where={where!r}: {_not_a_field(own, owner)}")
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
        mistyped = _mistyped(message, where, owner)
        if mistyped is not None:
            raise StoreError(f"invalid filter where={where!r}: {mistyped}") from exc
        unknown = _NO_FIELD.search(message)
        if unknown:
            close = _CLOSE_FIELD.search(message)  # the planner's guess, often past the list
            guess = f"; did you mean {close.group(1)}?" if close else ""
            message = f"no field {unknown.group(1)}{guess}; filters can name {_listed(owner)}"
        bare = unknown.group(1).strip('"') if unknown else ""  # the engine keeps "Mixed" quoted
        if unknown and _compared_as_string(bare, where):
            message += f"; a string takes single quotes in SQL: '{bare}'"
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
