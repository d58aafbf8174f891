"""The names of the similarity scores between Gaussians, and strict parsing of them."""

from __future__ import annotations

from enum import StrEnum


class Score(StrEnum):
    """A similarity between two diagonal Gaussians; higher always means more similar."""

    #: Dot product of the means (cosine for unit-norm means); ignores the variances.
    DOT = "dot"
    #: Dot product shrunk by its own standard deviation (probit approximation), as in UEC.
    UEC = "uec"
    #: Cosine divided by 1 + (β/π)·Var(dot), as the published UEC's MTEB script scores.
    UEC_MTEB = "uec-mteb"
    #: Closed-form sampled distance of PCME++: squared mean distance plus both total variances.
    CSD = "csd"
    #: Negative squared 2-Wasserstein distance between the two Gaussians.
    W2 = "w2"
    #: Negative KL divergence KL(query || document).
    KL = "kl"
    #: Mutual likelihood score of PFE: log-likelihood that both share one latent point.
    MLS = "mls"
    #: Negative Bhattacharyya distance: overlap of the two densities.
    BHATTACHARYYA = "bhattacharyya"


_ALIASES = {"cosine": Score.DOT}


def parse_score(name: Score | str) -> Score:
    """Turn a score name into a Score, failing with the list of valid names on a typo."""
    if isinstance(name, Score):
        return name
    if isinstance(name, str):
        key = name.strip().lower()
        if key in _ALIASES:
            return _ALIASES[key]
        try:
            return Score(key)
        except ValueError:
            pass
    valid = ", ".join([s.value for s in Score] + list(_ALIASES))
    raise ValueError(f"unknown score {name!r}; valid scores are: {valid}")
