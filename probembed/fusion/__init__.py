"""Fusing the Gaussians of K models into one per text, weighted by each model's uncertainty."""

from probembed.fusion.combine import Fused, default_temperature, fuse, member_blocks
from probembed.fusion.names import Fusion, FusionMode, parse_fusion, parse_mode, single_model
from probembed.fusion.weights import fusion_weights, uncertainty

__all__ = [
    "Fused",
    "Fusion",
    "FusionMode",
    "default_temperature",
    "fuse",
    "fusion_weights",
    "member_blocks",
    "parse_fusion",
    "parse_mode",
    "single_model",
    "uncertainty",
]
