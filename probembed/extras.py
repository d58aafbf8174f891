"""The optional parts of probembed and the pip extra that installs each one's dependencies.

The core (`Gaussian`, fusion, scoring, the uncertainty maths) needs only numpy and scipy. Each
optional package checks its extra before importing anything, so a missing dependency reads
"pip install 'probembed[store]'" rather than a bare ModuleNotFoundError deep in an import.
"""

from __future__ import annotations

from importlib.util import find_spec

#: Extra -> the top-level modules it installs that probembed imports (the model packages are
#: checked per encoder, so one model can be used without the others).
MODULES: dict[str, tuple[str, ...]] = {
    "models": ("platformdirs",),
    "store": ("lancedb", "pyarrow", "faiss"),
    "eval": ("ranx", "sklearn", "matplotlib"),
    "cli": ("typer", "rich"),
    "serve": ("fastapi", "fastapi_offline", "uvicorn", "prometheus_client"),
    "documents": ("bs4", "pypdf"),
    "langchain": ("langchain_core", "lancedb", "pyarrow", "faiss"),
    "llamaindex": ("llama_index.core", "lancedb", "pyarrow", "faiss"),
    "ray": ("ray", "lancedb", "pyarrow", "faiss"),
}


class MissingExtraError(ModuleNotFoundError):
    """An optional part was imported without the extra that brings its dependencies."""


def install_hint(extra: str) -> str:
    """The command that installs an extra."""
    return f"pip install 'probembed[{extra}]'"


def require(extra: str, feature: str) -> None:
    """Fail before `feature` imports anything if a module of `extra` is missing, naming it."""
    missing = [module for module in MODULES[extra] if not _installed(module)]
    if missing:
        raise MissingExtraError(
            f"{feature} needs {', '.join(missing)} (not installed): {install_hint(extra)}",
            name=missing[0],
        )


def _installed(module: str) -> bool:
    """Whether a module can be imported; a dotted name whose parent is missing is not."""
    try:
        return find_spec(module) is not None
    except ModuleNotFoundError:
        return False
