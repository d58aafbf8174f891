"""Compact stored variances: a low-rank basis per member block, a few coefficients per row.

A fused variance is concat_k(π_k σ²_k), and each member's σ²_k barely changes shape from
text to text (an adapter Laplace's profile is fixed up to a per-text scale; a full
last-layer Laplace adds a second direction). So a collection keeps, per block, the top RANK
right singular vectors of its pipeline's variances (in the table's header), and per row
only the least-squares coefficients on them: RANK x (number of members) floats instead of
the full dimension. What a search reads back is the reconstruction, floored at a fraction
of the smallest variance the basis was fitted on; the error this makes on each score is
measured by benchmarks/variance.py (benchmarks/results/variance.json, in docs/results.md) and
bounded by a test.

The basis is the pipeline's, not the collection's: it is fitted on reference texts every
machine has (first sentences of the Python docs' paragraphs), so what a collection stores
depends neither on its own texts nor on the size of its first write (a collection created
empty, or written a few items at a time, stores coefficients too, and an ingest stores the
same numbers at any batch size). Fitted on these short sentences, the default pipeline's
basis reproduces the score std of scientific abstracts, claims, caption sentences and
banking queries about as closely as one fitted on 512 of their own texts (a scratch
measurement; benchmarks/variance.py measures what collections store).

Not every pipeline's variances are this regular: the hashing encoder's sparse n-gram
features give a Laplace variance whose shape changes with each text. A pipeline's basis is
therefore kept only if it reproduces the score std of as many held-out reference texts within
MAX_STD_ERROR; otherwise its collections store whole variances (format 1).

The verdict (the basis, or None, and the error that decided it) ships with the pipeline:
`Pipeline.save` writes it to BASIS_FILE, fitting it first where this process has not, and
`Pipeline.load` reads it back, so a process that makes a collection of a built-in or of a
saved pipeline encodes no reference text, and every machine stores the same header. The file
names the pipeline fingerprint it was fitted for: one that names another (a member's model
changed), or that cannot be read (said in a warning), is ignored and the basis fitted here at
first use, as for a directory saved before it existed.

What a verdict is fitted on is the pipeline's fused variances, concat_k(π_k σ²_k): they depend
on the members and on the fusion (its weights scale each block, and a uec temperature makes
them vary by text; the floor and the std error are the fused rows'), which is what the
pipeline fingerprint identifies, and on nothing else of the pipeline (the score, the
collection adaptation, which tilts weights at search time, and the calibrator change no stored
row). So a verdict a loaded directory kept serves every pipeline of its fingerprint in this
process (`hold_kept`): one made from the loaded members under another score or calibrator
reuses it, while one under another fusion has another fingerprint and fits its own. The module
lives outside the store because the pipeline writes and reads it, and the pipeline must not
import the store.
"""

from __future__ import annotations

import base64
import json
import math
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeGuard

import numpy as np

from probembed import atomic
from probembed.caller import warn_caller
from probembed.gaussian import Gaussian
from probembed.pydoc_text import paragraphs
from probembed.scoring import dot_variance

if TYPE_CHECKING:  # the pipeline imports this module: its type only for checking
    from probembed.pipeline import Pipeline

#: Basis vectors per member block: the default pipeline's second direction (minilm's full
#: last-layer Laplace) is the one a per-text scale alone misses.
RANK = 2
#: Reference texts a basis is fitted on, and as many more it must reproduce.
REFERENCE_ROWS = 64
#: Largest error of the score std, relative to its median, a basis may make on held-out
#: reference texts. The default and retrieval pipelines err by 0.03% there; hashing encoders
#: by 0.5% to 1.3% and a learned variance head (default-head) by 1.6%, so their collections
#: store whole variances (tested). A collection's own texts, further from the reference, see
#: several times the reference's error (the default's std errs by at most 0.3% of its median
#: over 100 held-out queries scored against the first 10,000 texts of the search benchmark's
#: 100,000-text sample, stored as coefficients: benchmarks/variance.py,
#: benchmarks/results/variance.json), hence the margin.
MAX_STD_ERROR = 0.002
#: Rows decoded at a time: a block's float64 temporaries (128 x 512 x 8 bytes) stay in cache,
#: which makes decoding a few thousand hits about a third faster than one pass over them all.
DECODE_ROWS = 128
#: Reconstructions are floored at this fraction of the smallest fitted variance: a variance
#: is positive, and the log- and ratio-scores divide by it.
FLOOR_FRACTION = 0.5


@dataclass(frozen=True, eq=False)
class VarianceBasis:
    """Per member block, the basis a row's variance is a combination of."""

    #: Width of each block, in column order; they sum to the vector dimension.
    blocks: tuple[int, ...]
    #: Per block, a (rank, width) float32 basis.
    bases: tuple[np.ndarray, ...]
    #: Smallest variance a reconstruction returns.
    floor: float

    @classmethod
    def fit(cls, var: np.ndarray, blocks: Sequence[int]) -> VarianceBasis:
        """The top singular directions of each block of these (n, d) variances."""
        var = np.asarray(var, dtype=np.float64)
        widths = tuple(int(b) for b in blocks) or (var.shape[1],)
        if sum(widths) != var.shape[1] or len(var) == 0:
            raise ValueError(
                f"variance basis needs rows of width {sum(widths)} (blocks {widths}), "
                f"got an array of shape {var.shape}"
            )
        bases = []
        for part in np.split(var, np.cumsum(widths)[:-1], axis=1):
            _, _, vt = np.linalg.svd(part, full_matrices=False)
            bases.append(vt[: min(RANK, len(vt))].astype(np.float32))
        floor = float(max(var.min(), np.finfo(np.float32).tiny) * FLOOR_FRACTION)
        return cls(widths, tuple(bases), floor)

    def std_error(self, g: Gaussian) -> float:
        """Largest error of the dot-product std from decoded variances, relative to its median
        (the first REFERENCE_ROWS rows' scores against every row: every held-out reference
        text against all of them, as `reference_fit` passes them)."""
        compact = Gaussian(g.mean, self.decode(self.encode(g.var)))
        want = np.sqrt(dot_variance(g[:REFERENCE_ROWS], g))
        got = np.sqrt(dot_variance(g[:REFERENCE_ROWS], compact))
        return float(np.abs(got - want).max() / max(np.median(want), np.finfo(float).tiny))

    @property
    def width(self) -> int:
        """Coefficients per row."""
        return sum(len(b) for b in self.bases)

    @property
    def dim(self) -> int:
        """Vector dimension the basis reconstructs."""
        return sum(self.blocks)

    def encode(self, var: np.ndarray) -> np.ndarray:
        """(n, width) float32 least-squares coefficients of each row on the basis."""
        var = np.asarray(var, dtype=np.float64)
        if var.ndim != 2 or var.shape[1] != self.dim:
            raise ValueError(f"variances must be (n, {self.dim}), got {var.shape}")
        parts = np.split(var, np.cumsum(self.blocks)[:-1], axis=1)
        pinvs = [np.linalg.pinv(b.astype(np.float64)) for b in self.bases]
        coefs = [part @ p for part, p in zip(parts, pinvs, strict=True)]
        return np.hstack(coefs).astype(np.float32)

    def decode(self, coef: np.ndarray) -> np.ndarray:
        """(n, dim) float32 variances rebuilt from coefficients, floored.

        Each block is a sum of rank-many scaled basis rows, written straight into the output:
        elementwise float64 arithmetic, so no BLAS call (whose kernel and threads would choose
        the rounding, and whose start-up dominates products this thin), DECODE_ROWS rows of
        one block at a time.
        """
        coef = np.asarray(coef, dtype=np.float64)
        if coef.ndim != 2 or coef.shape[1] != self.width:
            raise ValueError(f"variance coefficients must be (n, {self.width}), got {coef.shape}")
        out = np.empty((len(coef), self.dim), dtype=np.float32)
        bases = [b.astype(np.float64) for b in self.bases]
        for first in range(0, len(coef), DECODE_ROWS):  # temporaries that stay in cache
            part, column, start = coef[first : first + DECODE_ROWS], 0, 0
            for basis in bases:
                rank, width = basis.shape
                block = part[:, column, None] * basis[0]
                for j in range(1, rank):
                    block += part[:, column + j, None] * basis[j]
                target = out[first : first + DECODE_ROWS, start : start + width]
                np.maximum(block, self.floor, out=target, casting="same_kind")
                column, start = column + rank, start + width
        return out

    def to_json(self) -> dict[str, Any]:
        """The header form: block widths, ranks, floor and the basis as base64 float32."""
        packed = np.concatenate([b.ravel() for b in self.bases]).astype("<f4").tobytes()
        return {
            "blocks": list(self.blocks),
            "ranks": [len(b) for b in self.bases],
            "floor": self.floor,
            "basis": base64.b64encode(packed).decode("ascii"),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> VarianceBasis:
        """Read the header form back, exactly."""
        flat = np.frombuffer(base64.b64decode(data["basis"]), dtype="<f4")
        bases, start = [], 0
        for width, rank in zip(data["blocks"], data["ranks"], strict=True):
            bases.append(flat[start : start + rank * width].reshape(rank, width).copy())
            start += rank * width
        return cls(tuple(data["blocks"]), tuple(bases), float(data["floor"]))


#: The file a pipeline directory keeps its verdict in (`Pipeline.save` writes it).
BASIS_FILE = "variance_basis.json"
#: Version of BASIS_FILE's layout; another is ignored (the basis fitted anew).
BASIS_FORMAT = 1


@dataclass(frozen=True, eq=False)
class Verdict:
    """Whether a pipeline's collections store coefficients: its basis (None: variances stored
    whole) and the reference std error that decided it, for the pipeline of `fingerprint`."""

    fingerprint: str
    basis: VarianceBasis | None
    std_error: float

    def to_json(self) -> dict[str, Any]:
        """BASIS_FILE's form: the basis as a collection's header holds it (`variance`)."""
        return {
            "format": BASIS_FORMAT,
            "pipeline": self.fingerprint,
            "std_error": self.std_error,
            "max_std_error": MAX_STD_ERROR,
            "variance": None if self.basis is None else self.basis.to_json(),
        }

    def write(self, directory: Path) -> None:
        """Keep it in a pipeline directory, replaced whole (`atomic.write_bytes`)."""
        text = json.dumps(self.to_json(), indent=2, allow_nan=False) + "\n"
        atomic.write_bytes(directory / BASIS_FILE, text.encode())


def read_verdict(directory: Path) -> Verdict | None:
    """The verdict a pipeline directory keeps, or None: absent (a directory saved before, fitted
    at first use as then), or unreadable, which is said in a warning and likewise refitted."""
    path = directory / BASIS_FILE
    if not path.is_file():
        return None
    try:
        return _verdict_of(json.loads(path.read_text(encoding="utf-8")))
    except (ValueError, TypeError, KeyError) as exc:  # JSON's, base64's and UTF-8's too
        warn_caller(f"{path} is ignored ({exc}); the variance basis is fitted anew at first use")
        return None


def _verdict_of(data: Any) -> Verdict:
    """A verdict from BASIS_FILE's form, every field checked (a ValueError names the first)."""
    if not isinstance(data, dict) or data.get("format") != BASIS_FORMAT:
        raise ValueError(f"not a variance basis of format {BASIS_FORMAT}")
    fingerprint, error, form = data["pipeline"], data["std_error"], data["variance"]
    if not isinstance(fingerprint, str) or not isinstance(error, (int, float)):
        raise ValueError("'pipeline' must be a fingerprint and 'std_error' a number")
    if not math.isfinite(error) or error < 0:
        raise ValueError(f"std_error {error!r} is no error")
    if (form is not None) != (error <= MAX_STD_ERROR):  # judged by another MAX_STD_ERROR
        raise ValueError(f"its verdict is not this release's for a std error of {error:g}")
    return Verdict(fingerprint, None if form is None else _checked_basis(form), float(error))


def _checked_basis(form: dict[str, Any]) -> VarianceBasis:
    """The header form read back, refused where its widths, ranks or floor cannot be one."""
    blocks, ranks, floor = form["blocks"], form["ranks"], form["floor"]
    counts = [*blocks, *ranks]
    if not blocks or len(blocks) != len(ranks) or not all(type(n) is int and n > 0 for n in counts):
        raise ValueError(f"blocks {blocks!r} and ranks {ranks!r} do not match")
    if max(ranks) > RANK or not (isinstance(floor, float) and 0 < floor < math.inf):
        raise ValueError(f"ranks {ranks!r} or floor {floor!r} out of range")
    size = 4 * sum(r * w for r, w in zip(ranks, blocks, strict=True))
    if len(base64.b64decode(form["basis"], validate=True)) != size:
        raise ValueError(f"the basis is not {size} bytes of float32")
    return VarianceBasis.from_json(form)


#: Pipeline fingerprint -> its verdict, fitted in this process or kept by a directory loaded
#: in it (`hold_kept`): every pipeline of that fingerprint takes it.
_FITTED: dict[str, Verdict] = {}
#: Pipeline fingerprint -> the lock its one fit is made under; `_LOCKS_LOCK` guards the dict.
_FITTING: dict[str, threading.Lock] = {}
_LOCKS_LOCK = threading.Lock()


def pipeline_basis(pipeline: Pipeline) -> VarianceBasis | None:
    """The basis every collection of this pipeline stores variances on, or None where a basis
    would not reproduce them (`pipeline_verdict`)."""
    return pipeline_verdict(pipeline).basis


def pipeline_verdict(pipeline: Pipeline) -> Verdict:
    """The verdict its directory kept (`Pipeline.variance_verdict`, where `verdict_fits`), else
    the one this process holds for its fingerprint (kept by a directory loaded, `hold_kept`, or
    fitted), else one fitted once per process: it encodes 2 x REFERENCE_ROWS texts.

    Threads asking at once for one pipeline's (the service's request threads) wait for the one
    that fits it, under a lock per fingerprint: each fitted it, seconds of encoding apiece.
    Other pipelines' bases are fitted meanwhile.
    """
    key = str(pipeline.fingerprint)
    kept = pipeline.variance_verdict
    if verdict_fits(kept, pipeline):
        return kept
    if key in _FITTED:
        return _FITTED[key]
    with _LOCKS_LOCK:
        fitting = _FITTING.setdefault(key, threading.Lock())
    with fitting:
        if key not in _FITTED:  # another thread may have fitted it while this one waited
            _FITTED.setdefault(key, fitted_verdict(pipeline))  # or a load has since held one
    return _FITTED[key]


def hold_kept(pipeline: Pipeline) -> None:
    """Offer the verdict a loaded pipeline's directory kept to every pipeline of its fingerprint
    in this process, where it is this one's (`verdict_fits`): a pipeline made from its members
    under another score, adaptation or calibrator (`Pipeline(loaded.members, loaded.fusion,
    ...)`, or `with_settings_of` a collection's kept copy saved without the file) would
    otherwise fit the same verdict again, seconds of encoding per member."""
    kept = pipeline.variance_verdict
    if verdict_fits(kept, pipeline):
        _FITTED.setdefault(kept.fingerprint, kept)


def verdict_fits(verdict: Verdict | None, pipeline: Pipeline) -> TypeGuard[Verdict]:
    """Whether a verdict is this pipeline's: fitted for its fingerprint (its members and fusion,
    which make the fused variances it was fitted on) and of its block widths (a basis of
    another's never decodes its rows; a verdict of whole variances fits any)."""
    if verdict is None or verdict.fingerprint != str(pipeline.fingerprint):
        return False
    if verdict.basis is None:
        return True
    return verdict.basis.blocks == (tuple(pipeline.blocks) or (pipeline.empty().gaussian.dim,))


def fitted_verdict(pipeline: Pipeline) -> Verdict:
    """A verdict fitted here on the reference texts, whatever one is held (what a built-in
    ships, `scripts/build_pipelines.py`): it encodes 2 x REFERENCE_ROWS texts."""
    basis, error = reference_fit(pipeline)
    key = str(pipeline.fingerprint)
    return Verdict(key, basis if error <= MAX_STD_ERROR else None, error)


def reference_fit(pipeline: Pipeline) -> tuple[VarianceBasis, float]:
    """A basis fitted on the first REFERENCE_ROWS reference texts, and its `std_error` on the
    rest: whether the pipeline's variances are regular enough to store as coefficients."""
    g = pipeline.encode(reference_texts()).gaussian
    blocks = pipeline.blocks or (g.dim,)
    basis = VarianceBasis.fit(g.var[:REFERENCE_ROWS], blocks)
    return basis, basis.std_error(g[REFERENCE_ROWS:])


def reference_texts() -> list[str]:
    """2 x REFERENCE_ROWS sentences of 40 to 200 characters: the first of each paragraph of the
    bundled Python docs, topics in name order (short: fitting costs one small batch)."""
    texts = []
    for paragraph in paragraphs():
        sentence = _SENTENCE_END.split(" ".join(paragraph.split()), maxsplit=1)[0]
        if 40 <= len(sentence) <= 200:
            texts.append(sentence)
        if len(texts) == 2 * REFERENCE_ROWS:
            return texts
    raise ValueError(f"the Python docs gave {len(texts)} reference texts, not {2 * REFERENCE_ROWS}")


_SENTENCE_END = re.compile(r"(?<=[.:])\s")
