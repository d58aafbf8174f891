"""A tuned copy of a pipeline, as `probembed tune` of the same members makes one: the same
vectors (fingerprint) under other settings, for the tests of a collection's kept copy."""

import numpy as np

from probembed.calibration import RelevanceCalibrator, hit_features
from probembed.pipeline import AdaptConfig, Pipeline, ScoreConfig
from probembed.store.ranking import scan


def tuned_copy(pipeline: Pipeline, sentences: list[str]) -> Pipeline:
    """What `probembed tune` of the same members gives: the same vectors, another beta and
    gamma and a relevance calibrator (fitted on real hits with seeded labels)."""
    docs = pipeline.encode(sentences[:60])
    queries = pipeline.encode(sentences[60:90])
    ranked = scan(queries.gaussian, docs.gaussian, np.arange(60), 10, "uec", 1.0)
    rows = [hit_features(r.dots, r.variances, 10) for r in ranked]
    x = np.concatenate(rows)
    groups = np.repeat(np.arange(len(rows)), [len(r) for r in rows])
    odds = np.exp(-8.0 * (x[:, 0] - np.median(x[:, 0])))
    y = np.random.default_rng(0).random(len(x)) < 1.0 / (1.0 + odds)
    calibrator = RelevanceCalibrator.fit(x, y, groups, seed=0)
    score, adapt = ScoreConfig("uec", 4.0), AdaptConfig(gamma=5.0)
    return Pipeline(pipeline.members, pipeline.fusion, score, "tuned", False, calibrator, adapt)


#: What the tuned copy changes of the hash pipeline's settings, as a refusal names it.
TUNED_CHANGES = (
    "score uec beta 1 -> uec beta 4; adaptation gamma 0 -> 5; relevance calibrator none -> one"
)
