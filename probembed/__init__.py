"""probembed: probabilistic text embeddings, fused by uncertainty, searched with error bars.

import probembed
pipe = probembed.load("default")            # built-in, ships with the package
fused = pipe.encode(["A man plays a guitar."])
fused.gaussian.mean, fused.gaussian.var, fused.explain(0)
"""

from probembed.encoders import get_encoder
from probembed.fusion import Fused
from probembed.gaussian import Gaussian
from probembed.pipeline import Pipeline, available_pipelines

__version__ = "0.1.0"
load = Pipeline.load

__all__ = [
    "Fused",
    "Gaussian",
    "Pipeline",
    "__version__",
    "available_pipelines",
    "get_encoder",
    "load",
]
