"""probembed as an HTTP service: OpenAI-compatible embeddings, collections, search, metrics."""

from probembed.extras import require

require("serve", "probembed.service")

from probembed.service.app import create_app
from probembed.service.auth import ApiKeys, load_keys
from probembed.service.server import serve
from probembed.service.settings import BatchSettings, Limits, ServiceSettings

__all__ = [
    "ApiKeys",
    "BatchSettings",
    "Limits",
    "ServiceSettings",
    "create_app",
    "load_keys",
    "serve",
]
