"""`where` filters: one SQL condition on a collection's columns (id, text, metadata columns).

`sql_list` quotes strings into one (`id IN (...)`), `id_conditions` many ids into several;
`filtered` runs a LanceDB call with a user's filter, refusing more than one condition,
comparisons with NULL, `$` outside quotes and comments and chains deep enough to crash the
engine, and rewording the engine's error for a bad one (a panic of the engine's too).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from probembed.store.errors import StoreError, quoted
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


def id_conditions(ids: Sequence[str], column: str = "id") -> list[str]:
    """`id IN (...)` (or another column's) over these ids, `IDS_PER_CONDITION` at a time: the
    memory of each is bounded, however many ids there are."""
    return [
        f"{column} IN ({sql_list(ids[start : start + IDS_PER_CONDITION])})"
        for start in range(0, len(ids), IDS_PER_CONDITION)
    ]


def id_list(values: Sequence[str], name: str) -> list[str]:
    """The ids a caller gave, checked before they are looked up: a lone string was read as
    one id per character, and an integer failed deep in the lookup, naming neither."""
    if isinstance(values, str):
        raise StoreError(f"{name} must be a list of strings, not one string; wrap it: [{values!r}]")
    listed = list(values)
    odd = next((i for i, value in enumerate(listed) if not isinstance(value, str)), None)
    if odd is not None:
        wrong = listed[odd]
        raise StoreError(
            f"{name} must be strings; {name}[{odd}] is {wrong!r} ({type(wrong).__name__})"
        )
    return listed


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
#: LanceDB's virtual columns: row ids, addresses and versions, which its filters read
#: (`_rowid > 3` deleted an item: a row's id and address change when a compaction moves it),
#: and its results' scores. No field has their names (a metadata column's starts with a letter).
_ENGINE_COLUMNS = frozenset(
    {
        "_rowid",
        "_rowaddr",
        "_rowoffset",
        "_row_created_at_version",
        "_row_last_updated_at_version",
        "_distance",
        "_score",
        "_relevance_score",
    }
)
#: A quoted name: SQL's "double quotes" or the engine's `backticks`.
_QUOTED_NAME = re.compile(r'"((?:[^"]|"")*)"|`([^`]*)`')
#: A name compared in a filter: before a comparison, IN or BETWEEN, or after a comparison.
_COMPARED = re.compile(
    r"[`\"]?([A-Za-z_]\w*)[`\"]?\s*(?:[=<>!]|(?:not\s+)?(?:in|between)\b)"
    r"|(?:[=<>]|!=)\s*[`\"]?([A-Za-z_]\w*)\b",
    re.IGNORECASE,
)
#: AND/OR operators on one path through a filter (through its parentheses). LanceDB 0.40
#: makes a chain of them a tree one level deeper per operator and walks it recursively: past
#: some 32,000 (31,937 ran, 32,323 did not) that overflowed the calling thread's 8 MiB stack,
#: a segfault that killed the process (a server, with no log line). An eighth of that.
MAX_CHAINED_CONDITIONS = 4_000
#: Terms (operators and operands, those inside its parentheses too) on one path through one
#: condition: a chain of arithmetic (`year + year + ...`) crashed the engine as above past
#: some 700 operators (1,400 terms), of `||` or of literals' `+`, `-`, `*` past 830, of
#: comparisons (`1 = 1 = ...`) past 1,950. At most 64 operators: a tenth.
MAX_CONDITION_TERMS = 128
#: Strings, quoted names and comments, as the engine's SQL lexer finds them.
_LITERAL = re.compile(r"""'(?:[^']|'')*'?|"(?:[^"]|"")*"?|`[^`]*`?|--[^\n]*|/\*""")
#: A filter's tokens once its comments are gone: strings and quoted names, words and numbers,
#: and any other character alone (`<=` is two: more terms than the engine's, never fewer).
_TOKEN = re.compile(r"""'(?:[^']|'')*'?|"(?:[^"]|"")*"?|`[^`]*`?|[\w.$]+|\S""")
#: The type LanceDB raises for a panic of its engine (`planner.rs`: "not yet implemented" for
#: `?` and `:name` placeholders, `N'x'`, `B'01'` and `R'x'` strings), a plain Exception made in
#: its extension (`pyo3_async_runtimes.RustPanic`), which no Python module exports to import.
_ENGINE_PANIC = ("pyo3_async_runtimes", "RustPanic")
#: Where a block comment's nesting opens or closes.
_COMMENT_MARK = re.compile(r"/\*|\*/")
#: Tokens that open and close a group, whose items are separated by the separators.
_OPENS = frozenset({"(", "[", "CASE"})
_CLOSES = frozenset({")", "]", "END"})
_SEPARATORS = frozenset({",", "WHEN", "THEN", "ELSE"})


@dataclass
class _Depth:
    """One group of a filter (the whole, a parenthesis, a CASE) as `_past_limits` walks it: its
    AND/OR chain and its conditions' terms so far, each with the most of a group inside, and
    those of the groups around it on the path to it."""

    #: AND/OR operators and terms on the path to this group, in the groups around it (this
    #: group one term of its condition): what a chain in it adds to.
    outer_booleans: int = 0
    outer_terms: int = 0
    #: AND/OR operators of the current item (a group's comma-separated part), and the most
    #: of a group it holds; the most of a finished item.
    booleans: int = 0
    nested_booleans: int = 0
    most_booleans: int = 0
    #: Terms of the current condition (between AND/OR), and the most of a group it holds;
    #: the most of a finished condition.
    terms: int = 0
    nested_terms: int = 0
    most_terms: int = 0
    #: A BETWEEN waits for its AND, which joins no conditions.
    between: bool = False

    def inner(self) -> _Depth:
        """A group opened in the current condition, on a path through this one's chains."""
        return _Depth(self.outer_booleans + self.booleans, self.outer_terms + self.terms + 1)

    def path(self) -> tuple[int, int]:
        """AND/OR operators and terms on the longest path through the current condition so
        far: at most what the whole filter has, so a limit passed here is passed."""
        booleans = self.outer_booleans + self.booleans + self.nested_booleans
        return booleans, self.outer_terms + self.terms + self.nested_terms

    def end_condition(self) -> None:
        """The current condition is whole: keep its terms if they are the most."""
        self.most_terms = max(self.most_terms, self.terms + self.nested_terms)
        self.terms = self.nested_terms = 0

    def end_item(self) -> None:
        """The current item is whole: keep its AND/OR chain if it is the longest."""
        self.end_condition()
        self.most_booleans = max(self.most_booleans, self.booleans + self.nested_booleans)
        self.booleans = self.nested_booleans = 0

    def holds(self, group: _Depth) -> None:
        """A group closed inside the current condition: one term here, deeper inside."""
        group.end_item()
        self.nested_booleans = max(self.nested_booleans, group.most_booleans)
        self.nested_terms = max(self.nested_terms, group.most_terms)
        self.terms += 1


def _comment_end(where: str, start: int) -> int:
    """Where a block comment opened before `start` ends (they nest), or the filter's end."""
    depth = 1
    for mark in _COMMENT_MARK.finditer(where, start):
        depth += 1 if mark.group() == "/*" else -1
        if depth == 0:
            return mark.end()
    return len(where)


def _uncommented(where: str) -> str:
    """The filter with each comment a space, as the engine reads it (a comment's AND would
    split a chain that the engine reads whole)."""
    if "--" not in where and "/*" not in where:
        return where
    kept, at = [], 0
    for found in _LITERAL.finditer(where):
        token = found.group()
        if found.start() < at or token[0] in "'\"`":
            continue
        kept.append(where[at : found.start()] + " ")
        at = _comment_end(where, found.end()) if token == "/*" else found.end()
    return "".join(kept) + where[at:]


def _past_limits(where: str) -> tuple[int, int] | None:
    """AND/OR operators and one condition's terms on a path through the filter's expression
    tree, read token by token up to the first that passes `MAX_CHAINED_CONDITIONS` or
    `MAX_CONDITION_TERMS` (what it counts then), or None: within both. An upper bound, found
    without parsing it, since AND and OR bind loosest, every other node of the tree takes at
    least one token, and a group's tree hangs from one term of its condition. Stopping at the
    limit bounds the work: 4 MB of `(` took 10 s and 816 MB when the whole was counted."""
    groups = [_Depth()]
    group = groups[0]
    for found in _TOKEN.finditer(where):
        word = found.group().upper()
        if word in _OPENS:
            group = group.inner()
            groups.append(group)
        elif word in _CLOSES and len(groups) > 1:
            groups.pop()
            groups[-1].holds(group)
            group = groups[-1]
        elif word in _SEPARATORS:
            group.end_item()
        elif word in ("AND", "OR") and not group.between:
            group.end_condition()
            group.booleans += 1
        else:
            group.between = word == "BETWEEN" or (group.between and word != "AND")
            group.terms += 1
        booleans, terms = group.path()
        if booleans > MAX_CHAINED_CONDITIONS or terms > MAX_CONDITION_TERMS:
            return booleans, terms
    return None


def _too_deep(where: str) -> str | None:
    """Why the engine would crash on this filter, or None: too long a chain of AND/OR, or of
    one condition's terms (a long `IN (...)` list is neither)."""
    if len(where) <= MAX_CONDITION_TERMS:  # as many tokens at most: within both limits
        return None
    past = _past_limits(where)
    if past is None:
        return None
    if past[0] > MAX_CHAINED_CONDITIONS:
        return (
            f"it chains more than {MAX_CHAINED_CONDITIONS:,} AND/OR operators, the limit "
            "(LanceDB's planner crashes on some 32,000): match many values with "
            "`field IN (...)`"
        )
    return (
        f"one of its conditions chains more than {MAX_CONDITION_TERMS} terms (operators and "
        "operands, with those in its parentheses), the limit (LanceDB's planner crashes on "
        "some 1,400)"
    )


def _fields(owner: CollectionReads) -> str:
    """The fields a filter can name, the first `_FIELDS_LISTED` by name and the rest counted
    (a collection at its column cap listed 128)."""
    fields = owner.filter_fields()
    more = len(fields) - _FIELDS_LISTED
    return ", ".join(fields[:_FIELDS_LISTED] + ([f"{more} more"] if more > 0 else []))


def _listed(owner: CollectionReads) -> str:
    """Every name a filter can use: the fields, and `metadata`, which a refusal that left it
    out seemed to rule out while `metadata LIKE '%...%'` works."""
    return f"{_fields(owner)} and metadata (each item's metadata as JSON text)"


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


def _compared_as_string(name: str, where: str) -> str | None:
    """The value as written where the filter compares with `name` as a value, in double
    quotes (`source = "b"`) or none (`source = b`: the shell took the single quotes of
    `--where source='b'`), which SQL reads as a column, not a string; None where it does
    not (a column name on its own: `"a b" = 1`, `b > 1`)."""
    bare = re.sub(r"'(?:[^']|'')*'", "''", where)
    named = re.escape(name)
    value = rf'(?:[=<>,]|\blike|\bin\s*\()\s*(?:"({named})"|({named})(?![\w"]))'
    found = re.search(value, bare, re.IGNORECASE)
    return None if found is None else found.group(1) or found.group(2)


def _mistyped(message: str, where: str, owner: CollectionReads) -> str | None:
    """The engine's refusal of a literal a column's type cannot hold, said with the field, its
    type and the literal (the engine named neither field nor filter); `metadata` compared with
    a literal not a string (`metadata = 1`) is told it holds the items' JSON as text. None for
    any other error."""
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
            f"metadata is each item's metadata as JSON text, not a field of it: compare it "
            f"with a string (`metadata LIKE '%...%'` matches the JSON's text), or name a "
            f"field: {_fields(owner)}"
        )
    whose = (
        "LanceDB's virtual columns (row ids, addresses and versions, which compaction and "
        "updates change, and result scores), not the items' data"
        if name in _ENGINE_COLUMNS
        else "probembed's own columns (vectors and bookkeeping)"
    )
    said = f"no field {name}: it is one of {whose}; filters can name {_listed(owner)}"
    if owner.holds_in_json(name):
        said += (
            f"; the items hold {name} in their metadata JSON only (a field of that name gets "
            "no column), so it cannot be filtered on as a field; `metadata LIKE '%...%'` "
            "matches the JSON's text"
        )
    return said


def _own_column(bare: str, unquoted: str) -> str | None:
    """The first of probembed's own columns or LanceDB's virtual ones a filter names (outside
    its strings), or None: a name outside quotes as SQL lower-cases it, a quoted one as
    written."""
    quoted = [a or b for a, b in _QUOTED_NAME.findall(bare)]
    names = [n.lower() for n in _NAME.findall(unquoted)] + quoted
    return next((n for n in names if n in _OWN_COLUMNS | _ENGINE_COLUMNS), None)


def _compared_names(where: str) -> list[str]:
    """The names a filter compares with something, each once, in order, outside its strings."""
    bare = re.sub(r"'(?:[^']|'')*'", "''", where)
    found = (a or b for a, b in _COMPARED.findall(bare))
    return list(dict.fromkeys(n for n in found if n.lower() not in _SQL_WORDS))


def _refused(where: str, owner: CollectionReads) -> str | None:
    """Why a filter is refused before the engine reads it, or None: what it would run wrongly
    or silently, or crash on. Its comments are read as the engine reads them: as spaces."""
    uncommented = _uncommented(where)
    bare = re.sub(r"'(?:[^']|'')*'", "", uncommented)
    if ";" in bare:
        return "a filter is one SQL condition; ';' is not allowed outside a quoted string"
    unquoted = _QUOTED_NAME.sub("", bare).replace("<=>", " ")  # null-safe
    if "$" in unquoted:  # the engine panicked on both (a 500 from the service)
        return (
            "'$' is not allowed outside a quoted string or a comment: LanceDB reads `$1` as a "
            "placeholder and `$$...$$` as a string, and runs neither; quote strings with single "
            "quotes"
        )
    if _NULL_COMPARED.search(unquoted):
        return (
            "a comparison with NULL is never true in SQL, so it keeps no row; write "
            "`field IS NULL` or `field IS NOT NULL`"
        )
    deep = _too_deep(uncommented)  # before the checks that read every name
    if deep is not None:
        return deep
    own = _own_column(bare, unquoted)
    if own is not None:
        return _not_a_field(own, owner)
    folded = _folded(unquoted, owner)
    if folded is not None:
        return (
            f"SQL reads {folded} outside double quotes as the field {folded.lower()!r}; write "
            f'{folded.lower()} for that field, or "{folded}" for a field named {folded}'
        )
    return None


#: What a filter the engine panicked on holds (the panic's own message says nothing).
_PANICKED = (
    "LanceDB cannot run it (its engine stopped on something it has not implemented: a `?` or "
    "`:name` placeholder, or a string written N'...', B'...' or R'...'); quote strings with "
    "plain single quotes and write values in place"
)


def _engine_panic(exc: Exception) -> bool:
    """Whether LanceDB's engine panicked: on a filter, a bad filter (a 4xx from the
    service), not a failure of the store."""
    kind = type(exc)
    return (kind.__module__, kind.__qualname__) == _ENGINE_PANIC


def filtered(run: Any, where: str | None, owner: CollectionReads) -> Any:
    """Run a LanceDB call with a filter, refusing what `_refused` finds, and turning a bad
    filter's engine error into a clear StoreError: no engine source paths, and for an
    unknown field the fields a filter can name (asked of `owner` only then), not every
    column, and whether the items hold it in their metadata JSON only."""
    shown = f"where={quoted(where or '')}"
    refused = _refused(where, owner) if where else None
    if refused is not None:
        raise StoreError(f"invalid filter {shown}: {refused}")
    try:
        return run()
    except Exception as exc:
        panic = _engine_panic(exc)
        if not where or not (panic or isinstance(exc, (ValueError, RuntimeError, OSError))):
            raise
        if panic:
            raise StoreError(f"invalid filter {shown}: {_PANICKED}") from exc
        message = _ENGINE_SOURCE.sub("", str(exc).splitlines()[0]).removeprefix("Invalid input, ")
        mistyped = _mistyped(message, where, owner)
        if mistyped is not None:
            raise StoreError(f"invalid filter {shown}: {mistyped}") from exc
        unknown = _NO_FIELD.search(message)
        if unknown:
            close = _CLOSE_FIELD.search(message)  # the planner's guess, often past the list
            guess = f"; did you mean {close.group(1)}?" if close else ""
            message = f"no field {unknown.group(1)}{guess}; filters can name {_listed(owner)}"
        bare = unknown.group(1).strip('"') if unknown else ""  # the engine keeps "Mixed" quoted
        written = _compared_as_string(bare, where) if unknown else None
        if written is not None:
            message += f"; a string takes single quotes in SQL: '{written}'"
        elif unknown and owner.holds_in_json(unknown.group(1).strip('"`')):
            message += (
                f"; the items hold {unknown.group(1)} in their metadata JSON only (a field gets "
                "a column when its name is lower-case snake_case, its first value a scalar, "
                f"and the collection had fewer than {MAX_METADATA_COLUMNS} metadata columns "
                "then), so it cannot be filtered on as a field; `metadata LIKE '%...%'` "
                "matches the JSON's text"
            )
        message = _UNPARSED.sub(r"cannot parse it (\1)", message)
        raise StoreError(f"invalid filter {shown}: {message}") from exc
