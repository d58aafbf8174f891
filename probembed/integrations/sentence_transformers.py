"""A sentence-transformers-shaped face on a pipeline, so code written for `SentenceTransformer`
(and MTEB's encoder protocol) runs on probembed unchanged: `pipeline.as_sentence_transformer()`.

The embeddings are the fused means; variances and fusion weights stay with `Pipeline.encode`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from probembed.gaussian import Gaussian
from probembed.scoring import score_matrix

if TYPE_CHECKING:
    from probembed.pipeline import Pipeline

#: Keyword arguments that sentence-transformers or MTEB pass and that change nothing here:
#: MTEB's task metadata, and the device (probembed's members choose their own).
_IGNORED = frozenset(
    {"task_name", "prompt_type", "task_metadata", "hf_split", "hf_subset", "device"}
)


class SentenceEncoder:
    """`encode`, `get_sentence_embedding_dimension` and `similarity`, as sentence-transformers."""

    #: As `SentenceTransformer.similarity_fn_name`: what `similarity` computes.
    similarity_fn_name = "cosine"

    def __init__(self, pipeline: Pipeline) -> None:
        self.pipeline = pipeline

    def encode(
        self,
        sentences: str | Sequence[str],
        batch_size: int = 32,
        show_progress_bar: bool = False,
        normalize_embeddings: bool = False,
        convert_to_numpy: bool = True,
        convert_to_tensor: bool = False,
        **kwargs: Any,
    ) -> Any:
        """Fused means: a 1-d array for one str, an (n, d) float32 array for a list, as ST does.

        `convert_to_tensor` gives a torch tensor, `convert_to_numpy=False` a list of 1-d
        tensors, as in sentence-transformers. `normalize_embeddings` L2-normalises each mean:
        a concat-fused mean is a concatenation of √π_k-scaled unit vectors with Σ π_k = 1, so
        it is already unit-norm and normalising changes it only by float rounding; a mean-mode
        fusion (Σ π_k μ_k) is shorter than 1 and is rescaled. `batch_size` is checked but the
        pipeline batches on its own (each member in its own chunks, through the embedding
        cache), so the vectors are exactly `Pipeline.encode`'s. `prompt` is prepended to every
        sentence, as in sentence-transformers; MTEB's task metadata is accepted and unused.
        """
        prompt = kwargs.pop("prompt", None)
        precision = kwargs.pop("precision", "float32")
        unknown = set(kwargs) - _IGNORED
        if unknown:
            raise TypeError(f"encode got unsupported option(s) {sorted(unknown)}")
        if precision != "float32":
            raise ValueError(f"precision {precision!r} is not supported: probembed gives float32")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
        single = isinstance(sentences, str)
        texts = [sentences] if single else list(sentences)
        if prompt:
            texts = [prompt + t for t in texts]
        means = self._means(texts, show_progress_bar, normalize_embeddings)
        return _convert(means[0] if single else means, convert_to_numpy, convert_to_tensor)

    def _means(self, texts: list[str], progress: bool, normalize: bool) -> np.ndarray:
        """The fused means of the texts (normalised if asked), (0, d) for no texts."""
        if not texts:
            return np.zeros((0, self.get_sentence_embedding_dimension()), dtype=np.float32)
        gaussian = self.pipeline.encode(texts, progress=progress).gaussian
        return (gaussian.normalize() if normalize else gaussian).mean

    def get_sentence_embedding_dimension(self) -> int:
        """The dimension of the fused means."""
        return self.pipeline.empty().gaussian.dim

    def similarity(self, a: Any, b: Any) -> Any:
        """Cosine similarities of every row of `a` with every row of `b`, as a float32 torch
        tensor (sentence-transformers' dtype, so the two mix); computed in float64."""
        import torch

        left, right = (Gaussian.deterministic(_matrix(x)).normalize() for x in (a, b))
        return torch.from_numpy(score_matrix(left, right, "dot").astype(np.float32))


def _matrix(x: Any) -> np.ndarray:
    """Embeddings (array, tensor, list; one row or many) as an (n, d) numpy array."""
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    arr = np.asarray(x, dtype=np.float32)
    return arr[None, :] if arr.ndim == 1 else arr


def _convert(means: np.ndarray, to_numpy: bool, to_tensor: bool) -> Any:
    """Means in the container sentence-transformers would return for these flags."""
    if not (to_tensor or not to_numpy):
        return means
    import torch

    tensor = torch.from_numpy(np.ascontiguousarray(means))
    if to_tensor:
        return tensor
    return list(tensor) if tensor.ndim == 2 else tensor
