"""Optional parts name the extra to install; the core imports with numpy and scipy alone.

Each case runs in a fresh interpreter where the extra's modules are blocked the way Python
documents it (sys.modules[name] = None makes `import name` raise ModuleNotFoundError), so the
installed packages stay untouched.
"""

import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = ("torch", "lancedb", "pyarrow", "faiss", "rich", "typer", "platformdirs", "sklearn")


def run_blocked(blocked: tuple[str, ...], code: str) -> subprocess.CompletedProcess:
    """Run `code` in a child interpreter in which the `blocked` modules cannot be imported."""
    prelude = f"import sys\nfor name in {blocked!r}:\n    sys.modules[name] = None\n"
    return subprocess.run(
        [sys.executable, "-c", prelude + code], capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize(
    ("blocked", "module", "extra"),
    [
        (("lancedb",), "probembed.store", "store"),
        (("faiss",), "probembed.store.index", "store"),
        (("ranx", "sklearn"), "probembed.evaluation", "eval"),
    ],
)
def test_importing_an_optional_part_without_its_extra_names_the_extra(blocked, module, extra):
    result = run_blocked(blocked, f"import {module}")
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("probembed.extras.MissingExtraError: ")
    assert f"needs {blocked[0]}" in last and f"pip install 'probembed[{extra}]'" in last


def test_the_pipeline_names_the_models_extra():
    result = run_blocked(("platformdirs",), "import probembed\nprobembed.load('default')")
    assert "pip install 'probembed[models]'" in result.stderr.strip().splitlines()[-1]


def test_the_command_says_which_extra_in_one_line_without_a_traceback():
    code = "from probembed.interfaces import main\nmain()"
    result = run_blocked(("typer",), code)
    assert result.returncode == 2  # as a command's missing extra: 1 is a crash's
    assert result.stderr.strip() == (
        "probembed: the probembed command needs typer (not installed): pip install 'probembed[cli]'"
    )


def test_the_core_imports_and_scores_with_every_optional_dependency_blocked():
    code = (
        "import numpy as np\n"
        "import probembed\n"
        "from probembed.scoring import score_matrix\n"
        "from probembed.fusion import fuse\n"
        "g = probembed.Gaussian(np.eye(2), np.full((2, 2), 0.1))\n"
        "print(score_matrix(g, g, 'uec').round(6).tolist())\n"
        "print(fuse([g, g], ('a', 'b')).explain(0))\n"
    )
    result = run_blocked(HEAVY, code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[1] == "{'a': 0.5, 'b': 0.5}"


def test_importing_scoring_loads_no_heavy_library():
    code = (
        "import sys\nimport probembed.scoring\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r}))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_every_lazy_name_has_the_type_a_type_checker_sees():
    """Without an import under TYPE_CHECKING a lazy name is Any to mypy and IDEs, so
    `probembed.load(...).encdoe(...)` passed a user's type check."""
    import ast
    import importlib

    import probembed

    tree = ast.parse(Path(probembed.__file__).read_text(encoding="utf-8"))
    (block,) = [
        node
        for node in tree.body
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
    ]
    typed = {
        alias.name: node.module
        for node in block.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }
    assigned = {
        target.id: ast.unparse(node.value)
        for node in block.body
        if isinstance(node, ast.Assign)
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    assert typed == probembed._LAZY
    assert assigned == {"load": "Pipeline.load"}
    for name, module in typed.items():
        assert getattr(probembed, name) is getattr(importlib.import_module(module), name)
    assert probembed.load == probembed.Pipeline.load
