"""probembed as an HTTP service: OpenAI-compatible embeddings, collections, search, metrics.

The public names are imported on first use: a server's encoding children import this package
on their way to `probembed.service.worker` and need none of them (the app's imports, FastAPI
and LanceDB among them, were some 2 s of every child's start).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from probembed.extras import require

require("serve", "probembed.service")

if TYPE_CHECKING:
    from probembed.service.app import create_app
    from probembed.service.auth import ApiKeys, load_keys
    from probembed.service.server import serve
    from probembed.service.settings import BatchSettings, Limits, ServiceSettings

#: Public names imported on first use, and the module that holds each.
_LAZY = {
    "ApiKeys": "probembed.service.auth",
    "BatchSettings": "probembed.service.settings",
    "Limits": "probembed.service.settings",
    "ServiceSettings": "probembed.service.settings",
    "create_app": "probembed.service.app",
    "load_keys": "probembed.service.auth",
    "serve": "probembed.service.server",
}

__all__ = [
    "ApiKeys",
    "BatchSettings",
    "Limits",
    "ServiceSettings",
    "create_app",
    "load_keys",
    "serve",
]


def __getattr__(name: str) -> Any:
    """A public name, imported from its module on first use."""
    import importlib

    if name not in _LAZY:
        raise AttributeError(f"module 'probembed.service' has no attribute {name!r}")
    return getattr(importlib.import_module(_LAZY[name]), name)


def __dir__() -> list[str]:
    """The public names, including the lazily imported ones."""
    return sorted({*globals(), *__all__})
