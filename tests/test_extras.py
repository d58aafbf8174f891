"""Optional parts name the extra to install; the core imports with numpy and scipy alone.

Each case runs in a fresh interpreter where the extra's modules are blocked the way Python
documents it (sys.modules[name] = None makes `import name` raise ModuleNotFoundError), so the
installed packages stay untouched.
"""

import ast
import importlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType

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


def test_a_pipeline_saves_its_variance_basis_without_the_store(tmp_path):
    """Saving fits the basis where the process has not (its reference texts are the Python
    docs): with the store's packages blocked, as where the `store` extra is not installed,
    it is still written, and no store module is imported (the store depends on the pipeline,
    not the reverse)."""
    code = (
        "import sys\n"
        "from probembed.encoders import get_encoder\n"
        "from probembed.pipeline import Pipeline\n"
        "from probembed.uncertainty import make_estimator\n"
        "member = make_estimator('perturb', get_encoder('hash', dim=32))\n"
        f"saved = Pipeline([member], cache=False).save({str(tmp_path / 'p')!r})\n"
        "print((saved / 'variance_basis.json').is_file())\n"
        "print(sorted(m for m in sys.modules if m.startswith('probembed.store')))\n"
    )
    result = run_blocked(("lancedb", "pyarrow", "faiss"), code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", "[]"]


def test_importing_scoring_loads_no_heavy_library():
    code = (
        "import sys\nimport probembed.scoring\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r}))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def type_checking_block(module: ModuleType) -> tuple[dict[str, str], dict[str, str]]:
    """The names a package imports under TYPE_CHECKING (name -> module) and assigns there."""
    tree = ast.parse(Path(str(module.__file__)).read_text(encoding="utf-8"))
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
    return typed, assigned


@pytest.mark.parametrize("package", ["probembed", "probembed.store"])
def test_every_lazy_name_has_the_type_a_type_checker_sees(package):
    """Without an import under TYPE_CHECKING a lazy name is Any to mypy and IDEs, so
    `probembed.load(...).encdoe(...)` passed a user's type check."""
    module = importlib.import_module(package)
    typed, assigned = type_checking_block(module)
    assert typed == module._LAZY
    assert assigned == ({"load": "Pipeline.load"} if package == "probembed" else {})
    for name, held_in in typed.items():
        assert getattr(module, name) is getattr(importlib.import_module(held_in), name)
    if package == "probembed":
        assert module.load == module.Pipeline.load


@pytest.mark.parametrize(
    ("package", "names", "typos"),
    [
        ("probembed", "Pipeline, load", "Pipelin, lod"),
        ("probembed.store", "Database", "Colection, Databse"),
    ],
)
def test_mypy_reports_a_misspelt_lazy_name(tmp_path, package, names, typos):
    """A module `__getattr__` seen by mypy makes every unknown name of the package Any: the
    lazy store passed `from probembed.store import Colection` where the eager one failed it,
    and `probembed.Pipelin` passed since the top package was made lazy."""
    root = Path(__file__).resolve().parents[1]
    first, second = typos.split(", ")
    snippet = tmp_path / "typo.py"
    snippet.write_text(
        f"import {package} as package\nfrom {package} import {first}, {names}\npackage.{second}\n"
    )
    args = ["--cache-dir", os.devnull, "--follow-imports", "skip", "--no-error-summary"]
    files = [str(snippet), str(root / Path(*package.split(".")) / "__init__.py")]
    result = subprocess.run(
        [sys.executable, "-m", "mypy", *args, *files], capture_output=True, text=True, timeout=120
    )
    errors = [line for line in result.stdout.splitlines() if "error:" in line]
    assert len(errors) == 2, result.stdout + result.stderr
    assert f'"{first}"' in errors[0] and f'"{second}"' in errors[1]


#: The store's modules a command that opens no database reads (files, its errors, option
#: checks, the bundled docs), and the libraries none of them may load.
LIGHT_STORE_MODULES = ("formats", "readers", "errors", "kinds", "pins", "results", "pydoc_corpus")
STORE_LIBRARIES = ("lancedb", "pyarrow", "faiss")


def loaded(code: str, *args: str, status: int = 0) -> list[str]:
    """Which of STORE_LIBRARIES a child interpreter has loaded once `code` has run (and ended
    with `status`)."""
    probe = (
        f"import sys\ntry:\n{textwrap.indent(code, '    ')}\nfinally:\n"
        f"    print(sorted(m for m in {STORE_LIBRARIES!r} if m in sys.modules), file=sys.stderr)"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe, *args], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == status, result.stderr
    return ast.literal_eval(result.stderr.strip().splitlines()[-1])


def test_the_light_store_modules_load_no_lancedb_pyarrow_or_faiss():
    """`probembed encode --file` read its file through `probembed.store.formats`, and the
    package's import loaded the whole store: a second and more of LanceDB for every such
    command."""
    imports = "".join(f"import probembed.store.{name}\n" for name in LIGHT_STORE_MODULES)
    assert loaded(imports + "import probembed.store") == []


def test_upkeep_and_location_load_no_lancedb():
    """`probembed serve` checks --compact-keep and --db with them before it opens anything."""
    assert "lancedb" not in loaded("import probembed.store.upkeep, probembed.store.location")


def test_every_public_store_name_resolves_and_is_listed():
    """Each name is its module's, also once every submodule is loaded: the import system sets
    a loaded `probembed.store.ingest` on the package, where `ingest` is a function."""
    code = (
        "import importlib\n"
        "import probembed.store as store\n"
        "assert set(store.__all__) <= set(dir(store)), set(store.__all__) - set(dir(store))\n"
        "from probembed.store import *\n"
        "import probembed.store.ingest, probembed.store.chunked\n"
        "for name in store.__all__:\n"
        "    held = importlib.import_module(store._LAZY[name])\n"
        "    assert getattr(store, name) is getattr(held, name), name\n"
        "    assert globals()[name] is getattr(held, name), name\n"
        "assert callable(store.ingest) and callable(probembed.store.ingest)\n"
    )
    assert "lancedb" not in loaded(code)  # LanceDB itself waits for a database to be opened
    with pytest.raises(AttributeError, match="has no attribute 'Databse'"):
        importlib.import_module("probembed.store").Databse  # noqa: B018


CLI = "from probembed.interfaces import main\nsys.argv = ['probembed', *sys.argv[1:]]\nmain()"


def test_encode_of_a_file_and_a_refused_serve_option_load_no_store_library(
    pydoc_pipeline_dir, tmp_path
):
    """Neither touches a database: each loaded LanceDB, pyarrow and FAISS (1.2 s of CPU)."""
    texts = tmp_path / "texts.txt"
    texts.write_text("a first line\nand a second\n", encoding="utf-8")
    encode = ["encode", "--file", str(texts), "--pipeline", str(pydoc_pipeline_dir)]
    assert loaded(CLI, *encode) == []
    refused = loaded(CLI, "serve", "--max-inputs", "0", status=2)  # pyarrow may come: --db's check
    assert "lancedb" not in refused and "faiss" not in refused
