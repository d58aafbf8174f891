"""Model-independent evaluation: dataset readers, task metrics, failure prediction, plots."""

from probembed.extras import require

require("eval", "probembed.evaluation")

from probembed.evaluation.datasets import (
    ClassificationDataset,
    Dataset,
    PairsDataset,
    RetrievalDataset,
    StsDataset,
    load_classification,
    load_dataset,
    load_evaluable,
    load_pairs,
    load_retrieval,
    load_sts,
)
from probembed.evaluation.metrics import (
    DEFAULT_RETRIEVAL_METRICS,
    per_query_metrics,
    probe_accuracy,
    probe_correct,
    retrieval_metrics,
    run_from_scores,
    spearman,
)
from probembed.evaluation.plots import (
    plot_binned,
    plot_reliability,
    plot_risk_coverage,
)
from probembed.evaluation.uncertainty import (
    NDCG_BELOW_MEDIAN,
    RECALL10_ZERO,
    abs_rank_error,
    auroc,
    binned_quality,
    confidence_signals,
    expected_calibration_error,
    failed_queries,
    quality_at_coverage,
    risk_coverage,
    top_quartile,
)

__all__ = [
    "DEFAULT_RETRIEVAL_METRICS",
    "NDCG_BELOW_MEDIAN",
    "RECALL10_ZERO",
    "ClassificationDataset",
    "Dataset",
    "PairsDataset",
    "RetrievalDataset",
    "StsDataset",
    "abs_rank_error",
    "auroc",
    "binned_quality",
    "confidence_signals",
    "expected_calibration_error",
    "failed_queries",
    "load_classification",
    "load_dataset",
    "load_evaluable",
    "load_pairs",
    "load_retrieval",
    "load_sts",
    "per_query_metrics",
    "plot_binned",
    "plot_reliability",
    "plot_risk_coverage",
    "probe_accuracy",
    "probe_correct",
    "quality_at_coverage",
    "retrieval_metrics",
    "risk_coverage",
    "run_from_scores",
    "spearman",
    "top_quartile",
]
