"""The OpenAI-compatible routes (/v1/models, /v1/embeddings) and Text Embeddings Inference's
/v1/similarity."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Security
from fastapi.responses import Response

from probembed.service import schemas
from probembed.service.answers import _embedding_body, _similarity_body
from probembed.service.auth import READ
from probembed.service.errors import _ERRORS, ApiError
from probembed.service.scopes import ScopedRoute, _scope
from probembed.service.state import Service
from probembed.service.validation import check_texts


def _embeddings(service: Service) -> APIRouter:
    """OpenAI-compatible /v1/embeddings and /v1/models."""
    router = APIRouter(
        tags=["embeddings"], dependencies=[Security(_scope(service, READ))], route_class=ScopedRoute
    )

    def card(name: str) -> schemas.ModelCard:
        """A served pipeline as OpenAI describes a model."""
        pipeline = service.pipeline(name)
        return schemas.ModelCard(id=name, dim=service.dim(name), models=list(pipeline.models))

    @router.get("/v1/models", response_model=schemas.ModelList, responses=_ERRORS)
    async def models() -> schemas.ModelList:
        """The pipelines served, as OpenAI lists models."""
        service.require_ready()
        return schemas.ModelList(data=[card(name) for name in service.pipelines])

    @router.get("/v1/models/{model}", response_model=schemas.ModelCard, responses=_ERRORS)
    async def model(model: str) -> schemas.ModelCard:
        """One served pipeline (OpenAI's `models.retrieve`); 404 lists the served ones."""
        return card(model)

    @router.post("/v1/embeddings", response_model=schemas.EmbeddingResponse, responses=_ERRORS)
    async def embeddings(body: schemas.EmbeddingRequest) -> Response:
        """Fused Gaussians of the inputs: mean as `embedding`, plus `variance` and `weights`."""
        texts = [body.input] if isinstance(body.input, str) else list(body.input)
        if not texts:
            raise ApiError(422, "input is an empty list: pass at least one text")
        check_texts(texts, "input", service.settings.limits, single=isinstance(body.input, str))
        pipeline = service.pipeline(body.model)
        dim = service.dim(body.model)
        if body.dimensions is not None and body.dimensions != dim:
            raise ApiError(
                422,
                f"dimensions={body.dimensions}: pipeline {body.model!r} makes {dim}-dimensional "
                f"vectors (members concatenated, not truncatable); omit it or pass {dim}",
            )
        fused = await service.batcher(pipeline).encode(texts)
        written = await asyncio.to_thread(
            _embedding_body, fused, body.model, body.encoding_format, texts
        )
        return Response(written, media_type="application/json")

    @router.post("/v1/similarity", response_model=schemas.SimilarityResponse, responses=_ERRORS)
    async def similarity(body: schemas.SimilarityRequest) -> Response:
        """Text Embeddings Inference's similarity: each of `sentences` against
        `source_sentence`, by the pipeline's own score, each with its std."""
        limits, inputs = service.settings.limits, body.inputs
        check_texts([inputs.source_sentence], "inputs.source_sentence", limits, single=True)
        check_texts(inputs.sentences, "inputs.sentences", limits)
        pipeline = service.pipeline(body.model)
        texts = [inputs.source_sentence, *inputs.sentences]
        fused = await service.batcher(pipeline).encode(texts)
        written = await asyncio.to_thread(_similarity_body, pipeline, fused)
        return Response(written, media_type="application/json")

    return router
