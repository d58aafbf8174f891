"""A sentence-transformers-shaped face on a pipeline, so code written for `SentenceTransformer`
(and MTEB's encoder protocol) runs on probembed unchanged: `pipeline.as_sentence_transformer()`.

The embeddings are the fused means; variances and fusion weights stay with `Pipeline.encode`.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from probembed.gaussian import Gaussian
from probembed.scoring import score_matrix, score_pairs

if TYPE_CHECKING:
    from probembed.pipeline import Pipeline

#: Keyword arguments that sentence-transformers or MTEB pass and that change nothing here:
#: MTEB's task metadata, and ST's multi-process pool and its chunking of the input.
_IGNORED = frozenset(
    {"task_name", "prompt_type", "task_metadata", "hf_split", "hf_subset", "pool", "chunk_size"}
)


def _texts(inputs: Iterable[Any]) -> list[Any]:
    """The texts of a list (a numpy array, a pandas column, a generator), or of MTEB 2's
    DataLoader of {"text": [...]} batches, told apart by the first item, in order."""
    if isinstance(inputs, Mapping):  # iterated, it gave its keys: {"text": "hi"} -> "text"
        raise TypeError(
            "encode takes a text or a list of texts, got a dict; pass its text (or a "
            "DataLoader of {'text': [...]} batches, as MTEB 2 does)"
        )
    if isinstance(inputs, Sequence):
        return list(inputs)
    items = iter(inputs)
    first = next(items, None)
    if not isinstance(first, Mapping):
        return [] if first is None else [first, *items]
    texts: list[Any] = []
    for batch in itertools.chain([first], items):
        if not isinstance(batch, Mapping) or "text" not in batch:
            raise TypeError(
                "encode takes texts or batches of {'text': [...]} (MTEB 2's DataLoader), "
                f"got a batch of type {type(batch).__name__} without 'text'"
            )
        texts += batch["text"]
    return texts


class SentenceEncoder:
    """`encode` (and `encode_query`/`encode_document`), the embedding dimension, `similarity`
    and `similarity_pairwise`, as sentence-transformers 6 has them, arguments in its order."""

    def __init__(self, pipeline: Pipeline) -> None:
        self.pipeline = pipeline
        #: As `SentenceTransformer.prompts`: none are defined (queries and documents alike).
        self.prompts: dict[str, str] = {}
        self._similarity_fn = "cosine"

    @property
    def similarity_fn_name(self) -> str:
        """As `SentenceTransformer.similarity_fn_name`: what `similarity` computes, one of
        cosine (the default), dot, euclidean and manhattan (negative distances, as ST's)."""
        return self._similarity_fn

    @similarity_fn_name.setter
    def similarity_fn_name(self, name: Any) -> None:
        """Set by name or by ST's `SimilarityFunction` (whose value is the name)."""
        name = getattr(name, "value", name)
        if name not in _SIMILARITIES:
            raise ValueError(
                f"similarity_fn_name {name!r} is not one of {', '.join(_SIMILARITIES)}"
            )
        self._similarity_fn = name

    def encode(
        self,
        inputs: str | Sequence[str] | None = None,
        prompt_name: str | None = None,
        prompt: str | None = None,
        batch_size: int = 32,
        show_progress_bar: bool | None = None,
        output_value: str | None = "sentence_embedding",
        precision: str = "float32",
        convert_to_numpy: bool = True,
        convert_to_tensor: bool = False,
        device: Any = None,
        normalize_embeddings: bool = False,
        truncate_dim: int | None = None,
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
        sentence, as in sentence-transformers, and `prompt_name` names one of `prompts` (there
        are none: a name is refused as ST refuses one it lacks); `device` may be None or the
        CPU, where the members encode; ST's defaults for the rest (sentence embeddings, no
        truncation) and MTEB's task metadata are accepted;
        asking for more than they give is an error (a truncated concat-fused mean would drop
        whole members). `sentences=` (ST before 6) names the input too.
        """
        if inputs is None and "sentences" in kwargs:
            inputs = kwargs.pop("sentences")
        unknown = set(kwargs) - _IGNORED
        if unknown:
            raise TypeError(f"encode got unsupported option(s) {sorted(unknown)}")
        if inputs is None:
            raise TypeError("encode needs the texts to encode (inputs)")
        prompt = self._prompt(prompt_name, prompt)
        _check_device(device)
        for name, value, default in (
            ("output_value", output_value, "sentence_embedding"),
            ("precision", precision, "float32"),
            ("truncate_dim", truncate_dim, None),
        ):
            if value != default:
                raise ValueError(
                    f"{name}={value!r} is not supported: probembed gives each text's fused mean "
                    f"as float32, whole ({name}={default!r})"
                )
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
        single = isinstance(inputs, str)
        texts = [inputs] if isinstance(inputs, str) else _texts(inputs)
        if prompt:
            texts = [prompt + t for t in texts]
        means = self._means(texts, bool(show_progress_bar), normalize_embeddings)
        return _convert(means[0] if single else means, convert_to_numpy, convert_to_tensor)

    def _prompt(self, prompt_name: str | None, prompt: str | None) -> str | None:
        """The prompt to prepend: `prompt`, else the one `prompt_name` names in `prompts`,
        refused as sentence-transformers refuses a name it does not have."""
        if prompt is not None or prompt_name is None:
            return prompt
        if prompt_name not in self.prompts:
            raise ValueError(
                f"Prompt name {prompt_name!r} not found in the configured prompts dictionary "
                f"with keys {list(self.prompts)!r} (probembed encodes queries and documents "
                "alike and defines no prompts; pass prompt='...' to prepend a text)"
            )
        return self.prompts[prompt_name]

    @property
    def device(self) -> str:
        """As `SentenceTransformer.device`: probembed's members encode on the CPU."""
        return "cpu"

    @property
    def max_seq_length(self) -> int | None:
        """As `SentenceTransformer.max_seq_length`: the shortest member's token limit (a
        longer text is cut by that member; None when no member has a limit)."""
        return self.pipeline.max_tokens

    def encode_query(self, inputs: str | Sequence[str], **options: Any) -> Any:
        """As `encode`: probembed encodes queries and documents alike."""
        return self.encode(inputs, **options)

    def encode_document(self, inputs: str | Sequence[str], **options: Any) -> Any:
        """As `encode`: probembed encodes queries and documents alike."""
        return self.encode(inputs, **options)

    def _means(self, texts: list[str], progress: bool, normalize: bool) -> np.ndarray:
        """The fused means of the texts (normalised if asked), (0, d) for no texts."""
        if not texts:
            return np.zeros((0, self.get_sentence_embedding_dimension()), dtype=np.float32)
        gaussian = self.pipeline.encode(texts, progress=progress).gaussian
        return (gaussian.normalize() if normalize else gaussian).mean

    def get_sentence_embedding_dimension(self) -> int:
        """The dimension of the fused means."""
        return self.pipeline.empty().gaussian.dim

    def get_embedding_dimension(self) -> int:
        """As `get_sentence_embedding_dimension` (sentence-transformers 6's name)."""
        return self.get_sentence_embedding_dimension()

    def similarity(self, a: Any, b: Any) -> Any:
        """`similarity_fn_name` of every row of `a` with every row of `b`, as a float32 torch
        tensor (sentence-transformers' dtype, so the two mix); computed in float64."""
        return self._similarities(a, b, pairwise=False)

    def similarity_pairwise(self, a: Any, b: Any) -> Any:
        """`similarity_fn_name` of each row of `a` with the same row of `b`, as a float32
        torch tensor; computed in float64."""
        return self._similarities(a, b, pairwise=True)

    def _similarities(self, a: Any, b: Any, pairwise: bool) -> Any:
        """What `similarity` and `similarity_pairwise` share. They take embeddings, as
        sentence-transformers' do, so cosine and dot score the means alone, with no std (MTEB
        calls this on every pair it evaluates; `scoring.similarity` would add the variances'
        matmuls only to drop them: 4x the time on 4,000 x 4,000 384-d means)."""
        import torch
        from scipy.spatial.distance import cdist

        left, right = _matrix(a), _matrix(b)
        name = self.similarity_fn_name
        if name in ("cosine", "dot"):
            pair = [Gaussian.deterministic(x) for x in (left, right)]
            if name == "cosine":
                pair = [g.normalize() for g in pair]
            values = (score_pairs if pairwise else score_matrix)(pair[0], pair[1], "dot")
        else:  # negative distances, as sentence-transformers gives them
            metric, order = cast(tuple[str, int], _SIMILARITIES[name])  # None: cosine and dot
            left, right = left.astype(np.float64), right.astype(np.float64)
            if pairwise:
                values = -np.linalg.norm(left - right, ord=order, axis=1)
            else:
                values = -cdist(left, right, metric)
        return torch.from_numpy(np.asarray(values).astype(np.float32))


#: sentence-transformers' similarity functions -> scipy's distance and its vector norm
#: (None: a dot product).
_SIMILARITIES: dict[str, tuple[str, int] | None] = {
    "cosine": None,
    "dot": None,
    "euclidean": ("euclidean", 2),
    "manhattan": ("cityblock", 1),
}


def _check_device(device: Any) -> None:
    """Accept no device or the CPU; refuse another rather than ignore it (sentence-
    transformers moves the model there, and fails where it cannot)."""
    if device is None:
        return
    import torch

    try:
        kind = torch.device(device).type
    except (RuntimeError, TypeError) as exc:
        raise ValueError(f"device={device!r} is not a torch device: {exc}") from None
    if kind != "cpu":
        raise ValueError(
            f"device={device!r} cannot be used: probembed's members encode on the CPU "
            "(pass device=None or 'cpu')"
        )


def _matrix(x: Any) -> np.ndarray:
    """Embeddings (array, tensor of any float type, list; one row or many) as an (n, d)
    float32 numpy array."""
    if hasattr(x, "detach"):
        x = x.detach().cpu().float().numpy()  # numpy has no bfloat16
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
