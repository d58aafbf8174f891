"""Invalid requests, found and told in a client's terms: the checks of texts against the
limits (413, 422), and the words and echo of a body the parser or pydantic refused."""

from __future__ import annotations

import codecs
import json
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from fastapi import HTTPException, Request, Response
from fastapi.encoders import jsonable_encoder
from fastapi.routing import APIRoute

from probembed.decoding import wide_unicode
from probembed.documents import stored_text
from probembed.encoders.base import is_blank, lone_surrogate
from probembed.service.errors import ApiError
from probembed.service.settings import Limits
from probembed.store.database import COLLECTION_NAME, COLLECTION_NAME_RULE
from probembed.store.errors import quoted

#: What FastAPI answers (400) when a body cannot be decoded at all.
UNPARSABLE = "There was an error parsing the body"
#: How a client sends what the routes read.
SEND_JSON = "send JSON encoded as UTF-8, with the header Content-Type: application/json"
#: Bytes of a body decoded at a time to check that it is UTF-8.
_DECODED_BYTES = 2**20
#: Pydantic's tags for the member of a union that an error is about (`chunk.bool`).
_UNION_TAGS = frozenset({"bool", "str", "int", "float", "list", "dict"})
#: Places a 422 names (and errors its `detail` lists) before it counts the rest.
_PROBLEMS_TOLD = 10
#: Characters of a refused value a 422 echoes.
_ECHO_CHARS = 200


class Utf8Route(APIRoute):
    """A route that reads a JSON body only when it is UTF-8, as RFC 8259 has JSON exchanged:
    FastAPI's `json.loads` of the bytes read UTF-16 and UTF-32 too, and CESU-8 (Java's
    modified UTF-8: a surrogate pair's halves encoded one by one) as lone surrogates, a 422
    naming a field where the body cannot be read, a 400 (FastAPI's own for a bad byte)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        """FastAPI's handler, behind the check of the body."""
        handler = super().get_route_handler()

        async def strict(request: Request) -> Response:
            content_type = request.headers.get("content-type", "")
            if _reads_as_json(content_type) and not _utf8(await request.body()):
                raise HTTPException(400, UNPARSABLE)  # worded by `_unreadable`, as FastAPI's
            return await handler(request)

        return strict


def _utf8(body: bytes) -> bool:
    """Whether a body is UTF-8, which `json.loads` would read as such (it takes UTF-16 and
    UTF-32 by their first bytes), decoded a block at a time rather than copied whole."""
    if not json.detect_encoding(body).startswith("utf-8"):
        return False
    decoder = codecs.getincrementaldecoder("utf-8")("strict")
    view = memoryview(body)
    try:
        for start in range(0, len(body), _DECODED_BYTES):
            decoder.decode(view[start : start + _DECODED_BYTES])
        decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        return False
    return True


def _unreadable(body: bytes) -> str:
    """Why FastAPI could not read a body it says nothing more of: UTF-16 or UTF-32, its first
    byte that is not UTF-8, or JSON nested deeper than the parser goes."""
    wide = wide_unicode(body[:_DECODED_BYTES])
    if wide is not None:
        return f"the body is {wide} text, not UTF-8; {SEND_JSON}"
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        where = f"byte 0x{body[exc.start]:02x} at offset {exc.start}"
        return f"the body is not UTF-8 text ({where}); {SEND_JSON}"
    try:
        json.loads(text)
    except RecursionError:
        return f"the body nests arrays or objects too deeply to be read; {SEND_JSON}"
    except ValueError:
        pass
    return f"the body cannot be read as JSON; {SEND_JSON}"


def _echoed(kept: Sequence[tuple[tuple[str | int, ...], Any]]) -> list[Any]:
    """The errors told, as `detail` lists them: the first `_PROBLEMS_TOLD`, each at its place
    in the body without pydantic's union tags and with its `input` cut short (a 9 MB body
    refused as a whole was echoed back whole)."""
    echoed = []
    for where, error in kept[:_PROBLEMS_TOLD]:
        # a path's error names the path; a body's field named `query` or `path` is the body's
        source = ["body"] if tuple(error.get("loc", ("body",)))[:1] == ("body",) else []
        error = jsonable_encoder({**error, "loc": [*source, *where]})
        if "input" in error:
            text = json.dumps(error["input"], default=str)
            if len(text) > _ECHO_CHARS:
                error["input"] = f"{text[:_ECHO_CHARS]}... ({len(text):,} characters as JSON)"
        echoed.append(error)
    return echoed


def _kept(errors: Sequence[Any]) -> list[tuple[tuple[str | int, ...], Any]]:
    """The validation errors worth telling, each with its place: the deepest at each place,
    and for a field that may take several shapes (`chunk`: true or an object) those of the
    shape the body gave it (a shape it has but whose values fail, not "should be a valid
    boolean" beside it); a value that fits none of them keeps every shape's complaint."""
    found = [(_where(e), e) for e in errors]
    deepest = [
        (where, e)
        for where, e in found
        if not any(o[: len(where)] == where and len(o) > len(where) for o, _ in found)
    ]
    fitted = {where for where, e in deepest if not _wrong_shape(e)}
    return [(w, e) for w, e in deepest if not (w in fitted and _wrong_shape(e))]


def _problems(kept: Sequence[tuple[tuple[str | int, ...], Any]]) -> list[str]:
    """The errors told as words, one per place in the body: what is wrong there, each
    complaint once (pydantic repeats a place under tags like `function-after[...]`)."""
    said: dict[tuple[str | int, ...], list[str]] = {}
    for where, error in kept:
        words = said.setdefault(where, [])
        if (text := _problem(where, error)) not in words:
            words.append(text)
    return [_placed(where, words) for where, words in said.items()]


def _wrong_shape(error: Any) -> bool:
    """Whether pydantic refused the value for its type ("Input should be a valid boolean"),
    not for what it holds."""
    return str(error.get("type", "")).endswith("_type")


def _where(error: Any) -> tuple[str | int, ...]:
    """The error's place in the body, without `body` and pydantic's union-member tags."""
    loc = [part for part in error.get("loc", ()) if part != "body"]
    return tuple(p for p in loc if isinstance(p, int) or ("[" not in p and p not in _UNION_TAGS))


def _problem(where: tuple[str | int, ...], error: Any) -> str:
    """What one validation error says is wrong, in a client's terms."""
    if error.get("type") == "json_invalid":
        position = next((p for p in error.get("loc", ()) if isinstance(p, int)), None)
        at = "" if position is None else f" at character {position + 1}"
        return f"the body is not valid JSON{at}: {error.get('ctx', {}).get('error', '')}"
    if not where and error.get("type") == "missing":
        return f"the body is empty; {SEND_JSON}"
    if error.get("type") == "string_unicode":  # as the app's own checks say it
        return "is not valid Unicode: it holds a lone surrogate (a \\ud800-\\udfff escape alone)"
    if error.get("ctx", {}).get("pattern") == COLLECTION_NAME:  # it said the pattern alone
        return f"invalid collection name {quoted(error.get('input'))}: {COLLECTION_NAME_RULE}"
    return str(error.get("msg", "invalid")).removeprefix("Value error, ")


def _not_json(content_type: str) -> str:
    """Why a body sent as another type than JSON is refused (415)."""
    sent = f"Content-Type {content_type!r}" if content_type else "no Content-Type"
    return f"the body must be JSON, sent with Content-Type: application/json (got {sent})"


def _reads_as_json(content_type: str) -> bool:
    """Whether FastAPI parses a body of this type as JSON: application/json or
    application/*+json (none given, form data, NDJSON and text it passes on unparsed)."""
    kind = content_type.split(";", 1)[0].strip().lower()
    major, _, minor = kind.partition("/")
    return major == "application" and (minor == "json" or minor.endswith("+json"))


def _placed(where: tuple[str | int, ...], words: list[str]) -> str:
    """A place's complaints after its name (`documents[1].id`, as the app's own checks name
    it); the body's own stand alone."""
    text = " or ".join(words)
    if text.startswith("the body "):
        return text
    name = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in where).lstrip(".")
    joiner = " " if text.startswith("is not valid Unicode") else ": "
    return f"{name or 'body'}{joiner}{text}"


def check_texts(
    texts: Sequence[str],
    field: str,
    limits: Limits,
    allow_empty: bool = False,
    chunked: bool = False,
    each: bool = True,
    single: bool = False,
    stored: bool = False,
    member: str = "",
) -> None:
    """Refuse too many texts (413), a text over the character limit or an empty one (422).
    Documents to chunk have no character limit but the body's: each chunk is what is embedded.
    Without `each`, only the count (a write that skips what it cannot embed). `single`: the
    client sent `field` as one string, so a problem names it without an index. `stored`:
    documents, measured as stored (`text_problem`). `member`: where in each item its text is
    (`.text` of a document: `documents[0]` named the document)."""
    if len(texts) > limits.max_inputs:
        raise ApiError(
            413, f"{field} has {len(texts)} texts; the limit is {limits.max_inputs} (--max-inputs)"
        )
    for i, text in enumerate(texts):
        named = field if single else f"{field}[{i}]{member}"
        if not allow_empty and is_blank(text):
            raise ApiError(422, f"{named} {_nothing_to_embed(text)}: there is nothing to embed")
        problem = text_problem(text, limits, chunked, stored) if each else None
        if problem is not None:
            raise ApiError(422, f"{named} {problem}")


def _nothing_to_embed(text: str) -> str:
    """What a text with nothing to embed is, as the CLI says it: `"   "` was "empty"."""
    return "is blank (only white space or invisible characters)" if text else "is empty"


def text_problem(
    text: str, limits: Limits, chunked: bool = False, stored: bool = False
) -> str | None:
    """Why a text cannot be embedded as sent (over the character limit, unless it is chunked;
    a lone surrogate), or None: a write with on_error "skip" skips it, others refuse it. The
    limit counts what is embedded: a document's text as stored (`stored`: without its
    surrounding whitespace, `documents.stored_text`; its padding refused a text within it),
    any other text as sent; the message says which."""
    if not chunked:
        measured = stored_text(text) if stored else text
        if len(measured) > limits.max_chars:
            how = "without" if stored else "as sent, with"
            return (
                f"has {len(measured)} characters {how} its surrounding whitespace; the limit "
                f"is {limits.max_chars} (--max-chars)"
            )
    surrogate = lone_surrogate(text)
    if surrogate is not None:
        return f"is not valid Unicode: it holds {surrogate}"
    return None
