"""How the built-in pipelines are made: candidate models, the seeded pair sample, the fit.

`scripts/build_pipelines.py` fits these candidates, tunes their fusion on dev splits and ships
what tuning keeps (a member tuned to weight 0 is dropped). `benchmarks/quality.py` fits the
same candidates the same way, so its table compares every candidate, including those the
shipped pipelines no longer carry. `hashing_pipeline` is the pipeline of no model the tests
and the store's benchmarks fit.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from probembed.encoders import get_encoder
from probembed.evaluation.datasets import load_pairs
from probembed.pipeline import FusionConfig, ModelSpec, Pipeline, available_pipelines
from probembed.uncertainty import Estimator, estimator_class, make_estimator

#: Every model tuning may choose from for the built-ins, in fusion order.
CANDIDATE_MODELS = ("minilm", "paraphrase-l3", "use", "wordllama")
#: Built-in name -> the estimator of its members. `retrieval` is `default`'s members tuned for
#: search (short queries against long documents) instead of for every task at once.
BUILTIN_ESTIMATORS = {
    "default": "laplace",
    "default-head": "head",
    "default-perturb": "perturb",
    "retrieval": "laplace",
}
SEED = 0
MAX_PAIRS = 8000
#: Passages of the bundled Python docs whose halves `hashing_pipeline` is fitted on.
HASHING_PASSAGES = 160


def sample_pairs(
    source: Path | Sequence[Path], max_pairs: int = MAX_PAIRS, seed: int = SEED
) -> list[tuple[str, str]]:
    """A seeded sample from a folder's pairs files (by name) or the files given (in their
    order): a fixed file order makes the sample reproducible."""
    files = sorted(source.glob("*.tsv")) if isinstance(source, Path) else list(source)
    pairs: list[tuple[str, str]] = []
    for path in files:
        data = load_pairs(path)
        pairs.extend(zip(data.text_a, data.text_b, strict=True))
    if not pairs:
        if isinstance(source, Path):
            raise ValueError(f"no positive pairs in {source} (expected *.tsv files)")
        raise ValueError(f"no positive pairs in {', '.join(map(str, files)) or 'no files'}")
    if len(pairs) > max_pairs:
        keep = np.sort(np.random.default_rng(seed).choice(len(pairs), max_pairs, replace=False))
        pairs = [pairs[i] for i in keep]
    return pairs


def candidate_specs(estimator: str) -> list[ModelSpec]:
    """The candidate members of a built-in, each with that estimator."""
    return [ModelSpec(m, estimator, {"seed": SEED}) for m in CANDIDATE_MODELS]


def fit_candidates(
    names: Sequence[str],
    pairs: Sequence[tuple[str, str]],
    cache: bool = True,
    progress: bool = False,
) -> dict[str, Pipeline]:
    """Each named built-in with every candidate member, untuned; members shared are fit once."""
    fitted: dict[tuple[str, str], Estimator] = {}
    pipelines = {}
    for name in names:
        specs = candidate_specs(BUILTIN_ESTIMATORS[name])
        for spec in specs:
            if (spec.encoder, spec.estimator) not in fitted:
                member = make_estimator(spec.estimator, get_encoder(spec.encoder), **spec.params)
                fitted[spec.encoder, spec.estimator] = member.fit(pairs, progress=progress)
        members = [fitted[s.encoder, s.estimator] for s in specs]
        pipelines[name] = Pipeline(members, FusionConfig("uec", "concat"), name=name, cache=cache)
    return pipelines


def recipe_members(
    encoders: Sequence[str],
    estimator: str,
    pairs: Sequence[tuple[str, str]],
    refit: bool = False,
    saved: Path | None = None,
) -> dict[str, Estimator]:
    """Each encoder's member as this recipe fits it: shipped, saved under `saved`, or fitted.

    The built-ins' members were fitted by this recipe on the same seeded pairs, so reusing
    them saves minutes of Fisher computation; `refit` fits every member from scratch. A member
    fitted here is saved under `saved/<encoder>` when given, for the next run to load.
    """
    shipped: dict[str, Estimator] = {}
    builtins = [b for b, e in BUILTIN_ESTIMATORS.items() if e == estimator]
    for builtin in reversed(builtins):  # the first built-in's member wins
        if not refit and builtin in available_pipelines():
            shipped |= {m.encoder.name: m for m in Pipeline.load(builtin, cache=False).members}
    members = {}
    for name in encoders:
        path = saved / name if saved is not None else None
        if name in shipped:
            members[name] = shipped[name]
        elif path is not None and path.is_dir() and not refit:
            members[name] = estimator_class(estimator).load(path, get_encoder(name))
        else:
            member = make_estimator(estimator, get_encoder(name), seed=SEED)
            members[name] = member.fit(pairs, progress=True)
            if path is not None:
                members[name].save(path)
    return members


def candidate_pipeline(
    name: str, pairs: Sequence[tuple[str, str]], refit: bool = False, cache: bool = True
) -> Pipeline:
    """A built-in with every candidate member: the shipped members as they are, the rest fitted."""
    estimator = BUILTIN_ESTIMATORS[name]
    members = recipe_members(CANDIDATE_MODELS, estimator, pairs, refit)
    return Pipeline(
        [members[m] for m in CANDIDATE_MODELS],
        FusionConfig("uec", "concat"),
        name=name,
        cache=cache,
    )


def hashing_pipeline(dims: Sequence[int], name: str = "hash") -> Pipeline:
    """Calibrated hashing members of these widths fused by UEC, fitted on the two halves of
    each of the bundled Python docs' first HASHING_PASSAGES passages: real fused Gaussians in
    a second, with no model to load and no data to find, the same on every machine."""
    from probembed.store.pydoc_corpus import read_pydoc_topics

    passages = [r.text for r in read_pydoc_topics()[:HASHING_PASSAGES]]
    pairs = [(t[: len(t) // 2], t[len(t) // 2 :]) for t in passages]
    specs = [
        ModelSpec("hash", "laplace", {"calibrate": True}, encoder_params={"dim": d}) for d in dims
    ]
    return Pipeline.fit(specs, pairs, FusionConfig("uec"), name=name, cache=False)
