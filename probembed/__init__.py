"""probembed: probabilistic text embeddings, fused by uncertainty, searched with error bars.

import probembed
pipe = probembed.load("default")            # built-in, ships with the package
fused = pipe.encode(["A man plays a guitar."])
fused.gaussian.mean, fused.gaussian.var, fused.explain(0)

`import probembed` needs only numpy and scipy: the pipeline (which encodes, and needs the
`models` extra) is imported on first use of `Pipeline`, `load`, `available_pipelines`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from probembed.fusion import Fused
from probembed.gaussian import Gaussian

if TYPE_CHECKING:  # what the lazy names below are, for type checkers and IDEs
    from probembed.encoders import get_encoder, register_encoder
    from probembed.encoders.scripts import UnreadScriptWarning
    from probembed.pipeline import Pipeline, available_pipelines
    from probembed.store import QueryCutWarning

    load = Pipeline.load

__version__ = "0.1.0"

#: Public names imported on first use, and the module that holds each.
_LAZY = {
    "Pipeline": "probembed.pipeline",
    "QueryCutWarning": "probembed.store",  # which names the `store` extra if it is missing
    "UnreadScriptWarning": "probembed.encoders.scripts",
    "available_pipelines": "probembed.pipeline",
    "get_encoder": "probembed.encoders",
    "register_encoder": "probembed.encoders",
}

__all__ = [
    "Fused",
    "Gaussian",
    "Pipeline",
    "QueryCutWarning",
    "UnreadScriptWarning",
    "__version__",
    "available_pipelines",
    "get_encoder",
    "load",
    "register_encoder",
]


if not TYPE_CHECKING:  # a module __getattr__ makes every unknown name Any to mypy

    def __getattr__(name: str) -> Any:
        """Import the pipeline side on first use, naming the extra it needs if that is missing."""
        import importlib

        if name == "load":
            return __getattr__("Pipeline").load
        if name not in _LAZY:
            raise AttributeError(f"module 'probembed' has no attribute {name!r}")
        if _LAZY[name] == "probembed.pipeline":
            from probembed.extras import require

            require("models", f"probembed.{name}")
        return getattr(importlib.import_module(_LAZY[name]), name)


def __dir__() -> list[str]:
    """The public names, including the lazily imported ones."""
    return sorted({*globals(), *__all__})
