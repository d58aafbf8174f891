"""Answers written to JSON bytes in a worker thread, an item per call: one call over a large
answer holds the GIL, and so the event loop, whichever thread makes it."""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

import numpy as np
import orjson
from pydantic import TypeAdapter

from probembed.fusion import Fused
from probembed.pipeline import Pipeline
from probembed.service import schemas


def _similarity_body(pipeline: Pipeline, fused: Fused) -> bytes:
    """The similarity answer as JSON bytes: the first fused row against the others, scored
    by `Pipeline.similarity_of` (what `Pipeline.similarity` scores with)."""
    found = pipeline.similarity_of(fused.rows(slice(0, 1)), fused.rows(slice(1, None)))
    scores, stds = found.score[0].tolist(), found.std[0].tolist()
    data = [
        {"index": i, "score": score, "std": std}
        for i, (score, std) in enumerate(zip(scores, stds, strict=True))
    ]
    answer: dict[str, Any] = {"object": "list", "data": data, "model": pipeline.name}
    answer |= {"score_name": pipeline.score.name, "beta": pipeline.score.beta}
    return _written_by_item(answer, "data", _numpy_json)


#: One query's result, validated and written as JSON bytes by pydantic.
_QUERY_RESULT = TypeAdapter(schemas.QueryResultOut)


def _search_body(name: str, results: list[dict]) -> bytes:
    """A search's JSON answer, each query's result validated and written by its own call: one
    call over every hit (2,048 queries of 1,000 hits are within the default limits) holds
    the GIL throughout, and on a worker thread stalls the event loop as much as on it."""
    answer = {"collection": name, "results": results}
    return _written_by_item(answer, "results", _query_json)


def _query_json(result: dict) -> bytes:
    """One query's result as the response model validates and writes it."""
    return _QUERY_RESULT.dump_json(_QUERY_RESULT.validate_python(result))


def _embedding_body(fused: Fused, model: str, encoding: str, texts: list[str]) -> bytes:
    """OpenAI's response body as JSON bytes, the bytes `orjson.dumps` gives the whole payload,
    written an item per call: one call over 2,048 rows held the GIL (and so the event loop,
    /healthz included) as long on a worker thread as on the loop. orjson writes the float32
    rows as they are: each float's shortest decimal, read back exactly."""
    payload = _embedding_payload(fused, model, encoding, texts)
    return _written_by_item(payload, "data", _numpy_json)


def _numpy_json(value: Any) -> bytes:
    """A value as JSON, numpy arrays as lists of their numbers."""
    return orjson.dumps(value, option=orjson.OPT_SERIALIZE_NUMPY)


def _written_by_item(answer: dict[str, Any], listed: str, write: Callable[[Any], bytes]) -> bytes:
    """`answer` as compact JSON (orjson's bytes), the list under `listed` written one item
    per `write` call, so no one call holds the GIL for the whole answer."""
    pieces: list[bytes] = [b"{"]
    for i, (key, value) in enumerate(answer.items()):
        pieces += [b"," if i else b"", orjson.dumps(key), b":"]
        if key == listed:
            pieces.append(b"[")
            for j, item in enumerate(value):
                pieces += [b"," if j else b"", write(item)]
            pieces.append(b"]")
        else:
            pieces.append(_numpy_json(value))
    pieces.append(b"}")
    return b"".join(pieces)


def _embedding_payload(fused: Fused, model: str, encoding: str, texts: list[str]) -> dict:
    """OpenAI's response body, float lists or base64 little-endian float32."""

    def encoded(row: np.ndarray) -> np.ndarray | str:
        if encoding == "base64":
            return base64.b64encode(row.astype("<f4").tobytes()).decode("ascii")
        return np.ascontiguousarray(row)  # orjson writes C-ordered arrays only

    mean, var = fused.gaussian.mean, fused.gaussian.var
    data = [
        {
            "object": "embedding",
            "index": i,
            "embedding": encoded(mean[i]),
            "variance": encoded(var[i]),
            "weights": fused.explain(i),
        }
        for i in range(len(texts))
    ]
    tokens = sum(len(t.split()) for t in texts)
    usage = {"prompt_tokens": tokens, "total_tokens": tokens}
    return {"object": "list", "data": data, "model": model, "usage": usage}
