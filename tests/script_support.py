"""A repository script (benchmarks/, scripts/) imported as a module, from its folder as it runs."""

import importlib
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def script_module(folder: str, name: str) -> ModuleType:
    """The script `folder/name.py`, importing its neighbours as it does when run."""
    path = str(ROOT / folder)
    sys.path.insert(0, path)
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(path)
