"""Calibrated relevance: P(a hit is relevant) from the features a search already has.

Numpy only: fitting (`RelevanceCalibrator.fit`) imports scikit-learn, and building training
data from a judged dataset (`probembed.calibration.training`) needs the `eval` extra.
"""

from probembed.calibration.calibrator import CALIBRATION_FILE, RelevanceCalibrator
from probembed.calibration.confidence import CONFIDENCE_DEPTH, QueryConfidence, query_features
from probembed.calibration.features import (
    BASE_FEATURES,
    BM25_HIT_FEATURES,
    DISAGREEMENT,
    bm25_hit_features,
    cosine_spread,
    hit_features,
)

__all__ = [
    "BASE_FEATURES",
    "BM25_HIT_FEATURES",
    "CALIBRATION_FILE",
    "CONFIDENCE_DEPTH",
    "DISAGREEMENT",
    "QueryConfidence",
    "RelevanceCalibrator",
    "bm25_hit_features",
    "cosine_spread",
    "hit_features",
    "query_features",
]
